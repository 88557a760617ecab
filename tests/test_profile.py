"""kprofile-grade views: metric prefix and direction, default view, --top, --diff, --merge/--query, -c, -o."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from result_rows import kbench_pickle, row, shard

from tunetable import profile as views
from tunetable import resultset
from tunetable.errors import TuneTableError
from tunetable.yamlio import load_yaml_file


@pytest.fixture
def result(tmp_path):
    rows = [row(m=1, config="ca", median=2.0), row(m=1, config="cb", median=1.0), row(m=1, config="cc", median=4.0),
            row(m=8, config="ca", median=3.0), row(m=8, config="cb", median=6.0), row(m=8, config="cc", median=None,
                                                                                          status="build")]
    return resultset.load_file(path=shard(tmp_path / "r.pkl", rows))


def test_metric_exact_prefix_and_direction(result):
    assert views.resolve_metric(frame=result.frame, requested="met (ms)") == views.Metric("met (ms)", False)
    assert views.resolve_metric(frame=result.frame, requested="met") == views.Metric("met (ms)", False)
    assert views.resolve_metric(frame=result.frame, requested="MED") == views.Metric("median_ms", False)
    assert views.resolve_metric(frame=result.frame, requested="tfl") == views.Metric("tflops", True)


def test_metric_ambiguous_and_unknown_list_choices(result):
    with pytest.raises(TuneTableError, match="ambiguous metric 'me'.*met \\(ms\\).*median_ms"):
        views.resolve_metric(frame=result.frame, requested="me")
    with pytest.raises(TuneTableError, match="unknown metric 'registers'.*choices: .*tflops"):
        views.resolve_metric(frame=result.frame, requested="registers")


def test_sorted_view_direction_and_ratio(result):
    low = views.sorted_view(frame=result.frame, metric=views.Metric("median_ms", False), shape=("M",))
    assert low.select("M", "config_id", "ratio").rows() == [(1, "cb", 1.0), (1, "ca", 2.0), (1, "cc", 4.0),
                                                            (8, "ca", 1.0), (8, "cb", 2.0)]
    high = views.sorted_view(frame=result.frame, metric=views.Metric("tflops", True), shape=("M",))
    assert high["config_id"].to_list() == ["cb", "ca", "cc", "ca", "cb"]
    assert high["ratio"].to_list()[:3] == pytest.approx([1.0, 0.5, 0.25])


def test_default_summary(result):
    table = views.summary(result=result, metric=views.Metric("met (ms)", False), shape=("M", "N", "K"))
    assert table.select("entries", "best_idx", "worst", "best", "worst/best", "shape", "BLOCK_M").rows() == [
        (3, "1", 4.0, 1.0, 4.0, "M=1/N=4096/K=4096", 64),
        (2, "0", 6.0, 3.0, 2.0, "M=8/N=4096/K=4096", 128)]
    assert table["best_spec"][0].startswith("BLOCK_M=64/BLOCK_N=128/BLOCK_K=64/")


def test_top_fraction_common_spec(result):
    metric = views.Metric("met (ms)", False)
    subset = views.top_fraction(frame=result.frame, metric=metric, fraction=0.67, shape=())
    # 5 ok rows, ceil(0.67 * 5) = 4 best: 1.0 cb, 2.0 ca, 3.0 ca, 4.0 cc
    assert sorted(subset["config_id"].to_list()) == ["ca", "ca", "cb", "cc"]
    common = views.common_spec(subset=subset, parameters=("BLOCK_M", "STAGES"), shape=())
    assert common.row(0, named=True) == {"BLOCK_M": 128, "STAGES": 4}
    with pytest.raises(TuneTableError, match="--top"):
        views.top_fraction(frame=result.frame, metric=metric, fraction=1.5, shape=())


def test_top_fraction_higher_is_better_keeps_the_highest(result):
    subset = views.top_fraction(frame=result.frame, metric=views.Metric("tflops", True), fraction=0.5, shape=("M",))
    assert subset.select("M", "config_id").rows() == [(1, "cb"), (1, "ca"), (8, "ca")]


def test_diff_view(tmp_path, result):
    current = resultset.load_file(path=shard(tmp_path / "c.pkl", [row(m=1, config="ca", median=0.5),
                                                                   row(m=8, config="ca", median=3.0)]))
    table = views.diff_view(baseline=result, current=current, metric=views.Metric("met (ms)", False), shape=("M",))
    assert table.select("shape", "best_tuning_metric", "baseline_metric", "ratio").rows() == [
        ("M=1", 0.5, 1.0, 0.5), ("M=8", 3.0, 3.0, 1.0)]
    assert table["changed"][0].startswith("BLOCK_M: 64 -> 128, STAGES: 3 -> 4")
    assert table["changed"][1] == ""


def test_kendall_tau_hand_values():
    assert views.kendall_tau(x=pl.Series([1, 2, 3, 4]).to_numpy(),
                             y=pl.Series([1, 3, 2, 4]).to_numpy()) == pytest.approx(4 / 6)
    # x ties: S = 4, n0 = 6, tied x pairs = 2 -> 4 / sqrt(4 * 6)
    assert views.kendall_tau(x=pl.Series([1, 1, 2, 2]).to_numpy(),
                             y=pl.Series([1.0, 2.0, 3.0, 4.0]).to_numpy()) == pytest.approx(4 / 24 ** 0.5)
    assert views.kendall_tau(x=pl.Series([4, 3, 2, 1]).to_numpy(),
                             y=pl.Series([1, 2, 3, 4]).to_numpy()) == pytest.approx(-1.0)


@pytest.mark.parametrize("given", [("[M] [N]",), ("[M,N]",), ("['M','N']",), ("M", "N"), ("[M, N]",)])
def test_pivot_forms_are_equivalent(given):
    assert views.parse_pivots(values=given) == ["M", "N"]


def test_query_filters_and_refuses_code():
    frame = pl.DataFrame({"M": [32, 128, 256], "K": [512, 512, 4096]})
    assert views.apply_query(frame=frame, query="M > 64 and K < 1024")["M"].to_list() == [128]
    assert views.apply_query(frame=frame, query="M in [32, 256]")["M"].to_list() == [32, 256]
    with pytest.raises(TuneTableError, match="matched no entry"):
        views.apply_query(frame=frame, query="M > 1000")
    with pytest.raises(TuneTableError, match="not allowed"):
        views.apply_query(frame=frame, query="__import__('os').system('true')")
    with pytest.raises(TuneTableError, match="unknown name 'Q'"):
        views.apply_query(frame=frame, query="Q > 1")


def test_merge_three_manifests_keeps_rows_of_every_file():
    merged = views.merge_manifests(manifests=[("a", [{"M": 1, "N": 8, "X": 1}]),
                                              ("b", [{"M": 1, "N": 8, "X": 2}, {"M": 2, "N": 8, "X": 3}]),
                                              ("c", [{"M": 3, "N": 8, "X": 4}])], pivots=["M", "N"], sort_pivots=[])
    assert merged.select("M", "X", "source").rows() == [(1, 1, "a"), (2, 3, "b"), (3, 4, "c")]


def profile(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunetable", "profile", *args], capture_output=True, text=True,
                          cwd=cwd,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_cli_default_head_tail_invalid_and_output(tmp_path, result):
    bad = tmp_path / "bad.pkl"
    bad.write_text("x")
    out_dir = tmp_path / "out"
    done = profile(tmp_path, result.path, str(bad), "-m", "med", "--head", "1", "--tail", "1", "-r", "-v",
                   "-o", str(out_dir / "sel.mojo"), "--out-dir", str(out_dir))
    assert done.returncode == 0, done.stderr
    assert f"Invalid pkl [{bad}]" in done.stdout
    assert "num invalid pkls: 1 out of num-files: 2" in done.stdout
    assert "M=1/N=4096/K=4096" in done.stdout and "best 1" in done.stdout and "worst 1" in done.stdout
    written = load_yaml_file(out_dir / "sel.yaml")
    assert [(e["M"], e["BLOCK_M"]) for e in written["params"]] == [(1, 64), (8, 128)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pkl", "out", "r.journal.jsonl", "r.pkl"]


def test_cli_unknown_metric_and_all_invalid(tmp_path, result):
    done = profile(tmp_path, result.path, "-m", "bogus")
    assert done.returncode == 2 and "unknown metric 'bogus'" in done.stderr and "Traceback" not in done.stderr
    bad = tmp_path / "bad.pkl"
    bad.write_text("x")
    done = profile(tmp_path, str(bad))
    assert done.returncode == 2 and f"Invalid pkl [{bad}]" in done.stderr


def test_cli_diff_writes_csv_to_out_dir_only(tmp_path, result):
    current = shard(tmp_path / "cur.pkl", [row(m=1, config="ca", median=0.5), row(m=8, config="ca", median=3.0)])
    done = profile(tmp_path, result.path, str(current), "-d", "-p", "[M]", "--out-dir", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    csv = pl.read_csv(tmp_path / "o" / "diff_1_cur.csv")
    assert csv.select("shape", "ratio").rows() == [("M=1", 0.5), ("M=8", 1.0)]
    assert not list(tmp_path.glob("*.csv"))


def test_cli_top_and_correlation(tmp_path, result):
    done = profile(tmp_path, result.path, "-t", "0.5", "-v", "-c", "--out-dir", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert "Sorted Absolute Correlation: met (ms)" in done.stdout and "common subset" in done.stdout
    assert (tmp_path / "o" / "correlation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_merge_and_query(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("params:\n  - {M: 1, N: 8, X: 1}\n  - {M: 512, N: 8, X: 2}\n")
    b.write_text("params:\n  - {M: 64, N: 8, X: 3}\n")
    out = tmp_path / "o" / "merged.yaml"
    done = profile(tmp_path, str(a), str(b), "--merge", "--query", "M > 32", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert [(e["M"], e["X"]) for e in load_yaml_file(out)["params"]] == [(64, 3), (512, 2)]
    empty = profile(tmp_path, str(a), str(b), "--merge", "--query", "M > 100000")
    assert empty.returncode == 2 and "matched no entry" in empty.stderr


def test_cli_on_kbench_pickle_top_and_output(tmp_path):
    specs = ["mm/BM=64/BN=32/$M=8/$N=16", "mm/BM=128/BN=32/$M=8/$N=16", "mm/BM=128/BN=64/$M=8/$N=16",
             "mm/BM=64/BN=64/$M=8/$N=16"]
    path = kbench_pickle(tmp_path / "k.pkl", specs, [4.0, 1.0, 2.0, 3.0])
    done = profile(tmp_path, str(path), "-m", "met", "-t", "0.5", "-o", str(tmp_path / "o" / "top"))
    assert done.returncode == 0, done.stderr
    # the best half: 1.0 (BM=128, BN=32) and 2.0 (BM=128, BN=64): BM 128; BN tie 32/64 -> smallest, 32
    written = load_yaml_file(tmp_path / "o" / "top.yaml")
    assert written["params"] == [{"name": "bench", "BM": 128, "BN": 32, "M": 8, "N": 16}]
    assert "(lower is better)" in done.stdout


def test_merge_sort_pivots_must_be_pivots():
    with pytest.raises(TuneTableError, match="--sort-pivots X"):
        views.merge_manifests(manifests=[("a", [{"M": 1, "N": 2, "X": 3}])], pivots=["M"], sort_pivots=["X"])
    merged = views.merge_manifests(manifests=[("a", [{"M": 2, "N": 1}, {"M": 1, "N": 1}])], pivots=["M", "N"],
                                   sort_pivots=["N"])
    assert merged["M"].to_list() == [2]  # deduplicated on N, first entry kept


def test_query_row_missing_a_name_does_not_match():
    frame = pl.DataFrame({"M": [32, 128], "SWAP": [None, True]})
    assert views.apply_query(frame=frame, query="SWAP == True and M > 1")["M"].to_list() == [128]
