"""Metrics and plot data of a tuned table: how the generated table performs per shape, against cuBLAS.

For every declared shape the table's lookup (first entry with this N and K whose [M, M_END)
holds M) names a configuration; its measured median at that shape (from the ranked table) is
the table's time there. The metrics JSON feeds ``dvc metrics diff``; the CSV feeds ``dvc plots``.

A dispatch list gets the same metrics: per shape its entry names a table and a configuration, and
that table's ranked rows give the time and the cuBLAS median of the same shard (what every table's
metrics report; the list was selected against the tables' shared yardstick, tunetable.baseline).

"speedup" means one thing in every output: cuBLAS time / the table's time (> 1 beats cuBLAS);
"slowdown_vs_best" is the table's time / the fastest measured at the shape (>= 1).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tunetable import plots
from tunetable.errors import TuneTableError
from tunetable.manifest import UNKNOWN, ManifestEntry, lookup
from tunetable.stats import geomean

PLOT_COLUMNS = (
    "shape", "M", "N", "K", "config_id", "tuned_ms", "cublas_ms", "best_ms",
    "tuned_tflops", "cublas_tflops", "speedup_vs_cublas", "slowdown_vs_best",
)
# A dispatch list's plot CSV also names the table serving each shape.
DISPATCH_PLOT_COLUMNS = (*PLOT_COLUMNS[:4], "table", *PLOT_COLUMNS[4:])


@dataclass(frozen=True)
class ShapeResult:
    """The table's pick at one shape and how it measured (times in ms; None where unmeasured)."""

    m: int
    n: int
    k: int
    entry_index: int | None
    config_id: str | None
    tuned_ms: float | None
    cublas_ms: float | None
    best_ms: float | None
    table: str | None = None       # a dispatch list's shape: the table serving it

    @property
    def shape(self) -> str:
        """``M77_N4096_K4096``, as in raw shard names."""
        return f"M{self.m}_N{self.n}_K{self.k}"

    def tflops(self, ms: float | None) -> float | None:
        """TFLOP/s of a time at this shape."""
        return None if ms is None or ms <= 0 else 2.0 * self.m * self.n * self.k / (ms * 1e-3) / 1e12


def rows_by_shape(ranked: Any) -> dict[tuple[int, int, int], pl.DataFrame]:
    """A table's ranked ok rows (polars) split by shape, once."""
    if not ranked.height:
        return {}
    return {(int(key[0]), int(key[1]), int(key[2])): frame
            for key, frame in ranked.partition_by(["M", "N", "K"], as_dict=True).items()}


def measured_at(*, rows: pl.DataFrame | None, entry: ManifestEntry | None, m: int, n: int, k: int,
                table: str | None = None) -> ShapeResult:
    """The entry's pick and its measured time at one shape, from that shape's ranked rows (None: unmeasured)."""
    tuned = cublas = best = None
    if rows is not None:
        best = float(rows["median_ms"].min())
        cublas_values = rows["cublas_ms"].drop_nulls() if "cublas_ms" in rows.columns else []
        cublas = float(cublas_values[0]) if len(cublas_values) else None
        if entry is not None:
            picked = rows.filter(pl.col("config_id") == entry.config_id)["median_ms"]
            tuned = float(picked[0]) if picked.len() else None
    return ShapeResult(m=m, n=n, k=k, entry_index=entry.index if entry else None,
                       config_id=entry.config_id if entry else None, tuned_ms=tuned, cublas_ms=cublas, best_ms=best,
                       table=table)


def shape_results(
    *, entries: Sequence[ManifestEntry], ranked: Any, shapes: Iterable[tuple[int, int, int]]
) -> list[ShapeResult]:
    """The table's pick and its measured time at every shape (ranked: polars DataFrame of ok rows)."""
    by_shape = rows_by_shape(ranked)
    return [measured_at(rows=by_shape.get((m, n, k)), entry=lookup(entries, m=m, n=n, k=k), m=m, n=n, k=k)
            for m, n, k in shapes]


def dispatch_shape_results(
    *, entries: Sequence[ManifestEntry], ranked: Mapping[str, Any], shapes: Iterable[tuple[int, int, int]]
) -> list[ShapeResult]:
    """A dispatch list at every shape: the table its entry names, and that table's measured time there.

    ``ranked``: table name -> its ranked ok rows (polars). Times, cuBLAS and best come from the named
    table's own rows at the shape (the same shard), as every table's metrics report them. Each table's rows are split
    by shape once (per shape, a split of the whole table made thousands of shapes quadratic).
    """
    by_table: dict[str, dict[tuple[int, int, int], pl.DataFrame]] = {}
    results = []
    for m, n, k in shapes:
        entry = lookup(entries, m=m, n=n, k=k)
        table = str(entry.values.get("TABLE", "")) if entry is not None else None
        if entry is None or table not in ranked:
            results.append(measured_at(rows=None, entry=entry, m=m, n=n, k=k, table=table))
            continue
        if table not in by_table:
            by_table[table] = rows_by_shape(ranked[table])
        results.append(measured_at(rows=by_table[table].get((m, n, k)), entry=entry, m=m, n=n, k=k, table=table))
    return results


def shards_key(*, shards: Sequence[Path], table: str) -> str:
    """The content key of the raw shards behind a table (their folder: results/raw/<table>/<key>/).

    The key is what ``audit``, ``trace`` and ``gc`` follow, so it is never guessed: no shards, a
    missing shard or shards of several keys are errors.
    """
    if not shards:
        raise TuneTableError(f"no raw shards given: the metrics record their content key, so pass the shards "
                             f"behind the ranked table (results/raw/{table}/<key>/*.pkl)", where="SHARDS")
    missing = [shard for shard in shards if not Path(shard).is_file()]
    if missing:
        raise TuneTableError("no such shard", path=missing[0], where="SHARDS")
    keys = sorted({Path(shard).parent.name for shard in shards})
    if len(keys) > 1:
        raise TuneTableError(f"shards of several content keys given ({', '.join(keys)})", where="SHARDS")
    return keys[0]


def _round(value: float | None) -> float | None:
    """A value rounded to 6 decimals (None stays None)."""
    return None if value is None else round(value, 6)


def table_metrics(
    *, table: str, results: Sequence[ShapeResult], entries: int, failures: Mapping[str, int], content_key: str,
    provenance: Mapping[str, Any],
) -> dict[str, Any]:
    """The metrics mapping of a table (deterministic: no times of this run)."""
    covered = [r for r in results if r.tuned_ms is not None]
    with_cublas = [r for r in covered if r.cublas_ms is not None]
    return {
        "table": table,
        "entries": entries,
        "shapes": len(results),
        "shapes_covered": len(covered),
        "geomean_tflops": _round(geomean(r.tflops(r.tuned_ms) for r in covered)),
        "geomean_cublas_tflops": _round(geomean(r.tflops(r.cublas_ms) for r in with_cublas)),
        # cuBLAS time / the table's time (> 1: the table is faster), as "speedup" means in every output.
        "geomean_speedup_vs_cublas": _round(geomean(r.cublas_ms / r.tuned_ms for r in with_cublas)),
        "shapes_faster_than_cublas": sum(1 for r in with_cublas if r.tuned_ms < r.cublas_ms),
        # The table's time over the best measured at each shape (>= 1; range merging costs a little).
        "geomean_slowdown_vs_best": _round(geomean(r.tuned_ms / r.best_ms for r in covered if r.best_ms)),
        "failures": int(sum(failures.values())),
        "failures_by_status": dict(sorted(failures.items())),
        "content_key": content_key,
        "results_key": str(provenance.get("results_key", UNKNOWN)),
        "device": str(provenance.get("device", UNKNOWN)),
    }


def dispatch_metrics(
    *, name: str, results: Sequence[ShapeResult], entries: int, content_keys: Mapping[str, str],
    provenance: Mapping[str, Any],
) -> dict[str, Any]:
    """The metrics mapping of a dispatch list: a table's, plus the shapes each table serves and their keys."""
    summary = table_metrics(table=name, results=results, entries=entries, failures={}, content_key="",
                            provenance=provenance)
    for per_table in ("failures", "failures_by_status", "content_key", "results_key"):
        summary.pop(per_table)
    summary["shapes_by_table"] = {table: sum(1 for r in results if r.table == table) for table in content_keys}
    summary["content_keys"] = dict(content_keys)
    return summary


def failure_counts(failures: Any) -> dict[str, int]:
    """Failed (configuration, shape) pairs per status from a failures frame (polars)."""
    if failures is None or failures.height == 0 or "status" not in failures.columns:
        return {}
    counts = failures.group_by("status").len()
    return {str(row[0]): int(row[1]) for row in counts.sort("status").iter_rows()}


def plot_rows(results: Sequence[ShapeResult]) -> list[dict[str, Any]]:
    """One plot row per shape (CSV for ``dvc plots``); a dispatch list's rows name their table."""
    rows = []
    for r in results:
        speedup = r.cublas_ms / r.tuned_ms if r.tuned_ms and r.cublas_ms else None
        slowdown = r.tuned_ms / r.best_ms if r.tuned_ms and r.best_ms else None
        rows.append({
            "shape": r.shape, "M": r.m, "N": r.n, "K": r.k, "config_id": r.config_id or "",
            "tuned_ms": _round(r.tuned_ms), "cublas_ms": _round(r.cublas_ms), "best_ms": _round(r.best_ms),
            "tuned_tflops": _round(r.tflops(r.tuned_ms)), "cublas_tflops": _round(r.tflops(r.cublas_ms)),
            "speedup_vs_cublas": _round(speedup), "slowdown_vs_best": _round(slowdown),
        })
        if r.table is not None:
            rows[-1]["table"] = r.table
    return rows


def csv_text(rows: Sequence[Mapping[str, Any]], *, columns: Sequence[str] = PLOT_COLUMNS) -> str:
    """CSV with a fixed column order; empty cells for missing values."""

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})
    return buffer.getvalue()


def metrics_json(metrics: Mapping[str, Any]) -> str:
    """Stable, reviewable JSON text."""
    return json.dumps(metrics, indent=2, sort_keys=False) + "\n"


def plot_png(*, table: str, results: Sequence[ShapeResult], roofline: plots.Roofline = plots.Roofline()) -> bytes:
    """The table against cuBLAS (PNG bytes, deterministic): per (N, K), the speedup over M on a log2 axis and the
    TFLOP/s under ``roofline`` (the table's device's: tunetable.plots), drawn from the plot CSV's rows, so that
    `tunetable plots` redraws the same bytes from the CSV."""
    return plots.table_png(name=table, points=plots.points_from_rows(plot_rows(results)), roofline=roofline)
