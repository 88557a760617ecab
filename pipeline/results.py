"""The raw-result contract: one kbench-compatible pickle per (table, shape) shard.

A shard is a dict ``{"name", "file", "merged_df", "build_df", "provenance"}`` pickled with a
pinned protocol. ``merged_df`` has kbench's columns (``mesh_idx``, ``name``, ``met (ms)``,
``iters``, ``spec`` and one column per parameter) plus the project's own (ROW_FIELDS).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_bytes
from tunetable.errors import TuneTableError

PICKLE_PROTOCOL = 4
STATUSES = ("ok", "build", "verify", "launch", "timeout", "missing")
BASELINE_ID = "cublas"

# Columns every row carries, in this order; parameter columns (BLOCK_M, ...) follow ``spec``.
KBENCH_FIELDS = ("mesh_idx", "name", "met (ms)", "iters", "spec")
ROW_FIELDS = (
    "M", "N", "K",
    "config_id",        # KernelConfig.id, or "cublas" for baseline rows
    "kind",             # "kernel" | "baseline"
    "status",           # one of STATUSES; only "ok" rows can be ranked or selected
    "error",            # first lines of the failure, or None
    "samples_ms",       # every timed sample (list of float), per launch
    "median_ms", "iqr_ms", "mean_ms", "min_ms",
    "tflops",           # 2*M*N*K / median
    "rel_err",          # ||C - C_ref|| / ||C_ref||
    "registers", "smem_bytes", "spill_bytes", "stack_bytes", "compile_s",
    "sm_clock_mhz", "power_w",   # mean NVML readings while this config ran
    "backend",          # "cuda" | "replay"
    "device", "driver", "nvcc", "git_rev", "time",  # of the measurement itself (ISO UTC time)
    "kernel_hash",      # keys.kernel_source_hash of the kernel source measured
    "content_key",      # the content key of the shard this row belongs to
    "measured_key",     # the content key of the cuda run that measured it (== content_key live)
)
# Columns of rows measured by a budgeted search (params.yaml ``search:``), after ROW_FIELDS. Such a
# shard holds only the configurations the search measured, plus the cuBLAS baseline. Shards
# measured exhaustively (no ``search:``, the default) do not carry them.
SEARCH_FIELDS = (
    "search",             # the search's label, e.g. "model(max_fevals=5,seed=0)"
    "search_strategy",    # exhaustive | random | model | evolutionary
    "search_seed",
    "search_step",        # 0-based order of the measurement within the shape's search (None: baseline)
    "search_max_fevals", "search_time_limit", "search_top_k",   # the budget (None: unlimited)
)


def spec_string(table: str, params: dict[str, Any], m: int, n: int, k: int) -> str:
    """kbench spec: ``table/P1=v1/.../$M=m/$N=n/$K=k`` (``$`` marks runtime arguments)."""
    parts = [table, *(f"{key}={value}" for key, value in params.items()), f"$M={m}", f"$N={n}", f"$K={k}"]
    return "/".join(parts)


def _gapped_int_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Columns whose values are all ints but missing on some rows (parameters on cuBLAS rows)."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    gapped = []
    for name in names:
        values = [row.get(name) for row in rows]
        present = [v for v in values if v is not None]
        if present and len(present) < len(values) and all(type(v) is int for v in present):
            gapped.append(name)
    return gapped


def write_shard(
    path: str | Path,
    *,
    table: str,
    rows: list[dict[str, Any]],
    build_rows: list[dict[str, Any]],
    provenance: dict[str, Any],
) -> None:
    """Write a shard atomically as a kbench-style pickle of pandas DataFrames."""
    import pandas as pd

    merged = pd.DataFrame(rows)
    for name in _gapped_int_columns(rows):  # pandas would make them float (128.0 in manifests)
        merged[name] = merged[name].astype("Int64")
    payload = {
        "name": table,
        "file": str(path),
        "merged_df": merged,
        "build_df": pd.DataFrame(build_rows),
        "provenance": dict(provenance),
    }
    atomic_write_bytes(path, pickle.dumps(payload, protocol=PICKLE_PROTOCOL))


def read_shard(path: str | Path) -> dict[str, Any]:
    """Read a shard (or any kbench pickle); a file that is not one raises TuneTableError."""
    try:
        with open(path, "rb") as handle:
            payload = pickle.load(handle)  # noqa: S301 - our own result files only
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as exc:
        raise TuneTableError(f"Invalid pkl [{path}]: {exc.__class__.__name__}", path=path) from None
    if not isinstance(payload, dict) or "merged_df" not in payload:
        raise TuneTableError(f"Invalid pkl [{path}]: no merged_df", path=path)
    return payload
