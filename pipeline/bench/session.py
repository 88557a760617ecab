"""A table's bench session on the cuda backend: shard jobs from the compile report, launch payloads, estimate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tunetable import paths
from tunetable.bench.plan import (
    BenchSettings,
    ConfigTask,
    baseline_task,
    default_families,
    launch_payload,
    measured_git_revision,
    tasks_from_reports,
)
from tunetable.bench.runner import ShardJob, estimate_shard_s
from tunetable.errors import TuneTableError
from tunetable.keys import kernel_source_hash, nvcc_version
from tunetable.params import TableSpec

def parse_shapes(texts: Sequence[str]) -> list[tuple[int, int, int]]:
    """``M,N,K`` options as shapes; a malformed one names the option and its index."""
    shapes = []
    for index, text in enumerate(texts):
        parts = text.replace("x", ",").split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise TuneTableError(f"expected M,N,K with positive integers, got '{text}'", where=f"--shape[{index}]")
        shapes.append(tuple(int(p) for p in parts))  # type: ignore[arg-type]
    return shapes


def shard_payloads(*, tasks: Sequence[ConfigTask], m: int, n: int, k: int,
                   families: Mapping[str, Any]) -> dict[str, Any]:
    """Launch payload per task for one shape; a shape the family rejects is that task's error text."""
    payloads: dict[str, Any] = {}
    for task in tasks:
        try:
            payloads[task.config_id] = launch_payload(task=task, m=m, n=n, k=k, families=families)
        except TuneTableError:
            raise  # a user error (an unknown family), not a shape this family rejects
        except (ValueError, KeyError) as exc:
            payloads[task.config_id] = f"shape rejected: {exc}"
    return payloads


def cuda_jobs(*, table: TableSpec, shapes: Sequence[tuple[int, int, int]], key: str, results_root: Path,
              families: Mapping[str, Any] | None = None) -> list[ShardJob]:
    """One job per shape: the compiled configurations plus the cuBLAS baseline."""
    kernel_hash, tasks = tasks_from_reports(grid_path=paths.grid_file(table.name, root=results_root),
                                            compile_path=paths.compile_report(table.name, root=results_root))
    current = kernel_source_hash(table.kernel)
    if kernel_hash != current:
        raise TuneTableError(f"the kernel changed since the grid/compile stage ({kernel_hash} -> {current}): "
                             "run grid and compile again", path=table.kernel)
    lost = [t.cubin or t.config_id for t in tasks
            if t.build_status == "ok" and (not t.cubin or not Path(t.cubin).is_file())]
    if lost:
        raise TuneTableError(f"{len(lost)} compiled cubins are missing (first: {lost[0]}): run compile again",
                             path=paths.compile_report(table.name, root=results_root))
    tasks = [*tasks, baseline_task()]
    families = families if families is not None else default_families()
    provenance = {"nvcc": nvcc_version(), "git_rev": measured_git_revision(),
                  "command": "tunetable " + " ".join(sys.argv[1:])}
    return [
        ShardJob(table=table.name, m=m, n=n, k=k, tasks=tuple(tasks),
                 payloads=shard_payloads(tasks=tasks, m=m, n=n, k=k, families=families),
                 journal_path=paths.journal(table.name, key, m, n, k, root=results_root),
                 shard_path=paths.raw_shard(table.name, key, m, n, k, root=results_root),
                 content_key=key, kernel_hash=kernel_hash, provenance=provenance)
        for (m, n, k) in shapes
    ]


def estimate_seconds(*, jobs: Sequence[ShardJob], settings: BenchSettings, gpus: int,
                     measurements: Callable[[ShardJob], int] | None = None) -> float:
    """A rough wall-time estimate of measuring the jobs (printed before a cuda run).

    ``measurements(job)``: how many tasks a search budget measures in a shard (default: all).
    """
    return sum(estimate_shard_s(job=job, settings=settings,
                                measurements=None if measurements is None else measurements(job))
               for job in jobs) / max(1, gpus)
