"""benchmarks/unseen_shapes.py's per-device plumbing: which selector, which recordings, which result file."""

from __future__ import annotations

import math

import pytest
from bench_support import REPO, load_benchmark_script
from tunetable.params import load_params, selector_spec

unseen = load_benchmark_script("unseen_shapes")


@pytest.fixture(scope="module")
def params() -> dict:
    return load_params(REPO / "params.yaml")


def test_primary_device_keeps_the_declared_selector_and_file_name(params: dict) -> None:
    assert list(params["devices"])[0] == "h200"   # params.yaml: the primary device
    assert unseen.selector_name(params=params, device="h200") == "gemm_selector"
    assert unseen.out_name(params=params, device="h200") == "unseen_shapes.json"


def test_other_device_gets_its_device_selector_over_its_recordings(params: dict) -> None:
    name = unseen.selector_name(params=params, device="h100")
    assert name == "gemm_selector.h100"
    spec = selector_spec(params, name)
    assert spec.tables == ("gemm_mma.h100", "gemm_wgmma.h100", "gemm_wgmma_swap.h100")
    assert spec.data == "kernels/data/gemm_selector.h100.json"
    assert unseen.out_name(params=params, device="h100") == "unseen_shapes.h100.json"
    assert unseen.out_name(params=params, device="h100", name="unseen_shapes_timing.json") == \
        "unseen_shapes_timing.h100.json"


def test_validation_recordings_are_the_devices_own(params: dict) -> None:
    names = selector_spec(params, "gemm_selector.h100").tables
    paths = unseen.held_out_paths(device="h100", names=names)
    assert {t: p.relative_to(REPO).as_posix() for t, p in paths.items()} == {
        "gemm_mma": "data/recordings/h100_validation_gemm_mma.parquet",
        "gemm_wgmma": "data/recordings/h100_validation_gemm_wgmma.parquet",
        "gemm_wgmma_swap": "data/recordings/h100_validation_gemm_wgmma_swap.parquet"}
    primary = unseen.held_out_paths(device="h200", names=("gemm_mma",))
    assert primary["gemm_mma"].relative_to(REPO).as_posix() == "data/recordings/h200_validation_gemm_mma.parquet"


def test_speedups_geomean_min_and_slow_count() -> None:
    rows = [{"speedup_vs_cublas": v} for v in (0.5, 2.0, 0.95, 0.89)]
    found = unseen.speedups(rows)
    assert found["speedup_vs_cublas"] == pytest.approx((0.5 * 2.0 * 0.95 * 0.89) ** 0.25)
    assert found["min_speedup_vs_cublas"] == 0.5
    assert found["below_0.9x"] == 2


def test_speedups_unmeasured_pick_counts_as_zero() -> None:
    found = unseen.speedups([{"speedup_vs_cublas": 1.2}, {"speedup_vs_cublas": 1.0 / math.inf}])
    assert found["speedup_vs_cublas"] == 0.0
    assert found["below_0.9x"] == 1
