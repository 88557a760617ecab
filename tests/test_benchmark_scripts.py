"""The GEMM benchmark scripts' CPU parts: argument parsing, payloads, and the recording summary."""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import shlex
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from bench_support import load_benchmark_script

from tunetable.kernels.families import FAMILIES
from tunetable.params import load_params, table_spec
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]


gemm_vs_cublas = load_benchmark_script("gemm_vs_cublas")
WGMMA = ("BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=2,CLUSTER_M=2,CLUSTER_N=1,RASTER=1,GROUP_M=8,SPLIT_K=1,"
         "TAIL_SPLIT=0")


def test_parse_shape_accepts_mxnxk_and_rejects_the_rest() -> None:
    assert gemm_vs_cublas.parse_shape("7x14336X4096") == (7, 14336, 4096)
    for bad in ("4096", "1x2", "ax2x3", "1x2x3x4"):
        with pytest.raises(argparse.ArgumentTypeError):
            gemm_vs_cublas.parse_shape(bad)


def test_explicit_config_derives_the_familys_geometry() -> None:
    config = gemm_vs_cublas.explicit_config(family="gemm_wgmma", text=WGMMA)
    defines = config.defines()
    assert defines["THREADS"] == 384
    assert defines["SMEM_BYTES"] == 4 * (128 + 256) * 64 * 2 + 2048
    with pytest.raises(SystemExit):
        gemm_vs_cublas.explicit_config(family="gemm_wgmma", text="BLOCK_M=big")


def test_explicit_config_holds_the_family_to_its_rules_unless_a_variant_lifts_them() -> None:
    # 128 x 64 in 10 stages: 10 * 192 * 64 * 2 + 2048 = 247808 bytes, past the kernel's static_assert (232448).
    deep = WGMMA.replace("BLOCK_N=256", "BLOCK_N=64").replace("STAGES=4", "STAGES=10")
    with pytest.raises(SystemExit, match=r"SMEM_BYTES <= 232448' is false \(the kernel's static_assert"):
        gemm_vs_cublas.explicit_config(family="gemm_wgmma", text=deep)
    swap_9 = "BLOCK_M=64,BLOCK_N=128,BLOCK_K=64,STAGES=9,CONSUMERS=2,SPLIT_K=1"
    with pytest.raises(SystemExit, match=r"'2 <= STAGES <= 8' is false"):
        gemm_vs_cublas.explicit_config(family="gemm_wgmma_swap", text=swap_9)
    lifted = gemm_vs_cublas.explicit_config(family="gemm_wgmma_swap", text=swap_9, check_rules=False)
    assert lifted.defines()["STAGES"] == 9


def test_payload_is_the_familys_launch_and_the_grid_cap_keeps_whole_clusters() -> None:
    config = gemm_vs_cublas.explicit_config(family="gemm_wgmma", text=WGMMA)
    payload = gemm_vs_cublas.payload_for(config=config, cubin="x.cubin", shape=(4096, 4096, 4096))
    launch = FAMILIES["gemm_wgmma"].launch(config.defines(), 4096, 4096, 4096)
    assert payload["grid"] == list(launch.grid) == [132, 1, 1]
    assert payload["family"] == "gemm_wgmma" and payload["workspace_bytes"] == 0  # SPLIT_K=1: no partials, no counters
    assert not {"reduce_entry", "reduce_grid", "reduce_block", "splits"} & set(payload)
    capped = gemm_vs_cublas.payload_for(config=config, cubin="x.cubin", shape=(4096, 4096, 4096), grid_cap=101)
    assert capped["grid"] == [100, 1, 1]  # whole 2-block clusters


def test_grid_multiple_rounds_a_persistent_grid_up_for_a_probe_variants_clusters() -> None:
    # gemm_wgmma_swap 64 x 128 tiles at 1 x 264 x 328: 1 M tile x 3 N tiles, so the family's grid is 3 blocks.
    config = gemm_vs_cublas.explicit_config(family="gemm_wgmma_swap",
                                            text="BLOCK_M=64,BLOCK_N=128,BLOCK_K=64,STAGES=8,CONSUMERS=2,SPLIT_K=1")
    assert gemm_vs_cublas.payload_for(config=config, cubin="x.cubin", shape=(1, 264, 328))["grid"] == [3, 1, 1]
    paired = gemm_vs_cublas.payload_for(config=config, cubin="x.cubin", shape=(1, 264, 328), grid_multiple=2)
    assert paired["grid"] == [4, 1, 1]
    full = gemm_vs_cublas.payload_for(config=config, cubin="x.cubin", shape=(4096, 4096, 4096), grid_multiple=2)
    assert full["grid"] == [132, 1, 1]  # already whole pairs


def test_split_k_payload_launches_one_kernel_with_partials_and_tile_counters() -> None:
    """gemm_mma SPLIT_K=4 at 7x4096x14336: fp32 partials [4, 7, 4096], then one int per 16x64 tile (64 of them)."""
    text = "BLOCK_M=16,BLOCK_N=64,BLOCK_K=64,WARPS_M=1,WARPS_N=4,WARPS_K=1,STAGES=4,SPLIT_K=4,GROUP_M=1"
    config = gemm_vs_cublas.explicit_config(family="gemm_mma", text=text)
    payload = gemm_vs_cublas.payload_for(config=config, cubin="x.cubin", shape=(7, 4096, 14336))
    assert payload["entry"] == "gemm_mma" and payload["grid"] == [64, 1, 4]
    assert payload["workspace_bytes"] == 4 * 7 * 4096 * 4 + 64 * 4
    assert not {"reduce_entry", "reduce_grid", "reduce_block", "splits"} & set(payload)


def test_reach_verdict_shows_the_digit_that_decides_the_target() -> None:
    table_vs_cublas = load_benchmark_script("table_vs_cublas")
    # 1.02993 rounds to 1.030 at three decimals, which would read as the 1.03 target met.
    assert table_vs_cublas.shown(value=1.02993, target=1.03) == "1.0299"
    assert table_vs_cublas.shown(value=1.0312, target=1.03) == "1.031"
    assert table_vs_cublas.against(value=0.99962, target=1.0, target_text="1.0") == "0.9996 (target >= 1.0: NOT met)"
    assert table_vs_cublas.against(value=0.8135, target=0.80, target_text="0.80") == "0.814 (target >= 0.80: met)"


@pytest.mark.slow
def test_table_vs_cublas_matches_the_recordings(tmp_path: Path) -> None:
    """The script's figures, recomputed here from the recordings and manifests directly."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "table_vs_cublas.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "table_vs_cublas.json").read_text())
    assert (tmp_path / "table_vs_cublas.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frame = pl.read_parquet(REPO / "data" / "recordings" / "h200_gemm_wgmma.parquet").filter(pl.col("status") == "ok")
    square = frame.filter((pl.col("M") == 4096) & (pl.col("N") == 4096) & (pl.col("K") == 4096))
    cublas = square.filter(pl.col("config_id") == "cublas")["median_ms"][0]
    best = square.filter(pl.col("config_id") != "cublas")["median_ms"].min()
    assert result["best_at_square"]["gemm_wgmma 4096^3"]["ratio"] == pytest.approx(cublas / best)
    # The dispatch list's ratio per shape is the ratio of the table it names, at that table's selection.
    dispatch = load_yaml_file(REPO / "manifests" / "gemm_dispatch.yaml")["params"]
    per_shape = result["per_shape"]
    for label, ratio in per_shape["gemm_dispatch"].items():
        m, n, k = map(int, label.split("x"))
        entry = next(e for e in dispatch if e["N"] == n and e["K"] == k and e["M"] <= m < e["M_END"])
        assert ratio == per_shape[entry["TABLE"]][label]
    values = list(per_shape["gemm_dispatch"].values())
    params = load_params(REPO / "params.yaml")
    shapes = set().union(*(table_spec(params, name).shapes() for name in params["tables"]))
    assert len(values) == len(shapes) == 70   # every table's shapes: gemm_mma's 55 and M = 112, 176, 320 of 5 (N, K)
    assert result["tables"]["gemm_dispatch"]["geomean"] == pytest.approx(math.exp(sum(map(math.log, values)) / 70))
    # The "default" set is gemm_mma's 55 shapes, apart from every table's 70.
    assert result["reach"]["default"]["shapes"] == 55 and result["reach"]["every table's shapes"]["shapes"] == 70


compare_probes = load_benchmark_script("compare_probes")


def _probe_report(path: Path, *, timed: dict[str, dict[str, float]], flags: list[str]) -> Path:
    """A gemm_vs_cublas.py report with the given medians (ms) per shape, as the script writes it."""
    entries = []
    for shape, rows in timed.items():
        m, n, k = (int(part) for part in shape.split("x"))
        entries.append({"M": m, "N": n, "K": k, "failures": {}, "launch_grid": {},
                        "rows": [{"name": name, "median_ms": ms, "iqr_ms": 0.0} for name, ms in rows.items()]})
    path.write_text(json.dumps({"family": "gemm_wgmma", "source": "kernels/gemm_wgmma.cu", "nvcc_flags": flags,
                                "configs": {"ca": "BLOCK_M=64", "cb": "BLOCK_M=128"}, "timed": entries}))
    return path


def test_compare_probes_takes_ratios_against_each_runs_own_cublas(tmp_path: Path) -> None:
    # Run b is 10 % slower overall (cuBLAS too): by ratio, config ca improved 5 % and cb did not change.
    a = _probe_report(tmp_path / "a.json", flags=["-DX=0"],
                      timed={"64x4096x4096": {"cublas": 10.0, "ca": 12.5, "cb": 11.0},
                             "128x4096x4096": {"cublas": 20.0, "ca": 25.0, "cb": 19.0}})
    b = _probe_report(tmp_path / "b.json", flags=["-DX=1"],
                      timed={"64x4096x4096": {"cublas": 11.0, "ca": 11.0 / (0.8 * 1.05), "cb": 12.1},
                             "128x4096x4096": {"cublas": 22.0, "ca": 22.0 / (0.8 * 1.05), "cb": 20.9},
                             "256x4096x4096": {"cublas": 30.0, "ca": 29.0}})
    runs = [compare_probes.load_run(path=a), compare_probes.load_run(path=b)]

    best = {row["shape"]: row["runs"] for row in compare_probes.best_per_shape(runs=runs)}
    assert list(best) == ["64x4096x4096", "128x4096x4096", "256x4096x4096"]  # numeric order, every run's shapes
    assert best["64x4096x4096"][0] == {"config": "cb", "ratio": pytest.approx(10.0 / 11.0)}
    assert best["128x4096x4096"][0]["config"] == "cb" and best["128x4096x4096"][1]["config"] == "cb"
    assert best["256x4096x4096"][0] is None and best["256x4096x4096"][1]["ratio"] == pytest.approx(30.0 / 29.0)

    shared = {row["config"]: row for row in compare_probes.shared_configs(runs=runs)}
    assert shared["ca"]["shapes"] == ["64x4096x4096", "128x4096x4096"]  # only the shapes both runs timed it on
    assert shared["ca"]["geomean"][0] == pytest.approx(0.8)
    assert shared["ca"]["geomean"][1] / shared["ca"]["geomean"][0] == pytest.approx(1.05)
    assert shared["cb"]["geomean"][1] / shared["cb"]["geomean"][0] == pytest.approx(1.0)
    assert shared["ca"]["label"] == "BLOCK_M=64"

    by_time = {row["config"]: row for row in compare_probes.shared_configs(runs=runs, key="medians")}
    # Kernel time itself, cuBLAS a row of its own: b's cuBLAS is 10 % slower on the two common shapes.
    assert by_time["cublas"]["geomean"][0] == pytest.approx((10.0 * 20.0) ** 0.5)
    assert by_time["cublas"]["geomean"][1] / by_time["cublas"]["geomean"][0] == pytest.approx(1.1)
    cb_change = by_time["cb"]["geomean"][1] / by_time["cb"]["geomean"][0]
    assert cb_change == pytest.approx((12.1 / 11.0 * 20.9 / 19.0) ** 0.5)
    assert by_time["ca"]["shapes"] == ["64x4096x4096", "128x4096x4096"]


def test_compare_probes_writes_its_report_and_names_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _probe_report(tmp_path / "a.json", flags=[], timed={"64x4096x4096": {"cublas": 10.0, "ca": 12.5}})
    b = _probe_report(tmp_path / "b.json", flags=["-DX=1"], timed={"64x4096x4096": {"cublas": 10.0, "ca": 10.0}})
    assert compare_probes.main([str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    report = (tmp_path / "cmp.md").read_text()
    assert "| b | gemm_wgmma | kernels/gemm_wgmma.cu | -DX=1 |" in report
    assert "1.000 (+25.0 %)" in report  # ca: 0.8 -> 1.0 of cuBLAS
    assert json.loads((tmp_path / "cmp.json").read_text())["shared_configs"][0]["config"] == "ca"

    no_cublas = tmp_path / "c.json"
    no_cublas.write_text(json.dumps({"timed": [{"M": 1, "N": 8, "K": 8, "rows": [{"name": "ca", "median_ms": 1.0}]}]}))
    (tmp_path / "cmp.md").write_text("earlier report\n")
    assert compare_probes.main([str(a), str(no_cublas), "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"compare_probes: {no_cublas}: timed[0] (1x8x8): no cuBLAS row to take ratios against"]
    assert (tmp_path / "cmp.md").read_text() == "earlier report\n"  # nothing written on bad input
    not_a_report = tmp_path / "d.json"
    not_a_report.write_text("[1, 2]")
    assert compare_probes.main([str(not_a_report)]) == 2
    assert f"{not_a_report}: no 'timed' list" in capsys.readouterr().err


fixed_cost = load_benchmark_script("fixed_cost")


def _floor_us(m: int, n: int, k: int) -> float:
    """DESIGN.md's floor, written out here: max(bytes / 4.13 TB/s, flops / 800 TFLOP/s), in us."""
    return max((m * k + n * k + m * n) * 2 / 4.13e12, 2.0 * m * n * k / 800e12) * 1e6


def test_fixed_cost_fits_the_line_through_the_long_k_points(tmp_path: Path) -> None:
    # ca: 4 us + 1.25 x floor from K = 2048 on (0.8 of the floor's rate); its K = 512 point is off the line, left out.
    ks = (512, 2048, 4096, 8192)
    timed = {f"1x4096x{k}": {"cublas": (5.0 + _floor_us(1, 4096, k)) / 1e3,
                             "ca": (4.0 + 1.25 * _floor_us(1, 4096, k) + (9.0 if k == 512 else 0.0)) / 1e3}
             for k in ks}
    run = _probe_report(tmp_path / "sweep.json", flags=[], timed=timed)
    fits = {fit["contender"]: fit for fit in fixed_cost.fits_of(runs=[run], min_k=2048)}
    assert fits["ca"]["fixed_us"] == pytest.approx(4.0) and fits["ca"]["floor_rate"] == pytest.approx(0.8)
    assert fits["cublas"]["fixed_us"] == pytest.approx(5.0) and fits["cublas"]["floor_rate"] == pytest.approx(1.0)
    assert fits["ca"]["shape"] == "1x4096xK" and fits["ca"]["ks"] == list(ks)

    reach = {"64x4096x4096": {"roofline": 0.6}, "32x4096x4096": {"roofline": 0.9}, "1024x4096x4096": {"roofline": 0.9}}
    ceiling = fixed_cost.roofline_ceiling(reach=reach, fixed_us=4.0)
    assert [row["shape"] for row in ceiling["shapes"]] == ["64x4096x4096"]  # only M = 64-512
    floor = _floor_us(64, 4096, 4096)
    assert ceiling["geomean_ceiling"] == pytest.approx(floor / (floor + 4.0))
    assert ceiling["geomean_of_ceiling"] == pytest.approx(0.6 * (floor + 4.0) / floor)


def test_fixed_cost_writes_its_report_and_names_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    timed = {f"1x4096x{k}": {"cublas": 0.01 * k / 1024, "ca": 0.012 * k / 1024} for k in (2048, 4096)}
    run = _probe_report(tmp_path / "sweep.json", flags=[], timed=timed)
    assert fixed_cost.main([str(run), "--out", str(tmp_path / "fc")]) == 0
    assert "| sweep | ca | 1x4096xK | K = 2048 4096:" in (tmp_path / "fc.md").read_text()
    assert json.loads((tmp_path / "fc.json").read_text())["ceiling"] is None

    (tmp_path / "fc.md").write_text("earlier report\n")
    short = _probe_report(tmp_path / "short.json", flags=[], timed={"1x4096x4096": {"cublas": 0.01, "ca": 0.012}})
    assert fixed_cost.main([str(short), "--out", str(tmp_path / "fc")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"fixed_cost: {short}: ca: 1 points with K >= 2048: a line needs two"]
    not_a_report = tmp_path / "d.json"
    not_a_report.write_text("[1, 2]")
    assert fixed_cost.main([str(not_a_report), "--out", str(tmp_path / "fc")]) == 2
    assert f"fixed_cost: {not_a_report}: no 'timed' list (not a gemm_vs_cublas.py report)" in capsys.readouterr().err
    assert (tmp_path / "fc.md").read_text() == "earlier report\n"  # nothing written on bad input


def test_profile_speed_runs_its_views_on_grown_recordings(tmp_path: Path) -> None:
    """The benchmark's pieces at a small size: inputs grown from the recordings, the engine, one view per format."""
    profile_speed = load_benchmark_script("profile_speed")
    rows = profile_speed.recording_rows()
    grown = profile_speed.grown(rows=rows, size=20_000, start=5_000)
    assert grown.height == 15_000 and grown["M"].max() > 16384          # copies get their own shapes
    assert set(grown.columns) == set(rows.columns)
    timings = profile_speed.engine_polars(grown)
    assert set(timings) == {"parse_specs", "profile_views", "rank_select", "total"}
    assert set(profile_speed.engine_pandas(grown)) == set(timings)
    inputs = profile_speed.write_inputs(rows=rows, size=15_000, folder=tmp_path, batch=10_000)
    launcher = profile_speed.Launcher()
    try:
        for path in inputs.values():
            figure = profile_speed.run_view(launcher=launcher, path=path, args=profile_speed.VIEWS["-t 0.05"],
                                            folder=tmp_path)
            assert figure["wall_s"] > 0 and 0 < figure["peak_gb"] < 4 and figure["printed_bytes"] < 20_000
    finally:
        launcher.close()


def _recording_rows(medians: dict[tuple[str, int], float]) -> pl.DataFrame:
    """A minimal recording of table t: (config_id, M) -> median ms at N = K = 64; 'cublas' is the baseline."""
    return pl.DataFrame([
        {"table": "t", "kind": "baseline" if cid == "cublas" else "kernel", "status": "ok", "config_id": cid,
         "M": m, "N": 64, "K": 64, "median_ms": ms} for (cid, m), ms in medians.items()])


def test_compare_recordings_reads_speedups_and_reach_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    compare_recordings = load_benchmark_script("compare_recordings")
    before, after = tmp_path / "before.parquet", tmp_path / "after.parquet"
    _recording_rows({("a", 1): 2.0, ("a", 2): 4.0, ("b", 1): 3.0, ("cublas", 1): 2.0,
                     ("cublas", 2): 4.0}).write_parquet(before)
    _recording_rows({("a", 1): 1.0, ("a", 2): 4.0, ("b", 1): 3.0, ("c", 2): 1.0, ("cublas", 1): 2.0,
                     ("cublas", 2): 5.0}).write_parquet(after)
    out = tmp_path / "figures.json"
    monkeypatch.setattr(sys, "argv", ["compare_recordings", str(before), str(after), "--out", str(out)])
    assert compare_recordings.main() == 0
    figures = json.loads(out.read_text())
    # a: 2.0 / 1.0 at M = 1 and 4.0 / 4.0 at M = 2 -> sqrt(2); b unchanged; c only after: not compared
    assert figures["per_configuration"] == {"b": 1.0, "a": round(math.sqrt(2), 4)}
    assert figures["kernel_speedup_geomean"] == round(2 ** (1 / 3), 4)
    assert figures["cublas_control_geomean"] == round(math.sqrt(4 / 5), 4)
    # best x cuBLAS: M = 1 2/2 -> 2/1; M = 2 4/4 -> 5/1 (c, new in after, counts for the reach)
    reach = [(row["best_vs_cublas_before"], row["best_vs_cublas_after"]) for row in figures["per_shape"]]
    assert reach == [(1.0, 2.0), (1.0, 5.0)]
    assert "1.000 -> 3.162" in capsys.readouterr().out


def test_compare_recordings_reach_of_any_family_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compare_recordings = load_benchmark_script("compare_recordings")
    before, after, other = (tmp_path / f"{name}.parquet" for name in ("before", "after", "other"))
    _recording_rows({("a", 1): 2.0, ("a", 2): 4.0, ("cublas", 1): 2.0, ("cublas", 2): 4.0}).write_parquet(before)
    _recording_rows({("a", 1): 1.0, ("a", 2): 8.0, ("cublas", 1): 2.0, ("cublas", 2): 4.0}).write_parquet(after)
    # another family, its own cuBLAS rows: 3/2 at M = 1, 6/3 at M = 2
    _recording_rows({("z", 1): 2.0, ("z", 2): 3.0, ("cublas", 1): 3.0, ("cublas", 2): 6.0}).write_parquet(other)
    out = tmp_path / "figures.json"
    monkeypatch.setattr(sys, "argv", ["compare_recordings", str(before), str(after), "--other", str(other),
                                      "--out", str(out)])
    assert compare_recordings.main() == 0
    figures = json.loads(out.read_text())
    # M = 1: max(1.0, 1.5) -> max(2.0, 1.5); M = 2: max(1.0, 2.0) -> max(0.5, 2.0)
    assert [(row["before"], row["after"]) for row in figures["any_family_per_shape"]] == [(1.5, 2.0), (2.0, 2.0)]
    assert figures["any_family_min_before"] == 1.5 and figures["any_family_min_after"] == 2.0
    assert figures["any_family_geomean_before"] == round(math.sqrt(3.0), 4)


def test_compare_recordings_names_a_file_that_is_no_recording(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    compare_recordings = load_benchmark_script("compare_recordings")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    monkeypatch.setattr(sys, "argv", ["compare_recordings", str(bad), str(bad), "--out", str(tmp_path / "x.json")])
    assert compare_recordings.main() == 2
    assert f"{bad}: not a readable recording" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("script", ["compare_probes", "compare_recordings", "device_ceilings", "runtime_gemm",
                                    "placement_probe"])
def test_the_device_side_comparison_scripts_import_without_polars(script: str) -> None:
    # scripts/device_probe.sh runs compare_probes on the GPU machine, whose image has no polars
    code = ("import sys, runpy; sys.modules['polars'] = None; "
            f"runpy.run_path({str(REPO / 'benchmarks' / f'{script}.py')!r}, run_name='not_main')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr


runtime_gemm = load_benchmark_script("runtime_gemm")


def test_runtime_gemm_tables_set_is_every_tables_shapes_once() -> None:
    # issue 49's figure is over every table's default shapes: the union of params.yaml's tables, each shape once
    params = load_params(REPO / "params.yaml")
    expected = {shape for table in params["tables"] for shape in table_spec(params, table).shapes()}
    found = runtime_gemm.table_shapes(load_yaml_file(REPO / "params.yaml")["tables"])
    assert len(found) == len(set(found)) == len(expected) == 70
    assert set(found) == expected


def test_runtime_gemm_reads_the_serving_devices_recordings_and_names_its_files() -> None:
    paths = runtime_gemm.validation_recordings("h100")
    assert sorted(paths) == ["gemm_mma", "gemm_wgmma", "gemm_wgmma_swap"]
    assert paths["gemm_wgmma"] == REPO / "data" / "recordings" / "h100_validation_gemm_wgmma.parquet"
    assert all(path.exists() for path in paths.values())
    stem = runtime_gemm.output_stem
    assert stem(wanted=["default", "other", "validation"], serving="h200", primary="h200") == "runtime_gemm"
    assert stem(wanted=["tables"], serving="h200", primary="h200") == "runtime_gemm_tables"
    assert stem(wanted=["tables"], serving="h100", primary="h200") == "runtime_gemm_tables.h100"
    summary = {"device": "h100", "other_devices": ["h200"], "geomean_vs_cublas": 1.0,
               "tables_h200_geomean_vs_cublas": 0.99}
    assert runtime_gemm.other_devices(summary) == ["h200"]


class OrderTimer:
    """A stand-in for ColdL2Timer that records the order in which contenders are sampled."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def warm_up(self, launch: Any, *, sets: int, warmup_ms: float) -> tuple[int, float]:
        return 1, 0.1

    batch_size = staticmethod(lambda per_launch, *, min_batch_ms: 3)

    def sample(self, launch: Any, *, sets: int, batch: int) -> float:
        self.order.append(launch)
        return 1.0


@pytest.mark.parametrize(("contenders", "rounds", "first_places"), [
    (5, 5, {0, 1, 2, 3, 4}),             # runtime_gemm's sets: every contender leads one round
    (30, 7, {0, 4, 8, 12, 16, 20, 24}),  # many contenders: the leaders are spread over the list, not its first 7
])
def test_timed_spreads_each_contenders_place_over_the_rounds(contenders: int, rounds: int,
                                                               first_places: set[int]) -> None:
    timer = OrderTimer()
    names = [f"c{index}" for index in range(contenders)]
    medians, samples, batch = runtime_gemm.timed(timer, contenders={name: name for name in names}, rounds=rounds,
                                                 n_sets=2)
    assert all(len(values) == rounds for values in samples.values()) and set(batch.values()) == {3}
    leaders = {names.index(timer.order[round_index * contenders]) for round_index in range(rounds)}
    assert leaders == first_places


placement_probe = load_benchmark_script("placement_probe")


def test_placement_probe_reads_shapes_and_configs_and_names_bad_ones() -> None:
    assert placement_probe.parse_shape("512x4096x14336") == (512, 4096, 14336)
    assert placement_probe.parse_config("gemm_wgmma:BLOCK_M=128,TAIL_SPLIT=0") == (
        "gemm_wgmma", {"BLOCK_M": 128, "TAIL_SPLIT": 0})
    for bad in ("512x4096", "0x1x1", "axbxc"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected MxNxK"):
            placement_probe.parse_shape(bad)
    for bad in ("gemm_wgmma", ":BLOCK_M=1", "gemm_wgmma:BLOCK_M=x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected FAMILY:KEY=INT"):
            placement_probe.parse_config(bad)
    rows = [{"gemm_us": 90.0}, {"gemm_us": 99.0}, {"gemm_us": 94.5}]
    assert placement_probe.spread(rows, "gemm_us") == pytest.approx(1.1)


ncu_kernels = load_benchmark_script("ncu_kernels")
launch_gaps = load_benchmark_script("launch_gaps")
NCU_EXCERPT = REPO / "tests" / "fixtures" / "ncu" / "details_excerpt.csv"  # two kernels of the H200 run (ncu_mid)


def test_ncu_report_sets_the_profiled_kernels_side_by_side(tmp_path: Path) -> None:
    kernels = ncu_kernels.read_details(path=NCU_EXCERPT)
    assert [kernels[i]["name"] for i in ("0", "1")] == ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "gemm_wgmma"]
    duration = "GPU Speed Of Light Throughput / Duration [us]"
    assert (kernels["0"]["metrics"][duration], kernels["1"]["metrics"][duration]) == ("25.06", "25.15")
    table = ncu_kernels.side_by_side(kernels=kernels, labels=["cublas", "ours"])
    assert table["columns"] == ["cublas", "ours"]
    assert {"metric": duration, "values": ["25.06", "25.15"]} in table["rows"]
    assert all(not row["metric"].endswith("/ ") for row in table["rows"])  # rule advice rows are not metrics
    unnamed = ncu_kernels.side_by_side(kernels=kernels, labels=["only one label"])
    assert unnamed["columns"] == ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "gemm_wgmma"]
    labels = tmp_path / "labels.json"
    labels.write_text('["512x4096x4096 cublas", "512x4096x4096 gemm_wgmma"]')
    out = tmp_path / "side"
    assert ncu_kernels.main(["report", str(NCU_EXCERPT), "--labels", str(labels), "--out", str(out)]) == 0
    markdown = out.with_suffix(".md").read_text()
    assert f"| {duration} | 25.06 | 25.15 |" in markdown
    assert "2. 512x4096x4096 gemm_wgmma (kernel `gemm_wgmma`)" in markdown


def test_ncu_report_names_a_file_that_is_not_a_details_page(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    raw = tmp_path / "raw.csv"
    raw.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","25.1"\n')
    assert ncu_kernels.main(["report", str(raw), "--out", str(tmp_path / "side")]) == 2
    assert capsys.readouterr().err.startswith(f"ncu_kernels: {raw}: no details page")
    assert not (tmp_path / "side.md").exists()


# Two kernels of the H200 run (ncu_sass_mid), their Kernel Name and Address header lines and SASS rows verbatim:
# cuBLAS's rows are lines 170-201 of ncu_source.csv (its k-loop's 8 HGMMA), ours lines 1579-1600 (3 HGMMA).
NCU_SOURCE_EXCERPT = REPO / "tests" / "fixtures" / "ncu" / "source_excerpt.csv"
# Counted by hand from the fixture's rows. cuBLAS: 1 row at 512 executed (BAR.SYNC), 31 at 27648 (15 UIADD3,
# 8 HGMMA, 3 WARPGROUP, 2 SYNCS, 2 NOP, 1 LOP3); ours: 22 rows at 65536 (4 R2UR, 4 UMOV, 3 HGMMA, 2 LOP3, 2 USEL
# and one each of IMAD, LEA, SYNCS, UIADD3, UISETP, ULOP3, WARPGROUP).
NCU_SOURCE_CUBLAS = {
    "name": "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "instructions_executed": 512 + 31 * 27648,
    "static_instructions": 32, "hgmma_executed": 8 * 27648, "instructions_per_hgmma": 3.88,  # 857600 / 221184
    "r2ur_executed": 0, "stall_samples": 717,
    "executed_by_opcode": [["UIADD3", 15 * 27648], ["HGMMA", 8 * 27648], ["WARPGROUP", 3 * 27648],
                           ["NOP", 2 * 27648], ["SYNCS", 2 * 27648], ["LOP3", 27648], ["BAR", 512]],
    "stalls_by_opcode": [["WARPGROUP", 459], ["HGMMA", 178], ["UIADD3", 62], ["LOP3", 13], ["SYNCS", 4],
                         ["BAR", 1]],  # the two NOPs stalled 0 samples, so they are not listed
}
NCU_SOURCE_OURS = {
    "name": "gemm_wgmma", "instructions_executed": 22 * 65536, "static_instructions": 22,
    "hgmma_executed": 3 * 65536, "instructions_per_hgmma": 7.33, "r2ur_executed": 4 * 65536, "stall_samples": 827,
    "executed_by_opcode": [["R2UR", 4 * 65536], ["UMOV", 4 * 65536], ["HGMMA", 3 * 65536], ["LOP3", 2 * 65536],
                           ["USEL", 2 * 65536], ["IMAD", 65536], ["LEA", 65536], ["SYNCS", 65536],
                           ["UIADD3", 65536], ["UISETP", 65536], ["ULOP3", 65536], ["WARPGROUP", 65536]],
    "stalls_by_opcode": [["WARPGROUP", 529], ["HGMMA", 180], ["R2UR", 22], ["LOP3", 19], ["UMOV", 19],
                         ["USEL", 17], ["UISETP", 12], ["LEA", 10]],  # top 8 of 12: SYNCS 8, UIADD3 5, ... left off
}


def test_ncu_source_sums_each_kernels_sass_by_what_it_executed() -> None:
    kernels = ncu_kernels.read_source(path=NCU_SOURCE_EXCERPT)
    assert [(kernel["name"], len(kernel["rows"])) for kernel in kernels] == [
        ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", 32), ("gemm_wgmma", 22)]
    assert ncu_kernels.summarise_sass(kernel=kernels[0]) == NCU_SOURCE_CUBLAS
    assert ncu_kernels.summarise_sass(kernel=kernels[1]) == NCU_SOURCE_OURS
    assert ncu_kernels.opcode("@!P0  SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R90+URZ+0x30030], RZ") == "SYNCS"
    assert ncu_kernels.opcode("      HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24, gsb0") == "HGMMA"
    unnamed = ncu_kernels.sass_summary(kernels=kernels, labels=["only one label"], source=NCU_SOURCE_EXCERPT)
    assert unnamed["columns"] == ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "gemm_wgmma"]


def test_ncu_source_writes_its_report_from_a_gzipped_page(tmp_path: Path) -> None:
    page = tmp_path / "ncu_source.csv.gz"
    page.write_bytes(gzip.compress(NCU_SOURCE_EXCERPT.read_bytes()))
    labels = tmp_path / "labels.json"
    labels.write_text('["512x4096x4096 cublas", "512x4096x4096 gemm_wgmma"]')
    out = tmp_path / "sass"
    assert ncu_kernels.main(["source", str(page), "--labels", str(labels), "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text()) == {
        "source": "ncu_source.csv.gz", "columns": ["512x4096x4096 cublas", "512x4096x4096 gemm_wgmma"],
        "kernels": [NCU_SOURCE_CUBLAS, NCU_SOURCE_OURS]}
    markdown = out.with_suffix(".md").read_text()
    assert markdown.startswith("# SASS executed per kernel, by opcode family (ncu_source.csv.gz)\n")
    assert "| instructions executed per HGMMA | 3.88 | 7.33 |" in markdown
    assert f"| R2UR executed | 0 | {4 * 65536} |" in markdown
    assert f"2. R2UR {4 * 65536}, UMOV {4 * 65536}, HGMMA {3 * 65536}," in markdown
    assert "2. 512x4096x4096 gemm_wgmma (kernel `gemm_wgmma`)" in markdown


def _not_a_source_page(tmp_path: Path, case: str) -> Path:
    """A copy of the source excerpt broken one way, or the details excerpt."""
    if case == "details page":
        return NCU_EXCERPT
    lines = NCU_SOURCE_EXCERPT.read_text().splitlines()
    if case == "no header":
        del lines[1]
    else:  # a count that is not an integer, on the fourth line (cuBLAS's LOP3 row)
        fields = next(csv.reader([lines[3]]))
        fields[5] = "27,648"
        lines[3] = ",".join(f'"{field}"' for field in fields)
    path = tmp_path / "broken.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("case", "where"), [
    ("details page", 'line 1: no "Kernel Name" line before it'),
    ("no header", "line 2: kernel 'nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT' has no \"Address\" header"),
    ("count not an integer", "line 4: Instructions Executed is '27,648', not an integer"),
])
def test_ncu_source_names_a_file_that_is_not_a_source_page(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           case: str, where: str) -> None:
    page = _not_a_source_page(tmp_path, case)
    assert ncu_kernels.main(["source", str(page), "--out", str(tmp_path / "sass")]) == 2
    assert capsys.readouterr().err.startswith(f"ncu_kernels: {page}: {where}")
    assert not (tmp_path / "sass.md").exists() and not (tmp_path / "sass.json").exists()


def test_contenders_are_cublas_or_a_family_with_integer_tunables() -> None:
    for module in (ncu_kernels, launch_gaps):
        assert module.parse_contender("cublas") == ("cublas", None)
        parsed = module.parse_contender("gemm_wgmma:BLOCK_M=128,STAGES=6")
        assert parsed == ("gemm_wgmma", {"block_m": 128, "stages": 6})
        with pytest.raises(argparse.ArgumentTypeError, match="'STAGES=six' is not NAME=INTEGER"):
            module.parse_contender("gemm_wgmma:BLOCK_M=128,STAGES=six")


def test_launch_gaps_are_next_start_minus_previous_end_in_start_order() -> None:
    # Spans in us as the profiler gives them, out of order; the third starts before the second ends (overlap).
    spans = [(30.0, 40.0), (0.0, 10.0), (11.5, 31.0)]
    assert launch_gaps.gaps_of(spans=spans) == [1.5, -1.0]


@pytest.mark.parametrize("probe", sorted((REPO / "benchmarks" / "probes" / "ncu").glob("*.txt")), ids=lambda p: p.stem)
def test_every_ncu_probe_is_a_launch_line_ncu_kernels_accepts(probe: Path) -> None:
    lines = [line for line in probe.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 1, f"{probe.name}: scripts/device_ncu.sh runs one line, found {len(lines)}"
    args = ncu_kernels.build_parser().parse_args(["launch", "--labels", "labels.json", *shlex.split(lines[0])])
    for text in args.contender:
        ncu_kernels.parse_contender(text)
    assert args.shape and args.contender


sass_loops = load_benchmark_script("sass_loops")


def test_sass_loops_summary_counts_per_hgmma() -> None:
    # Two configurations: one k-loop of 38 instructions / 4 HGMMA / 0 R2UR, one of 78 / 4 / 8 and a second loop
    # of 61 / 4 / 1: per HGMMA 9.5, 19.5, 15.25 instructions (mean 14.75) and 0, 2, 0.25 R2UR (mean 0.75).
    # b spills 8 bytes.
    configs = [{"id": "a", "params": "", "registers": 168, "spill_bytes": 0,
                "loops": [{"instructions": 38, "hgmma": 4, "r2ur": 0, "syncs": 2}]},
               {"id": "b", "params": "", "registers": 232, "spill_bytes": 8,
                "loops": [{"instructions": 78, "hgmma": 4, "r2ur": 8, "syncs": 2},
                          {"instructions": 61, "hgmma": 4, "r2ur": 1, "syncs": 3}]}]
    assert sass_loops.summarise(configs=configs) == {
        "configurations": 2, "loops": 3, "instructions_per_hgmma_mean": 14.75, "r2ur_per_hgmma_mean": 0.75,
        "configurations_with_r2ur_in_a_k_loop": 1, "configurations_spilling": 1}
    report = {"table": "gemm_wgmma", "source": "kernels/x.cu", "nvcc_flags": ["-O3"],
              "summary": sass_loops.summarise(configs=configs), "configs": configs}
    markdown = sass_loops.render_markdown(report=report)
    assert "| b |  | 232 | 8 | 61 | 4 | 1 | 3 |" in markdown.splitlines()
    assert "2 configurations, 3 k-loops: 14.75 instructions and 0.75 R2UR per HGMMA" in markdown
    assert "1 configurations with an R2UR in a k-loop; 1 configurations spill." in markdown


def test_sass_loops_without_cuobjdump_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(sass_loops, "find_cuobjdump", lambda: None)
    assert sass_loops.main(["--table", "gemm_wgmma"]) == 2
    assert "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm" in capsys.readouterr().err


def test_sass_loops_names_an_unknown_table(capsys: pytest.CaptureFixture) -> None:
    if sass_loops.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (the dev extra installs it)")
    assert sass_loops.main(["--table", "no_such_table"]) == 2
    assert capsys.readouterr().err.startswith("sass_loops: ")


partial_tiles = load_benchmark_script("partial_tiles")


def partial_tiles_frame() -> pl.DataFrame:
    """Two configurations at one (N, K): a 128-row tile at M = 100 / 128 / 176 / 256, a 64-row one at 100 / 128."""
    rows = [("a", 128, 100, 0.030), ("a", 128, 128, 0.015), ("a", 128, 176, 0.040), ("a", 128, 256, 0.020),
            ("b", 64, 100, 0.010), ("b", 64, 128, 0.010)]
    return pl.DataFrame([{"kind": "kernel", "status": "ok", "config_id": config_id, "BLOCK_M": block_m,
                          "BLOCK_N": 64, "STAGES": 8, "M": m, "N": 4096, "K": 4096, "median_ms": ms}
                         for config_id, block_m, m, ms in rows]
                        + [{"kind": "baseline", "status": "ok", "config_id": "cublas", "BLOCK_M": None, "BLOCK_N": None,
                            "STAGES": None, "M": 100, "N": 4096, "K": 4096, "median_ms": 0.001}])


def test_partial_tiles_sets_each_partial_m_against_the_same_tile_count() -> None:
    ratios = partial_tiles.partial_ratios(frame=partial_tiles.load_times_from(frame=partial_tiles_frame()))
    # a: 100 -> 128 (0.030 / 0.015) and 176 -> 256 (0.040 / 0.020); b: 100 rows are two 64-row tiles, 128 whole.
    assert [(row["config_id"], row["M"], row["M_whole"], round(row["ratio"], 6)) for row in ratios] == [
        ("a", 100, 128, 2.0), ("a", 176, 256, 2.0), ("b", 100, 128, 1.0)]
    assert partial_tiles.summarise(ratios=ratios, key=None) == [
        {"group": "all", "pairs": 3, "median": 2.0, "p90": 2.0, "max": 2.0}]


def test_partial_tiles_names_a_recording_it_cannot_use(tmp_path: Path) -> None:
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(partial_tiles.RecordingError, match="broken.parquet: cannot read the recording"):
        partial_tiles.load_times(path=broken)
    lacking = tmp_path / "lacking.parquet"
    partial_tiles_frame().drop("STAGES").write_parquet(lacking)
    with pytest.raises(partial_tiles.RecordingError, match="lacking.parquet: no column STAGES"):
        partial_tiles.load_times(path=lacking)
    assert partial_tiles.main(["--recording", str(broken), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out.md").exists()


def test_llama_client_counts_a_failed_phase_as_a_target_not_met() -> None:
    client = load_benchmark_script("llama_client")
    row = {"batch": 1, "ms_per_step": {"unpatched": 10.0, "patched": 9.0}, "patched_over_unpatched": 0.9,
           "tokens_per_s": {"unpatched": 100.0, "patched": 111.1}, "logits_rel_err": 1e-3, "top1_agreement": 1.0,
           "err_vs_fp32": {"unpatched": 2e-2, "patched": 2.4e-2}, "within_bf16_tolerance": True}
    results = {"prefill": None, "decode": [row], "compile": None, "errors": {"prefill": "RuntimeError: x"},
               "layers": 32, "device": "NVIDIA H100 80GB HBM3", "torch": "2.11", "transformers": "5.17",
               "git_rev": "abc", "date": "2026-12-06", "patch": "took 225 of 225", "method": "m"}
    met = client.targets(results)
    tolerance = "logits within bf16 tolerance (patched error vs fp32 <= 1.25x unpatched's, every phase)"
    assert met == {"decode batch 1 <= unpatched": True, "decode batch 8 <= unpatched": False,
                   "decode batch 64 <= unpatched": False, "prefill <= 1.0x unpatched": False,
                   tolerance: False, "zero graph breaks from tunetable": False}
    results["targets"] = met
    text = client.render_markdown(results)
    assert "| decode batch 1 (CUDA graph) | 10.000 | 9.000 | 0.900 | 100 | 111 | 1.00e-03 | 2.00e-02 | 2.40e-02 |" \
        in text
    assert "Failed: prefill: RuntimeError: x" in text and "- prefill <= 1.0x unpatched: NOT met" in text


def test_llama_client_reports_each_shapes_path_and_a_check_that_failed() -> None:
    client = load_benchmark_script("llama_client")
    base = {"M": 2048, "N": 4096, "K": 4096, "device": 0, "layers": ["self_attn.o_proj", "self_attn.q_proj"],
            "first_phase": "prefill", "path": "tunetable", "source": "table gemm_wgmma[8] c05e6993f39",
            "why": "tunetable's kernel", "tunetable_launches": {"prefill": 192, "decode batch 1": 0}}
    ok = {**base, "bitwise_equal_to_torch": True, "tunetable_err_vs_fp32": 2.1e-3, "torch_err_vs_fp32": 2.1e-3,
          "tunetable_ms": 0.0885, "torch_ms": 0.088, "torch_over_tunetable": 0.994}
    failed = {**base, "M": 1, "N": 1024, "path": "torch", "check_error": "RuntimeError: no cubin"}
    lines = client.shape_markdown([ok, failed])
    assert ("| 2048 | 4096 | 4096 | self_attn.o_proj, self_attn.q_proj | prefill | tunetable | table gemm_wgmma[8] "
            "c05e6993f39 | tunetable's kernel | prefill: 192 | 0.0885 | 0.0880 | 0.994 | yes | 2.10e-03 | 2.10e-03 |"
            ) in lines
    assert lines[-1].endswith("| RuntimeError: no cubin | - | - | - | - | - |")
    assert client.shape_markdown([]) == []


def test_llama_client_judges_bf16_tolerance_against_the_fp32_model() -> None:
    """The patched model's error against fp32 may be up to 1.25x the unpatched model's, not more."""
    client = load_benchmark_script("llama_client")
    torch = pytest.importorskip("torch")   # errors() computes norms with torch (optional: not in CI's install)
    reference = torch.ones(4, 8)
    logits = {"unpatched": reference * 1.01, "patched": reference * 1.012}
    found = client.errors(torch, logits, reference)
    assert abs(found["err_vs_fp32"]["unpatched"] - 0.01) < 1e-6 and found["within_bf16_tolerance"]
    found = client.errors(torch, {"unpatched": reference * 1.01, "patched": reference * 1.013}, reference)
    assert not found["within_bf16_tolerance"]
    assert "err_vs_fp32" not in client.errors(torch, logits, None)


class _FakeTensor:
    """A numpy array with the few torch.Tensor methods runtime_gemm's time_shape calls (CPU stand-in)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def float(self) -> _FakeTensor:
        return _FakeTensor(self.array.astype(np.float64))

    def t(self) -> _FakeTensor:
        return _FakeTensor(self.array.T)

    def fill_(self, value: float) -> _FakeTensor:
        self.array.fill(value)
        return self

    def norm(self) -> _FakeTensor:
        return _FakeTensor(np.linalg.norm(self.array))

    def __matmul__(self, other: _FakeTensor) -> _FakeTensor:
        return _FakeTensor(self.array @ other.array)

    def __sub__(self, other: _FakeTensor) -> _FakeTensor:
        return _FakeTensor(self.array - other.array)

    def __truediv__(self, other: _FakeTensor) -> _FakeTensor:
        return _FakeTensor(self.array / other.array)

    def __float__(self) -> float:
        return float(self.array)


def _fake_torch() -> types.SimpleNamespace:
    """torch as time_shape uses it, on numpy: seeded randn, empty, mm(out=), empty_cache."""
    def generator(device: str) -> types.SimpleNamespace:
        found = types.SimpleNamespace(rng=None)
        found.manual_seed = lambda seed: setattr(found, "rng", np.random.default_rng(seed)) or found
        return found

    def randn(*size: int, device: str, dtype: str, generator: types.SimpleNamespace) -> _FakeTensor:
        return _FakeTensor(generator.rng.standard_normal(size).astype(np.float32))

    def mm(a: _FakeTensor, bt: _FakeTensor, *, out: _FakeTensor) -> None:
        out.array[...] = a.array @ bt.array

    return types.SimpleNamespace(bfloat16="bfloat16", Generator=generator, randn=randn, mm=mm,
                                 empty=lambda *size, device, dtype: _FakeTensor(np.empty(size, np.float32)),
                                 cuda=types.SimpleNamespace(empty_cache=lambda: None))


def _fake_operator(*, device: str, runs: list[tuple[int, int, int]] | None = None,
                   wrong: bool = False) -> Any:
    """The PyTorch operator on the stand-ins: a · bᵀ in numpy (doubled if ``wrong``), routed by the runtime's own
    rule (layers.torch_serves on ``device``'s dispatcher: what torch_ops.route decides, without a GPU)."""
    from tunetable.kernels.runtime import decide
    from tunetable.kernels.runtime.layers import torch_serves

    def run(a: _FakeTensor, b: _FakeTensor) -> _FakeTensor:
        if runs is not None:
            runs.append((a.array.shape[0], b.array.shape[0], a.array.shape[1]))
        return _FakeTensor(a.array @ b.array.T * (2.0 if wrong else 1.0))

    def route(m: int, n: int, k: int) -> types.SimpleNamespace:
        why = torch_serves(decide.dispatcher(device=device).decide(m=m, n=n, k=k), m=m, n=n, k=k,
                           smallest_floor_s=None)
        return types.SimpleNamespace(torch=why is not None, why=why or "tunetable's kernel")

    return runtime_gemm.Operator(run=run, route=route)


class _CountingTimer:
    """ColdL2Timer's interface with every contender run once per sample and 1 ms reported (no timing here)."""

    def warm_up(self, launch: Any, *, sets: int, warmup_ms: float) -> tuple[int, float]:
        launch(0)
        return 1, 1.0

    def batch_size(self, per_launch: float, *, min_batch_ms: float) -> int:
        return 1

    def sample(self, launch: Any, *, sets: int, batch: int) -> float:
        launch(0)
        return 1.0


@pytest.mark.parametrize(("wrong_other", "wrong_operator"), [(False, False), (True, False), (False, True)])
def test_runtime_gemm_runs_and_verifies_the_other_devices_table_choice(monkeypatch: pytest.MonkeyPatch,
                                                                       wrong_other: bool, wrong_operator: bool) -> None:
    # The orchestration on CPU stand-ins: gemm() serves the H100's tables, the H200's choice of the same shape runs
    # beside it through gemm_with (its family and tunables), the PyTorch operator runs with its route recorded, and a
    # wrong result from the H200's choice or the operator fails the row's verification.
    from tunetable.kernels.runtime import decide
    from tunetable.kernels.runtime.layers import torch_serves

    runs: list[tuple[str, dict[str, int]]] = []

    def gemm(a: _FakeTensor, b: _FakeTensor, *, out: _FakeTensor) -> None:
        out.array[...] = a.array @ b.array.T

    def gemm_with(tunables: dict[str, int], a: _FakeTensor, b: _FakeTensor, *, out: _FakeTensor,
                  family: str = "gemm_mma") -> None:
        runs.append((family, dict(tunables)))
        out.array[...] = a.array @ b.array.T * (2.0 if wrong_other and family != "gemm_mma" else 1.0)

    monkeypatch.setattr(runtime_gemm.tunetable.kernels, "gemm", gemm)
    monkeypatch.setattr(runtime_gemm.tunetable.kernels, "gemm_with", gemm_with)
    seen: list[int] = []
    shapes = [(256, 4096, 4096), (64, 4096, 4096)]   # table shapes where the H200 chose a TMA family (not gemm_mma)
    operator_runs: list[tuple[int, int, int]] = []
    operator = _fake_operator(device="h100", runs=operator_runs, wrong=wrong_operator)
    rows, summary = runtime_gemm.run_set(_fake_torch(), timer=_CountingTimer(), name="tables", shapes=shapes,
                                         rounds=2, l2_bytes=1 << 20, started=0.0, device="h100", others=("h200",),
                                         operator=operator, checkpoint=lambda found: seen.append(len(found)))
    assert seen == [1, 2] and [(r["M"], r["N"], r["K"]) for r in rows] == shapes
    to_torch = 0
    for row, (m, n, k) in zip(rows, shapes, strict=True):
        h200 = decide.dispatcher(device="h200").decide(m=m, n=n, k=k).entry
        assert (row["tables_h200_kernel"], row["tables_h200_config_id"]) == (h200.kernel, h200.config_id)
        assert (h200.kernel, {name: getattr(h200, name) for name in decide.tunable_fields(h200.kernel)}) in runs
        own = decide.dispatcher(device="h100").decide(m=m, n=n, k=k)
        assert row["config_id"] == own.entry.config_id
        assert row["rel_err"] < 1e-6
        assert row["verified"] is (not wrong_operator and (not wrong_other or h200.kernel == "gemm_mma"))
        why = torch_serves(own, m=m, n=n, k=k, smallest_floor_s=None)
        assert (row["operator_path"], row["operator_why"]) == (("torch", why) if why else ("tunetable",
                                                                                          "tunetable's kernel"))
        assert (row["operator_rel_err"] > 0.5) is wrong_operator
        assert operator_runs.count((m, n, k)) >= 3   # verified once, warmed up, one sample per round
        to_torch += why is not None
    assert summary["device"] == "h100" and summary["tables_h200_geomean_vs_cublas"] == pytest.approx(1.0)
    assert summary["operator_to_torch"] == to_torch and summary["operator_geomean_vs_cublas"] == pytest.approx(1.0)
    assert summary["operator_below_0.9x"] == 0 and summary["below_0.9x"] == 0
    assert all(row["tables_h200_kernel"] != "gemm_mma" for row in rows)   # a wrong choice is not gemm_mma's


def test_runtime_gemm_main_writes_the_serving_devices_files_with_the_other_tables_beside(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # main() end to end on the stand-ins above, on a GPU the H100's tables serve: `--sets tables --limit 2` writes
    # runtime_gemm_tables.h100.json / .md with the H200's choice beside gemm()'s (nothing here is a timing).
    torch = _fake_torch()
    torch.__version__ = "stand-in"
    torch.cuda.get_device_properties = lambda ordinal: types.SimpleNamespace(name="NVIDIA H100 80GB HBM3",
                                                                             L2_cache_size=50 << 20)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "pycuda", types.ModuleType("pycuda"))
    monkeypatch.setitem(sys.modules, "pycuda.driver", types.ModuleType("pycuda.driver"))
    monkeypatch.setattr(runtime_gemm, "runtime", lambda: types.SimpleNamespace(table=types.SimpleNamespace(
        device="h100")))
    monkeypatch.setattr(runtime_gemm, "ColdL2Timer", lambda cuda, stream: _CountingTimer())
    monkeypatch.setattr(runtime_gemm, "torch_operator", lambda: _fake_operator(device="h100"))
    host = dict.fromkeys(("gemm_out_us", "gemm_alloc_us", "prepared_launch_us", "torch_op_us", "torch_linear_us",
                          "torch_mm_out_us", "torch_mm_us", "first_call_us"), 1.0)
    monkeypatch.setattr(runtime_gemm, "gpu_shape", lambda torch, *, m, n, k: host)

    def gemm(a: _FakeTensor, b: _FakeTensor, *, out: _FakeTensor, **_: Any) -> None:
        out.array[...] = a.array @ b.array.T

    monkeypatch.setattr(runtime_gemm.tunetable.kernels, "gemm", gemm)
    monkeypatch.setattr(runtime_gemm.tunetable.kernels, "gemm_with", lambda tunables, a, b, **kw: gemm(a, b, **kw))
    monkeypatch.setattr(sys, "argv", ["runtime_gemm.py", "--sets", "tables", "--limit", "2", "--rounds", "1",
                                      "--out", str(tmp_path)])
    runtime_gemm.main()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["runtime_gemm_tables.h100.json",
                                                                "runtime_gemm_tables.h100.md"]
    found = json.loads((tmp_path / "runtime_gemm_tables.h100.json").read_text())
    assert found["tables_of"] == "h100" and [(r["M"], r["N"], r["K"]) for r in found["sets"]["tables"]] == [
        (1, 4096, 4096), (8, 4096, 4096)]
    assert found["summary"]["tables"]["verified"] == 2 and "tables_h200_geomean_vs_cublas" in found["summary"]["tables"]
    text = (tmp_path / "runtime_gemm_tables.h100.md").read_text()
    assert "served by the h100 tables" in text and "h200's tables on this GPU: 1.000x cuBLAS" in text
    assert "The PyTorch operator (torch.ops.tunetable.gemm, torch's matmul on " in text
    assert {row["operator_path"] for row in found["sets"]["tables"]} <= {"torch", "tunetable"}


def test_runtime_gemm_validation_summary_states_the_operator_and_the_slow_shapes() -> None:
    # The validation set's summary and markdown from hand-made rows (two shapes, one below 0.9x for gemm() and one
    # the operator sends to torch): the "none below 0.9x" is counted for gemm() and for the operator.
    base = {"N": 4096, "K": 4096, "source": "selector", "kernel": "gemm_mma", "config_id": "c1",
            "best_family": "gemm_mma", "best_config_id": "c2", "online_family": "gemm_mma", "online_config_id": "c2",
            "online_tuning_s": 1.0, "verified": True, "gemm_tflops": 1.0, "best_tflops": 1.0, "online_tflops": 1.0,
            "cublas_tflops": 1.0, "gemm_of_best": 1.0, "online_of_best": 1.0, "online_vs_cublas": 1.0,
            "best_vs_cublas": 1.0}
    rows = [{**base, "M": 3, "gemm_vs_cublas": 0.8, "operator_vs_cublas": 0.99, "operator_path": "torch"},
            {**base, "M": 300, "gemm_vs_cublas": 1.25, "operator_vs_cublas": 1.25, "operator_path": "tunetable"}]
    summary = runtime_gemm.validation_summary(rows)
    assert summary["gemm_vs_cublas"] == pytest.approx(1.0) and summary["operator_geomean_vs_cublas"] == pytest.approx(
        (0.99 * 1.25) ** 0.5)
    assert (summary["min_vs_cublas"], summary["below_0.9x"]) == (0.8, 1)
    assert (summary["operator_min_vs_cublas"], summary["operator_below_0.9x"], summary["operator_to_torch"]) == (
        0.99, 0, 1)
    lines = runtime_gemm.validation_markdown(rows, summary)
    assert any("torch's matmul on 1 shapes): 1.112x cuBLAS, min 0.990, 0 below 0.9x (gemm: min 0.800, 1 below)"
               in line for line in lines)
    assert lines[-3].endswith("| 0.800 | torch | 0.990 |")


def test_device_ceilings_proposes_the_highest_rounds_and_renders_them() -> None:
    # The pure half of benchmarks/device_ceilings.py on hand-made rounds (the GPU half runs on the device only).
    script = load_benchmark_script("device_ceilings")
    found = {"copy": {"bytes": 2 << 30, "ms": [1.5, 1.4], "tb_s": [2.86, 3.07], "median_tb_s": 2.965,
                      "max_tb_s": 3.0678},
             "gemm": {"4096x4096x4096": {"median_tflops": 700.0, "max_tflops": 712.34},
                      "8192x8192x8192": {"median_tflops": 690.0, "max_tflops": 705.0}}}
    assert script.proposed(found) == {"copy_tb_s": 3.07, "tflops": 712.3}
    text = script.render_markdown({**found, "proposed": script.proposed(found), "gpu": "NVIDIA H100 80GB HBM3",
                                   "device": "h100", "torch": "2.11", "git_rev": "abc", "date": "today",
                                   "method": "m.", "smi_before": "1980 MHz", "smi_after": "1980 MHz"})
    assert "| device-to-device copy, 2 GiB (read + written) | 2.96 TB/s | 3.07 TB/s |" in text
    assert "| torch.mm bf16 4096x4096x4096 (warm) | 700.0 TFLOP/s | 712.3 TFLOP/s |" in text
    assert "`devices.h100.ceilings`: copy_tb_s 3.07, tflops 712.3." in text


def test_runtime_slow_state_reports_each_cell_against_the_same_cells_cublas() -> None:
    """Per (data, order) the contender's µs and cuBLAS of that cell over it (hand values; no GPU)."""
    probe = load_benchmark_script("runtime_slow_state")
    assert probe.parse_shape("250x18944x3584") == (250, 18944, 3584)
    assert probe.parse_config("BLOCK_M=256,BLOCK_N=176,STAGES=4") == {"block_m": 256, "block_n": 176, "stages": 4}
    rows = [{"shape": "250x18944x3584", "data": data, "order": order, "contender": name, "median_us": us,
             "samples_us": [us]}
            for data in probe.DATA for order in probe.ORDERS
            for name, us in (("256x176 s4 r1", 70.0 if data == "uniform" else 58.0), ("cublas", 56.0))]
    text = probe.report({"device": "GPU", "git_rev": "abc", "date": "d", "method": "m", "rows": rows})
    head = next(row for row in text.splitlines() if row.startswith("| shape | contender |"))
    assert head.split(" | ")[2:4] == ["randn, interleaved", "randn, alone"] and len(head.split(" | ")) == 12
    assert head.endswith("| first set again, interleaved | first set again, alone |")
    line = next(row for row in text.splitlines() if row.startswith("| 250x18944x3584 | 256x176 s4 r1 |"))
    assert line.split(" | ")[2:] == ["58.0 µs (0.966x)", "58.0 µs (0.966x)", "70.0 µs (0.800x)", "70.0 µs (0.800x)",
                                     "58.0 µs (0.966x)", "58.0 µs (0.966x)", "58.0 µs (0.966x)", "58.0 µs (0.966x)",
                                     "58.0 µs (0.966x)", "58.0 µs (0.966x) |"]
    # Conditions chosen on the command line (--data): the report's columns follow their order.
    chosen = [row for row in rows if row["data"] in ("uniform", "randn")]
    text = probe.report({"device": "GPU", "git_rev": "abc", "date": "d", "method": "m", "rows": chosen,
                         "conditions": ("uniform", "randn")})
    head = next(row for row in text.splitlines() if row.startswith("| shape | contender |"))
    assert head.split(" | ")[2:] == ["uniform, interleaved", "uniform, alone", "randn, interleaved", "randn, alone |"]
    # "first set again" times the first condition's operands: it cannot come first (one line, before any GPU work).
    script = str(REPO / "benchmarks" / "runtime_slow_state.py")
    done = subprocess.run([sys.executable, script, "--config", "BLOCK_M=256", "--shape", "250x18944x3584",
                           "--data", "first set again"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "it cannot come first" in done.stderr.splitlines()[-1], done.stderr[-2000:]
