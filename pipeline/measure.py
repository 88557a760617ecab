"""A table's measurement, one path for every backend: its content key, its shard jobs, its search, the runner.

The runner (``tunetable.bench.runner.run_shards``) has three backends behind one interface (run a
shard; measure tasks; give their rows): ``cuda`` (a worker process per GPU), ``cpu-test`` (the same
worker protocol over numpy, for tests) and ``replay`` (``tunetable.bench.replay.ReplayRunner``: the
recording, in process). A table's budgeted ``search:`` (``tunetable.search``) drives whichever
backend runs, through that interface: the search imports the bench, the bench never imports the
search, and this module, above both, composes them for ``tunetable bench`` and the Snakefile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable import paths
from tunetable.bench.plan import BackendChoice, ConfigTask, baseline_task, recording_path, settings_from_params
from tunetable.bench.replay import ReplayRunner, load_recording
from tunetable.bench.runner import Event, ShardJob, run_shards
from tunetable.bench.session import cuda_jobs
from tunetable.grid import DeviceLimits, expand
from tunetable.keys import kernel_source_hash
from tunetable.params import TableSpec
from tunetable.search import SearchSettings
from tunetable.search.driver import TableSearch, expected_measurements, recorded_compile_records, table_search
from tunetable.search.transfer import tuning_order
from tunetable.shardkey import search_key_part, search_settings, shard_key

Shape = tuple[int, int, int]


# --- the jobs and the run ------------------------------------------------------------------------

def grid_tasks(*, params: Mapping[str, Any], table: TableSpec) -> list[ConfigTask]:
    """Tasks straight from the grid (replay needs no compile report), plus the baseline."""
    kept = expand(table, limits=DeviceLimits.from_params(params)).kept
    tasks = [ConfigTask(config_id=config.id, kind="kernel", mesh_idx=index, family=table.family,
                        params=tuple(config.params), defines=tuple(config.defines().items()))
             for index, config in enumerate(kept)]
    return [*tasks, baseline_task()]


def replay_jobs(*, params: Mapping[str, Any], table: TableSpec, shapes: Sequence[Shape], key: str,
                results_root: Path) -> list[ShardJob]:
    """One replay job per shape: the grid's configurations plus the baseline (nothing to compile or launch)."""
    tasks = tuple(grid_tasks(params=params, table=table))
    kernel_hash = kernel_source_hash(table.kernel)
    return [ShardJob(table=table.name, m=m, n=n, k=k, tasks=tasks, payloads={},
                     journal_path=paths.journal(table.name, key, m, n, k, root=results_root),
                     shard_path=paths.raw_shard(table.name, key, m, n, k, root=results_root),
                     content_key=key, kernel_hash=kernel_hash)
            for (m, n, k) in shapes]


@dataclass(frozen=True)
class Measurement:
    """What ``tunetable bench`` runs for a table: the backend, the jobs left (in run order), the search."""

    table: TableSpec
    choice: BackendChoice
    key: str
    jobs: tuple[ShardJob, ...]           # the shards still to write, in the order they run
    done: int                            # shards already on disk (final: never re-measured)
    settings: Any                        # tunetable.bench.plan.BenchSettings
    search: SearchSettings | None
    table_search: TableSearch | None
    replay: ReplayRunner | None
    expected: int                        # measurements the jobs take (the progress bar's total)


def plan_measurement(*, params: Mapping[str, Any], table: TableSpec, shapes: Sequence[Shape], choice: BackendChoice,
                     results_root: Path, allow_missing: bool = False,
                     params_path: str | Path = "params.yaml") -> Measurement:
    """The jobs of a table's shapes on the chosen backend, with the table's search when it has one."""
    key = shard_key(params, table, choice.backend)
    search = None if search_key_part(table=table, path=params_path) is None else search_settings(
        table=table, path=params_path)
    replay = None
    if choice.backend == "replay":
        recording = recording_path(table=table)
        replay = ReplayRunner(recording=load_recording(recording), recording_path=recording,
                              provenance=choice.provenance, allow_missing=allow_missing)
        jobs = replay_jobs(params=params, table=table, shapes=shapes, key=key, results_root=results_root)
    else:
        jobs = cuda_jobs(table=table, shapes=shapes, key=key, results_root=results_root)
    todo = [job for job in jobs if not job.shard_path.is_file()]
    searching = None
    expected = sum(len(job.tasks) for job in todo)
    if search is not None:
        # Replay: what the compiler fixed (registers, shared memory) comes from the recording.
        overrides = recorded_compile_records(replay.recording, table=table.name) if replay is not None else None
        seed_model = None
        if search.seed_from_selector:   # the shape selector's model, from the recordings of its tables
            # lazy: the selector ranks with polars, which the GPU host's bench does not have
            from tunetable.selector_seeds import seed_model as selector_seed_model

            seed_model = selector_seed_model(params=params, path=params_path)
        searching = table_search(settings=search, table=table.name,
                                 shard_dir=paths.raw_dir(table.name, key, root=results_root),
                                 compile_overrides=overrides, seed_model=seed_model)
        order = {shape: index for index, shape in enumerate(tuning_order([job.shape for job in todo]))}
        todo.sort(key=lambda job: order[job.shape])
        expected = sum(expected_measurements(settings=search, tasks=job.tasks) for job in todo)
    return Measurement(table=table, choice=choice, key=key, jobs=tuple(todo), done=len(jobs) - len(todo),
                       settings=settings_from_params(params=params), search=search, table_search=searching,
                       replay=replay, expected=expected)


def run_measurement(plan: Measurement, *, gpus: Sequence[str | None], on_event: Event | None = None,
                    ) -> dict[Path, list[dict[str, Any]]]:
    """Run the plan's jobs on its backend (driven by its search, if any); rows by shard path."""
    if plan.replay is not None and plan.jobs:
        plan.replay.check(plan.jobs)   # every shape checked before any shard is written
    return run_shards(jobs=plan.jobs, settings=plan.settings, runner=plan.choice.backend, gpus=gpus,
                      on_event=on_event, search=plan.table_search, replay=plan.replay)
