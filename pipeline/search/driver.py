"""The bench's budgeted search: per shape, the strategy asks and the bench measures (ask/tell).

With a table's ``search:`` set (anything but the default, an unbudgeted exhaustive run) the
bench does not measure every configuration of a shard. Per shape it runs the table's
SearchPlan; every batch the strategy proposes is measured by the real backend and told back as
the median time (or the failure):

- cuda and cpu-test: ``WorkerSession.measure_tasks`` in the worker process (verified, warmed up,
  interleaved rounds, journalled: a killed search resumes and re-measures nothing, since the
  strategy asks again for the same configurations and the journal answers);
- replay: ``RecordingSession.measure_tasks``, the recording's rows (checked up front for every
  configuration) served one batch at a time, exactly as the cuda backend would measure them.
The search drives a measurer (``tunetable.bench.runner.Measurer``); the bench never imports
the search (``tunetable.measurement_plan`` composes the two).

The cuBLAS baseline is measured with the first batch and never counts against the budget.
A shape's search also reads:
- the perf model's prediction (GEMM families only), from the compile report's registers and
  shared memory (replay: the recording's, which the compiler fixed before any GPU time);
- transfer: the winners of the nearest shapes (same N, K) whose shards already exist under the
  same content key, i.e. measured earlier in this tuning run (shapes run in ``tuning_order``);
- ``learn_from``: the complete profiles of a recording's *other* shapes (``learned.py``);
  rows of the shape being tuned are never read.

The shard holds the measured configurations in measurement order, then the baseline, each row
with ``tunetable.results.SEARCH_FIELDS``; its provenance gains ``search`` (label, settings, stop
reason, the trace). Rank and select work on such shards unchanged: they rank what was measured.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tunetable.bench.runner import Measurer, ShardJob
from tunetable.bench.tasks import ConfigTask
from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.search import SearchPlan, SearchSettings, make_strategy
from tunetable.search.base import Failure, Outcome, SearchResult
from tunetable.search.learned import Profile
from tunetable.search.prior import predict_space
from tunetable.search.transfer import interleave, seed_shapes
from tunetable.results import read_shard
from tunetable.search.kt_interop import load_rows

Shape = tuple[int, int, int]
Row = dict[str, Any]
MeasureRows = Callable[[Sequence[ConfigTask]], list[Row]]
SHARD_NAME = re.compile(r"^M(\d+)_N(\d+)_K(\d+)\.pkl$")
SEED_WINNERS = 2   # winners taken from each neighbouring shard


def task_config(task: ConfigTask) -> KernelConfig:
    """The KernelConfig of a kernel task (its id is the grid's config id for real grids)."""
    return KernelConfig.from_dict(task.family, dict(task.params))


def search_fields(*, settings: SearchSettings, step: int | None) -> dict[str, Any]:
    """The SEARCH_FIELDS of one row: the search's label, strategy, seed, budget and the row's step."""
    return {"search": settings.label, "search_strategy": settings.strategy, "search_seed": settings.seed,
            "search_step": step, "search_max_fevals": settings.max_fevals,
            "search_time_limit": settings.time_limit, "search_top_k": settings.top_k}


def row_outcome(row: Mapping[str, Any]) -> Outcome:
    """What the strategy is told: the median of an ``ok`` row, else a Failure with its status."""
    if row.get("status") == "ok" and row.get("median_ms") is not None:
        return float(row["median_ms"])
    return Failure(str(row.get("status") or "missing"), row.get("error"))


def expected_measurements(*, settings: SearchSettings, tasks: Sequence[ConfigTask]) -> int:
    """Configurations a shard's search measures at most (kernels within the budget, plus the baseline)."""
    kernels = sum(1 for t in tasks if t.kind == "kernel")
    cap = min(kernels, settings.max_fevals or kernels, settings.top_k or kernels)
    return cap + (len(tasks) - kernels)


def compile_records(
    tasks: Sequence[ConfigTask], overrides: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per KernelConfig id: build status, registers and shared memory (``overrides`` by task config id win)."""
    records = {}
    for task in tasks:
        if task.kind != "kernel":
            continue
        record = {"status": "ok" if task.build_status == "ok" else "build", **dict(task.compile_info)}
        record.update(overrides.get(task.config_id, {}))
        records[task_config(task).id] = record
    return records


def perf_predictor(
    configs: Sequence[KernelConfig], records: Mapping[str, Mapping[str, Any]]
) -> Callable[[Shape], np.ndarray | None]:
    """The perf model's seconds per configuration on any shape (None for a family it cannot model), memoised."""
    cache: dict[Shape, np.ndarray | None] = {}

    def predict(shape: Shape) -> np.ndarray | None:
        """The perf model's seconds per configuration on ``shape`` (None where it cannot model it), memoised."""
        if shape not in cache:
            m, n, k = shape
            try:
                cache[shape] = predict_space(configs=configs, m=m, n=n, k=k, compile_records=records)
            except ValueError:
                cache[shape] = None   # not a tiled GEMM the model knows: searches run without a prior
        return cache[shape]

    return predict


def solved_shapes(shard_dir: Path) -> list[Shape]:
    """Shapes whose shards exist in a content key's folder (measured earlier in this tuning run)."""
    if not shard_dir.is_dir():
        return []
    found = []
    for path in sorted(shard_dir.iterdir()):
        match = SHARD_NAME.match(path.name)
        if match:
            found.append(tuple(int(v) for v in match.groups()))
    return found  # type: ignore[return-value]


def shard_winners(path: Path, *, count: int = SEED_WINNERS) -> list[str]:
    """The fastest ``ok`` kernel configurations of a shard (ties by config id)."""

    frame = read_shard(path)["merged_df"]
    rows = [r for r in frame.to_dict(orient="records")
            if r.get("kind", "kernel") == "kernel" and r.get("status") == "ok" and r.get("median_ms") is not None]
    rows.sort(key=lambda r: (float(r["median_ms"]), str(r["config_id"])))
    return [str(r["config_id"]) for r in rows[:count]]


def neighbour_winners(*, shard_dir: Path, shape: Shape) -> list[str]:
    """Winners of the seed shapes (transfer.seed_shapes) among those solved: each one's best first, then runners-up."""
    chosen = seed_shapes(shape=shape, solved=solved_shapes(shard_dir))
    return interleave([shard_winners(shard_dir / f"M{m}_N{n}_K{k}.pkl") for m, n, k in chosen])


def load_profiles(path: str | Path, *, table: str) -> tuple[Profile, ...]:
    """Complete profiles per shape of a recording's kernel rows of ``table`` (failures as inf)."""

    times: dict[Shape, dict[str, float]] = {}
    for row in load_rows(path):
        if row.get("table", table) != table or row.get("kind", "kernel") != "kernel":
            continue
        shape = (int(row["M"]), int(row["N"]), int(row["K"]))
        ok = row.get("status") == "ok" and row.get("median_ms") is not None
        times.setdefault(shape, {})[str(row["config_id"])] = float(row["median_ms"]) if ok else math.inf
    if not times:
        raise TuneTableError(f"no kernel rows of table '{table}' to learn from", path=path)
    return tuple(Profile(shape=shape, times=by_id) for shape, by_id in sorted(times.items()))


@dataclass(frozen=True)
class TableSearch:
    """A table's budgeted search as the bench runs it, one shape at a time."""

    plan: SearchPlan
    shard_dir: Path                                    # the content key's folder: neighbours measured earlier
    table: str = ""                                    # the table searched
    seed_model: Any = None                             # seed_from_selector: tunetable.selector_fit.SelectorModel
    profiles: tuple[Profile, ...] = ()                 # learn_from: other shapes' complete profiles
    compile_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by task config id

    @property
    def settings(self) -> SearchSettings:
        """The table's search settings."""
        return self.plan.settings

    def run_shard(self, *, measurer: Measurer, job: ShardJob) -> tuple[list[Row], dict[str, Any]]:
        """Search one shard on a measurer (a live worker's, a recording's): each batch through ``measure_tasks``."""
        def measure_rows(tasks: Sequence[ConfigTask]) -> list[Row]:
            """Measure ``tasks`` on the measurer; their shard rows."""
            measurer.measure_tasks(job, tasks)
            return measurer.task_rows(job, tasks)

        return self.search_shape(shape=job.shape, tasks=job.tasks, measure_rows=measure_rows)

    def search_shape(
        self, *, shape: Shape, tasks: Sequence[ConfigTask], measure_rows: MeasureRows
    ) -> tuple[list[Row], dict[str, Any]]:
        """Run the search over a shard's kernel tasks; the measured rows (annotated) and the search's provenance."""
        kernels = [t for t in tasks if t.kind == "kernel"]
        extras = [t for t in tasks if t.kind != "kernel"]
        configs = [task_config(t) for t in kernels]
        task_of = {config.id: task for config, task in zip(configs, kernels)}
        if len(task_of) != len(kernels):
            raise TuneTableError(
                f"shape {shape}: two configurations share parameters; the search cannot tell them apart"
            )
        config_id_of = {task.config_id: config.id for config, task in zip(configs, kernels)}
        predict = perf_predictor(configs, compile_records(kernels, self.compile_overrides))
        seeds = []
        if self.settings.seed_from_selector and self.seed_model is not None:
            # The shape selector's prior for a new shape, from every table's recording: this table's best first.
            from tunetable.selector_seeds import seed_ids

            seeds = [config_id_of[c] for c in seed_ids(model=self.seed_model, table=self.table, shape=shape)
                     if c in config_id_of]
        if self.settings.transfer:
            seeds += [config_id_of[c] for c in neighbour_winners(shard_dir=self.shard_dir, shape=shape)
                      if c in config_id_of and config_id_of[c] not in seeds]
        measured: dict[str, Row] = {}
        waiting = list(extras)

        def measure_batch(batch: Sequence[KernelConfig]) -> list[Outcome]:
            """Measure a batch (with the waiting non-kernel tasks); each configuration's outcome."""
            asked = [task_of[config.id] for config in batch]
            rows = measure_rows([*asked, *waiting])
            waiting.clear()
            measured.update((str(row["config_id"]), row) for row in rows)
            return [row_outcome(measured[task.config_id]) for task in asked]

        try:
            result = self.plan.run(configs=configs, measure=lambda config: measure_batch([config])[0],
                                   prior=predict(shape), seed_ids=seeds, measure_batch=measure_batch, shape=shape,
                                   profiles=self.profiles,
                                   predict=predict)
        except TuneTableError:
            raise  # already names its file and place
        except ValueError as exc:
            raise TuneTableError(f"shape {shape}: {exc}") from None
        if waiting:
            measure_batch([])
        rows = [{**measured[task_of[e.config_id].config_id], **search_fields(settings=self.settings, step=e.step)}
                for e in result.trace]
        rows += [{**measured[t.config_id], **search_fields(settings=self.settings, step=None)} for t in extras]
        return rows, {"search": self.provenance(result=result, seeds=seeds, shape=shape, task_of=task_of)}

    def provenance(self, *, result: SearchResult, seeds: Sequence[str], shape: Shape,
                   task_of: Mapping[str, ConfigTask]) -> dict[str, Any]:
        """What a searched shard's provenance says of its search: settings, stop reason, seeds, the trace."""
        return {
            "label": self.settings.label,
            "settings": {name: getattr(self.settings, name) for name in
                         ("strategy", "max_fevals", "time_limit", "seed", "top_k", "transfer", "learn_from",
                          "seed_from_selector")},
            "stop_reason": result.stop_reason,
            "transfer_seeds": [task_of[c].config_id for c in seeds if c in task_of],
            "learned_from_shapes": len({p.shape for p in self.profiles if tuple(p.shape) != tuple(shape)}),
            "trace": [{"step": e.step, "config_id": task_of[e.config_id].config_id, "elapsed_s": round(e.elapsed_s, 3)}
                      for e in result.trace],
        }


def table_search(*, settings: SearchSettings, table: str, shard_dir: Path,
                 compile_overrides: Mapping[str, Mapping[str, Any]] | None = None,
                 seed_model: Any = None) -> TableSearch:
    """The TableSearch of a table's settings (reads the ``learn_from`` recording once)."""
    profiles = load_profiles(settings.learn_from, table=table) if settings.learn_from else ()
    return TableSearch(plan=make_strategy(settings), shard_dir=shard_dir, profiles=profiles,
                       compile_overrides=dict(compile_overrides or {}), table=table, seed_model=seed_model)

