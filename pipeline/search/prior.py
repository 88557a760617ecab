"""The analytical GEMM performance model over a table's configurations (the search's prior).

The formulas (occupancy, waves, roofline, the persistent variant) live in
``tunetable.kernels.perfmodel`` so that the runtime's shape selector evaluates the same model
without importing the build; this module applies them to ``KernelConfig``s and compile reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from tunetable.config import KernelConfig
from tunetable.kernels.perfmodel import (  # noqa: F401  (re-exported: the search's model names)
    DEVICE_FLOPS,
    HBM_BYTES_PER_S,
    NUM_SMS,
    SATURATING_WARPS,
    GemmTile,
    PersistentTile,
    Resources,
    blocks_per_sm,
    estimated_resources,
    predict_persistent_seconds,
    predict_seconds,
    roofline_floor_s,
    slice_reduction_s,
)


def predict_config_seconds(
    *, config: KernelConfig, m: int, n: int, k: int, compile_record: Mapping[str, object] | None = None
) -> float:
    """Predicted seconds of one configuration by its family's model (ValueError: no model fits its tunables)."""
    if compile_record is not None and compile_record.get("status", "ok") != "ok":
        return math.inf   # a configuration that does not build can never win
    if "CONSUMERS" in config.defines():
        return predict_persistent_seconds(tile=PersistentTile.from_config(config), m=m, n=n, k=k)
    resources = resources_for(config=config, compile_record=compile_record)
    return predict_seconds(tile=GemmTile.from_config(config), resources=resources, m=m, n=n, k=k)


def resources_for(*, config: KernelConfig, compile_record: Mapping[str, object] | None = None) -> Resources:
    """Resources of one configuration: the compile report's registers and smem where present, else estimates."""
    tile = GemmTile.from_config(config)
    estimate = estimated_resources(tile)
    registers, smem = estimate.registers, estimate.smem_bytes
    if compile_record is not None and compile_record.get("status", "ok") == "ok":
        registers = int(compile_record.get("registers") or registers)
        # The compile report's smem_bytes is the total per block (ptxas static + the pipeline's dynamic).
        smem = int(compile_record.get("smem_bytes") or smem)
    return Resources(registers=registers, smem_bytes=smem, threads=tile.threads)


def predict_space(
    *,
    configs: Sequence[KernelConfig],
    m: int,
    n: int,
    k: int,
    compile_records: Mapping[str, Mapping[str, object]] | None = None,
) -> np.ndarray:
    """Predicted seconds per configuration (the prior the search strategies read)."""
    records = compile_records or {}
    return np.array([predict_config_seconds(config=config, m=m, n=n, k=k, compile_record=records.get(config.id))
                     for config in configs], dtype=float)


def top_k(*, predictions: np.ndarray, k: int) -> list[int]:
    """Positions of the ``k`` best-predicted configurations, best first (ties by position)."""
    order = sorted(range(len(predictions)), key=lambda p: (float(predictions[p]), p))
    return order[: max(k, 1)]


def compile_records_by_id(report: Mapping[str, object]) -> dict[str, Mapping[str, object]]:
    """Index a compile report (``results/compile/<table>.json``) by configuration id."""
    records = report.get("records") or []
    return {str(r["config_id"]): r for r in records if isinstance(r, Mapping) and "config_id" in r}
