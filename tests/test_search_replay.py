"""Replaying a recording as a search problem: parquet rows -> space, optimum and cost function per shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.search import make_strategy
from tunetable.search.base import Failure
from tunetable.search.replay import grid_parameter_names, load_recorded_table


def _row(m: int, params: dict, status: str, median: float | None) -> dict:
    return {"M": m, "N": 4096, "K": 4096, "config_id": KernelConfig.from_dict("gemm_mma", params).id, "kind": "kernel",
            "status": status, "median_ms": median, "samples_ms": [median] if median else [], "registers": 128,
            "smem_bytes": 49152, "table": "gemm_mma", **params}


def _recording(tmp_path: Path) -> Path:
    import pandas as pd

    a = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "WARPS_M": 2, "WARPS_N": 2, "WARPS_K": 1, "STAGES": 3,
         "SPLIT_K": 1, "GROUP_M": 8}
    b = {**a, "STAGES": 4}
    c = {**a, "BLOCK_M": 16, "WARPS_M": 1, "WARPS_N": 4, "SPLIT_K": 4, "GROUP_M": 1, "BLOCK_K": 64}
    rows = [
        _row(1, a, "ok", 0.030), _row(1, b, "ok", 0.031), _row(1, c, "ok", 0.012),
        _row(4096, a, "ok", 0.40), _row(4096, b, "verify", None), _row(4096, c, "ok", 2.5),
        # cuBLAS rows have no parameters: parquet turns the integer columns into floats with gaps.
        {"M": 1, "N": 4096, "K": 4096, "config_id": "cublas", "kind": "baseline", "status": "ok", "median_ms": 0.02,
         "samples_ms": [0.02], "table": "gemm_mma"},
    ]
    path = tmp_path / "rec.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_recording_becomes_a_search_problem(tmp_path: Path) -> None:
    recorded = load_recorded_table(path=str(_recording(tmp_path)), table="gemm_mma", family="gemm_mma")
    assert len(recorded.space) == 3
    assert recorded.shapes == ((1, 4096, 4096), (4096, 4096, 4096))
    assert recorded.optimum_ms((1, 4096, 4096)) == 0.012
    assert recorded.optimum_ms((4096, 4096, 4096)) == 0.40
    stages4 = next(c for c in recorded.space.configs if dict(c.params)["STAGES"] == 4)
    assert recorded.measure((4096, 4096, 4096))(stages4) == Failure("verify", None)
    result = make_strategy({"strategy": "exhaustive"}).run(configs=recorded.space.configs,
                                                           measure=recorded.measure((1, 4096, 4096)))
    assert result.best_ms == 0.012


def test_mismatched_config_id_names_the_row(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.read_parquet(_recording(tmp_path))
    frame.loc[2, "config_id"] = "c0000000000"
    frame.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(TuneTableError, match=r"bad\.parquet: row 2: config_id c0000000000 does not match"):
        load_recorded_table(path=str(tmp_path / "bad.parquet"), table="gemm_mma", family="gemm_mma")


def test_grid_parameter_names_follow_the_groups() -> None:
    grid = {"groups": [{"name": "a", "BLOCK_M": [64], "STAGES": [3]}, {"name": "b", "BLOCK_M": [16], "SPLIT_K": [4]}]}
    assert grid_parameter_names(grid) == ["BLOCK_M", "STAGES", "SPLIT_K"]


def test_a_family_the_perf_model_cannot_rank_gets_no_prior(tmp_path: Path) -> None:
    import pandas as pd

    from tunetable.search.driver import perf_predictor

    # A family with neither WARPS_M / WARPS_N nor CONSUMERS: searches run without the analytical model.
    params = [{"BLOCK_M": 128, "BLOCK_N": n, "BLOCK_K": 64, "STAGES": 4, "VECTOR": 8} for n in (128, 256)]
    rows = [{**_row(1, p, "ok", t), "config_id": KernelConfig.from_dict("vectorised", p).id}
            for p, t in zip(params, (0.02, 0.03))]
    pd.DataFrame(rows).to_parquet(tmp_path / "wg.parquet")
    recorded = load_recorded_table(path=str(tmp_path / "wg.parquet"), table="gemm_mma", family="vectorised")
    assert recorded.prior((1, 4096, 4096)) is None
    assert perf_predictor(recorded.space.configs, {})((1, 4096, 4096)) is None
    result = make_strategy({"strategy": "model", "max_fevals": 1}).run(
        configs=recorded.space.configs, measure=recorded.measure((1, 4096, 4096)), prior=None)
    assert len(result.trace) == 1
