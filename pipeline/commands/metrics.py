"""``tunetable metrics``: the tuned table's metrics JSON, plot CSV and PNG (for dvc metrics / plots)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from tunetable.atomic import atomic_write_all

OUT = click.Path(dir_okay=False, path_type=Path)


def _read_frames(ranked_path: Path):
    """(ranked ok rows, failures) as polars frames; failures may be absent (no failures written)."""
    import polars as pl

    from tunetable.rank import failures_path, read_ranked

    ranked = read_ranked(path=ranked_path)
    failures_file = failures_path(out=ranked_path)
    failures = pl.read_csv(failures_file, infer_schema_length=0) if failures_file.is_file() else None
    return ranked, failures


@click.command("metrics")
@click.option("--table", required=True, help="Table name (as in params.yaml).")
@click.option("--manifest", "manifest_path", type=OUT, default=None, help="Manifest [default: manifests/<table>.yaml].")
@click.option("--ranked", "ranked_path", type=OUT, default=None,
              help="Ranked parquet [default: results/ranked/<table>.parquet].")
@click.option("--json", "json_path", type=OUT, default=None,
              help="Metrics JSON [default: results/metrics/<table>.json].")
@click.option("--csv", "csv_path", type=OUT, default=None, help="Plot CSV [default: results/plots/<table>.csv].")
@click.option("--png", "png_path", type=OUT, default=None, help="Plot PNG [default: results/plots/<table>.png].")
@click.option("--params", "params_path", type=OUT, default=Path("params.yaml"), show_default=True)
# SHARDS is checked in shards_key (after the table), so a missing one is one error line, not click's usage.
@click.argument("shards", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
def command(table: str, manifest_path: Path | None, ranked_path: Path | None, json_path: Path | None,
            csv_path: Path | None, png_path: Path | None, params_path: Path, shards: tuple[Path, ...]) -> None:
    """Per shape, the tuned table's TFLOP/s against cuBLAS; geomeans, coverage, entries, failures.

    SHARDS (at least one) are the raw shards behind the ranked table: their content key is recorded
    in the metrics, so that `tunetable audit` and `trace` find them at any revision. Without SHARDS
    the command refuses and writes nothing (it never records an empty or guessed key). The JSON, CSV
    and PNG land together or not at all (tunetable.atomic.atomic_write_all).
    """
    from tunetable import metrics, paths
    from tunetable.params import load_params, table_spec

    spec = table_spec(load_params(params_path), table, path=params_path)
    manifest_path = manifest_path or Path(spec.codegen.manifest)
    ranked_path = ranked_path or paths.ranked(table)
    json_path = json_path or paths.metrics(table)
    csv_path = csv_path or paths.plot_data(table)
    png_path = png_path or paths.plot_data(table).with_suffix(".png")

    content_key = metrics.shards_key(shards=shards, table=table)
    provenance, entries = metrics.load_manifest(manifest_path)
    ranked, failures = _read_frames(ranked_path)
    results = metrics.shape_results(entries=entries, ranked=ranked, shapes=spec.shapes())
    summary = metrics.table_metrics(
        table=table, results=results, entries=len(entries), failures=metrics.failure_counts(failures),
        content_key=content_key, provenance=provenance,
    )
    # Rendered first, then written together: a failure anywhere leaves all three old files as they were.
    atomic_write_all(outputs={
        json_path: metrics.metrics_json(summary).encode("utf-8"),
        csv_path: metrics.csv_text(metrics.plot_rows(results)).encode("utf-8"),
        png_path: metrics.plot_png(table=table, results=results),
    })
    Console(stderr=True).print(
        f"{table}: {summary['shapes_covered']}/{summary['shapes']} shapes covered, "
        f"geomean {summary['geomean_tflops']} TFLOP/s, {summary['geomean_ratio_to_cublas']}x cuBLAS; "
        f"wrote {json_path}, {csv_path}, {png_path}",
        markup=False,
    )
