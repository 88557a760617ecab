"""Atomic file writes: a killed run leaves the old file or the new one, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipeline.errors import TuneTableError

# mkstemp creates 0600 files; a new file gets the mode a plain open() would give (read once, at import).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, then rename."""
    target = Path(path)
    try:
        _write_then_rename(target=target, data=data)
    except OSError as exc:
        # An unwritable target (parent is a file, no permission, disk full) is one error line, not a traceback.
        culprit = f" ({exc.filename})" if exc.filename and Path(exc.filename) != target else ""
        raise TuneTableError(f"cannot write: {exc.strerror or exc}{culprit}", path=target) from None


def _write_then_rename(*, target: Path, data: bytes) -> None:
    """Write through a same-folder temp file, fsync and rename; the temp file never outlives a failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_UMASK
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8, newlines untouched) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))
