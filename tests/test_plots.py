"""The PNG plots (tunetable.plots): per (N, K) speedup over cuBLAS against M and TFLOP/s under the roofline,
deterministic bytes, a bounded size, the audit's before/after plot, and `tunetable plots` redrawing from the CSVs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunetable import plots
from tunetable.audit import DispatchShapeChange, ShapeChange, TableAudit


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, from its IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def point(m: int, n: int = 4096, k: int = 4096, *, tuned: float = 0.010, cublas: float = 0.012,
          table: str | None = None) -> plots.PlotPoint:
    return plots.PlotPoint(m=m, n=n, k=k, tuned_ms=tuned, cublas_ms=cublas, table=table)


def test_speedup_and_tflops_of_a_point() -> None:
    p = point(1, tuned=0.010, cublas=0.012)
    assert p.speedup == pytest.approx(1.2)
    assert p.tflops(0.010) == pytest.approx(2 * 4096 * 4096 / 1e-5 / 1e12)   # 3.355 TFLOP/s
    assert plots.PlotPoint(m=1, n=8, k=8, tuned_ms=None, cublas_ms=1.0).speedup is None


def test_roofline_is_the_bandwidth_floor_at_m1_and_the_compute_ceiling_at_large_m() -> None:
    # M = 1, N = K = 4096: 2 * (4096 + 4096 * 4096 + 4096) bytes at 4.13 TB/s is 8.13 µs for 33.5 MFLOP.
    reference = plots.Roofline()
    assert reference.tflops(m=1, n=4096, k=4096) == pytest.approx(33_554_432 / 8.1277e-6 / 1e12, rel=1e-3)
    assert reference.tflops(m=8192, n=8192, k=8192) == pytest.approx(800.0)
    assert reference.label() == "roofline (H200 ceilings: 4.13 TB/s, 800 TFLOP/s)"


def test_a_device_table_s_roofline_is_its_device_s_measured_ceilings() -> None:
    # params.yaml's devices: the H100's measured 3.04 TB/s and 782.1 TFLOP/s (benchmarks/device_ceilings.py); its
    # tables (gemm_mma.h100) draw under those, the primary's (gemm_mma) under the H200's, bit-equal to perfmodel's.
    from tunetable.params import device_specs, load_params, primary_device

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    devices, primary = device_specs(params), primary_device(params)
    h100 = plots.table_roofline(name="gemm_mma.h100", devices=devices, primary=primary)
    h200 = plots.table_roofline(name="gemm_mma", devices=devices, primary=primary)
    assert h100.label() == "roofline (H100 ceilings: 3.04 TB/s, 782 TFLOP/s)"
    assert h200.label() == plots.Roofline().label()
    assert h200.tflops(m=1, n=4096, k=4096) == plots.Roofline().tflops(m=1, n=4096, k=4096)
    # M = 1: memory-bound, the H100's ceiling is the H200's times 3.04 / 4.13; 8192^3: compute-bound, 782.1.
    assert h100.tflops(m=1, n=4096, k=4096) == pytest.approx(h200.tflops(m=1, n=4096, k=4096) * 3.04 / 4.13)
    assert h100.tflops(m=8192, n=8192, k=8192) == pytest.approx(782.1)
    assert plots.table_roofline(name="gemm_mma.a100", devices=devices, primary=primary) == plots.Roofline()


def test_groups_are_per_nk_sorted_by_m_and_pooled_past_the_limit() -> None:
    groups = plots.nk_groups([point(64, 8192, 8192), point(1), point(8)])
    assert [(key, title, [p.m for p in ps]) for key, title, ps in groups] == [
        ((4096, 4096), "N = 4096, K = 4096", [1, 8]), ((8192, 8192), "N = 8192, K = 8192", [64])]
    many = plots.nk_groups([point(1, 4096 + 8 * i) for i in range(12)])
    assert len(many) == plots.MAX_NK_ROWS and many[-1][1] == "5 other (N, K), pooled" and many[-1][0] == (0, 0)


def test_table_png_is_deterministic_and_has_a_row_per_nk() -> None:
    points = [point(m, n, tuned=0.01 * m, cublas=0.011 * m, table=t) for m in (1, 8, 64) for n, t in
              ((4096, "a"), (8192, "b"))]
    first = plots.table_png(name="d", points=points)
    assert first == plots.table_png(name="d", points=points)   # byte for byte: the main job rewrites it
    assert png_size(first) == (1200, 2 * 290 + 100)
    assert b"Software" not in first and b"matplotlib" not in first.lower()


def test_audit_png_of_a_table_and_of_a_dispatch_list() -> None:
    table = TableAudit(table="gemm_mma", key_before="a", key_after="b", entries=(), shapes_total=2, shapes=(
        ShapeChange(m=1, n=4096, k=4096, config_before="c1", config_after="c2", ms_before=0.02, ms_after=0.01),
        ShapeChange(m=8, n=4096, k=4096, config_before="c1", config_after="c1", ms_before=0.02, ms_after=0.02)))
    png = plots.audit_png(item=table, rev_a="HEAD~1", rev_b="HEAD")
    assert png is not None and png_size(png) == (1200, 390)
    dispatch = TableAudit(table="gemm_dispatch", key_before=None, key_after=None, entries=(), shapes_total=1,
                          dispatch=True, shapes=(DispatchShapeChange(
                              m=1, n=4096, k=4096, table_before="a", table_after="b", config_before="c1",
                              config_after="c2", speedup_before=0.98, speedup_after=1.07),))
    assert png_size(plots.audit_png(item=dispatch, rev_a="v1", rev_b="v2")) == (1200, 390)
    unchanged = TableAudit(table="t", key_before="a", key_after="a", entries=(), shapes=(), shapes_total=3)
    assert plots.audit_png(item=unchanged, rev_a="HEAD", rev_b="working tree") is None


def test_redraw_from_csv_rewrites_only_changed_pngs(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("shape,M,N,K,config_id,tuned_ms,cublas_ms\n"
                                    "M1_N4096_K4096,1,4096,4096,c1,0.010,0.012\n"
                                    "M8_N4096_K4096,8,4096,4096,c1,0.011,\n")
    assert plots.redraw_from_csv(folder=tmp_path) == [tmp_path / "t.png"]
    assert plots.redraw_from_csv(folder=tmp_path) == []          # the same bytes: nothing rewritten
    (tmp_path / "bad.csv").write_text("shape,M\nx,abc\n")
    with pytest.raises(Exception, match=r"bad.csv.*not plot data"):
        plots.redraw_from_csv(folder=tmp_path)


def test_committed_pngs_are_what_their_csvs_draw() -> None:
    # Each under its device's roofline (params.yaml devices:), as the metrics stage and `tunetable plots` draw it.
    from tunetable.params import device_specs, load_params, primary_device

    root = Path(__file__).resolve().parents[1]
    params = load_params(root / "params.yaml")
    devices, primary = device_specs(params), primary_device(params)
    for data in sorted((root / "results" / "plots").glob("*.csv")):
        rows = data.read_text().splitlines()
        header = rows[0].split(",")
        points = plots.points_from_rows([dict(zip(header, line.split(","))) for line in rows[1:]])
        roofline = plots.table_roofline(name=data.stem, devices=devices, primary=primary)
        png = plots.table_png(name=data.stem, points=points, roofline=roofline)
        assert png == data.with_suffix(".png").read_bytes(), data.name


def test_audit_cli_has_a_plot_option() -> None:
    done = subprocess.run([sys.executable, "-m", "tunetable", "audit", "--help"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and "--plot" in done.stdout and "audit_<table>.png" in done.stdout
