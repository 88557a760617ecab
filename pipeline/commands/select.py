"""``tunetable select``: winners of a ranked table into manifests/<table>.yaml, a cross-family
dispatch list into manifests/<dispatch>.yaml, or the shape selector into its data file
(kernels/data/<selector>.json) and manifests/<selector>.yaml (all byte-stable)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress

from tunetable import paths
from tunetable.atomic import atomic_write_text
from tunetable.device_tables import split_device_table
from tunetable.errors import TuneTableError
from tunetable.manifest import load_manifest_document
from tunetable.params import dispatch_spec, load_params, selector_spec, table_spec
from tunetable.rank import read_ranked
from tunetable.select_winners import DEFAULT_TIE_TOLERANCE, TableResults, build_dispatch_manifest, build_manifest
from tunetable.selector_measurements import coverage_absent_line, selector_tables
from tunetable.selector_manifest import fit_selector_files

RANKED_REQUIRED = ("M", "N", "K", "config_id", "median_ms", "status")
DEFAULT_PARAMS = Path("params.yaml")


def _table_settings(*, params_path: Path | None, table: str) -> tuple[str, float]:
    """The table's family and select.tie_tolerance; built-in defaults only without --params and ./params.yaml."""

    if params_path is None:
        if not DEFAULT_PARAMS.is_file():
            return table, DEFAULT_TIE_TOLERANCE
        params_path = DEFAULT_PARAMS
    params = load_params(params_path)  # a --params that does not exist is an error naming it
    spec = table_spec(params, table, path=params_path)
    return spec.family, float((params.get("select") or {}).get("tie_tolerance", DEFAULT_TIE_TOLERANCE))


def dispatch_ranked_paths(values: tuple[str, ...], *, tables: tuple[str, ...]) -> dict[str, Path]:
    """``--ranked TABLE=PATH`` values for a dispatch list; tables not named read results/ranked/<table>.parquet."""

    given: dict[str, Path] = {}
    for index, value in enumerate(values):
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise TuneTableError(f"expected TABLE=PATH with --dispatch, got '{value}'", where=f"--ranked[{index}]")
        if name not in tables:
            raise TuneTableError(f"table '{name}' is not in this dispatch list ({', '.join(tables)})",
                                 where=f"--ranked[{index}]")
        given[name] = Path(path)
    return {table: given.get(table, paths.ranked(table)) for table in tables}


def _table_results(*, params: dict, params_path: Path, table: str, ranked_path: Path):
    """A table's manifest (from params.yaml's codegen.manifest) and its ranked rows."""

    spec = table_spec(params, table, path=params_path)
    manifest = load_manifest_document(params_path.parent / spec.codegen.manifest)
    if not manifest.params:
        raise TuneTableError(f"table {table} has no selected entries yet: select it first",
                             path=spec.codegen.manifest)
    ranked = read_ranked(path=ranked_path, required=(*RANKED_REQUIRED, "cublas_ms"))
    # A device table's entries name its base table (what the runtime looks up on that device).
    return TableResults(name=spec.base, entries=tuple(manifest.params), provenance=dict(manifest.provenance or {}),
                        ranked=ranked)


def _select_dispatch(*, name: str, ranked_values: tuple[str, ...], out: Path, tie_tolerance: float | None,
                     params_path: Path) -> str:
    """The dispatch manifest text of dispatch list ``name``."""

    params = load_params(params_path)
    spec = dispatch_spec(params, name, path=params_path)
    tolerance = spec.tie_tolerance if tie_tolerance is None else tie_tolerance
    ranked = dispatch_ranked_paths(ranked_values, tables=spec.tables)
    tables = [_table_results(params=params, params_path=params_path, table=t, ranked_path=ranked[t])
              for t in spec.tables]
    return build_dispatch_manifest(name=name, tables=tables, tolerance=tolerance)


CANDIDATE_LINE = '\n{"M":'   # how each candidate's line of a selector data file begins


def _select_selector(*, name: str, params_path: Path, console: Console) -> tuple[str, Path, str]:
    """The selector manifest text of selector ``name``, its data file's path and text, fitted on its tables'
    recordings (with their device's coverage recordings: ``selector_tables``)."""

    params = load_params(params_path)
    spec = selector_spec(params, name, path=params_path)
    root = params_path.parent
    found = selector_tables(root=root, specs=[table_spec(params, t, path=params_path) for t in spec.tables],
                            coverage=spec.coverage)
    if found.coverage_absent:
        console.print(coverage_absent_line(name=name, paths=found.coverage_absent), markup=False)
    tables = list(found.tables)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"selector {name}: shortlists per M range", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        # A device's selector keeps the base name inside its files (what the runtime asks that device for).
        text, data = fit_selector_files(name=split_device_table(name)[0], tables=tables, data_path=spec.data,
                                        candidates=spec.candidates,
                                        progress=advance)
    return text, root / spec.data, data


@click.command("select")
@click.option("--table", default=None, help="Table name (as in params.yaml).")
@click.option("--dispatch", "dispatch", default=None,
              help="Dispatch list (params.yaml dispatch:): per shape, which table serves it.")
@click.option("--selector", "selector", default=None,
              help="Shape selector (params.yaml selector:): the choice for shapes no table holds, built from the "
                   "tables' recordings.")
@click.option("--ranked", "ranked_values", multiple=True,
              help="With --table: the ranked parquet. With --dispatch: TABLE=PATH (repeatable; default "
                   "results/ranked/<table>.parquet).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Manifest YAML to write.")
@click.option("--tie-tolerance", type=float, default=None,
              help="Relative near-tie tolerance (default: params.yaml select.tie_tolerance, or the dispatch "
                   "list's tie_tolerance).")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Settings file [default: ./params.yaml; with --table, built-in defaults when it is absent]. "
                   "A --params that does not exist is an error.")
def command(table: str | None, dispatch: str | None, selector: str | None, ranked_values: tuple[str, ...],
            out: Path, tie_tolerance: float | None, params_path: Path | None) -> None:
    """Per (N, K), the fastest ok config per M range, near-ties going to the config winning more neighbours.

    With --dispatch: per shape, the table whose selected winner has the highest speedup over the
    cuBLAS baseline of its own shard (cuBLAS median / winner median); ties go to the table listed first.
    With --selector: per M range, the shortlist the runtime scores for shapes no table holds.
    """

    console = Console(stderr=True, soft_wrap=True)
    if sum(value is not None for value in (table, dispatch, selector)) != 1:
        raise TuneTableError("give --table, --dispatch or --selector (exactly one)", where="select")
    if tie_tolerance is not None and tie_tolerance < 0:
        raise TuneTableError(f"tie tolerance must be >= 0, got {tie_tolerance}", where="--tie-tolerance")
    if selector is not None:
        if ranked_values or tie_tolerance is not None:
            raise TuneTableError("--selector reads the tables' recordings: no --ranked or --tie-tolerance",
                                 where="--selector")
        text, data_path, data = _select_selector(name=selector, params_path=Path(params_path or DEFAULT_PARAMS),
                                                 console=console)
        # The data file first: a manifest never names a data file that is not there (codegen checks the sha256).
        atomic_write_text(data_path, data)
        console.print(f"wrote {data_path} ({data.count(CANDIDATE_LINE)} candidates)", markup=False)
    elif dispatch is not None:
        text = _select_dispatch(name=dispatch, ranked_values=ranked_values, out=out, tie_tolerance=tie_tolerance,
                                params_path=params_path or DEFAULT_PARAMS)
        if "params:\n  - " not in text:
            raise TuneTableError("no shape has a verified winner and a cuBLAS row in every table", where="--dispatch")
    else:
        if len(ranked_values) != 1:
            raise TuneTableError(f"give exactly one ranked parquet with --table, got {len(ranked_values)}",
                                 where="--ranked")
        ranked_path = Path(ranked_values[0])
        kernel, tolerance = _table_settings(params_path=params_path, table=table)
        if tie_tolerance is not None:
            tolerance = tie_tolerance
        ranked = read_ranked(path=ranked_path, required=RANKED_REQUIRED)
        text = build_manifest(table=table, kernel=kernel, ranked=ranked, tolerance=tolerance)
        if "params:\n  - " not in text:
            raise TuneTableError("no ok configuration to select", path=ranked_path)
    atomic_write_text(out, text)
    counted = ("names the data file: its sha256, the recordings" if selector
               else f"{text.count('<<: *defaults')} entries")
    console.print(f"wrote {out} ({counted})", markup=False)
