"""A dispatch entry's measured speedup over cuBLAS, and the PyTorch operator's route that it decides.

The expected figures are recomputed here from the committed recordings (tests/recording_figures.py: polars
and numpy), never through the pipeline: the shared cuBLAS yardstick of tunetable.baseline's model
(log cuBLAS = scale(recording) + level(shape)) by a least-squares solve, over the median of the entry's
configuration at the entry's first M. benchmarks/results/device_tables.json names the default shapes.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from functools import lru_cache
from pathlib import Path

import pytest
from recording_figures import recording_median, yardsticks_by_lstsq

from tunetable import codegen
from tunetable.kernels.runtime import decide
from tunetable.kernels.runtime.layers import torch_serves
from tunetable.kernels.tuning_configs import DEVICE_TABLES
from tunetable.manifest import load_manifest
from tunetable.params import load_params, table_specs

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
TABLES = tuple(PARAMS["dispatch"]["gemm_dispatch"]["tables"])
DEVICES = ("h200", "h100")
ROUNDING = 0.5e-4 + 1e-9      # the manifest holds 4 decimals
Shape = tuple[int, int, int]


def recording(device: str, table: str) -> Path:
    """A table's committed recording on a device (docs/devices.md: data/recordings/<device>_<table>.parquet)."""
    return REPO / f"data/recordings/{device}_{table}.parquet"


@lru_cache(maxsize=None)
def yardsticks(device: str) -> dict[str, dict[Shape, float]]:
    """Per table and shape: the shared cuBLAS yardstick over the device's recordings of the list's tables."""
    shapes = {spec.name: set(spec.shapes()) for spec in table_specs(PARAMS) if spec.name in TABLES}
    return yardsticks_by_lstsq(shapes, {table: recording(device, table) for table in TABLES})


def measured_speedup(*, device: str, table: str, config_id: str, shape: Shape) -> float:
    """The yardstick over the configuration's median at the shape, in the table's recording."""
    m, n, k = shape
    return yardsticks(device)[table][shape] / recording_median(path=recording(device, table), m=m, n=n, k=k,
                                                               config_id=config_id)


def default_shapes(device: str) -> list[Shape]:
    """The shapes device_tables.json reports the dispatch list at (every table's default shapes)."""
    reported = json.loads((REPO / "benchmarks/results/device_tables.json").read_text())
    keys = reported["per_shape"][device]["own"]["gemm_dispatch"]
    return sorted(tuple(int(v) for v in key.split("x")) for key in keys)


def tabled_decision(device: str, shape: Shape) -> decide.Decision:
    """The runtime's decision at a shape a table holds (no selector prediction, so no warning)."""
    m, n, k = shape
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = decide.dispatcher(device=device).decide(m=m, n=n, k=k)
    assert found.prediction is None and found.choice is not None, shape
    return found


@pytest.mark.parametrize("device", DEVICES)
def test_every_generated_dispatch_entry_holds_its_first_ms_measured_speedup(device: str) -> None:
    choices = DEVICE_TABLES[device].dispatch["gemm_dispatch"]
    assert len(choices) > 40
    for choice in choices:
        expected = measured_speedup(device=device, table=choice.table, config_id=choice.config_id,
                                    shape=(choice.m, choice.n, choice.k))
        assert abs(choice.speedup_vs_cublas - expected) <= ROUNDING, (choice, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_the_operator_hands_torch_exactly_the_default_shapes_whose_recording_measured_cublas_faster(
        device: str) -> None:
    shapes = default_shapes(device)
    assert len(shapes) == 70
    slower = []
    for shape in shapes:
        found = tabled_decision(device, shape)
        figure = round(measured_speedup(device=device, table=found.choice.table, config_id=found.choice.config_id,
                                        shape=shape), 4)
        why = torch_serves(found, m=shape[0], n=shape[1], k=shape[2], smallest_floor_s=None)
        if figure < 1.0:
            slower.append(shape)
            assert why is not None and why.startswith("its recording measured cuBLAS faster"), (shape, figure)
        else:
            assert why is None, (shape, figure, why)
    assert 10 <= len(slower) <= 30   # on both devices about a quarter of the default shapes


def test_the_h100s_512_x_4096_x_14336_goes_to_torch_and_1024_stays_with_tunetable() -> None:
    """gemm_wgmma's winner at 512 x 4096 x 14336 on the H100 ran slower than cuBLAS (0.994x in its own shard,
    manifests/gemm_dispatch.h100.yaml); at 1024 x 4096 x 14336 its winner ran faster (1.005x)."""
    slow = tabled_decision("h100", (512, 4096, 14336))
    expected = measured_speedup(device="h100", table=slow.choice.table, config_id=slow.choice.config_id,
                                shape=(512, 4096, 14336))
    assert expected < 1.0
    assert torch_serves(slow, m=512, n=4096, k=14336, smallest_floor_s=None) == (
        f"its recording measured cuBLAS faster (dispatch entry at M=512: {expected:.4f}x cuBLAS's speed)")
    fast = tabled_decision("h100", (1024, 4096, 14336))
    assert measured_speedup(device="h100", table=fast.choice.table, config_id=fast.choice.config_id,
                            shape=(1024, 4096, 14336)) >= 1.0
    assert torch_serves(fast, m=1024, n=4096, k=14336, smallest_floor_s=None) is None


def test_codegen_renders_each_entrys_speedup_as_a_float_literal(tmp_path: Path) -> None:
    """Two entries written here: 0.9785 renders as written, an integer 1 as the float literal 1.0."""
    manifest = tmp_path / "gemm_dispatch.yaml"
    entry = ("  - {{M: {m}, M_END: {end}, N: 4096, K: 4096, KERNEL: gemm_wgmma, TABLE: gemm_wgmma, "
             "CONFIG_ID: c0123456789, SPEEDUP_VS_CUBLAS: {speedup}}}")
    manifest.write_text("params:\n" + entry.format(m=1, end=512, speedup="1") + "\n"
                        + entry.format(m=512, end=2147483647, speedup="0.9785") + "\n")
    (job,) = codegen.jobs_from_params(params=PARAMS, params_path=REPO / "params.yaml", names=["gemm_dispatch"])
    region = codegen.render_job(dataclasses.replace(job, manifest_path=manifest)).region
    assert region.count('config_id="c0123456789", speedup_vs_cublas=1.0)') == 1
    assert region.count('config_id="c0123456789", speedup_vs_cublas=0.9785)') == 1


@pytest.mark.parametrize("device, manifest", [("h200", "manifests/gemm_dispatch.yaml"),
                                              ("h100", "manifests/gemm_dispatch.h100.yaml")])
def test_the_generated_lists_hold_the_manifests_figures(device: str, manifest: str) -> None:
    written = [entry["SPEEDUP_VS_CUBLAS"] for entry in load_manifest(REPO / manifest)]
    generated = [choice.speedup_vs_cublas for choice in DEVICE_TABLES[device].dispatch["gemm_dispatch"]]
    assert generated == written and all(type(value) is float for value in generated)
