"""benchmarks/device_tables.py and device_transfer.py: the pipeline's rules reused, the scoring of a selection."""

from __future__ import annotations

import math

from bench_support import REPO, load_benchmark_script

from tunetable.manifest import ManifestEntry

device_tables = load_benchmark_script("device_tables")
device_transfer = load_benchmark_script("device_transfer")
table_vs_cublas = load_benchmark_script("table_vs_cublas")


def entry(*, index: int, m: int, m_end: int, config_id: str, **values: str) -> ManifestEntry:
    """One manifest entry at N = K = 64."""
    return ManifestEntry(index=index, m=m, m_end=m_end, n=64, k=64, config_id=config_id,
                         values={"CONFIG_ID": config_id, **values})


def test_the_h200_selection_through_the_pipeline_rule_is_the_committed_manifests() -> None:
    """device_tables computes a device's own selection with select_winners: on the H200 it gives the committed files."""
    selection = device_tables.device_selections("h200")
    committed = device_tables.committed_selections()
    assert selection["tables"] == committed["tables"]
    assert selection["dispatch"] == committed["dispatch"]


def test_dispatch_ratios_take_the_named_tables_ratio_per_shape() -> None:
    """Each shape gets the ratio of the table its dispatch entry names; shapes no entry covers are left out."""
    series = {"a": {(1, 64, 64): 1.10, (128, 64, 64): 0.90}, "b": {(1, 64, 64): 0.95, (128, 64, 64): 1.20},
              "c": {(1, 32, 32): 2.0}}
    entries = [entry(index=0, m=1, m_end=128, config_id="x", TABLE="a"),
               entry(index=1, m=128, m_end=2147483647, config_id="y", TABLE="b")]
    assert table_vs_cublas.dispatch_ratios(series=series, entries=entries) == {(1, 64, 64): 1.10,
                                                                                 (128, 64, 64): 1.20}


def test_own_over_other_compares_the_shapes_both_selections_score() -> None:
    """A shape the other device's selection cannot be scored on (its pick was never measured here) leaves the ratio."""
    own = {(1, 64, 64): 1.2, (128, 64, 64): 1.1, (256, 64, 64): 0.5}
    other = {(1, 64, 64): 1.0, (128, 64, 64): 1.0}
    found = device_tables.paired_ratio(own=own, other=other)
    assert found == {"geomean": round(math.sqrt(1.2 * 1.1), 4), "shapes": 2, "unscored": ["256x64x64"]}


def test_the_cost_of_the_other_devices_choice_is_its_time_over_the_own_choices() -> None:
    """Strict and selected costs on the H100 rows: 12 / 10 - 1 where the H200's pick differs, 0 where it agrees."""
    times = {"h100": {"t": {(1, 64, 64): {"p": 10.0, "q": 12.0, "cublas": 11.0},
                            (4096, 64, 64): {"p": 5.0, "q": 6.0, "cublas": 5.0}}},
             "h200": {"t": {(1, 64, 64): {"p": 3.0, "q": 2.0, "cublas": 2.5},
                            (4096, 64, 64): {"p": 1.0, "q": 2.0, "cublas": 1.0}}}}
    own = "params:\n  - {M: 1, M_END: 2147483647, N: 64, K: 64, CONFIG_ID: p}\n"
    other = ("params:\n  - {M: 1, M_END: 4096, N: 64, K: 64, CONFIG_ID: q}\n"
             "  - {M: 4096, M_END: 2147483647, N: 64, K: 64, CONFIG_ID: p}\n")
    found = device_tables.winner_differences(table="t", times=times,
                                             selections={"h100": {"tables": {"t": own}},
                                                         "h200": {"tables": {"t": other}}})
    assert (found["shapes"], found["strict_winner_differs"], found["selected_differs"]) == (2, 1, 1)
    assert found["selected_cost"]["max"] == 0.2 and found["selected_cost"]["worst"][0]["shape"] == "1x64x64"
    assert math.isclose(found["selected_cost"]["geomean"], round(math.sqrt(1.2) - 1, 4))
    assert found["by_m"]["M <= 32"]["selected_differs"] == 1 and found["by_m"]["M > 512"]["selected_differs"] == 0


def test_transfer_summary_counts_shapes_reached_within_the_budget() -> None:
    """Shares of shapes within 2 % and of the exhaustive measurements, and the worst best-of-budget."""
    found = {(1, 64, 64): {"needed": 1, "best_vs_exhaustive": 1.0, "measured": 4},
             (2, 64, 64): {"needed": None, "best_vs_exhaustive": 1.05, "measured": 4}}
    item = device_transfer.summary(found, grid=40)
    assert (item["shapes_within_2pct"], item["share_within_2pct"]) == (1, 0.5)
    assert (item["measurements"], item["exhaustive_measurements"], item["measurement_share"]) == (8, 80, 0.1)
    assert item["worst_best_vs_exhaustive"] == 1.05


def test_device_transfer_names_a_missing_recording_in_one_line(tmp_path) -> None:
    """A seed that does not exist: one error line naming it, exit 2, nothing written."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(device_transfer.REPO / "benchmarks/device_transfer.py"),
                           "--seed-from", str(tmp_path / "absent.parquet"),
                           "--target", str(device_transfer.REPO / "data/recordings/h100_gemm_mma.parquet"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (2, f"error: {tmp_path / 'absent.parquet'}: no such file\n")
    assert list(tmp_path.iterdir()) == []


def test_the_operators_served_figure_counts_torch_where_the_dispatch_entry_measured_cublas_faster() -> None:
    """operator_served routes the shapes whose covering dispatch entry (read here from the manifest) is below 1.0."""
    import yaml

    entries = yaml.safe_load((REPO / "manifests" / "gemm_dispatch.h100.yaml").read_text())["params"]
    # A table shape whose entry measured cuBLAS faster, one where ours was, and 1 x 4096 x 4096.
    slower = next(e for e in entries if e["SPEEDUP_VS_CUBLAS"] < 1.0)
    faster = next(e for e in entries if e["SPEEDUP_VS_CUBLAS"] > 1.05 and e["M"] > 1)
    ratios = {(slower["M"], slower["N"], slower["K"]): 0.9, (faster["M"], faster["N"], faster["K"]): 1.2,
              (1, 4096, 4096): 1.1}

    def below_one(m: int, n: int, k: int) -> bool:
        found = next(e for e in entries if e["N"] == n and e["K"] == k and e["M"] <= m < e["M_END"])
        return found["SPEEDUP_VS_CUBLAS"] < 1.0

    expected = {shape: 1.0 if below_one(*shape) else ratio for shape, ratio in ratios.items()}
    served = device_tables.operator_served(device="h100", ratios=ratios)
    assert served["to_torch"] == sum(below_one(*shape) for shape in ratios) >= 1
    assert math.isclose(served["geomean"], math.exp(sum(map(math.log, expected.values())) / 3), rel_tol=1e-3)
