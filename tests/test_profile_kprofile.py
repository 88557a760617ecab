"""profile as a drop-in for kprofile: -t's rule, --top-fraction, -o's file:, pandas --query, the project's own
tables and recordings as inputs, bounded output, and a Kendall tau that never enumerates pairs.

kprofile's facts (read in modularml/mojo @ 5d09008, max/kernels/benchmarks/autotune/kprofile.py):
``top_idx`` keeps ``x < (t + min/max) * max``, i.e. below ``min + t*max``, then each parameter's most
common value; ``codegen_yaml`` writes ``name``, ``file`` (the pickle's ``file``), ``common: &common``
(a list) and ``params``; ``--query`` is ``DataFrame.query``.
"""

from __future__ import annotations

import itertools
import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from result_rows import kbench_pickle, row, shard

from tunetable import profile as views
from tunetable import resultset
from tunetable.errors import TuneTableError
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"


def recorded_kernel_rows() -> int:
    """The recording's configuration rows (the cuBLAS rows are its ``baseline`` kind), counted by polars."""
    return pl.read_parquet(RECORDING).filter(pl.col("kind") == "kernel").height

# One shape, six entries: the kprofile rule and the fraction rule pick different common values.
SPECS = ["mm/BM=64/BN=32/$M=8/$N=16", "mm/BM=128/BN=32/$M=8/$N=16", "mm/BM=128/BN=64/$M=8/$N=16",
         "mm/BM=128/BN=64/$M=8/$N=16", "mm/BM=64/BN=64/$M=8/$N=16", "mm/BM=64/BN=32/$M=8/$N=16"]
TIMES = [1.0, 1.1, 1.2, 1.3, 6.0, 10.0]


def profile(cwd: Path, *args: str, columns: int | None = 200) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "tunetable", "profile", *args], capture_output=True, text=True,
                          cwd=cwd, env=env)


def kbench(path: Path, *, source: str | None = "$KERNEL_BENCHMARKS_ROOT/gpu/bench_matmul.mojo",
           specs: list[str] = SPECS, times: list[float] = TIMES) -> Path:
    import pandas as pd

    merged = pd.DataFrame({"mesh_idx": range(len(specs)), "name": ["mm"] * len(specs), "met (ms)": times,
                           "iters": [100] * len(specs), "spec": specs})
    payload = {"merged_df": merged, "build_df": pd.DataFrame(), "name": "mm"}
    if source is not None:
        payload["file"] = source
    path.write_bytes(pickle.dumps(payload))
    return path


def test_top_is_kprofiles_threshold_rule(tmp_path: Path) -> None:
    result = resultset.load_file(path=kbench(tmp_path / "k.pkl"))
    metric = views.Metric("met (ms)", False)
    # min + 0.05 * max = 1.0 + 0.5 = 1.5: the four entries 1.0, 1.1, 1.2, 1.3 (kprofile: x < 1.5)
    subset = views.within_top(frame=result.frame, metric=metric, threshold=0.05, shape=result.shape)
    assert sorted(subset["met (ms)"].to_list()) == [1.0, 1.1, 1.2, 1.3]
    common = views.common_spec(subset=subset, parameters=result.parameters, shape=result.shape)
    assert common.select("BM", "BN").row(0) == (128, 32)     # BM: 128 three times; BN: 32 and 64 twice, tie: smaller
    fraction = views.top_fraction(frame=result.frame, metric=metric, fraction=0.05, shape=result.shape)
    assert fraction["met (ms)"].to_list() == [1.0]              # ceil(0.05 * 6) = 1 entry: the fraction rule differs
    first = views.common_spec(subset=fraction, parameters=result.parameters, shape=result.shape)
    assert first.select("BM", "BN").row(0) == (64, 32)


def test_top_mirrors_for_higher_is_better(tmp_path: Path) -> None:
    frame = pl.DataFrame({"M": [1] * 5, "X": [1, 2, 3, 4, 5], "tflops": [100.0, 96.0, 94.0, 50.0, 10.0]})
    subset = views.within_top(frame=frame, metric=views.Metric("tflops", True), threshold=0.05, shape=("M",))
    assert subset["X"].to_list() == [1, 2]     # above 100 - 0.05 * 100 = 95
    with pytest.raises(TuneTableError, match="--top: expected a threshold > 0"):
        views.within_top(frame=frame, metric=views.Metric("tflops", True), threshold=float("nan"), shape=("M",))


def test_cli_top_and_top_fraction_write_different_picks_and_keep_kbenchs_file(tmp_path: Path) -> None:
    path = kbench(tmp_path / "k.pkl")
    done = profile(tmp_path, str(path), "-t", "0.05", "-o", str(tmp_path / "o" / "top"))
    assert done.returncode == 0, done.stderr
    written = load_yaml_file(tmp_path / "o" / "top.yaml")
    assert written["name"] == "mm" and written["file"] == "$KERNEL_BENCHMARKS_ROOT/gpu/bench_matmul.mojo"
    assert written["params"] == [{"name": "mm", "BM": 128, "BN": 32, "M": 8, "N": 16}]
    assert "below min + 0.05*max" in done.stdout
    done = profile(tmp_path, str(path), "--top-fraction", "0.05", "-o", str(tmp_path / "o" / "frac"))
    assert done.returncode == 0, done.stderr
    assert load_yaml_file(tmp_path / "o" / "frac.yaml")["params"][0]["BM"] == 64
    both = profile(tmp_path, str(path), "-t", "0.05", "--top-fraction", "0.1")
    assert both.returncode == 2 and "not both" in both.stderr
    negative = profile(tmp_path, str(path), "-t", "-1")
    assert negative.returncode == 2 and "--top: expected a threshold >= 0" in negative.stderr


def test_output_yaml_file_key_rules(tmp_path: Path) -> None:
    ours = shard(tmp_path / "s.pkl", [row(m=1, config="ca", median=1.0), row(m=1, config="cb", median=2.0)])
    done = profile(tmp_path, str(ours), "-o", str(tmp_path / "o" / "ours"))
    assert done.returncode == 0, done.stderr
    assert "file" not in load_yaml_file(tmp_path / "o" / "ours.yaml")   # a shard names itself only
    other = kbench(tmp_path / "k2.pkl", source="$KERNEL_BENCHMARKS_ROOT/gpu/other.mojo")
    clash = profile(tmp_path, str(kbench(tmp_path / "k1.pkl")), str(other), "-o", str(tmp_path / "o" / "x"))
    assert clash.returncode == 2 and "different kbench files" in clash.stderr and "-o" in clash.stderr
    assert not (tmp_path / "o" / "x.yaml").exists()


@pytest.mark.slow
def test_merge_keeps_name_and_file_and_takes_pandas_queries(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("name: bench_matmul\nfile: $KERNEL_BENCHMARKS_ROOT/gpu/bench_matmul.mojo\nparams:\n"
                 "  - {M: 1, N: 8, K: 64, SWAP: true}\n  - {M: 512, N: 8, K: 2048, SWAP: false}\n")
    b = tmp_path / "b.yaml"
    b.write_text("params:\n  - {M: 64, N: 8, K: 512, SWAP: false}\n")
    queries = {"M > 32 & K < 1024": [64], "M < 32 | K >= 2048": [1, 512], "~SWAP & M.between(64, 512)": [64, 512],
               "M in [1, 512]": [1, 512], "M == [1, 64]": [1, 64], "K.between(64, 512, inclusive='neither')": []}
    for query, expected in queries.items():
        out = tmp_path / "o" / "merged.yaml"
        done = profile(tmp_path, str(a), str(b), "--merge", "--query", query, "-o", str(out))
        if not expected:
            assert done.returncode == 2 and "matched no entry" in done.stderr
            continue
        assert done.returncode == 0, (query, done.stderr)
        written = load_yaml_file(out)
        assert [e["M"] for e in written["params"]] == expected, query
        assert written["name"] == "bench_matmul" and written["file"].endswith("bench_matmul.mojo")
    refused = profile(tmp_path, str(a), "--merge", "--query", "M.__class__ or __import__('os')")
    assert refused.returncode == 2 and "not allowed" in refused.stderr and "Traceback" not in refused.stderr


def test_reads_recordings_and_ranked_tables(tmp_path: Path) -> None:
    from tunetable import rank

    done = profile(tmp_path, str(RECORDING), "--head", "1")
    assert done.returncode == 0, done.stderr
    assert "metric [met (ms)]" in done.stdout
    assert f"{recorded_kernel_rows():,} compared; left out: 55 baseline" in done.stdout
    recording = pl.read_parquet(RECORDING)
    ranked = rank.rank_rows(rows=recording, parameters=resultset.describe_table_file(path=RECORDING).parameters)
    rank.write_ranked(table=ranked, out=tmp_path / "gemm_mma.parquet", name="gemm_mma")
    for suffix in (".parquet", ".csv"):
        done = profile(tmp_path, str(tmp_path / f"gemm_mma{suffix}"), "--head", "1", "--all")
        assert done.returncode == 0, done.stderr
        assert "metric [median_ms]" in done.stdout          # ranked tables have no kbench `met (ms)`
        best = ranked.ranked.filter(pl.col("rank") == 1).sort("M", "N", "K")
        lines = [line for line in done.stdout.splitlines() if "ratio=1.000" in line or "│" in line]
        for config in best["config_id"].head(5).to_list():
            assert any(config in line for line in lines), config


def test_unsupported_input_says_what_profile_reads(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    done = profile(tmp_path, str(tmp_path / "notes.txt"))
    assert done.returncode == 2
    for what in (".pkl", "raw shards", "kbench pickles", ".parquet", "ranked tables", "recordings", ".csv"):
        assert what in done.stdout + done.stderr, what
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("a,b\n1,2\n")
    done = profile(tmp_path, str(wrong))
    assert done.returncode == 2 and "neither a ranked table nor a recording: no column M" in done.stderr


@pytest.mark.slow
def test_views_are_bounded_unless_all_and_csv_writes_them_whole(tmp_path: Path) -> None:
    done = profile(tmp_path, str(RECORDING), "-r", "--max-rows", "6", "--out-dir", str(tmp_path / "o"), "--csv")
    assert done.returncode == 0, done.stderr
    rows = recorded_kernel_rows()
    assert f"sorted ({rows:,} rows)" in done.stdout and f"… {rows - 6:,} rows" in done.stdout
    assert f"(6 of {rows:,} rows shown: --all prints every row; all of it is in" in done.stdout
    assert pl.read_csv(tmp_path / "o" / "h200_gemm_mma.sorted.csv").height == rows
    every = profile(tmp_path, str(RECORDING), "-r", "--all", columns=None)
    assert every.returncode == 0 and sum("│" in line for line in every.stdout.splitlines()) >= rows


def test_a_pipe_never_splits_a_value(tmp_path: Path) -> None:
    result = shard(tmp_path / "r.pkl", [row(m=4096, config="ca", median=2.0), row(m=4096, config="cd", median=1.0)])
    for columns in (80, 60, None):
        done = profile(tmp_path, str(result), "-r", "--head", "1", columns=columns)
        assert done.returncode == 0, done.stderr
        assert "M=4096/" in done.stdout and not any(line.rstrip().endswith(("M=409", "BLOCK_N=22"))
                                                    for line in done.stdout.splitlines())
        if columns:   # a table fits the width; what cannot fit is printed one whole record per line
            assert all(len(line) <= columns or "│" not in line for line in done.stdout.splitlines())


def brute_tau(x: np.ndarray, y: np.ndarray) -> float:
    """tau-b straight from its definition, every pair enumerated."""
    score = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in itertools.combinations(range(len(x)), 2))
    pairs = len(x) * (len(x) - 1) // 2

    def tied(values: np.ndarray) -> int:
        counts = np.unique(values, return_counts=True)[1]
        return int((counts * (counts - 1) // 2).sum())

    denominator = math.sqrt((pairs - tied(x)) * (pairs - tied(y)))
    return score / denominator if denominator else math.nan


@pytest.mark.parametrize("seed", range(6))
def test_kendall_tau_matches_the_pairwise_definition_on_every_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    n = 120
    discrete, continuous = rng.integers(0, 6, n).astype(float), np.round(rng.random(n), 2)
    for x, y in ((discrete, rng.integers(0, 4, n).astype(float)), (discrete, continuous),
                 (continuous, np.round(continuous + rng.random(n), 2))):
        expected = brute_tau(x, y)
        for cells, values in ((10**9, 10**9), (0, 10**9), (0, 0)):   # contingency, grouped, Knight
            monkeypatch.setattr(views, "CONTINGENCY_CELLS", cells)
            monkeypatch.setattr(views, "GROUPED_VALUES", values)
            assert views.kendall_tau(x=x, y=y) == pytest.approx(expected, abs=1e-12)


def test_count_inversions() -> None:
    values = np.array([3, 1, 2, 3, 0, 2])
    expected = sum(1 for i, j in itertools.combinations(range(len(values)), 2) if values[i] > values[j])
    assert views.count_inversions(values) == expected == 8


def test_left_out_counts_per_reason(tmp_path: Path) -> None:
    loaded = resultset.load_file(path=shard(tmp_path / "r.pkl", [
        row(m=1, config="ca", median=1.0), row(m=1, config="cb", median=None, status="build"),
        row(m=1, config="cc", median=None, status="verify"), row(m=1, config="cd", median=None, status="build"),
        row(m=1, config="cublas", median=0.5)]))
    counts = views.left_out(frame=loaded.frame, metric=views.Metric("met (ms)", False))
    assert counts == {"baseline": 1, "build": 2, "verify": 1}


def test_kbench_pickle_helper_still_reads(tmp_path: Path) -> None:
    path = kbench_pickle(tmp_path / "k.pkl", ["mm/BM=64/$M=8", "mm/BM=128/$M=8"], [2.0, 1.0])
    assert resultset.load_file(path=path).source_file == "x.yaml"


def test_yaml_inputs_are_printed_expanded_and_written_to_output(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: mm\nfile: $KERNEL_BENCHMARKS_ROOT/gpu/mm.mojo\n"
                    "params:\n  - {BM: [64, [128, 64]], BN: 32, M: 8}\n  - {BM: 256, BN: [32, 64], M: 8}\n")
    done = profile(tmp_path, str(grid), "-o", str(tmp_path / "o" / "again"))
    assert done.returncode == 0, done.stderr
    written = load_yaml_file(tmp_path / "o" / "again.yaml")
    assert written["name"] == "mm" and written["file"] == "$KERNEL_BENCHMARKS_ROOT/gpu/mm.mojo"
    assert [(e["BM"], e["BN"]) for e in written["params"]] == [(64, 32), (128, 32), (256, 32), (256, 64)]
    assert f"[{grid}]" in done.stdout


def test_kprofile_output_reads_back_unchanged(tmp_path: Path) -> None:
    first = profile(tmp_path, str(kbench(tmp_path / "k.pkl")), "-t", "0.05", "-o", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    again = profile(tmp_path, str(tmp_path / "a.yaml"), "-o", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    a, b = (load_yaml_file(tmp_path / f"{n}.yaml") for n in "ab")
    assert (a["name"], a["file"], a["params"]) == (b["name"], b["file"], b["params"])


def test_expand_entries_is_kbenchs_grid_without_eval() -> None:
    entries = [{"A": [1, [2, 1]], "B": ["x", "2*64"], "C": 3}]
    assert views.expand_entries(entries=entries, path="g.yaml") == [
        {"A": 1, "B": "x", "C": 3}, {"A": 1, "B": "2*64", "C": 3}, {"A": 2, "B": "x", "C": 3},
        {"A": 2, "B": "2*64", "C": 3}]


def test_diff_of_a_file_against_itself_reads_it_once_and_shows_ratio_one(tmp_path: Path) -> None:
    path = kbench(tmp_path / "k.pkl")
    done = profile(tmp_path, str(path), str(path), "-d", "--out-dir", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert pl.read_csv(tmp_path / "o" / "diff_1_k.csv")["ratio"].to_list() == [1.0]


def test_an_unreadable_pickle_beside_a_table_is_listed_and_the_table_profiled(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"not a pickle")
    done = profile(tmp_path, str(bad), str(RECORDING), "--max-rows", "4")
    assert done.returncode == 0, done.stderr
    assert f"Invalid pkl [{bad}]" in done.stdout and "num invalid pkls: 1 out of num-files: 2" in done.stdout
    assert f"{recorded_kernel_rows():,} compared" in done.stdout
