"""After the main job: keep the DVC cache holding the outs that dvc.lock records, so `dvc status` is clean.

On a fresh clone the DVC cache is empty and no remote need be reachable. ``snakemake --cores 2``
reproduces results/raw and results/ranked byte for byte as dvc.lock records them, but DVC calls
an out that is not in its cache "changed", so `dvc status` would list both stages and `dvc repro`
would run them again. The main job therefore stores in the cache every stage's outs whose hashes
equal the lock's (`dvc commit` of exactly those stages: same hashes, the lock is rewritten
unchanged). A stage whose params, code or outs differ from the lock is left alone: recording a
change is `dvc repro`'s job, never a side effect of Snakemake.

Nothing here runs inside `dvc repro` (DVC sets DVC_ROOT for a stage's command and records the
outs itself), and a repository without DVC is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.yamlio import load_yaml_file

NOT_IN_CACHE = "not in cache"


@dataclass(frozen=True)
class CacheReport:
    """What the main job did with the DVC cache, and the stages dvc.lock does not describe."""

    cached: tuple[str, ...] = ()        # stages whose outs were stored in the cache now
    changed: tuple[str, ...] = ()       # stages with params, code or outs unlike dvc.lock (dvc repro records them)
    skipped: str | None = None          # why nothing was looked at


def lock_out_hashes(lock: Mapping[str, Any]) -> dict[str, list[str]]:
    """stage -> md5 of each cached out recorded in a loaded dvc.lock."""
    stages = lock.get("stages") if isinstance(lock, Mapping) else None
    hashes: dict[str, list[str]] = {}
    for name, stage in (stages or {}).items():
        outs = stage.get("outs") if isinstance(stage, Mapping) else None
        hashes[str(name)] = [str(out["md5"]) for out in outs or [] if isinstance(out, Mapping) and out.get("md5")]
    return hashes


def cache_object(*, root: Path, md5: str) -> Path:
    """Where DVC 3 keeps an object of the default cache (``.dvc/cache/files/md5/ab/cdef...``)."""
    return root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def stages_to_cache(status: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(stages whose only difference from the lock is outs not in the cache, stages that changed)."""
    cacheable, changed = [], []
    for stage, entries in status.items():
        kinds = [(kind, value) for entry in entries if isinstance(entry, Mapping) for kind, value in entry.items()]
        only_uncached = kinds and all(kind == "changed outs" and isinstance(value, Mapping)
                                      and set(value.values()) == {NOT_IN_CACHE} for kind, value in kinds)
        (cacheable if only_uncached else changed).append(str(stage))
    return cacheable, changed


def _load_lock(path: Path) -> Mapping[str, Any]:
    """dvc.lock as data (tunetable.yamlio: safe, strict, libyaml's parser when present)."""

    return load_yaml_file(path) or {}


def cache_reproduced_outs(*, root: Path = Path(".")) -> CacheReport:
    """Store the outs that match dvc.lock in the DVC cache (see the module docstring); never raises."""
    if os.environ.get("DVC_ROOT"):
        return CacheReport(skipped="inside dvc repro")
    lock_path = root / "dvc.lock"
    if not (root / ".dvc").is_dir() or not lock_path.is_file():
        return CacheReport(skipped="no DVC project here")
    try:
        hashes = lock_out_hashes(_load_lock(lock_path))
    except Exception as exc:  # a broken lock is DVC's to report; the run itself succeeded
        return CacheReport(skipped=f"dvc.lock unreadable ({exc.__class__.__name__})")
    if all(cache_object(root=root, md5=md5).is_file() for values in hashes.values() for md5 in values):
        return CacheReport()  # the usual case: nothing to look at, no DVC import (~1 s)
    try:
        from dvc.repo import Repo  # lazy: dvc takes ~1 s to import; only the main job's cache step needs it

        with Repo(str(root)) as repo:
            cacheable, changed = stages_to_cache(repo.status())
            for stage in cacheable:
                repo.commit(stage, force=True)
    except Exception as exc:  # DVC's errors are many; the run succeeded, say why nothing was cached
        return CacheReport(skipped=f"dvc: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return CacheReport(cached=tuple(cacheable), changed=tuple(changed))
