"""results/raw holds exactly the shards of the current plan; shards of other keys wait in results/parked.

``results/raw`` is a DVC out: ``dvc.lock`` records a hash of everything in it. Shards of other
content keys (an older kernel, a reverted grid, a re-recording) are final measurements and stay on
disk, but outside that folder, so that ``dvc.lock`` records what the committed params and code
produce: what a fresh clone reproduces. When a plan needs a parked key again (a change reverted),
its shards come back by a rename, so nothing is re-measured.

A shard moves with every file of its stem (``M1_N8_K8.pkl``, its journal, any sidecar). A parked
file that already exists with other bytes is never overwritten: that is an error naming both.

``python -m tunetable.rawstore park TABLE/KEY...``, ``restore SHARD...`` and ``salvage SHARD...`` (the
shards a failed live bench job finished) are what the Snakemake rules run (pipeline/rules/measure.smk).
"""

from __future__ import annotations

import filecmp
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tunetable import paths
from tunetable.errors import TuneTableError

RAW = paths.RESULTS / "raw"
PARKED = paths.RESULTS / "parked"


def stale_entries(*, current: Mapping[str, str], raw: Path = RAW) -> list[Path]:
    """What results/raw holds besides the current keys' folders: other key folders, undeclared tables, stray files."""
    if not raw.is_dir():
        return []
    stale = []
    for table_dir in sorted(raw.iterdir()):
        if table_dir.name not in current or not table_dir.is_dir():
            stale.append(table_dir)
            continue
        stale.extend(entry for entry in sorted(table_dir.iterdir()) if entry.name != current[table_dir.name])
    return stale


def parked_path(path: str | Path, *, raw: Path = RAW, parked: Path = PARKED) -> Path:
    """Where a file or folder under results/raw waits while its key is not current."""
    return parked / Path(path).relative_to(raw)


def _move(source: Path, target: Path) -> None:
    """Rename one file; an existing target (checked first to hold the same bytes) just drops the source."""
    if target.exists():
        source.unlink()
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)


def _files(path: Path) -> list[Path]:
    """A file, or every file under a folder (sorted)."""
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def _prune_empty(folder: Path, *, stop: Path) -> None:
    """Remove empty folders inside ``folder``, then ``folder`` and its parents up to ``stop`` while empty."""
    if folder.is_dir():
        for directory in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if not any(directory.iterdir()):
                directory.rmdir()
    while stop in folder.parents:
        if folder.is_dir():
            if any(folder.iterdir()):
                return
            folder.rmdir()
        folder = folder.parent


def _check_targets(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Refuse before moving anything when a target exists with other bytes."""
    for source, target in pairs:
        if target.exists() and not filecmp.cmp(source, target, shallow=False):
            raise TuneTableError(f"{target} exists with other bytes: keep one of them by hand (nothing was moved)",
                                 path=source)


def park(entries: Iterable[str | Path], *, raw: Path = RAW, parked: Path = PARKED) -> list[Path]:
    """Move entries of results/raw (key folders, files) to results/parked; the files moved, as targets."""
    pairs = [(file, parked_path(file, raw=raw, parked=parked)) for entry in entries for file in _files(Path(entry))]
    _check_targets(pairs)
    for source, target in pairs:
        _move(source, target)
    for entry in entries:
        if Path(entry).is_dir():
            _prune_empty(Path(entry), stop=raw)
    return [target for _source, target in pairs]


def shard_files(shard: str | Path) -> list[Path]:
    """A parked shard and every file of its stem beside it (journal, sidecars)."""
    path = Path(shard)
    stem = path.name.split(".", 1)[0]
    return sorted(p for p in path.parent.glob(f"{stem}.*") if p.is_file()) if path.parent.is_dir() else []


def restore(shards: Iterable[str | Path], *, raw: Path = RAW, parked: Path = PARKED) -> list[Path]:
    """Move parked shards (given by their results/raw path) back into results/raw; the files restored."""
    pairs = []
    for shard in shards:
        source = parked_path(shard, raw=raw, parked=parked)
        if not source.is_file():
            raise TuneTableError("no parked copy of this shard", path=source)
        pairs += [(file, raw / file.relative_to(parked)) for file in shard_files(source)]
    _check_targets(pairs)
    for source, target in pairs:
        _move(source, target)
    for folder in sorted({source.parent for source, _target in pairs}):
        _prune_empty(folder, stop=parked)
    return [target for _source, target in pairs]


def salvage(shards: Iterable[str | Path], *, raw: Path = RAW, parked: Path = PARKED) -> list[Path]:
    """Park the listed shards that exist, each with every file of its stem (its journal): what a failed bench
    job finished. Snakemake deletes a failed job's outputs; parked, they come back by a rename (``restore``)
    on the next run. A shard not written (its journal holds the measurements so far) stays where it is."""
    finished = [Path(shard) for shard in shards if Path(shard).is_file()]
    return park([file for shard in finished for file in shard_files(shard)], raw=raw, parked=parked)


COMMANDS = {"park": park, "restore": restore, "salvage": salvage}


def main(argv: Sequence[str]) -> int:
    """``park ENTRY...``, ``restore SHARD...`` or ``salvage SHARD...``; one line per action, errors as one line."""
    if len(argv) < 2 or argv[0] not in COMMANDS:
        print("usage: python -m tunetable.rawstore park RESULTS_RAW_ENTRY... | restore RAW_SHARD... | "
              "salvage RAW_SHARD...", file=sys.stderr)
        return 2
    try:
        moved = COMMANDS[argv[0]](argv[1:])
    except TuneTableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    where = RAW if argv[0] == "restore" else PARKED
    entries = f"{len(argv) - 1} entr{'y' if len(argv) == 2 else 'ies'}"
    print(f"{argv[0]}: {len(moved)} file(s) of {entries} now under {where}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
