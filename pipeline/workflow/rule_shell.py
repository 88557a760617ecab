"""The shell fragments the Snakefile's rules run: the CLI as this interpreter sees it, the GPU claim, rawstore,
the error display, and options built from a plan's shards and specs."""

from __future__ import annotations

import shlex
import sys

from tunetable.params import DispatchSpec
from tunetable.workflow.run_plan import Shard
from tunetable.workflow.stamps import ranked_outputs

# The CLI as the interpreter running Snakemake sees it: works without an activated venv.
CLI = f"{shlex.quote(sys.executable)} -m tunetable"
# Live bench jobs claim a free GPU first (Snakemake assigns no device ids): see pipeline/gpu_claim.py.
GPU_CLAIM = f"{shlex.quote(sys.executable)} -m tunetable.gpu_claim "
# Parks other keys' shards outside results/raw and restores parked ones (pipeline/rawstore.py).
RAWSTORE = f"{shlex.quote(sys.executable)} -m tunetable.rawstore"
# Appended to a rule's shell command whose output goes to {log}: when the command fails, its error
# lines (the CLI's `error: ...`), else the log's last lines, reach the terminal too, and the status stays.
SHOW_ERRORS = " || {{ status=$?; grep -h '^error: ' {log} >&2 || tail -n 5 {log} >&2; exit $status; }}"


def shape_options(shards: list[Shard]) -> str:
    """``--shape M,N,K`` for each shard, as one shell fragment."""
    return " ".join(f"--shape {shard.shape_arg}" for shard in shards)


def dispatch_ranked_options(spec: DispatchSpec) -> str:
    """``--ranked TABLE=PATH`` for each table of a dispatch list, as one shell fragment."""
    return " ".join(f"--ranked {table}={ranked_outputs(table)['parquet']}" for table in spec.tables)
