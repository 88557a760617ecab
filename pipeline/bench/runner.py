"""The runner interface: what measures shards, what a search drives, and ``run_shards``, which takes either runner.

Kernel Tuner's split (runners/runner.py, runners/simulation.py): a runner measures what it is asked
and returns the results; the simulation runner serves recorded results through the same interface,
so everything above it runs unchanged. Here two runners are peers:

- ``LiveRunner`` (``tunetable.bench.live``): a worker process per GPU, each over a ``Backend``
  (``tunetable.bench.backend``: ``cuda``, or ``cpu-test`` for tests without a GPU);
- ``ReplayRunner`` (``tunetable.bench.replay``): the rows of a recording the cuda backend made on a GPU.

One meaning per name: a ``Runner`` runs shards (``run_shards`` takes one as an object); a
``Measurer`` measures the tasks of one shard and gives their rows (a runner opens one per worker,
the live runner a ``WorkerSession``, the replay runner a ``RecordingSession``); a ``ShardSearch``
(``tunetable.search.driver.TableSearch``) picks what a measurer measures; a ``Backend`` is the
device side of a worker process. Every shard is finished the same way, whichever runner measured
it (``measure_shard``): its rows and the measurer's provenance are written atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tunetable.bench.tasks import ConfigTask
from tunetable.results import write_shard

Row = dict[str, Any]


@dataclass(frozen=True)
class ShardJob:
    """One (table, shape) shard to measure: its tasks, per-task launch payloads and files."""

    table: str
    m: int
    n: int
    k: int
    tasks: tuple[ConfigTask, ...]
    payloads: dict[str, Any]            # config_id -> payload dict, or an error string
    journal_path: Path
    shard_path: Path
    content_key: str
    kernel_hash: str
    provenance: dict[str, Any] = field(default_factory=dict)  # nvcc, git_rev, command

    @property
    def shape(self) -> tuple[int, int, int]:
        """(M, N, K)."""
        return (self.m, self.n, self.k)


Event = Callable[[str, ShardJob, dict[str, Any]], None]


def no_event(kind: str, job: ShardJob, record: dict[str, Any]) -> None:
    """The progress callback of a caller that watches nothing."""


class Measurer(Protocol):
    """Measures the tasks of one shard and gives their rows: what a search drives (one per worker or recording)."""

    def measure_tasks(self, job: ShardJob, tasks: Sequence[ConfigTask]) -> None:
        """Measure what the shard still lacks of ``tasks``."""

    def task_rows(self, job: ShardJob, tasks: Sequence[ConfigTask]) -> list[Row]:
        """The shard rows of ``tasks``."""

    def shard_record(self, job: ShardJob) -> tuple[list[Row], dict[str, Any]]:
        """What the shard file holds besides its rows: the build rows and the provenance of the measurement."""


class ShardSearch(Protocol):
    """A budgeted search over one shard (tunetable.search.driver.TableSearch); it drives any measurer."""

    def run_shard(self, *, measurer: Measurer, job: ShardJob) -> tuple[list[Row], dict[str, Any]]:
        """Measure the configurations the search picks through ``measurer``; the rows and provenance to add."""


class Runner(Protocol):
    """Measures shards (LiveRunner, ReplayRunner): what ``run_shards`` takes."""

    @property
    def backend(self) -> str:
        """The backend recorded in every row: cuda, cpu-test or replay."""

    def check(self, jobs: Sequence[ShardJob]) -> None:
        """Refuse the jobs before anything is written (one error naming the first problems), or pass."""

    def run(self, jobs: Sequence[ShardJob], *, search: ShardSearch | None, on_event: Event) -> dict[Path, list[Row]]:
        """Measure every job (each through ``measure_shard``); rows by shard path."""


def measure_shard(job: ShardJob, *, measurer: Measurer, search: ShardSearch | None, on_event: Event) -> list[Row]:
    """Measure a shard (every task, or what ``search`` picks), then write its pickle atomically; its rows."""
    extra_provenance: dict[str, Any] = {}
    if search is None:
        measurer.measure_tasks(job, job.tasks)
        rows = measurer.task_rows(job, job.tasks)
    else:
        rows, extra_provenance = search.run_shard(measurer=measurer, job=job)
    build_rows, provenance = measurer.shard_record(job)
    write_shard(job.shard_path, table=job.table, rows=rows, build_rows=build_rows,
                provenance={**provenance, **extra_provenance})
    on_event("shard", job, {"rows": len(rows)})
    return rows


def run_shards(*, jobs: Sequence[ShardJob], runner: Runner, search: ShardSearch | None = None,
               on_event: Event | None = None) -> dict[Path, list[dict[str, Any]]]:
    """Run shards on a runner, live or replayed alike: every job checked first; returns rows by shard path.

    A search keeps the given order (its tuning order: a shape starts from the winners of
    neighbours measured before it); without one, a live runner on several GPUs takes the largest first.
    """
    runner.check(jobs)
    return runner.run(jobs, search=search, on_event=on_event or no_event)
