"""One number format per kind of column (tunetable.numbers): times and ratios at kprofile's three decimals,
Kendall tau at four, on the terminal and in the CSV and Markdown files alike. Expected strings are written by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from result_rows import row, shard

from tunetable import rank
from tunetable.numbers import number_cell


def test_number_cell_fixed_decimals() -> None:
    assert [number_cell(v) for v in (0.5, 3.0, 0.0117464, 786.4, 12, None, float("nan"), "c1")] == [
        "0.500", "3.000", "0.012", "786.400", "12", "", "nan", "c1"]
    assert [number_cell(v, decimals=4) for v in (0.019, -0.0283, -0.02635, 0.2148, 1.0)] == [
        "0.0190", "-0.0283", "-0.0263", "0.2148", "1.0000"]   # -0.02635 is -0.026349999... in binary


def test_markdown_of_a_ranked_table_uses_three_decimals() -> None:
    frame = pl.DataFrame({"config_id": ["a|b", "c"], "median_ms": [0.5, 3.0], "ratio": [1.0, 6.0], "M": [1, 8]})
    assert rank.markdown(frame=frame, title="t") == (
        "# t\n\n| config_id | median_ms | ratio | M |\n|---|---|---|---|\n"
        "| a\\|b | 0.500 | 1.000 | 1 |\n| c | 3.000 | 6.000 | 8 |\n")


def profile(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunetable", "profile", *args], capture_output=True, text=True,
                          cwd=cwd, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}, check=False)


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, Path]:
    baseline = shard(tmp_path / "base.pkl", [row(m=1, config="ca", median=2.0), row(m=1, config="cb", median=0.5),
                                              row(m=1, config="cc", median=3.0), row(m=8, config="ca", median=0.8)])
    current = shard(tmp_path / "cur.pkl", [row(m=1, config="ca", median=1.0), row(m=1, config="cb", median=0.25),
                                            row(m=8, config="ca", median=0.8)])
    return baseline, current


def cells_of(stdout: str, first: str) -> list[str]:
    """The cells of the printed table row whose first cell is ``first`` (rich's box lines split on │)."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row starting {first!r} in:\n{stdout}")


def test_profile_summary_prints_best_and_worst_alike(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    done = profile(tmp_path, str(shards[0]), "-m", "met", "-p", "[M]", "--csv", "--out-dir", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    # kprofile's summary view: entries, best_idx, worst, best, worst/best, ...: best 0.500 beside worst 3.000.
    assert cells_of(done.stdout, "3")[2:5] == ["3.000", "0.500", "6.000"]
    summary = next((tmp_path / "o").glob("*summary*.csv"), None) or next((tmp_path / "o").glob("*per_shape*.csv"))
    text = summary.read_text()
    assert ",3.000,0.500,6.000," in text and ",0.5," not in text


def test_profile_diff_prints_and_writes_three_decimals(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    done = profile(tmp_path, *map(str, shards), "-d", "-m", "met", "-p", "[M]", "--out-dir", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    # shape, metric, best_tuning_metric, baseline_metric, ratio: 0.250 and 0.500 where kprofile's diff gave 0.25, 0.5.
    assert cells_of(done.stdout, "M=1")[2:5] == ["0.250", "0.500", "0.500"]
    assert cells_of(done.stdout, "M=8")[2:5] == ["0.800", "0.800", "1.000"]
    lines = (tmp_path / "o" / "diff_1_cur.csv").read_text().splitlines()
    assert lines[1:] == ['M=1,met (ms),0.250,0.500,0.500,""', 'M=8,met (ms),0.800,0.800,1.000,""']


def test_profile_correlation_at_four_decimals(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    done = profile(tmp_path, str(shards[0]), "-c", "-m", "met", "--out-dir", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    matrix = (tmp_path / "o" / "correlation.csv").read_text().splitlines()
    values = [cell for line in matrix[1:] for cell in line.split(",")[1:] if cell]
    assert values and all(v == "NaN" or len(v.split(".")[1]) == 4 for v in values), matrix
    assert cells_of(done.stdout, "met (ms)")[-1] == "1.0000"


def test_suggest_prints_microseconds_at_three_decimals() -> None:
    from tunetable.commands.suggest import _us

    assert [_us(v) for v in (1.1746e-5, 1.2345e-3, 5e-7, None)] == ["11.746", "1234.500", "0.500", "-"]


def test_trace_cells_use_the_same_format() -> None:
    from tunetable.commands.trace import _cell

    assert [_cell(v) for v in (0.0117464, 12.45, 1755.0, 64, None, "c1")] == [
        "0.012", "12.450", "1755.000", "64", "-", "c1"]


def test_kt_times_use_the_same_format() -> None:
    from tunetable.commands.kt import _ms

    assert [_ms(v) for v in (0.0117464, 5.0, float("nan"), None)] == ["0.012", "5.000", "-", "-"]
