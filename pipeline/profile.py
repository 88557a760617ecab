"""kprofile-grade views of benchmark results as pure functions over polars frames.

Each view returns data (frames, dicts); printing and files belong to ``tunetable.commands.profile``.
Metric direction comes from the metric itself: times are lower-is-better, throughputs
(TFLOP/s, GB/s, GFLOPS, throughput) higher-is-better; anything else is refused.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from tunetable.errors import TuneTableError
from tunetable.rank import is_baseline
from tunetable.resultset import LoadedResult
import io
from tunetable.expr import parse_query

LOWER_IS_BETTER = ("(ms)", "(s)", "(us)", "(ns)", "_ms", "_s", "_us")
HIGHER_IS_BETTER = ("tflops", "gflops", "gb/s", "tb/s", "throughput", "gelems", "arithmetic", "datemovement",
                    "datamovement")
DEFAULT_METRIC = "met (ms)"


@dataclass(frozen=True)
class Metric:
    """A resolved metric column and its direction."""

    name: str
    higher_is_better: bool


def metric_direction(*, name: str) -> bool | None:
    """True when higher is better, False when lower is better, None when the metric is not a known kind."""
    lowered = name.lower()
    if any(tag in lowered for tag in HIGHER_IS_BETTER):
        return True
    if lowered.endswith(LOWER_IS_BETTER) or lowered.startswith("met ("):
        return False
    return None


def check_profilable(*, result: LoadedResult, requested: str | None) -> None:
    """A result holds rows and its metric a finite value in at least one; else one error naming the file."""
    if result.frame.height == 0:
        raise TuneTableError("no rows to profile", path=result.path)
    metric = resolve_metric(frame=result.frame, requested=requested, path=result.path)
    values = result.frame.get_column(metric.name).cast(pl.Float64, strict=False)
    if not values.is_finite().any():
        raise TuneTableError(f"metric '{metric.name}' has no finite value in any row", path=result.path)


def metric_choices(*, frame: pl.DataFrame) -> list[str]:
    """Numeric columns of a frame whose direction is known, in column order."""
    return [c for c, t in frame.schema.items() if t.is_numeric() and metric_direction(name=c) is not None]


def default_metric(*, frame: pl.DataFrame) -> str:
    """kprofile's ``met (ms)`` where the file has it (kbench pickles, shards, recordings), else ``median_ms``."""
    return DEFAULT_METRIC if DEFAULT_METRIC in frame.columns or "median_ms" not in frame.columns else "median_ms"


def resolve_metric(*, frame: pl.DataFrame, requested: str | None, path: str | None = None) -> Metric:
    """An exact metric name or a unique case-insensitive prefix of one (None: the default); else an error."""
    requested = default_metric(frame=frame) if requested is None else requested
    choices = metric_choices(frame=frame)
    if not choices:
        raise TuneTableError("no metric column (a time such as 'met (ms)' or median_ms, or a throughput such as "
                             "tflops)", path=path, where="--metric")
    if requested in choices:
        matches = [requested]
    else:
        matches = [c for c in choices if c.lower().startswith(requested.lower())]
    if len(matches) != 1:
        why = "ambiguous" if matches else "unknown"
        listed = matches or choices
        raise TuneTableError(f"{why} metric '{requested}' (choices: {', '.join(listed)})", path=path,
                             where="--metric")
    direction = metric_direction(name=matches[0])
    return Metric(name=matches[0], higher_is_better=bool(direction))


def left_out(*, frame: pl.DataFrame, metric: Metric) -> dict[str, int]:
    """Rows the views leave out, counted per reason: each failure status, baseline rows, no metric value."""
    counts: dict[str, int] = {}
    baseline = is_baseline(frame) if "config_id" in frame.columns else pl.lit(False)
    status = pl.col("status") if "status" in frame.columns else pl.lit("ok")
    missing = pl.col(metric.name).is_null() | pl.col(metric.name).is_nan()
    reason = (pl.when(baseline).then(pl.lit("baseline")).when(status != "ok").then(status.cast(pl.Utf8))
              .when(missing).then(pl.lit(f"no {metric.name}")).otherwise(pl.lit(None, dtype=pl.Utf8)))
    for name, count in (frame.select(reason.alias("reason")).drop_nulls().group_by("reason").len()
                        .sort("reason").iter_rows()):
        counts[name] = count
    return counts


def comparable(*, frame: pl.DataFrame, metric: Metric) -> pl.Expr:
    """Rows that can be compared: kernel configurations with status ok and a metric value."""
    keep = pl.col(metric.name).is_not_null() & pl.col(metric.name).is_not_nan()
    if "status" in frame.columns:
        keep = keep & (pl.col("status") == "ok")
    if "config_id" in frame.columns:
        keep = keep & ~is_baseline(frame)
    return keep


def kernel_rows(*, frame: pl.DataFrame, metric: Metric, columns: list[str] | None = None) -> pl.DataFrame:
    """The comparable rows (only ``columns`` when given, so a 10 M-row frame is never copied whole)."""
    lazy = frame.lazy().filter(comparable(frame=frame, metric=metric))
    return (lazy.select(columns) if columns is not None else lazy).collect()


@dataclass(frozen=True)
class Ordering:
    """The comparable rows, best first within each shape, as row numbers into the frame (no column copied).

    ``rows`` holds ``_row`` (position in the frame), the shape, the metric, ``_position`` (0-based within
    its shape), ``_count`` (rows of its shape) and ``_best`` (its shape's best metric value).
    """

    rows: pl.DataFrame
    metric: Metric
    shape: tuple[str, ...]


def order_rows(*, frame: pl.DataFrame, metric: Metric, shape: tuple[str, ...]) -> Ordering:
    """Sort only the row numbers, shape and metric (ties: mesh_idx), never the whole frame."""
    tie = ["mesh_idx"] if "mesh_idx" in frame.columns else []
    lazy = (frame.lazy().with_row_index("_row").filter(comparable(frame=frame, metric=metric))
            .select("_row", *shape, metric.name, *tie)
            .sort([*shape, metric.name, *tie],
                  descending=[False] * len(shape) + [metric.higher_is_better] + [False] * len(tie)))
    over = (lambda e: e.over(shape)) if shape else (lambda e: e)
    rows = lazy.with_columns(over(pl.int_range(pl.len(), dtype=pl.UInt32)).alias("_position"),
                             over(pl.len()).cast(pl.UInt32).alias("_count"),
                             over(pl.col(metric.name).first()).alias("_best")).drop(tie).collect()
    return Ordering(rows=rows, metric=metric, shape=shape)


def rows_of(*, frame: pl.DataFrame, ordering: Ordering, picked: pl.DataFrame,
            columns: list[str] | tuple[str, ...] | None = None) -> pl.DataFrame:
    """The frame's rows named by ``picked`` (a slice of ``ordering.rows``), in its order, with ``ratio`` to the best."""
    names = [c for c in dict.fromkeys(columns or frame.columns) if c in frame.columns and c != "ratio"]
    gathered = frame.select(pl.col(names).gather(picked["_row"])) if picked.height else frame.select(names).clear()
    ratio = picked[ordering.metric.name] / picked["_best"]
    return gathered.with_columns(ratio.alias("ratio"))


def sorted_view(*, frame: pl.DataFrame, metric: Metric, shape: tuple[str, ...],
                columns: list[str] | tuple[str, ...] | None = None) -> pl.DataFrame:
    """Rows sorted best first within each shape, with ``ratio`` = metric / best metric of the shape."""
    ordering = order_rows(frame=frame, metric=metric, shape=shape)
    return rows_of(frame=frame, ordering=ordering, picked=ordering.rows, columns=columns)


def first_last(*, ordering: Ordering, head: int, tail: int) -> pl.DataFrame:
    """Per shape the ``head`` best and the ``tail`` worst rows of an ordering (each may be 0)."""
    keep = (pl.col("_position") < head) | (pl.col("_position") >= pl.col("_count").cast(pl.Int64) - tail)
    return ordering.rows.filter(keep)


def shape_string(*, row: dict[str, Any], shape: tuple[str, ...]) -> str:
    """kprofile's shape: ``p=value`` joined by ``/``."""
    return "/".join(f"{p}={row[p]}" for p in shape)


def summary(*, result: LoadedResult, metric: Metric, shape: tuple[str, ...],
            ordering: Ordering | None = None) -> pl.DataFrame:
    """Default view: per shape the entries, best index, worst, best, worst/best ratio and the best spec.

    ``ordering``: the result's ``order_rows`` when the caller has it already (one sort for every view).
    """
    ordering = order_rows(frame=result.frame, metric=metric, shape=shape) if ordering is None else ordering
    frame = result.frame
    index = "mesh_idx" if "mesh_idx" in frame.columns else "config_id"
    firsts = ordering.rows.filter(pl.col("_position") == 0)
    lasts = ordering.rows.filter(pl.col("_position") == pl.col("_count") - 1)
    best = frame.select(pl.col([index, *result.parameters]).gather(firsts["_row"]))
    table = pl.DataFrame([*(firsts[p] for p in shape),
                          firsts["_count"].cast(pl.Int64).alias("entries"),
                          best[index].cast(pl.Utf8).alias("best_idx"),
                          lasts[metric.name].alias("worst"),
                          firsts[metric.name].alias("best"),
                          (lasts[metric.name] / lasts["_best"]).alias("worst/best"),
                          *(best[p] for p in result.parameters)])
    if table.is_empty():
        table = pl.DataFrame(schema={**{p: frame.schema[p] for p in shape}, "entries": pl.Int64,
                                     "best_idx": pl.Utf8, "worst": pl.Float64, "best": pl.Float64,
                                     "worst/best": pl.Float64, **{p: frame.schema[p] for p in result.parameters}})
    shape_expr = (pl.concat_str([pl.format(f"{p}={{}}", pl.col(p)) for p in shape], separator="/")
                  if shape else pl.lit(""))
    spec_expr = (pl.concat_str([pl.format(f"{p}={{}}", pl.col(p)) for p in result.parameters], separator="/")
                 if result.parameters else pl.lit(""))
    return table.select(*shape, "entries", "best_idx", "worst", "best", "worst/best",
                        shape_expr.alias("shape"), spec_expr.alias("best_spec"), *result.parameters)


def within_top(*, frame: pl.DataFrame, metric: Metric, threshold: float, shape: tuple[str, ...],
               columns: list[str] | tuple[str, ...] | None = None,
               ordering: Ordering | None = None) -> pl.DataFrame:
    """kprofile's ``--top T``: per shape the entries below ``min + T * max`` (lower is better), best first.

    kprofile keeps ``x < (T + min/max) * max``; mirrored for a higher-is-better metric: ``x > max - T * max``.
    """
    if not (threshold > 0 and math.isfinite(threshold)):
        raise TuneTableError(f"expected a threshold > 0, got {threshold:g}", where="--top")
    ordering = order_rows(frame=frame, metric=metric, shape=shape) if ordering is None else ordering
    value = pl.col(metric.name)
    over = (lambda e: e.over(shape)) if shape else (lambda e: e)
    high, low = over(value.max()), over(value.min())
    keep = value > high - threshold * high if metric.higher_is_better else value < low + threshold * high
    return rows_of(frame=frame, ordering=ordering, picked=ordering.rows.filter(keep), columns=columns)


def top_fraction(*, frame: pl.DataFrame, metric: Metric, fraction: float, shape: tuple[str, ...],
                 columns: list[str] | tuple[str, ...] | None = None,
                 ordering: Ordering | None = None) -> pl.DataFrame:
    """The best ``fraction`` of each shape's entries (at least one), by the metric's own direction."""
    if not 0 < fraction <= 1:
        raise TuneTableError(f"expected a fraction in (0, 1], got {fraction}", where="--top-fraction")
    ordering = order_rows(frame=frame, metric=metric, shape=shape) if ordering is None else ordering
    keep = pl.col("_position") < (pl.col("_count").cast(pl.Float64) * fraction).ceil().clip(lower_bound=1)
    return rows_of(frame=frame, ordering=ordering, picked=ordering.rows.filter(keep), columns=columns)


def common_spec(*, subset: pl.DataFrame, parameters: tuple[str, ...], shape: tuple[str, ...]) -> pl.DataFrame:
    """Per shape, the most common value of each parameter in ``subset`` (ties: the smallest value)."""
    frame = subset if shape else subset.with_columns(pl.lit(0).alias("_all"))
    group = list(shape) or ["_all"]
    result = frame.select(group).unique(maintain_order=True)
    for p in parameters:
        counts = (frame.group_by([*group, p]).agg(pl.len().alias("_n"))
                  .sort([*group, "_n", p], descending=[False] * len(group) + [True, False])
                  .group_by(group, maintain_order=True).agg(pl.col(p).first()))
        result = result.join(counts, on=group, how="left")
    return result if shape else result.drop("_all")


def diff_view(*, baseline: LoadedResult, current: LoadedResult, metric: Metric,
              shape: tuple[str, ...]) -> pl.DataFrame:
    """Per shape: baseline best, current best, current/baseline, and the parameters that changed."""
    parameters = tuple(p for p in current.parameters if p in baseline.parameters)

    def best(result: LoadedResult) -> pl.DataFrame:
        """Per shape, a result's best metric value and that configuration's parameters."""
        ordering = order_rows(frame=result.frame, metric=metric, shape=shape)
        firsts = ordering.rows.filter(pl.col("_position") == 0)
        return rows_of(frame=result.frame, ordering=ordering, picked=firsts,
                       columns=[*shape, metric.name, *parameters]).drop("ratio")

    joined = best(current).join(best(baseline), on=list(shape), how="inner", suffix="_baseline")
    if joined.is_empty():
        raise TuneTableError("no shape in common with the baseline", path=current.path, where="--diff")
    changed = [pl.when(pl.col(p) != pl.col(f"{p}_baseline"))
               .then(pl.format(f"{p}: {{}} -> {{}}", pl.col(f"{p}_baseline"), pl.col(p))) for p in parameters]
    shape_expr = pl.concat_str([pl.format(f"{p}={{}}", pl.col(p)) for p in shape], separator="/")
    return joined.select(
        shape_expr.alias("shape"),
        pl.lit(metric.name).alias("metric"),
        pl.col(metric.name).alias("best_tuning_metric"),
        pl.col(f"{metric.name}_baseline").alias("baseline_metric"),
        (pl.col(metric.name) / pl.col(f"{metric.name}_baseline")).alias("ratio"),
        (pl.concat_str(changed, separator=", ", ignore_nulls=True) if changed else pl.lit("")).alias("changed"),
    )


# Contingency tables up to this many cells; per-value counting when one side has at most this many values.
CONTINGENCY_CELLS = 4_000_000
GROUPED_VALUES = 256


@dataclass(frozen=True)
class Ranks:
    """A column as dense codes 0..distinct-1 (equal values share a code, NaN is -1)."""

    codes: np.ndarray
    distinct: int
    has_nan: bool

    @cached_property
    def order(self) -> np.ndarray:
        """Every non-NaN position, by code (stable); sorted once per column, when a pair first needs it."""
        return np.argsort(self.codes, kind="stable")[int((self.codes < 0).sum()):]


# Integer columns spanning at most this many values are coded by a lookup table (O(n)) instead of a sort.
DIRECT_CODE_SPAN = 1 << 20


def ranks_of(values: np.ndarray) -> Ranks:
    """Dense codes of ``values`` (floats; NaN allowed)."""
    values = np.asarray(values, dtype=float)
    nan = np.isnan(values)
    present = values[~nan] if nan.any() else values
    low = present.min() if present.size else 0.0
    span = present.max() - low if present.size else 0.0
    if span < DIRECT_CODE_SPAN and np.array_equal(present, np.round(present)):
        offsets = (present - low).astype(np.int64)           # small integers (tile sizes, stages): no sort
        seen = np.bincount(offsets, minlength=int(span) + 1) > 0
        lookup = np.cumsum(seen) - 1
        distinct, inverse = int(seen.sum()), lookup[offsets]
    else:
        uniques, inverse = np.unique(present, return_inverse=True)
        distinct = len(uniques)
    if nan.any():
        codes = np.full(len(values), -1, dtype=np.int32)
        codes[~nan] = inverse
    else:
        codes = inverse
    # int32 codes halve the memory of a 10 M-row correlation; arithmetic on them is done in int64.
    return Ranks(codes=codes.astype(np.int32, copy=False), distinct=distinct, has_nan=bool(nan.any()))


def kendall_tau(*, x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b (ties handled, pairs with a NaN on either side dropped); NaN when either side is constant."""
    return tau_of_ranks(x=ranks_of(np.asarray(x, dtype=float)), y=ranks_of(np.asarray(y, dtype=float)))


def tau_of_ranks(*, x: Ranks, y: Ranks) -> float:
    """tau-b of two coded columns of equal length: concordant minus discordant pairs over the tie-corrected count.

    Pairs are never enumerated: a contingency table when both sides take few values, Knight's
    method with the inversions counted one value at a time when one side does (O(values * n)),
    else Knight's method with a vectorised merge count of inversions (O(n log^2 n)).
    """
    if (x.distinct + 1) * (y.distinct + 1) <= CONTINGENCY_CELLS:
        return _tau_from_table(_joint_counts(x=x, y=y))
    valid = (x.codes >= 0) & (y.codes >= 0) if (x.has_nan or y.has_nan) else None
    xs, ys = (x.codes, y.codes) if valid is None else (x.codes[valid], y.codes[valid])
    n = len(xs)
    x_ties, x_seen = _tied_pairs(xs, x.distinct)
    y_ties, y_seen = _tied_pairs(ys, y.distinct)
    if n < 2 or x_seen < 2 or y_seen < 2:
        return math.nan
    pairs = n * (n - 1) // 2
    if min(x.distinct, y.distinct) <= GROUPED_VALUES:
        small, large = (x, y) if x.distinct <= y.distinct else (y, x)
        order = large.order if valid is None else large.order[valid[large.order]]
        inversions, both_tied = _inversions_by_value(small=small, large=large, order=order)
    else:
        keys = xs.astype(np.int64) * y.distinct + ys
        order = np.argsort(keys)
        inversions, both_tied = count_inversions(ys[order]), _tied_runs(keys[order])
    score = pairs - x_ties - y_ties + both_tied - 2 * inversions
    return score / math.sqrt((pairs - x_ties) * (pairs - y_ties))


def _tied_pairs(codes: np.ndarray, distinct: int) -> tuple[int, int]:
    """Pairs of equal codes, and how many codes occur."""
    counts = np.bincount(codes, minlength=distinct).astype(np.int64)
    return int((counts * (counts - 1) // 2).sum()), int((counts > 0).sum())


def _joint_counts(*, x: Ranks, y: Ranks) -> np.ndarray:
    """Rows with both values present, counted per (x code, y code): one pass, NaN rows dropped by their slot."""
    width = y.distinct + 1
    table = np.bincount((x.codes.astype(np.int64) + 1) * width + (y.codes + 1), minlength=(x.distinct + 1) * width)
    return table.reshape(x.distinct + 1, width)[1:, 1:].astype(np.int64)


def _tau_from_table(table: np.ndarray) -> float:
    """tau-b from joint counts: concordant minus discordant pairs by 2-D suffix and prefix sums."""
    n = int(table.sum())
    rows, columns = table.sum(axis=1), table.sum(axis=0)
    if n < 2 or (rows > 0).sum() < 2 or (columns > 0).sum() < 2:
        return math.nan
    later = np.zeros_like(table)                 # rows with a strictly larger x
    later[:-1] = np.cumsum(table[::-1], axis=0)[::-1][1:]
    above = np.zeros_like(table)                 # ... and a strictly larger y
    above[:, :-1] = np.cumsum(later[:, ::-1], axis=1)[:, ::-1][:, 1:]
    below = np.zeros_like(table)                 # ... and a strictly smaller y
    below[:, 1:] = np.cumsum(later, axis=1)[:, :-1]
    score = int((table * (above - below)).sum())
    pairs = n * (n - 1) // 2
    x_ties = int((rows * (rows - 1) // 2).sum())
    y_ties = int((columns * (columns - 1) // 2).sum())
    return score / math.sqrt((pairs - x_ties) * (pairs - y_ties))


def _inversions_by_value(*, small: Ranks, large: Ranks, order: np.ndarray) -> tuple[int, int]:
    """Knight's inversions of ``small`` in (large, small) order, and the pairs tied on both sides.

    ``order`` sorts by ``large`` only (ties by position): its inversions inside runs of equal
    ``large`` are the ones a (large, small) sort would remove, so they are counted apart and taken off.
    """
    sequence = small.codes[order]
    inversions = 0
    for value in range(1, small.distinct):
        seen = np.cumsum(sequence == value)          # how many of `value` up to each position
        inversions += int(seen[sequence < value].sum())
    sorted_large = large.codes[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_large[1:] != sorted_large[:-1]]))
    lengths = np.diff(np.concatenate([starts, [len(order)]]))
    if (lengths == 1).all():
        return inversions, 0
    run = np.repeat(np.arange(len(starts)), lengths)
    tied = np.repeat(lengths > 1, lengths)
    run, sequence = run[tied], sequence[tied]
    for value in range(1, small.distinct):
        seen = np.cumsum(sequence == value)
        before_run = np.concatenate([[0], seen])[np.searchsorted(run, run, side="left")]
        inversions -= int((seen - before_run)[sequence < value].sum())
    joint = np.unique(run * small.distinct + sequence, return_counts=True)[1].astype(np.int64)
    return inversions, int((joint * (joint - 1) // 2).sum())


def _tied_runs(ordered: np.ndarray) -> int:
    """Pairs of equal values in a sorted array."""
    edges = np.flatnonzero(np.diff(ordered)) + 1
    runs = np.diff(np.concatenate([[0], edges, [len(ordered)]])).astype(np.int64)
    return int((runs * (runs - 1) // 2).sum())


def count_inversions(values: np.ndarray) -> int:
    """Pairs i < j with values[i] > values[j] of non-negative ints: bottom-up merge levels, each one vectorised."""
    n = len(values)
    if n < 2:
        return 0
    runs = values.astype(np.int64)
    span = int(runs.max()) + 1
    position = np.arange(n, dtype=np.int64)
    total = 0
    width = 1
    while width < n:
        pair = position // (2 * width)
        right = (position // width) % 2 == 1
        keys = pair * span + runs
        left_keys = keys[~right]                  # sorted: each run is sorted and pairs ascend
        right_pairs = pair[right]
        upto = np.searchsorted(left_keys, keys[right], side="right")
        pair_end = np.searchsorted(left_keys, right_pairs * span + (span - 1), side="right")
        total += int((pair_end - upto).sum())
        runs = np.sort(keys, kind="stable") - pair * span
        width *= 2
    return total


def numeric_columns(*, frame: pl.DataFrame, names: tuple[str, ...]) -> list[str]:
    """Names whose columns are numeric or boolean (booleans count as 0/1)."""
    return [n for n in names if n in frame.columns and (frame.schema[n].is_numeric() or frame.schema[n] == pl.Boolean)]


def correlation(
    *, frame: pl.DataFrame, metric: Metric, parameters: tuple[str, ...]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Kendall tau of every numeric parameter with the metric (sorted by |tau|) and the full matrix."""
    names = [*numeric_columns(frame=frame, names=parameters), metric.name]
    rows = kernel_rows(frame=frame, metric=metric, columns=names)
    ranks = {}
    for name in names:   # one column at a time as floats: only its codes stay
        ranks[name] = ranks_of(rows[name].cast(pl.Float64).fill_null(float("nan")).to_numpy())
    del rows
    matrix: dict[str, list[float]] = {a: [math.nan] * len(names) for a in names}
    for i, a in enumerate(names):
        for j in range(i, len(names)):
            if i == j:   # tau-b of a column with itself: 1 unless it is constant
                tau = 1.0 if ranks[a].distinct > 1 else math.nan
            else:
                tau = tau_of_ranks(x=ranks[a], y=ranks[names[j]])
            matrix[a][j] = matrix[names[j]][i] = tau
    with_metric = [(p, matrix[p][-1]) for p in names[:-1]]
    sorted_rows = sorted(with_metric, key=lambda item: (-(0.0 if math.isnan(item[1]) else abs(item[1])), item[0]))
    table = pl.DataFrame({"parameter": [p for p, _ in sorted_rows],
                          "kendall_tau": [t for _, t in sorted_rows],
                          "abs_tau": [0.0 if math.isnan(t) else abs(t) for _, t in sorted_rows]},
                         schema={"parameter": pl.Utf8, "kendall_tau": pl.Float64, "abs_tau": pl.Float64})
    full = pl.DataFrame({"name": names, **{b: [matrix[a][j] for a in names] for j, b in enumerate(names)}})
    return table, full


def heatmap_png(*, matrix: pl.DataFrame, title: str) -> bytes:
    """A correlation matrix as a PNG heatmap (matplotlib, Agg backend) with 2-decimal annotations."""

    import matplotlib  # lazy: heavy, and only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (lazy, with matplotlib)

    names = matrix["name"].to_list()
    values = matrix.drop("name").to_numpy().astype(float)
    size = max(4.0, 0.8 * len(names) + 2)
    figure, axes = plt.subplots(figsize=(size, size * 0.8), dpi=100)
    image = axes.imshow(np.nan_to_num(values), cmap="Blues", vmin=-1, vmax=1)
    axes.set_xticks(range(len(names)), labels=names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), labels=names)
    for i in range(len(names)):
        for j in range(len(names)):
            axes.text(j, i, "nan" if math.isnan(values[i, j]) else f"{values[i, j]:.2f}", ha="center", va="center")
    axes.set_title(title)
    figure.colorbar(image)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def parse_pivots(*, values: tuple[str, ...]) -> list[str]:
    """``[M] [N]``, ``[M,N]``, ``['M','N']``, ``M N`` and ``M,N`` all mean [M, N]; repeats are concatenated."""
    names: list[str] = []
    for value in values:
        for token in value.replace("[", " ").replace("]", " ").replace(",", " ").split():
            name = token.strip("'\"")
            if name and name not in names:
                names.append(name)
    return names


def apply_query(*, frame: pl.DataFrame, query: str) -> pl.DataFrame:
    """Rows of ``frame`` matching a pandas ``DataFrame.query`` string; no match is an error.

    ``M > 64 and K < 1024``, ``M > 64 & (K < 1024 | ~SWAP_AB)``, ``N.between(1024, 4096)``,
    ``M in [1, 8]``: through tunetable.expr.parse_query (ast whitelist, never eval). A row lacking
    a name the query uses (a key absent from its manifest) does not match.
    """

    expression = parse_query(query, allowed_names=frame.columns, where="--query")
    keep = [all(row[name] is not None for name in expression.names) and bool(expression(row))
            for row in frame.iter_rows(named=True)]
    result = frame.filter(pl.Series(keep, dtype=pl.Boolean))
    if result.is_empty():
        raise TuneTableError(f"query '{query}' matched no entry", where="--query")
    return result


# A kbench grid YAML read by profile expands to at most this many entries (one line naming the file beyond).
MAX_EXPANDED_ENTRIES = 1_000_000


def expand_entries(*, entries: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """kbench's grid semantics for YAML inputs: in each entry, list values form a cartesian product.

    Nested lists are flattened and repeats dropped (first seen kept), as kbench does; values are
    never evaluated (kbench calls eval on them). A manifest of scalar entries comes back unchanged.
    """
    expanded: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        lists = {key: _flat_unique(value) for key, value in entry.items() if isinstance(value, list)}
        count = math.prod(len(values) for values in lists.values())
        if len(expanded) + count > MAX_EXPANDED_ENTRIES:
            raise TuneTableError(f"the grid expands past {MAX_EXPANDED_ENTRIES:,} entries", path=path,
                                 where=f"params[{index}]")
        for combination in itertools.product(*lists.values()):
            expanded.append({**entry, **dict(zip(lists, combination))})
    return expanded


def _flat_unique(values: list[Any]) -> list[Any]:
    """A value list flattened and without repeats, first seen first."""
    flat: list[Any] = []
    stack = list(reversed(values))
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(reversed(value))
        elif not any(value == seen and type(value) is type(seen) for seen in flat):
            flat.append(value)
    return flat


def merge_manifests(*, manifests: list[tuple[str, list[dict[str, Any]]]], pivots: list[str],
                    sort_pivots: list[str]) -> pl.DataFrame:
    """Entries of several manifests merged on the pivots: the first file that has a pivot key wins."""
    frames = []
    for order, (path, entries) in enumerate(manifests):
        if not entries:
            continue
        frame = pl.DataFrame(entries, infer_schema_length=None).with_columns(
            pl.lit(order).alias("_file"), pl.int_range(pl.len()).alias("_entry"), pl.lit(path).alias("source"))
        frames.append(frame)
    if not frames:
        raise TuneTableError("no manifest entries to merge", where="--merge")
    merged = pl.concat(frames, how="diagonal_relaxed")
    keys = pivots or [c for c in frames[0].columns if all(c in f.columns for f in frames) and not c.startswith("_")
                      and c != "source"]
    missing = [p for p in keys if p not in merged.columns]
    if missing:
        raise TuneTableError(f"pivot {missing[0]} is in no manifest", where="--pivots")
    order_by = sort_pivots or keys
    bad = [p for p in order_by if p not in keys]
    if bad:
        raise TuneTableError(f"--sort-pivots {bad[0]} is not one of the pivots {keys}", where="--sort-pivots")
    deduplicated = merged.sort(["_file", "_entry"]).unique(subset=order_by, keep="first", maintain_order=True)
    return deduplicated.sort(order_by, nulls_last=True).drop("_file", "_entry")
