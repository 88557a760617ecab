"""Claim one free GPU for a command: ``python -m tunetable.gpu_claim CMD...`` runs ``CMD... --gpus ID``.

Snakemake's ``gpu`` resource is only a counter (it assigns no device ids), so on a host with
several GPUs and ``--resources gpu=N`` each bench job takes an exclusive lock on one visible
device for as long as it runs. Locks are advisory fcntl locks, released by the kernel when the
process ends, so a killed job never leaves a device claimed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Sequence

from tunetable.errors import TuneTableError
from tunetable.bench.devices import visible_gpu_ids

POLL_S = 0.5


def lock_dir() -> Path:
    """Where device locks live (TUNETABLE_GPU_LOCK_DIR, else the system temp folder)."""
    return Path(os.environ.get("TUNETABLE_GPU_LOCK_DIR") or tempfile.gettempdir())


def try_claim(*, gpu_ids: Sequence[str], folder: Path) -> tuple[str, IO[bytes]] | None:
    """Lock the first free device of ``gpu_ids``; (id, open lock file) or None when all are busy."""
    folder.mkdir(parents=True, exist_ok=True)
    for gpu in gpu_ids:
        handle = open(folder / f"tunetable-gpu{gpu}.lock", "wb")  # noqa: SIM115 - held while the job runs
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return gpu, handle
    return None


def claim(*, gpu_ids: Sequence[str], folder: Path) -> tuple[str, IO[bytes]]:
    """Wait until a device of ``gpu_ids`` is free and lock it."""
    if not gpu_ids:
        raise TuneTableError("no GPU visible to claim", where="gpu_claim")
    while True:
        claimed = try_claim(gpu_ids=gpu_ids, folder=folder)
        if claimed is not None:
            return claimed
        time.sleep(POLL_S)


def main(argv: Sequence[str]) -> int:
    """Claim a device, run the command with ``--gpus ID`` appended, return its exit status."""

    if not argv:
        print("usage: python -m tunetable.gpu_claim CMD [ARGS...]", file=sys.stderr)
        return 2
    try:
        gpu, handle = claim(gpu_ids=visible_gpu_ids(), folder=lock_dir())
    except TuneTableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    with handle:
        print(f"tunetable: claimed GPU {gpu}", file=sys.stderr)
        return subprocess.run([*argv, "--gpus", gpu], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
