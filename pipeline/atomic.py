"""Atomic file writes: a killed run leaves the old file or the new one, never half of either.

``atomic_write_all`` extends this to a group of files that belong together (a table's metrics
JSON, plot CSV and PNG): every file is written to a temp file in its target folder first, and
only when all of them are on disk are they renamed into place.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tunetable.errors import TuneTableError

# mkstemp creates 0600 files; a new file gets the mode a plain open() would give (read once, at import).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, then rename."""
    atomic_write_all(outputs={path: data})


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8, newlines untouched) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_all(*, outputs: Mapping[str | Path, bytes]) -> None:
    """Write several files so that they land together or not at all: every temp file first, then the renames.

    A failure while writing any temp file (unwritable folder, disk full) removes every temp file
    and leaves all the old files untouched. The renames that follow are same-folder renames of
    files already on disk; a target that is a folder is refused before anything is written.
    """
    targets = [Path(path) for path in outputs]
    _check_targets(targets=targets)
    staged: dict[Path, Path] = {}
    try:
        for target, data in zip(targets, outputs.values()):
            staged[target] = _staged_copy(target=target, data=data)
        for target in targets:
            os.replace(staged[target], target)
            del staged[target]
    except OSError as exc:
        raise _write_error(exc=exc, target=target) from None
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


def _check_targets(*, targets: list[Path]) -> None:
    """Refuse a group that names one file twice, or a target that is an existing folder."""
    seen: dict[Path, Path] = {}
    for target in targets:
        key = Path(os.path.abspath(target))
        if key in seen:
            raise TuneTableError(f"named twice among the outputs (also as {seen[key]})", path=target)
        seen[key] = target
        if target.is_dir():
            raise TuneTableError("cannot write: is a folder", path=target)


def _write_error(*, exc: OSError, target: Path) -> TuneTableError:
    """An unwritable target (parent is a file, no permission, disk full) as one error line, not a traceback."""
    culprit = f" ({exc.filename})" if exc.filename and Path(exc.filename) != target else ""
    return TuneTableError(f"cannot write: {exc.strerror or exc}{culprit}", path=target)


def _staged_copy(*, target: Path, data: bytes) -> Path:
    """``data`` in a fsynced temp file beside ``target`` (with the mode the target gets); removed on failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_UMASK
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)
