"""After a killed run: its stale Snakemake locks released, and metrics stamps whose checked-in files changed dropped."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

from tunetable.keys import sha256_file
from tunetable.workflow.run_plan import Plan
from tunetable.workflow.stamps import metrics_stamp, select_stamp

RUN_LOCK = Path(".snakemake") / "tunetable-run.lock"
_RUN_LOCK_HANDLE: Any = None  # held (fcntl) for the life of the snakemake process that parsed the Snakefile


def release_stale_locks(*, workdir: str | Path = ".") -> list[str]:
    """Remove Snakemake's locks when no other run holds this working copy: a killed run's locks, left behind.

    Every snakemake run of this Snakefile holds an fcntl lock on .snakemake/tunetable-run.lock for its
    whole life (the kernel drops it when the process dies, SIGKILL included). Taking it proves that no
    other run is active here, so any Snakemake lock file is stale; failing to take it leaves everything
    to Snakemake's own locking.
    """

    global _RUN_LOCK_HANDLE
    root = Path(workdir)
    if _RUN_LOCK_HANDLE is None:
        (root / RUN_LOCK).parent.mkdir(parents=True, exist_ok=True)
        handle = open(root / RUN_LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return []
        _RUN_LOCK_HANDLE = handle
    locks = sorted((root / ".snakemake" / "locks").glob("*.lock"))
    for lock in locks:
        lock.unlink(missing_ok=True)
    return [str(lock) for lock in locks]


def stamp_matches(stamp: str | Path) -> bool:
    """True when every file a ``sha256sum`` stamp lists is present with the recorded hash."""

    try:
        lines = Path(stamp).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    listed = [line.split(None, 1) for line in lines if line.strip() and not line.startswith("#")]
    if not listed:
        return False
    for entry in listed:
        if len(entry) != 2 or not Path(entry[1].lstrip("*")).is_file():
            return False
        if sha256_file(entry[1].lstrip("*")) != entry[0]:
            return False
    return True


def drop_stale_stamps(plan: Plan) -> list[str]:
    """Remove each metrics stamp whose checked-in files are missing or changed, so that the rule runs again.

    Checked-in files are never Snakemake outputs (Snakemake deletes outputs before a job and after a
    failure); the stamp stands for them, so it is only as good as the files it lists.
    """
    dropped = []
    # A selector's select stamp stands for its manifest and data file (codegen's inputs: tunetable.workflow.targets).
    stamps = [*(metrics_stamp(spec.name) for spec in (*plan.tables, *plan.dispatches)),
              *(select_stamp(spec.name) for spec in plan.selectors)]
    for stamp in stamps:
        if stamp.is_file() and not stamp_matches(stamp):
            stamp.unlink()
            dropped.append(str(stamp))
    return dropped
