"""Kernel Tuner interop: our rows -> KT cache -> the real kernel_tuner package reads it -> our rows again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.search.kt_interop import export_kt_caches, replay_with_kernel_tuner, rows_from_kt_cache

kernel_tuner = pytest.importorskip("kernel_tuner", reason="kernel_tuner (dev extra) is not installed")

# Hand-made rows of one shape: (BLOCK_M, BLOCK_N, STAGES) -> (status, samples in ms).
MEASURED = {
    (64, 64, 3): ("ok", [0.50, 0.52, 0.51]),
    (64, 64, 4): ("build", []),
    (64, 128, 3): ("ok", [0.40, 0.41, 0.39]),
    (64, 128, 4): ("ok", [0.20, 0.21, 0.22]),
    (128, 64, 3): ("verify", []),
    (128, 64, 4): ("ok", [0.35, 0.36, 0.34]),
}


def _rows() -> list[dict]:
    rows = []
    for (bm, bn, stages), (status, samples) in MEASURED.items():
        params = {"BLOCK_M": bm, "BLOCK_N": bn, "STAGES": stages}
        rows.append({
            "M": 128, "N": 4096, "K": 4096, "config_id": KernelConfig.from_dict("gemm_mma", params).id,
            "kind": "kernel", "status": status, "error": None if status == "ok" else f"{status} failed",
            "samples_ms": samples, "median_ms": sorted(samples)[1] if samples else None,
            "registers": 96, "compile_s": 1.25, "device": "NVIDIA H200", "table": "gemm_mma", **params,
        })
    rows.append({"M": 128, "N": 4096, "K": 4096, "config_id": "cublas", "kind": "baseline", "status": "ok",
                 "samples_ms": [0.1], "median_ms": 0.1, "device": "NVIDIA H200", "table": "gemm_mma",
                 "BLOCK_M": None, "BLOCK_N": None, "STAGES": None})
    return rows


def _export(tmp_path: Path) -> Path:
    (path,) = export_kt_caches(_rows(), table="gemm_mma", kernel_name="gemm_mma", out_dir=tmp_path)
    return path


def test_kernel_tuner_reads_our_cache(tmp_path: Path) -> None:
    from kernel_tuner.util import CompilationFailedConfig, RuntimeFailedConfig, read_cache

    path = _export(tmp_path)
    assert path.name == "gemm_mma_M128_N4096_K4096.json"
    document = read_cache(str(path), open_cache=False)
    assert document["tune_params_keys"] == ["BLOCK_M", "BLOCK_N", "STAGES"]
    assert document["tune_params"] == {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "STAGES": [3, 4]}
    assert document["problem_size"] == [128, 4096, 4096]
    cache = document["cache"]
    assert sorted(cache) == ["128,64,3", "128,64,4", "64,128,3", "64,128,4", "64,64,3", "64,64,4"]
    assert cache["64,128,4"]["time"] == 0.21 and cache["64,128,4"]["times"] == [0.20, 0.21, 0.22]
    assert isinstance(cache["64,64,4"]["__error__"], CompilationFailedConfig)
    assert isinstance(cache["128,64,3"]["__error__"], RuntimeFailedConfig)


@pytest.mark.filterwarnings("ignore:None of the tunable parameters specify thread block dimensions")
def test_kernel_tuner_simulation_finds_our_best(tmp_path: Path) -> None:
    from kernel_tuner import tune_cache

    results, env = tune_cache(str(_export(tmp_path)), strategy="brute_force", quiet=True)
    best = env["best_config"]
    assert (best["BLOCK_M"], best["BLOCK_N"], best["STAGES"], best["time"]) == (64, 128, 4, 0.21)
    assert len(results) == 4   # tune_cache drops failed entries from its space


def test_replay_counts_failures_like_our_search(tmp_path: Path) -> None:
    order = replay_with_kernel_tuner(_export(tmp_path), strategy="brute_force", max_fevals=6, seed=0)
    assert len(order) == 6
    assert dict(order)["64,64,4"] == float("inf")
    assert dict(order)["64,128,4"] == 0.21
    random_order = replay_with_kernel_tuner(_export(tmp_path), strategy="random_sample", max_fevals=3, seed=4)
    assert len(random_order) == 3
    assert random_order == replay_with_kernel_tuner(_export(tmp_path), strategy="random_sample", max_fevals=3, seed=4)


def test_round_trip_keeps_ids_statuses_and_samples(tmp_path: Path) -> None:
    back = {row["config_id"]: row for row in rows_from_kt_cache(_export(tmp_path), family="gemm_mma")}
    original = {row["config_id"]: row for row in _rows() if row["kind"] == "kernel"}
    assert set(back) == set(original)
    for config_id, row in original.items():
        assert back[config_id]["status"] == row["status"]
        assert back[config_id]["samples_ms"] == row["samples_ms"]
        assert back[config_id]["median_ms"] == row["median_ms"]
        assert (back[config_id]["M"], back[config_id]["N"], back[config_id]["K"]) == (128, 4096, 4096)
        assert back[config_id]["compile_s"] == 1.25
        assert back[config_id]["backend"] == "kernel_tuner"


def test_import_a_cache_written_by_kernel_tuner_itself(tmp_path: Path) -> None:
    """Kernel Tuner's own writer (header, then one appended entry per result, left open) imports cleanly."""
    from kernel_tuner.util import store_cache

    path = tmp_path / "theirs.json"
    header = {"device_name": "NVIDIA H200", "kernel_name": "gemm_mma", "problem_size": [64, 4096, 4096],
              "tune_params_keys": ["BLOCK_M", "BLOCK_N"], "tune_params": {"BLOCK_M": [64], "BLOCK_N": [64, 128]},
              "objective": "time", "cache": {}}
    path.write_text(json.dumps(header, indent="")[:-3])   # exactly how process_cache starts a file
    cache: dict = {}
    store_cache("64,64", {"BLOCK_M": 64, "BLOCK_N": 64, "time": 0.3, "times": [0.3, 0.3], "compile_time": 500.0},
                str(path), cache)
    store_cache("64,128", {"BLOCK_M": 64, "BLOCK_N": 128, "time": 0.25, "times": [0.2, 0.3], "compile_time": 400.0},
                str(path), cache)
    rows = {(r["BLOCK_M"], r["BLOCK_N"]): r for r in rows_from_kt_cache(path, family="gemm_mma")}
    assert rows[(64, 128)]["median_ms"] == 0.25
    assert rows[(64, 128)]["samples_ms"] == [0.2, 0.3]
    assert rows[(64, 64)]["compile_s"] == 0.5
    assert rows[(64, 64)]["config_id"] == KernelConfig.from_dict("gemm_mma", {"BLOCK_M": 64, "BLOCK_N": 64}).id
    assert (rows[(64, 64)]["M"], rows[(64, 64)]["device"]) == (64, "NVIDIA H200")


def test_malformed_cache_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"kernel_name": "x", "problem_size": [1, 2], "tune_params_keys": [], "cache": {}}')
    with pytest.raises(TuneTableError, match=r"broken\.json: problem_size: problem_size must be \[M, N, K\]"):
        rows_from_kt_cache(path, family="gemm_mma")
    path.write_text("not json")
    with pytest.raises(TuneTableError, match=r"broken\.json: line 1: not a Kernel Tuner cache"):
        rows_from_kt_cache(path, family="gemm_mma")


def test_search_columns_are_never_parameters() -> None:
    from tunetable.results import SEARCH_FIELDS
    from tunetable.search.kt_interop import parameter_names

    columns = ["mesh_idx", "BLOCK_M", "STAGES", "M", "median_ms", *SEARCH_FIELDS, "table"]
    assert parameter_names(columns) == ["BLOCK_M", "STAGES"]
