"""Searching a recording offline: a recorded table as a search space plus one cost function per shape.

A recording (``data/recordings/<name>.parquet``, rows of ``tunetable.results.ROW_FIELDS`` plus
parameter columns and ``table``) holds every configuration of the grid measured on every shape.
Replaying it lets a strategy be judged against the exhaustive optimum with no GPU: the cost
function returns the recorded median, or a Failure with the recorded status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunetable.config import KernelConfig, Value
from tunetable.errors import TuneTableError
from tunetable.search.base import Failure, MeasureFn, Outcome
from tunetable.search.space import SearchSpace
from tunetable.search.kt_interop import load_rows, parameter_names, parameter_value
from tunetable.search.prior import predict_space

Shape = tuple[int, int, int]


@dataclass(frozen=True)
class RecordedTable:
    """One table of a recording: its configurations, shapes and outcome per (shape, configuration)."""

    table: str
    family: str
    space: SearchSpace
    shapes: tuple[Shape, ...]
    outcomes: Mapping[Shape, Mapping[str, Outcome]]          # shape -> config id -> outcome
    compile_records: Mapping[str, Mapping[str, Any]]        # config id -> resources known before GPU time

    def measure(self, shape: Shape) -> MeasureFn:
        """The cost function of one shape: the recorded median, or the recorded failure."""
        recorded = self.outcomes[shape]

        def measure(config: KernelConfig) -> Outcome:
            return recorded.get(config.id, Failure("missing", "not in the recording"))

        return measure

    def optimum_ms(self, shape: Shape) -> float:
        """The exhaustive optimum of a shape (fastest recorded median)."""
        times = [o for o in self.outcomes[shape].values() if not isinstance(o, Failure)]
        return min(times) if times else math.inf

    def prior(self, shape: Shape) -> np.ndarray | None:
        """The perf model's predicted time per configuration, for one shape (None: a family it cannot model)."""
        m, n, k = shape
        try:
            return predict_space(configs=self.space.configs, m=m, n=n, k=k, compile_records=self.compile_records)
        except ValueError:
            return None   # neither a WARPS_M/N tiled GEMM nor a persistent CONSUMERS one


def recorded_table(
    *, rows: Sequence[Mapping[str, Any]], table: str, family: str, source: str = "recording",
    names: Sequence[str] | None = None
) -> RecordedTable:
    """Build a RecordedTable from recording rows (other tables and cuBLAS baseline rows are ignored).

    ``names``: the tunables in grid order (default: every column that is not a result field).
    """
    kernel_rows = [r for r in rows if r.get("table", table) == table and r.get("kind", "kernel") == "kernel"]
    if not kernel_rows:
        raise TuneTableError(f"no kernel rows for table '{table}'", path=source)
    names = list(names) if names is not None else parameter_names(list(kernel_rows[0].keys()))
    configs: dict[str, KernelConfig] = {}
    outcomes: dict[Shape, dict[str, Outcome]] = {}
    compile_records: dict[str, dict[str, Any]] = {}
    for index, row in enumerate(kernel_rows):
        params: dict[str, Value] = {name: parameter_value(row[name]) for name in names if row.get(name) is not None}
        config = KernelConfig.from_dict(family, params)
        if str(row.get("config_id")) != config.id:
            raise TuneTableError(
                f"config_id {row.get('config_id')} does not match its parameters (expected {config.id})",
                path=source, where=f"row {index}",
            )
        configs.setdefault(config.id, config)
        shape = (int(row["M"]), int(row["N"]), int(row["K"]))
        outcomes.setdefault(shape, {})[config.id] = _outcome(row)
        # Registers, smem and build failures come from the compiler: known before any GPU time.
        compile_records.setdefault(config.id, {
            "status": "build" if row.get("status") == "build" else "ok",
            "registers": row.get("registers"),
            "smem_bytes": row.get("smem_bytes"),
        })
    ordered = sorted(configs.values(), key=lambda c: tuple(_sort_key(v) for _, v in c.params))
    return RecordedTable(
        table=table,
        family=family,
        space=SearchSpace.from_configs(ordered),
        shapes=tuple(sorted(outcomes, key=lambda s: (s[1], s[2], s[0]))),
        outcomes=outcomes,
        compile_records=compile_records,
    )


def load_recorded_table(*, path: str, table: str, family: str, names: Sequence[str] | None = None) -> RecordedTable:
    """Read a recording file and build the RecordedTable of ``table``."""
    return recorded_table(rows=load_rows(path), table=table, family=family, source=path, names=names)


def grid_parameter_names(grid: Mapping[str, Any]) -> list[str]:
    """The tunables of a params.yaml grid, in first-appearance order over its groups."""
    names: dict[str, None] = {}
    for group in grid.get("groups") or []:
        names.update((key, None) for key in group if key != "name")
    return list(names)


def _outcome(row: Mapping[str, Any]) -> Outcome:
    """A recorded row's outcome: its median ms when ok, else a Failure with its status and error."""
    if row.get("status") == "ok" and row.get("median_ms") is not None:
        return float(row["median_ms"])
    return Failure(str(row.get("status") or "missing"), row.get("error"))


def _sort_key(value: Value) -> tuple[int, Any]:
    """A sort key: numbers (bools excluded) by value first, then every other value by text."""
    return (0, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, str(value))
