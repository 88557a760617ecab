"""Hand-written result rows for the rank/profile/select tests (values chosen in each test)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from tunetable.results import spec_string, write_shard

GRID = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS_M", "WARPS_N", "WARPS_K", "STAGES", "SPLIT_K", "GROUP_M")
# Three gemm_mma configurations of the kind params.yaml declares, by hand-picked id.
CONFIGS: dict[str, dict[str, int]] = {
    "ca": dict(zip(GRID, (128, 128, 64, 2, 4, 1, 4, 1, 8))),
    "cb": dict(zip(GRID, (64, 128, 64, 2, 4, 1, 3, 1, 8))),
    "cc": dict(zip(GRID, (16, 64, 64, 1, 4, 1, 4, 4, 1))),
    "cd": dict(zip(GRID, (128, 256, 64, 2, 4, 1, 4, 1, 8))),
}


def row(*, m: int, config: str, median: float | None, n: int = 4096, k: int = 4096, status: str = "ok",
        iqr: float = 0.0, backend: str = "cuda", content_key: str = "live0001",
        table: str = "gemm_mma") -> dict[str, Any]:
    """One ROW_FIELDS row; ``config="cublas"`` gives the baseline row."""
    params = {} if config == "cublas" else CONFIGS[config]
    tflops = None if median is None else 2 * m * n * k / (median * 1e-3) / 1e12
    return {
        "mesh_idx": -1 if config == "cublas" else list(CONFIGS).index(config),
        "name": table, "met (ms)": median, "iters": 10,
        "spec": spec_string(table, params, m, n, k), **params,
        "M": m, "N": n, "K": k, "config_id": config, "kind": "baseline" if config == "cublas" else "kernel",
        "status": status, "error": None if status == "ok" else f"{status} failed",
        "samples_ms": [] if median is None else [median] * 3,
        "median_ms": median, "iqr_ms": iqr, "mean_ms": median, "min_ms": median, "tflops": tflops,
        "rel_err": 0.001, "registers": 128, "smem_bytes": 49152, "spill_bytes": 0, "stack_bytes": 0,
        "compile_s": 1.5, "sm_clock_mhz": 1755.0, "power_w": 650.0, "backend": backend, "device": "NVIDIA H200",
        "driver": "580.95.05", "nvcc": "Build cuda_13.0", "git_rev": "0123abcd4567", "time": "2026-11-29T08:00:00Z",
        "kernel_hash": "kh00112233445566", "content_key": content_key, "measured_key": "live0001",
    }


def shard(path: Path, rows: list[dict[str, Any]], *, table: str = "gemm_mma") -> Path:
    """Write rows as a real shard pickle through tunetable.results.write_shard."""
    write_shard(path, table=table, rows=rows, build_rows=[], provenance={"table": table})
    return path


def kbench_pickle(path: Path, specs: list[str], times: list[float]) -> Path:
    """A Modular kbench-style pickle: merged_df with mesh_idx, name, met (ms), iters, spec; no provenance."""
    import pandas as pd

    merged = pd.DataFrame({"mesh_idx": list(range(len(specs))), "name": ["bench"] * len(specs),
                           "met (ms)": times, "iters": [100] * len(specs), "spec": specs})
    path.write_bytes(pickle.dumps({"merged_df": merged, "build_df": pd.DataFrame(), "name": "bench", "file": "x.yaml"}))
    return path
