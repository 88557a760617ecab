"""The shared table renderer: no value is ever split, in a pipe or on a narrow terminal."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from tunetable.console_table import ConsoleTable, fold, plan_layout, print_table, tokens

SPEC = "BLOCK_M=128/BLOCK_N=224/BLOCK_K=64/WARPS_M=2/WARPS_N=4/STAGES=4/SPLIT_K=1"
CHANGED = "BLOCK_M: 64 -> 128, STAGES: 3 -> 4"


def printed(table: ConsoleTable, *, columns: int | None, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``print_table`` writes to a pipe (not a terminal) with ``$COLUMNS`` set or unset."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    buffer = io.StringIO()
    print_table(Console(file=buffer), table)
    return buffer.getvalue()


def profile_like() -> ConsoleTable:
    table = ConsoleTable(title="gemm_mma: per shape")
    for name in ("shape", "entries", "best", "best_spec", "changed"):
        table.add_column(name, justify="right" if name in ("entries", "best") else "left")
    for m in (1, 4096):
        table.add_row(f"M={m}/N=4096/K=4096", 104, 0.0123, SPEC, CHANGED)
    return table


def test_a_pipe_without_columns_prints_each_row_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    out = printed(profile_like(), columns=None, monkeypatch=monkeypatch)
    rows = [line for line in out.splitlines() if "M=4096/N=4096/K=4096" in line]
    assert len(rows) == 1 and SPEC in rows[0] and CHANGED in rows[0] and "0.0123" in rows[0]
    assert out.splitlines()[0] == "gemm_mma: per shape"


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_a_narrow_width_folds_between_values_only(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    out = printed(profile_like(), columns=columns, monkeypatch=monkeypatch)
    assert "┃" in out, "still a table"
    assert max(len(line) for line in out.splitlines()) <= columns
    lines = out.splitlines()
    # every NAME=value pair of the spec and every word of the change list is printed whole, on one line
    for value in [*tokens(SPEC), *tokens(CHANGED), "M=4096/", "0.0123"]:
        assert any(value.strip() in line for line in lines), value
    assert not re.search(r"BLOCK_N=22(?!4)|BLOCK_M=1(?!28)", out)   # the broken `BLOCK_N=22` / `4`


def test_too_narrow_for_the_longest_value_switches_to_one_record_per_line(monkeypatch: pytest.MonkeyPatch) -> None:
    table = ConsoleTable(title="shards")
    table.add_column("file")
    table.add_column("status")
    table.add_row("results/raw/gemm_mma/0123456789abcdef/M4096_N4096_K4096.pkl", "ok")
    out = printed(table, columns=40, monkeypatch=monkeypatch)
    assert out.splitlines() == ["shards", "file=results/raw/gemm_mma/0123456789abcdef/M4096_N4096_K4096.pkl  status=ok"]


def test_cells_are_plain_text_never_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    table = ConsoleTable(title="[bold]title[/bold]")
    table.add_column("value")
    table.add_row("[red]x[/red]")
    out = printed(table, columns=None, monkeypatch=monkeypatch)
    assert "[bold]title[/bold]" in out and "[red]x[/red]" in out


def test_gaps_mark_rows_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    table = ConsoleTable()
    table.add_column("rank", justify="right")
    table.add_column("config_id")
    table.add_row(1, "c0000000001")
    table.add_gap(29_998)
    table.add_row(30_000, "c0000030000")
    out = printed(table, columns=None, monkeypatch=monkeypatch)
    assert "… 29,998 rows" in out
    narrow = printed(table, columns=12, monkeypatch=monkeypatch)
    assert "… 29,998 rows not shown" in narrow.splitlines()


def test_fold_and_layout_are_pure() -> None:
    assert fold("A=1/B=22/C=333", width=6) == "A=1/\nB=22/\nC=333"
    assert fold("one two, three", width=4) == "one\ntwo,\nthree"
    assert fold("1/2 is not a spec", width=3) == "1/2\nis\nnot\na\nspec"   # `/` splits only NAME=value pairs
    # whole items before words: a change `STAGES: 6 -> 7` stays on one line when it fits
    assert fold("BLOCK_M: 16 -> 64, STAGES: 6 -> 7", width=20) == "BLOCK_M: 16 -> 64,\nSTAGES: 6 -> 7"
    layout = plan_layout(headers=["a", "b"], cells=[["x" * 10, "y y y"]], width=None)
    assert layout.mode == "table" and layout.widths == (10, 5)
    assert plan_layout(headers=["a"], cells=[["x" * 10]], width=8).mode == "records"


def test_add_row_checks_the_cell_count() -> None:
    table = ConsoleTable()
    table.add_column("a")
    with pytest.raises(ValueError, match="row has 2 cells for 1 columns"):
        table.add_row(1, 2)


def test_every_cli_table_goes_through_the_one_renderer() -> None:
    """No module of the package builds a rich Table itself: tables print only through tunetable.console_table."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "pipeline"
    offenders = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                 if path.name != "console_table.py" and "rich.table" in path.read_text()]
    assert offenders == []
