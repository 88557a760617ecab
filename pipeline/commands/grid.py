"""``tunetable grid``: expand a table's grid, say what was pruned and why, write results/grid/T.json."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click
from rich.console import Console

from tunetable import paths
from tunetable.atomic import atomic_write_text
from tunetable.console_table import ConsoleTable, print_table
from tunetable.grid import GridResult, TableGrid, grid_document, grid_json_text, load_table_grid
from tunetable.keys import kernel_source_hash

EPILOG = """\b
Examples:
  tunetable grid --table gemm_mma
  tunetable grid --table gemm_mma --param STAGES=2,3 --filter BLOCK_M=128 --dry-run
  tunetable grid --table gemm_mma --all        # every pruned (and, with --dry-run, kept) configuration
"""
# Rows of a configuration list printed without --all: a grid of 100 k configurations stays readable
# (the reasons are counted in full; every configuration is in the grid JSON).
SHOWN = 20


def counts_table(result: GridResult) -> ConsoleTable:
    """Counts at each step of the expansion."""
    table = ConsoleTable(title=f"grid {result.table}")
    table.add_column("step")
    table.add_column("configurations", justify="right")
    counts = result.counts
    for step, value in (
        ("expanded (groups, duplicates removed)", counts.expanded),
        ("after --filter", counts.after_filters),
        ("after rules", counts.after_rules),
        ("after device limits", counts.after_pruning),
    ):
        table.add_row(step, str(value))
    return table


def reasons_table(result: GridResult) -> ConsoleTable:
    """How many configurations each reason pruned, most first."""
    counts = Counter((item.stage, item.reason) for item in result.pruned)
    table = ConsoleTable(title=f"pruned ({len(result.pruned)}) by reason")
    table.add_column("configurations", justify="right")
    table.add_column("stage")
    table.add_column("reason")
    for (stage, reason), count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        table.add_row(str(count), stage, reason)
    return table


def pruned_table(result: GridResult, *, shown: int | None) -> ConsoleTable:
    """The pruned configurations with their reasons: the first ``shown`` (None: all)."""
    rows = result.pruned if shown is None else result.pruned[:shown]
    table = ConsoleTable(title=f"pruned configurations ({len(rows)} of {len(result.pruned)})")
    table.add_column("config id")
    table.add_column("stage")
    table.add_column("configuration")
    table.add_column("reason")
    for item in rows:
        table.add_row(item.config.id, item.stage, item.config.label(), item.reason)
    table.add_gap(len(result.pruned) - len(rows))
    return table


def dry_run_table(grid: TableGrid, *, shown: int | None) -> ConsoleTable:
    """What would be compiled (the first ``shown`` kept configs; None: all) and benchmarked (configs x shapes)."""
    shapes = grid.spec.shapes()
    kept = grid.result.kept
    rows = kept if shown is None else kept[:shown]
    table = ConsoleTable(title=f"dry run: would compile {len(kept)} and benchmark each on {len(shapes)} shapes")
    table.add_column("config id")
    table.add_column("group")
    table.add_column("configuration")
    table.add_column("derived")
    for config in rows:
        derived = " ".join(f"{name}={value}" for name, value in config.derived)
        table.add_row(config.id, grid.result.group_of.get(config.id, ""), config.label(), derived)
    table.add_gap(len(kept) - len(rows))
    return table


@click.command(epilog=EPILOG)
@click.option("--table", "table_name", required=True, help="Table declared under 'tables:' in params.yaml.")
@click.option("--params", "params_path", default="params.yaml", show_default=True, type=click.Path(dir_okay=False))
@click.option("--param", "param_options", multiple=True, metavar="NAME=V1,V2",
              help="Replace NAME's value list in every group that has it (repeatable).")
@click.option("--filter", "filter_options", multiple=True, metavar="NAME=VALUE",
              help="Keep configurations with NAME=VALUE (values of one name OR'ed, names AND'ed).")
@click.option("--dry-run", is_flag=True, help="List what would be compiled and benchmarked; write nothing.")
@click.option("--all", "show_all", is_flag=True,
              help=f"Print every pruned (and, with --dry-run, kept) configuration, not the first {SHOWN}.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Grid JSON to write [default: results/grid/<table>.json].")
def command(
    table_name: str, params_path: str, param_options: tuple[str, ...], filter_options: tuple[str, ...], dry_run: bool,
    show_all: bool, out: str | None
) -> None:
    """Expand a table's grid: counts before and after rules and pruning, and why each pruned one went.

    The pruned configurations are counted per reason; the first 20 are listed (--all lists every one,
    and the grid JSON holds them all).
    """
    console = Console()
    grid = load_table_grid(
        params_path=params_path, table=table_name, param_options=param_options, filter_options=filter_options
    )
    shown = None if show_all else SHOWN
    print_table(console, counts_table(grid.result))
    if grid.result.pruned:
        print_table(console, reasons_table(grid.result))
        print_table(console, pruned_table(grid.result, shown=shown))
    if dry_run:
        print_table(console, dry_run_table(grid, shown=shown))
        kept, shapes = len(grid.result.kept), len(grid.spec.shapes())
        console.print(
            f"dry run: {kept} configurations to compile, {kept} x {shapes} shapes = {kept * shapes} benchmark runs",
            soft_wrap=True,
        )
        return
    kernel_hash = kernel_source_hash(grid.kernel_path) if grid.kernel_path.is_file() else None
    target = Path(out) if out else paths.grid_file(table_name)
    atomic_write_text(target, grid_json_text(grid_document(grid.result, kernel_hash=kernel_hash)))
    console.print(f"wrote {target} ({len(grid.result.kept)} configurations, {len(grid.result.pruned)} pruned with "
                  "their reasons)", soft_wrap=True)
