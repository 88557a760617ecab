"""Tuning a second device cheaply: each table's budgeted search seeded from a tuned device's recordings.

``device_tuning`` turns params.yaml into the settings of the new device's measurement: every table's
``search`` becomes the model-based search (perf-model prior, transfer of already-tuned neighbours'
winners) with the learned prior taught by the seed device's recording of that table
(``learn_from``: data/recordings/<seed>_<table>.parquet), at most ``budget`` x the grid per shape.
How good that is, against an exhaustive recording of the target device: benchmarks/device_transfer.py.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.kernels.families.devices import recording_path
from tunetable.device_tables import table_on_device
from tunetable.measurement_plan import grid_config_ids
from tunetable.params import device_specs, table_spec


@dataclass(frozen=True)
class TablePlan:
    """One table's seeded measurement on the new device: the grid, the budget per shape, the seed recording."""

    table: str
    grid: int
    shapes: int
    per_shape: int
    learn_from: str
    measured: str     # the table to bench on the device: its device table (gemm_mma.h100), whose grid has the
                      # groups params.yaml gives that device; the primary's own name on the primary device

    @property
    def measurements(self) -> int:
        """Configurations measured over every shape."""
        return self.per_shape * self.shapes

    @property
    def exhaustive(self) -> int:
        """What the exhaustive recording measures (every configuration x every shape)."""
        return self.grid * self.shapes


def per_shape_budget(*, grid: int, budget: float) -> int:
    """Measurements per shape: ``budget`` x the grid rounded down (never above the share), at least one."""
    return max(1, math.floor(budget * grid + 1e-9))


def device_tuning(params: Mapping[str, Any], *, device: str, seed_from: str, budget: float,
                  path: str | Path = "params.yaml", root: Path = Path(".")) -> tuple[dict[str, Any], list[TablePlan]]:
    """(params with every table's seeded search, the plan per table); errors name the device or the recording."""
    declared = [spec.key for spec in device_specs(dict(params), path=path)]
    for option, key in (("--device", device), ("--seed-from", seed_from)):
        if key not in declared:
            raise TuneTableError(f"unknown device '{key}' (declared: {', '.join(declared) or 'none'})", path=path,
                                 where=option)
    if device == seed_from:
        raise TuneTableError("--seed-from must be another device than --device", where="--seed-from")
    if not 0 < budget <= 1:
        raise TuneTableError(f"the budget is a share of the grid in (0, 1], got {budget}", where="--budget")
    tuned = copy.deepcopy(dict(params))
    plans = []
    for name in params["tables"]:
        measured = table_on_device(params, base=name, device=device)
        spec = table_spec(dict(params), measured, path=path)
        seed = recording_path(device=seed_from, table=name)
        if not (root / seed).is_file():
            raise TuneTableError(f"no recording of table {name} on {seed_from} to seed from", path=seed)
        grid = len(grid_config_ids(params=params, table=spec))
        per_shape = per_shape_budget(grid=grid, budget=budget)
        tuned["tables"][name]["search"] = {"strategy": "model", "max_fevals": per_shape, "seed": 0,
                                           "transfer": True, "learn_from": seed}
        plans.append(TablePlan(table=name, grid=grid, shapes=len(spec.shapes()), per_shape=per_shape, learn_from=seed,
                               measured=measured))
    return tuned, plans
