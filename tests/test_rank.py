"""Ranking per shape: order, tie-break, ratios, failures and the written files."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest
from result_rows import GRID, row, shard

from tunetable import rank, resultset


@pytest.fixture
def ranked_table(tmp_path):
    rows = [row(m=1, config="ca", median=2.0), row(m=1, config="cc", median=1.0), row(m=1, config="cb", median=1.0),
            row(m=1, config="cublas", median=4.0), row(m=1, config="cd", median=None, status="build"),
            row(m=8, config="ca", median=3.0), row(m=8, config="cb", median=6.0),
            row(m=8, config="cc", median=0.5, status="verify")]
    frame = resultset.combine(results=resultset.load_files(paths=[shard(tmp_path / "s.pkl", rows)]).results)
    return rank.rank_rows(rows=frame, parameters=GRID)


def test_rank_order_ties_and_ratios(ranked_table):
    table = ranked_table.ranked
    assert table.select("M", "rank", "config_id").rows() == [(1, 1, "cb"), (1, 2, "cc"), (1, 3, "ca"),
                                                              (8, 1, "ca"), (8, 2, "cb")]
    assert table["slowdown_vs_best"].to_list() == [1.0, 1.0, 2.0, 1.0, 2.0]
    assert table["speedup_vs_cublas"].to_list()[:3] == [4.0, 4.0, 2.0]  # cuBLAS time / kernel time
    assert table["speedup_vs_cublas"].to_list()[3:] == [None, None]  # no baseline measured at M=8
    assert table.columns[:5] == ["rank", "M", "N", "K", "config_id"]
    assert table.columns[5:5 + len(GRID)] == list(GRID)


def test_failures_listed_with_their_class(ranked_table):
    failures = ranked_table.failures
    assert failures.select("M", "config_id", "status").rows() == [(1, "cd", "build"), (8, "cc", "verify")]


def test_write_ranked_files(tmp_path, ranked_table):
    out = tmp_path / "ranked" / "gemm_mma.parquet"
    written = rank.write_ranked(table=ranked_table, out=out, name="gemm_mma")
    assert sorted(p.name for p in written) == ["gemm_mma.csv", "gemm_mma.failures.csv", "gemm_mma.md",
                                               "gemm_mma.parquet"]
    assert pl.read_parquet(out).equals(ranked_table.ranked)
    assert "| rank | M | N | K | config_id |" in (tmp_path / "ranked" / "gemm_mma.md").read_text()
    assert (tmp_path / "ranked" / "gemm_mma.failures.csv").read_text().splitlines()[1].startswith("1,4096,4096,cd,")
    first = out.read_bytes()
    rank.write_ranked(table=ranked_table, out=out, name="gemm_mma")
    assert out.read_bytes() == first


def test_rank_cli_stops_at_an_unreadable_file_and_writes_nothing(tmp_path):
    """A table is never ranked without one of its files: one error line naming it, exit 2, no output."""
    good = shard(tmp_path / "M1.pkl", [row(m=1, config="ca", median=1.0), row(m=1, config="cb", median=0.5)])
    bad = tmp_path / "bad.pkl"
    bad.write_text("nope")
    out = tmp_path / "r" / "t.parquet"
    done = subprocess.run([sys.executable, "-m", "tunetable", "rank", "--table", "gemm_mma", "--out", str(out),
                           str(good), str(bad)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {bad}: not a readable pickle: UnpicklingError: invalid "
                                                "load key, 'n'."]
    assert not out.parent.exists()


def test_rank_cli_all_invalid_exits_2(tmp_path):
    bad = tmp_path / "bad.pkl"
    bad.write_text("nope")
    done = subprocess.run([sys.executable, "-m", "tunetable", "rank", "--table", "t", "--out",
                           str(tmp_path / "o.parquet"), str(bad)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {bad}: not a readable pickle")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_rank_cli_many_shards(tmp_path):
    ms = list(range(1, 18))
    paths = [str(shard(tmp_path / f"M{m}.pkl", [row(m=m, config="ca", median=float(m)),
                                                 row(m=m, config="cb", median=float(18 - m))])) for m in ms]
    out = tmp_path / "t.parquet"
    done = subprocess.run([sys.executable, "-m", "tunetable", "rank", "--table", "gemm_mma", "--out", str(out), *paths],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    winners = pl.read_parquet(out).filter(pl.col("rank") == 1)
    assert winners["config_id"].to_list() == ["ca"] * 8 + ["ca"] + ["cb"] * 8  # M=9: 9.0 vs 9.0, tie -> ca


def test_markdown_of_many_shapes_is_bounded_and_the_csv_keeps_every_row(tmp_path):
    # 150 shapes x 3 configurations: the Markdown lists 100 winners and the 3 configurations' totals.
    rows = [row(m=m, config=config, median=median) for m in range(1, 151)
            for config, median in (("ca", 1.0 + (m % 2)), ("cb", 1.5), ("cc", 3.0))]
    frame = resultset.combine(results=resultset.load_files(paths=[shard(tmp_path / "s.pkl", rows)]).results)
    table = rank.rank_rows(rows=frame, parameters=GRID)
    out = tmp_path / "ranked" / "gemm_mma.parquet"
    rank.write_ranked(table=table, out=out, name="gemm_mma")
    text = (tmp_path / "ranked" / "gemm_mma.md").read_text()
    assert "150 shapes, 450 ranked rows: every row is in gemm_mma.csv" in text
    assert "winners of the first 100 of 150 shapes" in text
    summary = text.split("configurations over all 150 shapes")[1]
    assert [line.split(" | ")[:3] for line in summary.splitlines() if line.startswith("| c")][1:] == [
        ["| ca", "75", "150"], ["| cb", "75", "150"], ["| cc", "0", "150"]]  # a tie in wins: lower geomean slowdown
    assert len(text.splitlines()) < 130
    assert len(pl.read_csv(tmp_path / "ranked" / "gemm_mma.csv")) == 450


def test_a_checked_recording_is_parsed_from_the_bytes_its_sidecar_hashes(tmp_path) -> None:
    # One read feeds both the check (pandas, sha256) and the polars frame the selector, trace and unseen_shapes read:
    # the frame is what polars reads from the file itself, dtypes included. (pl.from_pandas of the checked pandas
    # frame is not: the all-null `error` column comes back String, not Null.)
    import json
    import shutil
    from pathlib import Path

    from tunetable.errors import TuneTableError

    recording = Path(__file__).resolve().parents[1] / "data" / "recordings" / "h100_coverage_gemm_mma.parquet"
    checked = rank.read_checked_recording(path=recording)
    direct = pl.read_parquet(recording)
    assert checked.schema == direct.schema
    assert (checked.schema["error"], checked.schema["samples_ms"], checked.schema["M"]) == (
        pl.Null, pl.List(pl.Float64), pl.Int64)
    assert checked.equals(direct, null_equal=True) and checked.height == json.loads(
        recording.with_suffix(".json").read_text())["rows"]
    # The same rows written again are other bytes than the sidecar's sha256: refused, naming the file.
    copy = tmp_path / recording.name
    shutil.copy(recording.with_suffix(".json"), copy.with_suffix(".json"))
    direct.write_parquet(copy, compression="uncompressed")
    with pytest.raises(TuneTableError, match="does not match the .* its sidecar h100_coverage_gemm_mma.json") as error:
        rank.read_checked_recording(path=copy)
    assert str(copy) in str(error.value)
