"""``tunetable metrics``: a tuned table's (or dispatch list's) metrics JSON, plot CSV and PNG (dvc metrics / plots)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from tunetable.atomic import atomic_write_all
from tunetable.errors import TuneTableError
from tunetable.manifest import load_ranges
import polars as pl
from tunetable import metrics, paths, plots
from tunetable.commands.select import dispatch_ranked_paths
from tunetable.device_tables import split_device_table
from tunetable.params import device_specs, dispatch_spec, load_params, primary_device, table_spec
from tunetable.rank import failures_path, read_ranked

OUT = click.Path(dir_okay=False, path_type=Path)


def _read_frames(ranked_path: Path):
    """(ranked ok rows, failures) as polars frames; failures may be absent (no failures written)."""


    ranked = read_ranked(path=ranked_path)
    failures_file = failures_path(out=ranked_path)
    failures = pl.read_csv(failures_file, infer_schema_length=0) if failures_file.is_file() else None
    return ranked, failures


def _table_outputs(*, table: str, params_path: Path, manifest_path: Path | None, ranked_values: tuple[str, ...],
                   shards: tuple[Path, ...]) -> tuple[dict, list, tuple[str, ...]]:
    """A table's metrics mapping, per-shape results and plot columns."""

    spec = table_spec(load_params(params_path), table, path=params_path)
    if len(ranked_values) > 1:
        raise TuneTableError(f"give one ranked parquet with --table, got {len(ranked_values)}", where="--ranked")
    ranked_path = Path(ranked_values[0]) if ranked_values else paths.ranked(table)
    content_key = metrics.shards_key(shards=shards, table=table)
    provenance, entries = load_ranges(manifest_path or Path(spec.codegen.manifest))
    ranked, failures = _read_frames(ranked_path)
    results = metrics.shape_results(entries=entries, ranked=ranked, shapes=spec.shapes())
    summary = metrics.table_metrics(
        table=table, results=results, entries=len(entries), failures=metrics.failure_counts(failures),
        content_key=content_key, provenance=provenance,
    )
    return summary, results, metrics.PLOT_COLUMNS


def _dispatch_outputs(*, name: str, params_path: Path, manifest_path: Path | None, ranked_values: tuple[str, ...],
                      shards: tuple[Path, ...]) -> tuple[dict, list, tuple[str, ...]]:
    """A dispatch list's metrics mapping, per-shape results and plot columns."""

    params = load_params(params_path)
    spec = dispatch_spec(params, name, path=params_path)
    ranked_paths = dispatch_ranked_paths(ranked_values, tables=spec.tables)
    # Keyed by base table: a device's dispatch entries name the base tables (gemm_mma, not gemm_mma.h100).
    keys = {split_device_table(table)[0]: metrics.shards_key(
        shards=[s for s in shards if s.parent.parent.name == table], table=table) for table in spec.tables}
    provenance, entries = load_ranges(manifest_path or Path(spec.codegen.manifest))
    ranked = {split_device_table(table)[0]: read_ranked(path=ranked_paths[table]) for table in spec.tables}
    shapes = list(dict.fromkeys(shape for table in spec.tables
                                for shape in table_spec(params, table, path=params_path).shapes()))
    results = metrics.dispatch_shape_results(entries=entries, ranked=ranked, shapes=shapes)
    summary = metrics.dispatch_metrics(name=name, results=results, entries=len(entries), content_keys=keys,
                                       provenance=provenance)
    return summary, results, metrics.DISPATCH_PLOT_COLUMNS


@click.command("metrics")
@click.option("--table", default=None, help="Table name (as in params.yaml).")
@click.option("--dispatch", "dispatch", default=None, help="Dispatch list name (params.yaml dispatch:).")
@click.option("--manifest", "manifest_path", type=OUT, default=None,
              help="Manifest [default: the table's or list's codegen.manifest, manifests/<name>.yaml].")
@click.option("--ranked", "ranked_values", multiple=True,
              help="With --table: the ranked parquet [default: results/ranked/<table>.parquet]. With --dispatch: "
                   "TABLE=PATH (repeatable; default results/ranked/<table>.parquet).")
@click.option("--json", "json_path", type=OUT, default=None,
              help="Metrics JSON [default: results/metrics/<name>.json].")
@click.option("--csv", "csv_path", type=OUT, default=None, help="Plot CSV [default: results/plots/<name>.csv].")
@click.option("--png", "png_path", type=OUT, default=None, help="Plot PNG [default: results/plots/<name>.png].")
@click.option("--params", "params_path", type=OUT, default=Path("params.yaml"), show_default=True)
# SHARDS is checked in shards_key (after the table), so a missing one is one error line, not click's usage.
@click.argument("shards", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
def command(table: str | None, dispatch: str | None, manifest_path: Path | None, ranked_values: tuple[str, ...],
            json_path: Path | None, csv_path: Path | None, png_path: Path | None, params_path: Path,
            shards: tuple[Path, ...]) -> None:
    """Per shape, the tuned table's TFLOP/s and speedup over cuBLAS; geomeans, coverage, entries, failures.

    SHARDS (at least one per table) are the raw shards behind the ranked table(s): their content key
    is recorded in the metrics, so that `tunetable audit` and `trace` find them at any revision.
    Without SHARDS the command refuses and writes nothing (it never records an empty or guessed key).
    With --dispatch the list's entry names the table serving each shape, whose own rows give its time
    and the cuBLAS median of the same shard. The JSON, CSV and PNG land together or not at all.
    """

    if (table is None) == (dispatch is None):
        raise TuneTableError("give --table or --dispatch (exactly one)", where="metrics")
    name = str(table or dispatch)
    options = {"params_path": params_path, "manifest_path": manifest_path, "ranked_values": ranked_values,
               "shards": shards}
    summary, results, columns = (_table_outputs(table=name, **options) if table is not None
                                 else _dispatch_outputs(name=name, **options))
    json_path = json_path or paths.metrics(name)
    csv_path = csv_path or paths.plot_data(name)
    png_path = png_path or paths.plot_data(name).with_suffix(".png")
    # Rendered first, then written together: a failure anywhere leaves all three old files as they were.
    atomic_write_all(outputs={
        json_path: metrics.metrics_json(summary).encode("utf-8"),
        csv_path: metrics.csv_text(metrics.plot_rows(results), columns=columns).encode("utf-8"),
        png_path: metrics.plot_png(table=name, results=results, roofline=_roofline(params_path, name)),
    })
    Console(stderr=True).print(
        f"{name}: {summary['shapes_covered']}/{summary['shapes']} shapes covered, "
        f"geomean {summary['geomean_tflops']} TFLOP/s, speedup {summary['geomean_speedup_vs_cublas']}x over cuBLAS; "
        f"wrote {json_path}, {csv_path}, {png_path}",
        markup=False,
    )


def _roofline(params_path: Path, name: str) -> plots.Roofline:
    """The roofline of table ``name``'s device, from params.yaml's ``devices:``."""
    params = load_params(params_path)
    return plots.table_roofline(name=name, devices=device_specs(params, path=params_path),
                                primary=primary_device(params))
