"""``tunetable trace``: from a generated table entry down to the measurements behind it."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

EPILOG = """\b
Examples:
  tunetable trace gemm_mma 3                     entry 3 of table gemm_mma
  tunetable trace kernels/tuning_configs.py:57   the entry holding line 57
"""

SHARD_COLUMNS = ("status", "median_ms", "sm_clock_mhz", "power_w", "device", "driver", "backend", "time", "git_rev",
                 "measured_key")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@click.command("trace", epilog=EPILOG)
@click.argument("what")
@click.argument("index", required=False, type=int)
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True)
def command(what: str, index: int | None, params_path: Path) -> None:
    """WHAT is a TABLE (then INDEX) or FILE:LINE inside a generated region."""
    from pipeline import trace as tracing
    from pipeline.errors import TuneTableError
    from pipeline.params import load_params, table_spec, table_specs

    params = load_params(params_path)
    root = params_path.resolve().parent
    location = tracing.parse_location(what)
    if location is not None and index is None:
        table, index = tracing.entry_at_line(root=root, specs=table_specs(params, path=params_path),
                                             file=location[0], line=location[1])
    elif index is None:
        raise TuneTableError("give TABLE INDEX or FILE:LINE", where="trace")
    else:
        table = what
    result = tracing.trace(root=root, spec=table_spec(params, table, path=params_path), index=index)
    console = Console()
    g = result.generated
    console.print(f"[bold]{result.table}[{g.index}][/bold] {result.target}:{g.first_line}-{g.last_line}")
    console.print(g.text, markup=False, highlight=False)
    entry = result.entry
    console.print(f"\n[bold]manifest[/bold] {result.manifest} params[{entry.index}]: "
                  f"M [{entry.m}, {entry.m_end}) N={entry.n} K={entry.k} config {entry.config_id}")
    values = Table(show_header=False, box=None)
    for key, value in entry.values.items():
        values.add_row(str(key), _cell(value))
    console.print(values)
    if result.provenance:
        console.print("provenance: " + ", ".join(f"{k}={v}" for k, v in result.provenance.items()), markup=False)
    console.print(f"\n[bold]ranked[/bold] {result.ranked_path}")
    if not result.ranked:
        console.print("  (no ranked table in the working tree: run `snakemake rank_all`)")
    for at_m in result.ranked:
        rows = Table(title=f"M={at_m.m} N={entry.n} K={entry.k}: entry's config ranks {at_m.picked_rank or '-'}",
                     title_justify="left")
        columns = list(at_m.rows[0]) if at_m.rows else ["config_id"]
        for column in columns:
            rows.add_column(column, justify="left" if column == "config_id" else "right")
        for row in at_m.rows:
            style = "bold" if row.get("config_id") == entry.config_id else None
            rows.add_row(*(_cell(row.get(c)) for c in columns), style=style)
        console.print(rows)
    folder = Path(result.shards[0].path).parent if result.shards else None
    console.print(f"\n[bold]raw shards[/bold] content key {result.content_key or '(unknown)'}"
                  + (f" in {folder}/" if folder else ""))
    shards = Table()
    shards.add_column("file", no_wrap=True)
    for column in SHARD_COLUMNS:
        shards.add_column(column)
    for view in result.shards:
        cells = [_cell(view.row.get(c)) for c in SHARD_COLUMNS] if view.found else ["(missing: dvc pull)"] + [""] * (
            len(SHARD_COLUMNS) - 1)
        shards.add_row(Path(view.path).name, *cells)
    console.print(shards)
