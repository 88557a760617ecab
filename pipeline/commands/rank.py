"""``tunetable rank``: rank a table's raw result shards into parquet, CSV, Markdown and failures CSV."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress

from tunetable import rank as ranking
from tunetable import resultset
from tunetable.params import load_params, table_spec
from tunetable.paths import ranked as ranked_path

PROGRESS_MIN_FILES = 16
DEFAULT_PARAMS = Path("params.yaml")


def check_table(*, table: str, params_path: Path | None) -> None:
    """``table`` must be declared in params.yaml (unchecked only without --params and ./params.yaml)."""

    if params_path is None:
        if not DEFAULT_PARAMS.is_file():
            return
        params_path = DEFAULT_PARAMS
    table_spec(load_params(params_path), table, path=params_path)


def load_with_progress(*, paths: list[Path], console: Console, strict: bool = False,
                       keep_spec: bool = True) -> resultset.LoadReport:
    """load_files (``strict``: any unreadable file is an error) with a transient progress bar for many files."""

    if len(paths) < PROGRESS_MIN_FILES:
        return resultset.load_files(paths=paths, strict=strict, keep_spec=keep_spec)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("loading results", total=len(paths))
        return resultset.load_files(paths=paths, on_file=lambda _: progress.advance(task), strict=strict,
                                    keep_spec=keep_spec)


@click.command("rank")
@click.option("--table", required=True, help="Table name (as in params.yaml).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Ranked parquet (default results/ranked/<table>.parquet); .csv, .md, .failures.csv beside it.")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Settings file that must declare --table [default: ./params.yaml; not checked when it is absent]. "
                   "A --params that does not exist is an error.")
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=Path))
def command(table: str, out: Path | None, params_path: Path | None, shards: tuple[Path, ...]) -> None:
    """Rank every ok configuration per shape by median time (ties: config id), keeping any search columns."""

    check_table(table=table, params_path=params_path)
    console = Console(stderr=True, soft_wrap=True)
    # Every file must read (checksum verified for shards): a table is never ranked without one of its shards.
    report = load_with_progress(paths=list(shards), console=console, strict=True)
    frame = resultset.combine(results=report.results)
    parameters = resultset.union_names(groups=[r.parameters for r in report.results])
    table_data = ranking.rank_rows(rows=frame, parameters=parameters)
    target = out or ranked_path(table)
    written = ranking.write_ranked(table=table_data, out=target, name=table)
    console.print(f"ranked {table_data.ranked.height} ok rows, {table_data.failures.height} failed, "
                  f"from {len(shards)} files; wrote {', '.join(map(str, written))}", markup=False)
