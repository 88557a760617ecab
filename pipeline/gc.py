"""Decide which raw-result key folders to keep: the ones params.yaml resolves to now, and the
ones a metrics file names at any git ref; everything else under ``results/raw/<table>/`` and
``results/parked/<table>/`` goes.

Measurements are final, so they only ever accumulate: every bench-settings, kernel or toolchain
change leaves a key folder behind (the pipeline parks it under results/parked, outside the DVC
out; pipeline/rawstore.py). The metrics JSON records the content key of the shards behind each
table, so a key named at some branch or tag is still needed by ``tunetable audit``/``trace`` at
that ref and is kept.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable import lineage, paths, rawstore
from tunetable.errors import TuneTableError
from tunetable.bench.devices import device_name
from tunetable.params import table_spec
from tunetable.results import CHECKSUM_RECORD, read_shard
from tunetable.measurement_plan import shard_key

BACKENDS = ("cuda", "replay")
STORES = (rawstore.RAW, rawstore.PARKED)   # where key folders live: the DVC out, and the other keys beside it
NOT_DECLARED = "not a declared table"
UNREFERENCED = "not a current params key; no metrics file at any git ref names it"
LIVE_NO_GPU = "cuda measurements, and no GPU here to recompute the live key"


@dataclass(frozen=True)
class KeyFolder:
    """A folder under results/raw: ``<table>/<key>`` (key '' for a whole undeclared table's folder)."""

    table: str
    key: str
    path: Path
    size_bytes: int


@dataclass(frozen=True)
class Decision:
    """Keep or delete one folder, and why."""

    folder: KeyFolder
    keep: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class GitRef:
    """A ref scanned for metrics files: full name for git, short name for people."""

    name: str
    label: str


@dataclass(frozen=True)
class GcPlan:
    """What ``tunetable gc`` would do, folder by folder."""

    decisions: tuple[Decision, ...]
    current: Mapping[str, Mapping[str, str]]      # table -> backend -> key params.yaml resolves to
    refs: tuple[str, ...]                          # ref labels whose metrics were read
    notes: tuple[str, ...] = field(default=())

    @property
    def to_delete(self) -> tuple[Decision, ...]:
        """The decisions that delete their folder."""
        return tuple(d for d in self.decisions if not d.keep)

    @property
    def bytes_to_delete(self) -> int:
        """Bytes the deletions free."""
        return sum(d.folder.size_bytes for d in self.to_delete)


def folder_bytes(path: Path) -> int:
    """Total size of the plain files under a folder (symlinks not followed)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def key_folders(*, raw_root: Path, declared: Sequence[str]) -> list[KeyFolder]:
    """Key folders of declared tables, and whole folders of undeclared ones, sorted by path."""
    if not raw_root.is_dir():
        return []
    folders = []
    for table_dir in sorted(p for p in raw_root.iterdir() if p.is_dir()):
        if table_dir.name not in declared:
            folders.append(KeyFolder(table_dir.name, "", table_dir, folder_bytes(table_dir)))
            continue
        for key_dir in sorted(p for p in table_dir.iterdir() if p.is_dir()):
            folders.append(KeyFolder(table_dir.name, key_dir.name, key_dir, folder_bytes(key_dir)))
    return folders


def git_refs(*, root: Path) -> list[GitRef]:
    """HEAD, every branch and every tag of the repository at ``root``."""
    done = subprocess.run(["git", "for-each-ref", "--format=%(refname)%00%(refname:short)", "refs/heads", "refs/tags"],
                          cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TuneTableError("not a git repository: gc needs the git refs to know which keys are still named",
                             path=root)
    refs = [GitRef(*line.split("\0", 1)) for line in done.stdout.splitlines() if "\0" in line]
    head = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=False)
    # A detached HEAD may name a commit no branch holds; an unborn one names nothing.
    return ([GitRef("HEAD", "HEAD")] if head.returncode == 0 else []) + refs


def referenced_keys(*, root: Path, refs: Sequence[GitRef], tables: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """table -> key -> where a metrics file names it (each ref, and the working tree)."""
    named: dict[str, dict[str, list[str]]] = {table: {} for table in tables}
    sides: list[tuple[str | None, str]] = [(ref.name, ref.label) for ref in refs] + [(None, lineage.WORKTREE)]
    for table in tables:
        for rev, label in sides:
            key = lineage.metrics_at(root=root, rev=rev, table=table).get("content_key")
            if key:
                named[table].setdefault(str(key), []).append(label)
    return named


def current_keys(*, root: Path, params: Mapping[str, Any], tables: Sequence[str]) -> dict[str, dict[str, str]]:
    """table -> backend -> the content key params.yaml resolves to (cuda and replay)."""

    keys: dict[str, dict[str, str]] = {}
    # shard_key reads the kernel source and the recording by params.yaml's relative paths.
    with contextlib.chdir(root):
        for table in tables:
            spec = table_spec(dict(params), table, path=root / "params.yaml")
            # A table whose recording is not there yet has no replay key.
            backends = [b for b in BACKENDS if b != "replay" or (spec.recording and Path(spec.recording).is_file())]
            keys[table] = {backend: shard_key(dict(params), spec, backend)
                           for backend in backends}
    return keys


def holds_live_measurements(path: Path) -> bool:
    """True unless the folder provably holds replayed shards only (only live runs journal measurements;
    a replayed shard's journal holds its checksum record alone)."""

    for journal in path.glob("*.journal.jsonl"):
        lines = journal.read_bytes().splitlines()
        if any(f'"type": "{CHECKSUM_RECORD}"'.encode() not in line for line in lines if line.strip()):
            return True
    for shard in sorted(path.glob("*.pkl")):
        try:
            frame = read_shard(shard)["merged_df"]
        except TuneTableError:
            return True  # unreadable: it might be a measurement, so never a reason to delete
        if "backend" not in frame.columns or (frame["backend"] == "cuda").any():
            return True
    return False


def decide(*, folders: Sequence[KeyFolder], declared: Sequence[str], current: Mapping[str, Mapping[str, str]],
           referenced: Mapping[str, Mapping[str, Sequence[str]]],
           is_live: Callable[[Path], bool] | None = None) -> tuple[Decision, ...]:
    """Keep a folder that is current or named at a ref (or of an undeclared table); delete the rest.

    ``is_live`` (given where no GPU is visible, so the live key cannot be recomputed) keeps folders
    of cuda measurements: GPU time is never thrown away on a guess.
    """
    decisions = []
    for folder in folders:
        if folder.table not in declared:
            decisions.append(Decision(folder, True, (NOT_DECLARED,)))
            continue
        reasons = [f"current params key ({backend})" for backend, key in (current.get(folder.table) or {}).items()
                   if key == folder.key]
        labels = (referenced.get(folder.table) or {}).get(folder.key) or ()
        if labels:
            reasons.append(f"named by {paths.metrics(folder.table).as_posix()} at {', '.join(labels)}")
        if not reasons and is_live is not None and is_live(folder.path):
            reasons.append(LIVE_NO_GPU)
        decisions.append(Decision(folder, bool(reasons), tuple(reasons) or (UNREFERENCED,)))
    return tuple(decisions)


def plan_gc(*, root: Path, params: Mapping[str, Any]) -> GcPlan:
    """The plan for the repository at ``root`` (params: its loaded params.yaml)."""

    declared = list(params.get("tables") or {})
    folders = [folder for store in STORES
               for folder in key_folders(raw_root=root / store, declared=declared)]
    refs = git_refs(root=root)
    current = current_keys(root=root, params=params, tables=declared)
    referenced = referenced_keys(root=root, refs=refs, tables=declared)
    notes = []
    no_gpu = device_name() == "none"
    if no_gpu:
        notes.append("no GPU visible: the live (cuda) key cannot be recomputed here, so every folder of "
                     "cuda measurements is kept; run gc on the GPU machine to prune those")
    return GcPlan(decisions=decide(folders=folders, declared=declared, current=current, referenced=referenced,
                                   is_live=holds_live_measurements if no_gpu else None),
                  current=current, refs=tuple(ref.label for ref in refs), notes=tuple(notes))


def delete_folders(*, plan: GcPlan, root: Path) -> list[Path]:
    """Delete the plan's unreferenced folders (only ones inside results/raw or results/parked); the paths deleted."""
    stores = [(root / store).resolve() for store in STORES]
    deleted = []
    for decision in plan.to_delete:
        path = decision.folder.path
        if path.is_symlink() or not any(store in path.resolve().parents for store in stores):
            raise TuneTableError("refusing to delete a folder outside results/raw and results/parked", path=path)
        shutil.rmtree(path)
        deleted.append(path)
    return deleted
