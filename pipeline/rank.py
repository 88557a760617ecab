"""Rank a table's measured configurations per shape (polars): the input of select and of humans.

Only ``ok`` kernel rows are ranked, by median time with the config id breaking ties, so the
order is deterministic. Baseline (cuBLAS) rows give ``speedup_vs_cublas`` (cuBLAS median / the
configuration's median: higher is better, the one meaning of "speedup" in every output) and
``slowdown_vs_best`` is the time ratio to the shape's fastest (>= 1, lower is better); every other status is
a failure record listed separately with its failure class. Rows of searched shards keep their
``SEARCH_FIELDS`` (search label, strategy, seed, step, budgets) in the ranked parquet and CSV;
shards measured exhaustively have none, and neither has their ranked table.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tunetable.atomic import atomic_write_all
from tunetable.errors import TuneTableError
from tunetable.inputs import checked_recording_bytes
from tunetable.numbers import number_cell
from tunetable.results import BASELINE_ID, SEARCH_FIELDS

SHAPE = ("M", "N", "K")
HEAD_COLUMNS = ("rank", "M", "N", "K", "config_id")
MEASURE_COLUMNS = ("median_ms", "iqr_ms", "tflops", "slowdown_vs_best", "speedup_vs_cublas", "cublas_ms", "status")
# Where the measurement came from: carried so that select can write the manifest's provenance.
PROVENANCE_COLUMNS = ("measured_key", "kernel_hash", "backend", "device", "driver", "git_rev", "time")
FAILURE_COLUMNS = ("M", "N", "K", "config_id", "status", "error")
# The search behind each row, carried after the provenance only when the shards have it (searched
# shards); fixed types, so that shards whose budgets are all unset still give the same schema.
SEARCH_TYPES: dict[str, pl.DataType] = {
    "search": pl.Utf8(), "search_strategy": pl.Utf8(), "search_seed": pl.Int64(), "search_step": pl.Int64(),
    "search_max_fevals": pl.Int64(), "search_time_limit": pl.Float64(), "search_top_k": pl.Int64(),
}
# Bounds of the Markdown people read (the CSVs and the parquet hold every row).
MARKDOWN_SHAPES = 100
MARKDOWN_FAILURES = 200
RANKED_FIXED = frozenset({*HEAD_COLUMNS, *MEASURE_COLUMNS, *PROVENANCE_COLUMNS, *SEARCH_FIELDS})


@dataclass(frozen=True)
class RankedTable:
    """A table's ranked ok rows and its failed configurations."""

    ranked: pl.DataFrame
    failures: pl.DataFrame
    parameters: tuple[str, ...]


def _ensure(frame: pl.DataFrame, names: tuple[str, ...], dtype: pl.DataType) -> pl.DataFrame:
    """Add any missing column as nulls so that every ranked table has the same columns."""
    missing = [pl.lit(None, dtype=dtype).alias(n) for n in names if n not in frame.columns]
    return frame.with_columns(missing) if missing else frame


def is_baseline(frame: pl.DataFrame) -> pl.Expr:
    """Rows that are the cuBLAS baseline rather than a kernel configuration."""
    kind = pl.col("kind") == "baseline" if "kind" in frame.columns else pl.lit(False)
    return kind | (pl.col("config_id") == BASELINE_ID)


def search_columns(*, frame: pl.DataFrame) -> list[pl.Expr]:
    """The SEARCH_FIELDS columns ``frame`` has (none for exhaustive shards), in SEARCH_FIELDS order and typed."""
    present = [name for name in SEARCH_FIELDS if name in frame.columns]
    return [pl.col(name).cast(SEARCH_TYPES[name]) if name in SEARCH_TYPES else pl.col(name) for name in present]


INVALID = "invalid"   # failure status of an ok row whose median is not a finite positive time


def valid_time(name: str) -> pl.Expr:
    """A time column holding a finite positive number."""
    return pl.col(name).is_not_null() & pl.col(name).is_finite() & (pl.col(name) > 0)


def rank_rows(*, rows: pl.DataFrame, parameters: tuple[str, ...]) -> RankedTable:
    """Rank ok kernel rows within each (M, N, K) by median (ties: config_id); split off failures.

    Only a finite positive median ranks: an ``ok`` row whose median is NaN, infinite or not positive
    (never written by the bench: a corrupt or foreign file) is a failure of status ``invalid``, and
    such a cuBLAS row is no baseline. The ranked rows keep the SEARCH_FIELDS columns of searched
    shards (null on rows of exhaustive shards ranked with them); without any searched shard the
    ranked table has no such column.
    """
    frame = _ensure(rows, ("status", "error", "iqr_ms", "tflops", *PROVENANCE_COLUMNS), pl.Utf8)
    frame = frame.with_columns(pl.col("config_id").cast(pl.Utf8), pl.col("median_ms").cast(pl.Float64))
    frame = frame.with_columns([pl.col(c).cast(pl.Float64) for c in ("iqr_ms", "tflops")])
    baseline_mask = is_baseline(frame)
    baselines = (
        frame.filter(baseline_mask & (pl.col("status") == "ok") & valid_time("median_ms"))
        .group_by(SHAPE).agg(pl.col("median_ms").min().alias("cublas_ms"))
    )
    kernels = frame.filter(~baseline_mask)
    ok = kernels.filter((pl.col("status") == "ok") & valid_time("median_ms"))
    ranked = (
        ok.sort([*SHAPE, "median_ms", "config_id"])
        .with_columns(
            (pl.int_range(pl.len()).over(SHAPE) + 1).alias("rank"),
            (pl.col("median_ms") / pl.col("median_ms").min().over(SHAPE)).alias("slowdown_vs_best"),
        )
        .join(baselines, on=SHAPE, how="left")
        .with_columns((pl.col("cublas_ms") / pl.col("median_ms")).alias("speedup_vs_cublas"))
        .sort([*SHAPE, "rank"])
    )
    ranked = ranked.select([*HEAD_COLUMNS, *parameters, *MEASURE_COLUMNS, *PROVENANCE_COLUMNS,
                            *search_columns(frame=ranked)])
    failed = kernels.filter((pl.col("status") != "ok") | ~valid_time("median_ms").fill_null(False))
    ok_status = pl.col("status") == "ok"
    failures = failed.with_columns(
        pl.when(ok_status & pl.col("median_ms").is_null()).then(pl.lit("missing"))
        .when(ok_status).then(pl.lit(INVALID)).otherwise(pl.col("status")).alias("status"),
        pl.when(ok_status & pl.col("median_ms").is_not_null())
        .then(pl.lit("median_ms ") + pl.col("median_ms").cast(pl.Utf8) + pl.lit(" is not a finite positive time"))
        .otherwise(pl.col("error")).alias("error"),
    ).sort([*SHAPE, "config_id"]).select([*SHAPE, "config_id", *parameters, "status", "error"])
    return RankedTable(ranked=ranked, failures=failures, parameters=parameters)


def ranked_parameters(*, frame: pl.DataFrame) -> tuple[str, ...]:
    """The parameter columns of a ranked table, in grid order (everything not a fixed column)."""
    return tuple(c for c in frame.columns if c not in RANKED_FIXED)


def _csv(frame: pl.DataFrame) -> bytes:
    """A frame as CSV bytes, floats with 6 decimals."""
    buffer = io.BytesIO()
    frame.write_csv(buffer, float_precision=6)
    return buffer.getvalue()


def _markdown_cell(value: object) -> str:
    """A value as a Markdown table cell: empty for None, floats at 3 decimals as `tunetable profile` prints them
    (tunetable.numbers; the CSV keeps 6 for the tools that read it), pipes escaped."""
    return number_cell(value).replace("|", "\\|")


def markdown(*, frame: pl.DataFrame, title: str) -> str:
    """A Markdown table for humans (reviewed in PRs), one line per row."""
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_markdown_cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([f"# {title}", "", header, rule, *body, ""])


def ranked_markdown(*, frame: pl.DataFrame, name: str, csv_name: str, shapes: int = MARKDOWN_SHAPES) -> str:
    """The ranked Markdown: every row up to ``shapes`` shapes; beyond, bounded (the CSV holds every row).

    A table of thousands of shapes gets the winner of each of its first ``shapes`` shapes and, over
    all shapes, each configuration's wins and geomean slowdown to the best: a few hundred lines
    whatever the shape count, instead of one line per shape x configuration (80 MB at 5,500 shapes).
    """
    title = f"{name}: ranked configurations"
    count = frame.select(SHAPE).unique().height
    if count <= shapes:
        return markdown(frame=frame, title=title)
    winners = frame.filter(pl.col("rank") == 1)
    summary = (
        frame.group_by("config_id")
        .agg((pl.col("rank") == 1).sum().alias("shapes_won"), pl.len().alias("shapes_ranked"),
             pl.col("slowdown_vs_best").log().mean().exp().alias("geomean_slowdown_vs_best"))
        .sort(["shapes_won", "geomean_slowdown_vs_best", "config_id"], descending=[True, False, False])
    )
    note = (f"{count} shapes, {frame.height} ranked rows: every row is in {csv_name} (and the parquet). "
            f"Here the winner of each of the first {shapes} shapes, then every configuration over all {count}.")
    first = markdown(frame=winners.head(shapes), title=f"{title} (winners of the first {shapes} of {count} shapes)")
    return "\n".join([f"# {title}", "", note, "", first,
                      markdown(frame=summary, title=f"{name}: configurations over all {count} shapes")])


def failures_markdown(*, frame: pl.DataFrame, name: str, csv_name: str, rows: int = MARKDOWN_FAILURES) -> str:
    """The failures as Markdown: counts per status, then the first ``rows`` (the CSV holds every one)."""
    title = f"{name}: failed configurations"
    if frame.height <= rows:
        return markdown(frame=frame, title=title)
    counts = frame.group_by("status").agg(pl.len().alias("configurations")).sort("status")
    return "\n".join([
        markdown(frame=counts, title=f"{title}: {frame.height} (every one is in {csv_name})"),
        markdown(frame=frame.head(rows), title=f"{title}: the first {rows}"),
    ])


def failures_path(*, out: Path) -> Path:
    """``T.failures.csv`` beside the ranked parquet ``T.parquet``."""
    return out.with_name(f"{out.stem}.failures.csv")


def write_ranked(*, table: RankedTable, out: Path, name: str) -> list[Path]:
    """Write parquet, CSV, Markdown and failures CSV atomically; return the paths written."""
    buffer = io.BytesIO()
    table.ranked.write_parquet(buffer, statistics=False)
    human = table.ranked.select([c for c in table.ranked.columns if c not in (*PROVENANCE_COLUMNS, *SEARCH_FIELDS)])
    failures_md = failures_markdown(frame=table.failures.drop("error"), name=name,
                                    csv_name=failures_path(out=out).name)
    outputs = {
        out: buffer.getvalue(),
        out.with_suffix(".csv"): _csv(table.ranked),
        out.with_suffix(".md"): (ranked_markdown(frame=human, name=name, csv_name=out.with_suffix(".csv").name)
                                 + "\n" + failures_md).encode("utf-8"),
        failures_path(out=out): _csv(table.failures),
    }
    atomic_write_all(outputs=outputs)  # the four land together: a kill never leaves a new parquet with an old CSV
    return list(outputs)


def read_ranked(*, path: Path, required: tuple[str, ...] = ("M", "N", "K", "config_id", "median_ms")) -> pl.DataFrame:
    """Read a ranked parquet written by write_ranked; a missing or foreign file is one clear error."""
    if not path.is_file():
        raise TuneTableError("no such file", path=path)
    ranked = read_parquet_file(path=path, what="a ranked parquet")
    missing = [c for c in required if c not in ranked.columns]
    if missing:
        raise TuneTableError(f"missing column {missing[0]}", path=path)
    check_ranked(ranked=ranked, path=path)
    return ranked


def read_parquet_file(*, path: Path, what: str, data: bytes | None = None) -> pl.DataFrame:
    """A parquet file (``data``: its bytes, already read) as a polars frame; unreadable, corrupt or foreign is one
    error line naming ``path`` (polars panics too)."""
    try:
        return pl.read_parquet(path if data is None else io.BytesIO(data))
    except (OSError, ValueError, pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
        detail = str(exc).splitlines()[0][:120] if str(exc) else ""
        raise TuneTableError(f"not {what} ({exc.__class__.__name__}{': ' + detail if detail else ''})",
                             path=path) from None


def read_checked_recording(*, path: Path) -> pl.DataFrame:
    """A recording as a polars frame, parsed from the very bytes checked whole against its sidecar
    (``tunetable.inputs.checked_recording_bytes``): one read, one line naming the file if not."""
    return read_parquet_file(path=path, what="a recording (parquet)", data=checked_recording_bytes(path))


def check_ranked(*, ranked: pl.DataFrame, path: Path) -> None:
    """What rank writes, and what select and metrics rely on: integer shapes, config ids, finite positive times.

    A ranked file breaking it was not written by rank (edited, corrupt or foreign): an error naming the
    row, never a row quietly selected or dropped.
    """
    checks: list[tuple[str, pl.Expr]] = []
    for name in SHAPE:
        if name in ranked.columns:
            if not ranked.schema[name].is_integer():
                raise TuneTableError(f"column {name} is {ranked.schema[name]}, not integers", path=path)
            checks.append((f"{name} is not a positive integer", pl.col(name).is_null() | (pl.col(name) <= 0)))
    if "config_id" in ranked.columns:
        checks.append(("config_id is missing", pl.col("config_id").is_null()))
    for name in ("median_ms", "cublas_ms"):
        if name in ranked.columns:
            if not ranked.schema[name].is_numeric():
                raise TuneTableError(f"column {name} is {ranked.schema[name]}, not numbers", path=path)
            bad = ~valid_time(name).fill_null(False)
            checks.append((f"{name} is not a finite positive time", bad if name == "median_ms"
                           else pl.col(name).is_not_null() & bad))
    for problem, expression in checks:
        rows = ranked.with_row_index("row").filter(expression)
        if rows.height:
            first = rows.row(0, named=True)
            shape = ", ".join(f"{name}={first.get(name)}" for name in (*SHAPE, "config_id") if name in first)
            value = {"median_ms": first.get("median_ms"), "cublas_ms": first.get("cublas_ms")}
            shown = next((f" ({key} {val})" for key, val in value.items() if key in problem), "")
            raise TuneTableError(f"{problem}{shown} ({shape}); rank wrote no such row: rank the shards again",
                                 path=path, where=f"row {first['row']}")

