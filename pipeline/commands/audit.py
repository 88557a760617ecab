"""``tunetable audit [REV_A] [REV_B]``: why a tuned table changed between two revisions (a shape selector:
what it now chooses differently)."""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.console import Console

from tunetable import plots
from tunetable.atomic import atomic_write_bytes
from tunetable.audit import TableAudit, audit
from tunetable.console_table import ConsoleTable, print_table
from tunetable.numbers import number_cell
from tunetable.selector_review import LISTED

EPILOG = """\b
Examples:
  tunetable audit                  HEAD vs the working tree
  tunetable audit HEAD~1 HEAD      the last commit
  tunetable audit v1 v2 --all-shapes --table gemm_mma
  tunetable audit HEAD~1 HEAD --all-shapes --plot results/audit   per table: audit_<table>.png
"""


def _us(ms: float | None) -> str:
    """Milliseconds as microseconds at the one format of measured values (tunetable.numbers), '-' for None."""
    return "-" if ms is None else number_cell(ms * 1000)


def _times(value: float | None) -> str:
    """A speedup as '1.234x', '-' for None."""
    return "-" if value is None else f"{value:.3f}x"


def _value(value: object) -> str:
    """A params value as text, '(absent)' for None."""
    return "(absent)" if value is None else str(value)


def _pick(prediction) -> str:
    """A selector prediction as 'table config (µs)', '-' for None."""
    if prediction is None:
        return "-"
    return f"{prediction.candidate.table} {prediction.candidate.config_id} ({number_cell(prediction.seconds * 1e6)} µs)"


def _cells_table(title: str, cells, *, rev_a: str, rev_b: str) -> ConsoleTable:
    """Selector cells: shape, M range, the pick and predicted time at each side, predicted speedup."""
    table = ConsoleTable(title=title)
    for column in ("M", "N", "K", "M range", f"pick {rev_a}", f"pick {rev_b}", f"predicted speedup vs {rev_a}"):
        table.add_column(column, justify="left" if column.startswith(("pick", "M range")) else "right")
    for cell in cells:
        m, n, k = cell.shape
        table.add_row(str(m), str(n), str(k), f"[{cell.span[0]}, {cell.span[1]})", _pick(cell.before),
                      _pick(cell.after), _times(cell.ratio))
    return table


def _print_selector_review(console: Console, review, *, rev_a: str, rev_b: str) -> None:
    """A shape selector's change as a short review: counts, the recordings behind it, the first cells of each kind."""
    console.print(f"\n[bold]{review.name}[/bold] (shape selector): a fitted model, reviewed by what it chooses")
    for side in (review.before, review.after):
        if side.gap:
            console.print(f"not compared: {side.gap}", markup=False, highlight=False, style="yellow")
    if review.before.gap or review.after.gap:
        return
    console.print(f"{review.after.source}: {len(review.before.candidates)} -> {len(review.after.candidates)} "
                  f"candidates; {review.cells} cells (each M range's middle M x the (N, K) lattice): "
                  f"{len(review.choices)} choices changed, {len(review.moved)} predictions moved by more than "
                  f"{review.threshold:.0%}", markup=False, highlight=False)
    provenance = dict(review.after.provenance or {})
    fitted = [f"{provenance[key]} (data hash {provenance.get(key[:-len('recording')] + 'data_hash', '?')})"
              for key in provenance if key.endswith("_recording")]
    console.print(f"  fitted on ({rev_b}): {'; '.join(fitted) or 'unknown'}", markup=False, highlight=False)
    for key, before, after in review.provenance:
        console.print(f"  provenance {key}: {_value(before)} -> {_value(after)}", markup=False, highlight=False)
    for cells, what in ((review.choices, "choice changed"), (review.moved, "predicted time moved")):
        ranked = sorted(cells, key=lambda c: -abs(math.log(c.ratio)) if c.ratio else 0.0)[:LISTED]
        if ranked:
            print_table(console, _cells_table(f"{review.name}: {what} ({len(ranked)} of {len(cells)} cells, "
                                              "largest predicted change first)", ranked, rev_a=rev_a, rev_b=rev_b))


def _entry_text(values: object) -> str:
    """A manifest entry as 'M[M, M_END) N=.. K=.. CONFIG_ID', '-' when it is not a mapping."""
    if not isinstance(values, dict):
        return "-"
    shape = f"M[{values.get('M')}, {values.get('M_END')}) N={values.get('N')} K={values.get('K')}"
    return f"{shape} {values.get('CONFIG_ID')}"


def _print_table_audit(console: Console, item, *, rev_a: str, rev_b: str) -> None:
    """One table's (dispatch list's) changes: its entries, then per shape its pick and times at each side."""
    if item.dispatch:
        console.print(f"\n[bold]{item.table}[/bold] (dispatch list)")
    else:
        console.print(f"\n[bold]{item.table}[/bold]: raw results {item.key_before or '?'} -> "
                      f"{item.key_after or '?'}")
    if item.device:
        console.print(f"{item.table}: measured on device {item.device}", markup=False, highlight=False)
    if item.entries:
        entries = ConsoleTable(title=f"{item.table}: manifest entries changed")
        for column in ("change", "index", "entry"):
            entries.add_column(column)
        for change in item.entries:
            side = rev_a if change.change == "removed" else rev_b
            style = "red" if change.change == "removed" else "green"
            entries.add_row(f"{'-' if change.change == 'removed' else '+'} {change.change}",
                            f"{change.index} ({side})", _entry_text(change.values), style=style)
        print_table(console, entries)
    else:
        console.print(f"{item.table}: manifest entries unchanged")
    title = f"{item.table}: {len(item.shapes)} of {item.shapes_total} shapes changed"
    shapes = ConsoleTable(title=title)
    if item.dispatch:
        columns = ("M", "N", "K", f"table {rev_a}", f"table {rev_b}", f"config {rev_a}",
                   f"config {rev_b}", f"speedup_vs_cublas {rev_a}",
                   f"speedup_vs_cublas {rev_b}")
    else:
        columns = ("M", "N", "K", f"config {rev_a}", f"config {rev_b}", f"µs {rev_a}",
                   f"µs {rev_b}", f"speedup vs {rev_a}")
    for column in columns:
        shapes.add_column(column, justify="left" if column.startswith(("config", "table")) else "right")
    for shape in item.shapes:
        if item.dispatch:
            shapes.add_row(str(shape.m), str(shape.n), str(shape.k), shape.table_before or "-",
                           shape.table_after or "-", shape.config_before or "-", shape.config_after or "-",
                           _times(shape.speedup_before), _times(shape.speedup_after))
        else:
            shapes.add_row(str(shape.m), str(shape.n), str(shape.k), shape.config_before or "-",
                           shape.config_after or "-", _us(shape.ms_before), _us(shape.ms_after),
                           _times(shape.speedup))
    if item.shapes:
        print_table(console, shapes)
    else:
        console.print(title)
    for line in item.sources:
        console.print(f"source: {line}", markup=False, highlight=False)
    for line in item.gaps:
        console.print(f"not compared: {line}", markup=False, highlight=False, style="yellow")


@click.command("audit", epilog=EPILOG)
@click.argument("rev_a", required=False, default="HEAD")
@click.argument("rev_b", required=False, default=None)
@click.option("--table", "tables", multiple=True,
              help="Only this table, dispatch list or selector (repeatable; default: every one).")
@click.option("--all-shapes", is_flag=True, help="List every shape, not only those whose pick or time changed.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Repository root.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also draw each table's change as FOLDER/audit_<table>.png (per (N, K), against M; every shape "
                   "with --all-shapes).")
def command(rev_a: str, rev_b: str | None, tables: tuple[str, ...], all_shapes: bool, root: Path,
            plot_dir: Path | None) -> None:
    """Params changes (the cause), then per table the entries and per-shape times that changed (the effect).

    Times come from the shards on disk, else DVC (cache, then remote), else the table's recording in
    git when it holds the rows the manifest was selected from; what cannot be compared is said in a
    `not compared:` line with why. `speedup vs REV_A` is the time at REV_A / the time at REV_B.
    """

    result = audit(root=root.resolve(), rev_a=rev_a, rev_b=rev_b, tables=tables, all_shapes=all_shapes)
    console = Console()
    console.print(f"[bold]tunetable audit[/bold]: {result.rev_a} -> {result.rev_b}")
    params = ConsoleTable(title="params.yaml changes")
    for column in ("key", result.rev_a, result.rev_b):
        params.add_column(column)
    for change in result.params:
        params.add_row(change.key, _value(change.before), _value(change.after))
    if result.params:
        print_table(console, params)
    else:
        console.print("params.yaml: no changes")
    for item in result.tables:
        _print_table_audit(console, item, rev_a=result.rev_a, rev_b=result.rev_b)
        if plot_dir is not None:
            _write_plot(console, plot_dir=plot_dir, item=item, rev_a=result.rev_a, rev_b=result.rev_b)
    for review in result.selectors:
        _print_selector_review(console, review, rev_a=result.rev_a, rev_b=result.rev_b)


def _write_plot(console: Console, *, plot_dir: Path, item: TableAudit, rev_a: str, rev_b: str) -> None:
    """The table's before/after PNG under ``plot_dir`` (tunetable.plots), or why there is none."""
    png = plots.audit_png(item=item, rev_a=rev_a, rev_b=rev_b)
    if png is None:
        console.print(f"no plot for {item.table}: no shape changed (--all-shapes plots every one)", markup=False,
                      highlight=False)
        return
    target = plot_dir / f"audit_{item.table}.png"
    atomic_write_bytes(target, png)
    console.print(f"wrote {target}", markup=False, highlight=False)
