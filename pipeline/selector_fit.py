"""Build the shape selector from every table's recording: the choice for shapes no table holds.

What the runtime predicts (tunetable.kernels.runtime.selector_serve) for a configuration c on (M, N, K) is

    log(time / cuBLAS) = log(perf model / roofline floor) + bias_c(M, N, K)

The perf model (times the runtime's ``m_fit_factor``: ``model_function``) carries what
depends on N and K (tiles, waves, split-K traffic) and on how M fills the tiles. ``bias_c`` is
learned here from the recordings: at every measured shape of c's table, the residual
``log(median / cuBLAS yardstick) - log(model / floor)``; per recorded (N', K') those
residuals are interpolated in log M (its term), and ``bias_c(M, N, K)`` is the mean of the terms,
each weighted by e^-1 per octave of M beyond the Ms its (N', K') measured, times
e^(-d / BIAS_NK_SCALE) at d octaves from (N, K) to (N', K') (None: 1, every (N', K') alike). The runtime's
``nk_closeness`` / ``nk_shares`` / ``nk_mean`` combine the terms for both the build and the runtime.
The yardstick is each recording's cuBLAS rows pooled over every table that measured the shape, in that
recording's session scale (``tunetable.baseline``), as the dispatch list compares tables: one shard's
cuBLAS row can sit on either of two modes at some small shapes, and would move the families' biases apart.

The anchors are the measured Ms of every table; between two anchors the bias is linear in log M.
Each M range between anchors keeps, per point of an (N, K) lattice (1024 to 32768 in half octaves), a
shortlist of ``candidates`` configurations (any family), chosen greedily so that over the (M, N, K) probes
of the range near that point the best shortlisted prediction is as close as possible to the best
prediction over every configuration: the runtime scores a shape on the shortlist of the point nearest
its (N, K) (about a microsecond per candidate). A range's entries are the union of its shortlists, each
naming its points (``CELLS``).
benchmarks/unseen_shapes.py measures what this chooses on shapes it was not built from.

The fit (``build_selector``) gives one candidate per (range, shortlisted configuration), with its terms per
(N', K') at both ends of the range (BIAS_TERMS; cuBLAS's in CUBLAS_TERMS); tunetable.selector_manifest writes
them to the selector's data file (kernels/data/<selector>.json) and its short manifest. Only tables' recordings
(``tables.<t>.recording``, restricted to the table's shapes) are read, with their device's coverage recordings
(``selector.<s>.coverage``: extra (N, K) pairs recorded for this fit only, restricted to that CSV's shapes, each a
session of its own for the yardstick; ``tunetable.selector_measurements.selector_tables``): never validation data.
"""

from __future__ import annotations

import math
from itertools import product
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tunetable.errors import TuneTableError
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import ShapeCandidate
from tunetable.kernels.perfmodel import LAUNCH_OVERHEAD_S, roofline_floor_s
from tunetable.perfmodel_grid import GridFn
from tunetable.kernels.runtime.selector_serve import (
    BIAS_NK_SCALE,
    CUBLAS_NK_SCALE,
    LATTICE,
    cell_runs,
    interpolate,
    ModelFn,
    log_position,
    m_fit_factor,
    nk_closeness,
    nk_mean,
    nk_octaves,
    nk_shares,
    range_shares,
)
from tunetable.selector_measurements import (  # noqa: F401  (re-exported: moved from here)
    SelectorConfig,
    TableMeasurements,
    load_table_measurements,
    measurements_from_frames,
    shared_yardstick,
)

Shape = tuple[int, int, int]
INT32_MAX = 2**31 - 1
DEFAULT_CANDIDATES = 8
# N and K of the probes shortlists are chosen on: the runtime's LATTICE. Each lattice point (a cell) has its own
# shortlist per M range, chosen on the probes of the points within CELL_RADIUS steps
# along each axis; the runtime scores a shape on the shortlist of the point nearest its (N, K). Chosen by the
# folds of benchmarks/unseen_shapes.py (the tables' recordings, never the validation ones), runtime pick within
# 5 % / geomean regret, leave-one-(N, K)-out [leave-one-M-out], at the recordings of ab00d3cb3a2a:
#   one shortlist per range, 3 Ms        94.3 % / 1.45 %  [74.3 % / 4.74 %]
#   one per range, 6 Ms                  88.6 % / 1.99 %  [78.6 % / 3.80 %]
#   one per range of 16 / 20, 3 Ms       94.3 % / 1.43 / 1.39 %  [72.9 / 75.7 % / 4.67 / 4.25 %]
#   per cell, radius 0 / 1, 3 Ms         94.3 % / 1.36 / 1.34 %  [72.9 / 75.7 % / 3.94 / 3.73 %]
#   per cell, radius 0, 8 Ms             94.3 % / 1.32 %  [87.1 % / 2.63 %]
#   per cell, radius 1, 8 Ms             94.3 % / 1.34 %  [88.6 % / 2.38 %]
#   every configuration scored (no shortlist)  94.3 % / 1.34 %  [88.6 % / 2.40 %]
# Radius 1 with 8 Ms matches scoring every configuration on both folds, with 12 scored per shape. With the
# runtime's M_TILES_EXPONENT 0.1: radius 1, 8 Ms 94.3 % / 1.31 % [90.0 % / 1.84 %]; 12 Ms 94.3 % / 1.31 %
# [88.6 % / 2.37 %]; radius 2, 8 Ms 94.3 % / 1.36 % [84.3 % / 2.88 %].
# The shortlist's size (params.yaml selector.<name>.candidates), again on 2026-12-06 (issue 49) at df43932's
# recordings, on both devices' (benchmarks/unseen_shapes.py --folds-only [--device h100]; the validation recordings
# are read only to report): leave-one-(N, K)-out [leave-one-M-out], within 5 % / geomean regret,
#   12   H200 94.3 % / 1.02 %  [87.1 % / 2.35 %]   H100 91.4 % / 1.44 %  [85.7 % / 2.74 %]
#   24   H200 95.7 % / 0.99 %  [88.6 % / 2.04 %]   H100 92.9 % / 1.52 %  [87.1 % / 2.52 %]
#   every configuration scored: H200 98.6 % / 0.74 % [91.4 % / 1.79 %], H100 94.3 % / 1.40 % [88.6 % / 2.34 %]
# 24 lowers the two folds' summed regret on both devices (3.37 -> 3.03 %, 4.18 -> 4.04 %), but a shape's first
# decision scores twice the candidates: 38 -> 62 µs CPU (unseen_shapes --timing-only, the same host and load; target
# < 50 µs, docs/figures.md). Not taken: 12 stays. Read after, on the validation recordings: gemm() 0.994x -> 0.995x
# cuBLAS on the H200, 1.016x -> 1.016x on the H100, the same slow picks.
CELL_RADIUS = 1
PROBES_PER_RANGE = 8          # Ms per range, spread evenly in log M
OPEN_RANGE_OCTAVES = 2        # probes of the last range reach this far above the largest anchor
OUTSIDE_DECAY = 1.0           # an (N, K) whose Ms do not reach M weighs e^-1 per octave beyond them
NO_COVER = 10.0               # log regret of a probe no shortlisted candidate can run
DECIMALS = 4                  # logs and weights in the data file: 1e-4 is 0.01 % of a time


@dataclass(frozen=True)
class ResidualPoint:
    """One measurement behind a bias: a configuration at one shape, against the perf model."""

    shape: Shape
    median_ms: float
    cublas_ms: float
    model_ms: float

    @property
    def value(self) -> float:
        """log(median / cuBLAS) - log(model / floor): what the model misses at this shape."""
        m, n, k = self.shape
        floor_ms = 1e3 * roofline_floor_s(m=m, n=n, k=k)
        return math.log(self.median_ms / self.cublas_ms) - math.log(self.model_ms / floor_ms)


@dataclass(frozen=True)
class GroupTerm:
    """One (N, K)'s contribution to a bias at M: its interpolated residual and weight."""

    n: int
    k: int
    points: tuple[ResidualPoint, ...]   # the one or two measured Ms the value comes from
    value: float
    weight: float


@dataclass(frozen=True)
class RangeTerms:
    """Configurations' terms at both ends of an M range, per (N, K) of the model (arrays [configs, pairs])."""

    at_lo: np.ndarray
    lo_weights: np.ndarray      # 0: no term (the configuration's table never measured that (N, K))
    at_hi: np.ndarray
    hi_weights: np.ndarray
    usable: np.ndarray          # [configs]: measured at or around both ends (a candidate of the range)

    def bias(self, *, n: int, k: int, t: float, pairs: Sequence[tuple[int, int]]) -> np.ndarray:
        """The bias on (N, K) at log position ``t`` in the range (nan: not usable), as the runtime combines it."""
        closeness = nk_closeness(octaves=nk_octaves(n=n, k=k, pairs=pairs), scale=BIAS_NK_SCALE)
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = range_shares(start=nk_shares(weights=list(self.lo_weights.T), closeness=closeness),
                                  end=nk_shares(weights=list(self.hi_weights.T), closeness=closeness), t=t)
            bias = nk_mean(values=[*self.at_lo.T, *self.at_hi.T], shares=shares)
        return np.where(self.usable, np.asarray(bias, dtype=float), np.nan)


@dataclass(frozen=True)
class SelectorModel:
    """Every configuration's terms at every anchor: scores any configuration on any shape."""

    anchors: tuple[int, ...]
    configs: tuple[SelectorConfig, ...]
    parts: tuple[tuple[ModelFn, int], ...]   # per configuration: its perf model without m_fit_factor, its BLOCK_M
    grids: tuple[GridFn | None, ...]         # per configuration: that model over arrays of N and K (None: per shape)
    pairs: tuple[tuple[int, int], ...]   # every recorded (N, K): the terms' last axis
    values: np.ndarray          # [configs, anchors, pairs]: each (N, K)'s term (rounded as the manifest writes it)
    weights: np.ndarray         # [configs, anchors, pairs]: its weight (0: no term)
    measured: np.ndarray        # [configs, anchors]: some (N, K) measured the configuration at or around the anchor
    cublas_values: np.ndarray   # [anchors, pairs]: log(cuBLAS / floor) per (N, K)
    cublas_weights: np.ndarray  # [anchors, pairs]
    position: Mapping[int, int]  # anchor -> its index in the anchors axis

    def span(self, m: int) -> tuple[int, int]:
        """The anchors bracketing M (both the nearest one outside the anchors' span)."""
        below = [a for a in self.anchors if a <= m]
        above = [a for a in self.anchors if a >= m]
        lo = below[-1] if below else above[0]
        hi = above[0] if above else below[-1]
        return lo, hi

    def range_terms(self, *, columns: Sequence[int] | range, lo: int, hi: int) -> RangeTerms:
        """The terms at both ends of a range; usable: measured at or around both ends.

        Only in a range that no table measured at both ends does a configuration measured at one end
        take that end's terms at the other: tables' configurations are not extrapolated beyond their
        measured Ms where another table measured them.
        """
        rows, a, b = list(columns), self.position[lo], self.position[hi]
        ok_lo, ok_hi = self.measured[rows, a], self.measured[rows, b]
        at_lo, lo_weights = self.values[rows, a], self.weights[rows, a]
        at_hi, hi_weights = self.values[rows, b], self.weights[rows, b]
        if (self.measured[:, a] & self.measured[:, b]).any():   # no one-ended candidates in this range
            return RangeTerms(at_lo=at_lo, lo_weights=lo_weights, at_hi=at_hi, hi_weights=hi_weights,
                              usable=ok_lo & ok_hi)
        lo_only, hi_only = (ok_lo & ~ok_hi)[:, None], (ok_hi & ~ok_lo)[:, None]
        return RangeTerms(at_lo=np.where(hi_only, at_hi, at_lo), lo_weights=np.where(hi_only, hi_weights, lo_weights),
                          at_hi=np.where(lo_only, at_lo, at_hi), hi_weights=np.where(lo_only, lo_weights, hi_weights),
                          usable=ok_lo | ok_hi)

    def scores(self, *, m: int, n: int, k: int, lo: int | None = None, hi: int | None = None,
               columns: Sequence[int] | None = None, terms: RangeTerms | None = None) -> np.ndarray:
        """Predicted log(time / cuBLAS) of configurations on one shape (inf: cannot run it, or never measured).

        ``lo``/``hi``: the anchors the bias is interpolated between (default: those bracketing M);
        ``columns``: which configurations (default: all); ``terms``: their ``range_terms`` (computed if absent).
        """
        if lo is None or hi is None:
            lo, hi = self.span(m)
        columns = range(len(self.configs)) if columns is None else columns
        terms = self.range_terms(columns=columns, lo=lo, hi=hi) if terms is None else terms
        floor = roofline_floor_s(m=m, n=n, k=k)
        families = {family: runnable(family=family, shape=(m, n, k)) for family in {c.family for c in self.configs}}
        # The runtime's model_function, base x m_fit_factor, with the factor taken once per BLOCK_M (bit-equal times).
        factors = {block_m: m_fit_factor(m=m, block_m=block_m) for block_m in {self.parts[c][1] for c in columns}}
        seconds = np.array([self.parts[c][0](m, n, k) * factors[self.parts[c][1]]
                            if families[self.configs[c].family] else math.inf for c in columns])
        bias = terms.bias(n=n, k=k, t=log_position(m=m, start=lo, end=hi), pairs=self.pairs)
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = np.log(seconds / floor) + bias
        return np.where(np.isfinite(scores), scores, np.inf)

    def lattice_scores(self, *, ms: Sequence[int], lo: int, hi: int, columns: Sequence[int],
                       terms: RangeTerms) -> np.ndarray:
        """``scores`` at every M of ``ms`` and LATTICE point, [M, N point, K point, configuration]: the models' times
        at all of them at once (``perfmodel_grid``), the rest per shape as ``scores`` does it (bit-equal)."""
        m_grid, n_grid, k_grid = np.meshgrid(np.array(ms, dtype=np.int64), np.array(LATTICE, dtype=np.int64),
                                             np.array(LATTICE, dtype=np.int64), indexing="ij")
        factors = {block_m: np.array([m_fit_factor(m=m, block_m=block_m) for m in ms])[:, None, None]
                   for block_m in {self.parts[c][1] for c in columns}}
        seconds = np.empty((*m_grid.shape, len(columns)))
        for i, c in enumerate(columns):
            (base, block_m), grid = self.parts[c], self.grids[c]
            times = grid(m_grid, n_grid, k_grid) if grid is not None else np.array(
                [[[base(m, n, k) for k in LATTICE] for n in LATTICE] for m in ms])
            seconds[..., i] = times * factors[block_m]
        families = [self.configs[c].family for c in columns]
        scores = np.empty_like(seconds)
        for (i, m), (a, n), (b, k) in product(enumerate(ms), enumerate(LATTICE), enumerate(LATTICE)):
            runs = {family: runnable(family=family, shape=(m, n, k)) for family in set(families)}
            at = np.where([runs[family] for family in families], seconds[i, a, b], math.inf)
            bias = terms.bias(n=n, k=k, t=log_position(m=m, start=lo, end=hi), pairs=self.pairs)
            with np.errstate(divide="ignore", invalid="ignore"):
                point = np.log(at / roofline_floor_s(m=m, n=n, k=k)) + bias
            scores[i, a, b] = np.where(np.isfinite(point), point, np.inf)
        return scores

    def cublas_log(self, *, anchor: int, n: int, k: int) -> float:
        """log(cuBLAS / floor) at an anchor on (N, K), as the runtime combines the terms."""
        a = self.position[anchor]
        closeness = nk_closeness(octaves=nk_octaves(n=n, k=k, pairs=self.pairs), scale=CUBLAS_NK_SCALE)
        shares = nk_shares(weights=list(self.cublas_weights[a]), closeness=closeness)
        return float(nk_mean(values=list(self.cublas_values[a]), shares=shares))


@dataclass(frozen=True)
class SelectorBuild:
    """A built selector: the model over every configuration and the generated candidates."""

    model: SelectorModel
    candidates: tuple[ShapeCandidate, ...]
    tables: tuple[TableMeasurements, ...]

    @property
    def anchors(self) -> tuple[int, ...]:
        """Every measured M, ascending."""
        return self.model.anchors


# --- the bias: what the recordings say about the model -----------------------------------------

def anchors_of(tables: Sequence[TableMeasurements]) -> tuple[int, ...]:
    """Every measured M of every table, ascending."""
    return tuple(sorted({shape[0] for table in tables for shape in table.times}))


def group_term(*, n: int, k: int, points: Sequence[ResidualPoint], m: int) -> GroupTerm:
    """One (N, K)'s residual at M: linear in log M between its bracketing measured Ms, else its nearest."""
    ordered = sorted(points, key=lambda p: p.shape[0])
    below = [p for p in ordered if p.shape[0] <= m]
    above = [p for p in ordered if p.shape[0] >= m]
    if below and above:
        lo, hi = below[-1], above[0]
        value = interpolate(m=m, start=lo.shape[0], end=hi.shape[0], at_start=lo.value, at_end=hi.value)
        used = (lo,) if lo is hi else (lo, hi)
        return GroupTerm(n=n, k=k, points=used, value=value, weight=1.0)
    nearest = below[-1] if below else above[0]
    octaves = abs(math.log2(m / nearest.shape[0]))
    return GroupTerm(n=n, k=k, points=(nearest,), value=nearest.value, weight=math.exp(-OUTSIDE_DECAY * octaves))


def residual_points(*, table: TableMeasurements, config: SelectorConfig,
                    model: Callable[[int, int, int], float] | None = None
                    ) -> dict[tuple[int, int], list[ResidualPoint]]:
    """(N, K) -> the configuration's measured shapes there, each against the perf model."""
    model = model or config.model()
    groups: dict[tuple[int, int], list[ResidualPoint]] = {}
    for shape in sorted(table.times, key=lambda s: (s[1], s[2], s[0])):
        median = table.times[shape].get(config.config_id)
        cublas = table.cublas.get(shape)
        predicted = model(*shape)
        if median is None or cublas is None or not math.isfinite(predicted):
            continue
        groups.setdefault((shape[1], shape[2]), []).append(
            ResidualPoint(shape=shape, median_ms=median, cublas_ms=cublas, model_ms=1e3 * predicted))
    return groups


def bias_terms(*, groups: Mapping[tuple[int, int], Sequence[ResidualPoint]], m: int) -> list[GroupTerm]:
    """Every (N, K)'s term of the bias at M."""
    return [group_term(n=n, k=k, points=points, m=m) for (n, k), points in groups.items() if points]


def measured_at(terms: Sequence[GroupTerm]) -> bool:
    """Whether some (N, K) measured a configuration at or around M: only then is it a candidate there.

    Beyond a table's measured Ms (gemm_wgmma_swap's stop below the others': params.yaml) nothing says how its
    configurations do, so they are no candidates there.
    """
    return any(term.weight == 1.0 for term in terms)


def near_terms(terms: Sequence[GroupTerm], *, n: int, k: int, scale: float | None) -> list[GroupTerm]:
    """The terms with their weights times their (N', K')'s closeness to (N, K) (``nk_closeness``)."""
    closeness = nk_closeness(octaves=nk_octaves(n=n, k=k, pairs=[(t.n, t.k) for t in terms]), scale=scale)
    return [replace(term, weight=term.weight * near) for term, near in zip(terms, closeness)]


def weighted(terms: Sequence[GroupTerm]) -> float:
    """The weighted mean of the terms' values (nan without any), combined as the runtime does (``nk_mean``)."""
    weights = [term.weight for term in terms]
    if not sum(weights):
        return math.nan
    return float(nk_mean(values=[term.value for term in terms],
                         shares=nk_shares(weights=weights, closeness=[1.0] * len(terms))))


def cublas_terms(*, tables: Sequence[TableMeasurements], m: int) -> list[GroupTerm]:
    """log(cuBLAS / floor) per (N, K) at M, over every table's cuBLAS rows (a shape in two tables: their mean)."""
    by_shape: dict[Shape, list[float]] = {}
    for table in tables:
        for shape, ms in table.cublas.items():
            by_shape.setdefault(shape, []).append(ms)
    groups: dict[tuple[int, int], list[ResidualPoint]] = {}
    for shape in sorted(by_shape, key=lambda s: (s[1], s[2], s[0])):
        mean_ms = math.exp(sum(math.log(v) for v in by_shape[shape]) / len(by_shape[shape]))
        floor_ms = 1e3 * roofline_floor_s(m=shape[0], n=shape[1], k=shape[2])
        # As a ResidualPoint with median = cuBLAS and model = floor, its value is log(cuBLAS / floor).
        groups.setdefault((shape[1], shape[2]), []).append(
            ResidualPoint(shape=shape, median_ms=mean_ms, cublas_ms=floor_ms, model_ms=floor_ms))
    return bias_terms(groups=groups, m=m)


def cublas_seconds(*, tables: Sequence[TableMeasurements], shape: Shape) -> float | None:
    """cuBLAS's time on a shape as the recordings predict it: log(cuBLAS / floor) at M, nearer (N, K) weigh more.

    Each recorded (N, K)'s term (linear in log M) is weighted by e^(-d / CUBLAS_NK_SCALE), d its
    distance to the shape's (N, K) in octaves (log2 N, log2 K): cuBLAS's efficiency follows N and K.
    """
    m, n, k = shape
    terms = cublas_terms(tables=shared_yardstick(tables), m=m)
    if not terms:
        return None
    near = near_terms(terms, n=n, k=k, scale=CUBLAS_NK_SCALE)
    # Never below a launch (the runtime's Prediction says why): tiny shapes are launch-bound.
    return max(roofline_floor_s(m=m, n=n, k=k) * math.exp(weighted(near)), LAUNCH_OVERHEAD_S)


def ranges_of(anchors: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """(start, end, anchor at start, anchor at end) of every M range: [1, first) and [last, INT32_MAX) flat."""
    spans: list[tuple[int, int, int, int]] = []
    if anchors and anchors[0] > 1:
        spans.append((1, anchors[0], anchors[0], anchors[0]))
    spans.extend((lo, hi, lo, hi) for lo, hi in zip(anchors, anchors[1:]))
    if anchors:
        spans.append((anchors[-1], INT32_MAX, anchors[-1], anchors[-1]))
    return spans


def probe_ms(*, start: int, end: int) -> list[int]:
    """The Ms a range's shortlist is chosen on: PROBES_PER_RANGE spread in log M from ``start``."""
    top = start * 2 ** OPEN_RANGE_OCTAVES if end == INT32_MAX else end
    values = {max(1, min(end - 1, round(start * (top / start) ** (j / PROBES_PER_RANGE))))
              for j in range(PROBES_PER_RANGE)}
    return sorted(values)


def runnable(*, family: str, shape: Shape) -> bool:
    """Whether a family's kernels accept the shape (alignment, int32 extents)."""
    try:
        FAMILIES[family].check_shape(*shape)
    except ValueError:
        return False
    return True


def shortlist(*, regrets: np.ndarray, size: int) -> list[int]:
    """Greedy: each next column most lowers the summed regret of the rows' best chosen column (ties: first)."""
    if regrets.size == 0:
        return []
    best = np.full(regrets.shape[0], NO_COVER)
    chosen: list[int] = []
    for _ in range(min(size, regrets.shape[1])):
        totals = np.minimum(best[:, None], regrets).sum(axis=0)
        totals[chosen] = np.inf
        pick = int(np.argmin(totals))
        chosen.append(pick)
        best = np.minimum(best, regrets[:, pick])
    return chosen


def cell_shortlists(*, scores: np.ndarray, size: int) -> dict[int, list[tuple[int, int]]]:
    """Each lattice point's shortlist (``shortlist`` over the probes within CELL_RADIUS of it) as one pool:
    column -> the points (i, j) whose shortlist holds it, columns in order of first use (points in order)."""
    pool: dict[int, list[tuple[int, int]]] = {}
    _, points_n, points_k, columns = scores.shape
    for i in range(points_n):
        for j in range(points_k):
            near = scores[:, max(0, i - CELL_RADIUS):i + CELL_RADIUS + 1, max(0, j - CELL_RADIUS):j + CELL_RADIUS + 1]
            rows = near.reshape(-1, columns)
            rows = rows[np.isfinite(rows).any(axis=1)]
            regrets = np.minimum(rows - rows.min(axis=1, keepdims=True), NO_COVER)
            for column in shortlist(regrets=regrets, size=size):
                pool.setdefault(column, []).append((i, j))
    return pool


def term_arrays(*, groups_per_anchor: Sequence[Sequence[GroupTerm]],
                pairs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Values and weights [anchors, pairs] of terms per anchor (0 where an (N, K) has none), rounded as written."""
    column = {pair: i for i, pair in enumerate(pairs)}
    values = np.zeros((len(groups_per_anchor), len(pairs)))
    weights = np.zeros_like(values)
    for row, terms in enumerate(groups_per_anchor):
        for term in terms:
            values[row, column[(term.n, term.k)]] = term.value
            weights[row, column[(term.n, term.k)]] = term.weight
    return np.round(values, DECIMALS), np.round(weights, DECIMALS)


def selector_model(*, tables: Sequence[TableMeasurements]) -> SelectorModel:
    """Every configuration of every table with its terms at every anchor (against the shared cuBLAS yardstick)."""
    tables = shared_yardstick(tables)
    anchors = anchors_of(tables)
    configs = tuple(config for table in tables for config in table.configs)
    parts = tuple(config.model_parts() for config in configs)
    grids = tuple(config.model_grid() for config in configs)
    pairs = tuple(sorted({(shape[1], shape[2]) for table in tables for shape in table.times}))
    by_table = {table.table: table for table in tables}
    values = np.zeros((len(configs), len(anchors), len(pairs)))
    weights = np.zeros_like(values)
    measured = np.zeros((len(configs), len(anchors)), dtype=bool)
    for i, config in enumerate(configs):
        groups = residual_points(table=by_table[config.table], config=config)
        per_anchor = [bias_terms(groups=groups, m=a) for a in anchors]
        values[i], weights[i] = term_arrays(groups_per_anchor=per_anchor, pairs=pairs)
        measured[i] = [measured_at(terms) for terms in per_anchor]
    cublas_values, cublas_weights = term_arrays(
        groups_per_anchor=[cublas_terms(tables=tables, m=a) for a in anchors], pairs=pairs)
    return SelectorModel(anchors=anchors, configs=configs, parts=parts, grids=grids, pairs=pairs, values=values,
                         weights=weights, measured=measured, cublas_values=cublas_values,
                         cublas_weights=cublas_weights, position={a: i for i, a in enumerate(anchors)})


def term_rows(*, pairs: Sequence[tuple[int, int]], at_lo: np.ndarray, lo_weights: np.ndarray, at_hi: np.ndarray,
              hi_weights: np.ndarray) -> tuple[tuple[int, int, float, float, float, float], ...]:
    """(N, K, value at the start, weight, value at the end, weight) per (N, K) with a term at either end."""
    return tuple((n, k, float(at_lo[p]), float(lo_weights[p]), float(at_hi[p]), float(hi_weights[p]))
                 for p, (n, k) in enumerate(pairs) if lo_weights[p] > 0 or hi_weights[p] > 0)


def build_selector(*, tables: Sequence[TableMeasurements], candidates: int = DEFAULT_CANDIDATES,
                   progress: Callable[[int, int], None] | None = None) -> SelectorBuild:
    """The selector of these measurements: per M range, its shortlist with biases at both ends.

    ``progress(done, total)`` is called after each M range (the CLI's progress bar).
    """
    model = selector_model(tables=tables)
    position = model.position
    made: list[ShapeCandidate] = []
    spans = ranges_of(model.anchors)
    for done, (start, end, lo, hi) in enumerate(spans, start=1):
        # Candidates of a range: configurations whose table measured both of its ends; only where no
        # table did, those measured at one end (with that end's terms): a table's configurations are
        # never extrapolated beyond its measured Ms where another table measured them.
        every = model.range_terms(columns=range(len(model.configs)), lo=lo, hi=hi)
        usable = [int(i) for i in np.flatnonzero(every.usable)]
        if not usable:
            raise TuneTableError(f"no table measured M = {lo} or {hi}: the M range [{start}, {end}) has no candidate")
        terms = model.range_terms(columns=usable, lo=lo, hi=hi)
        ms = probe_ms(start=start, end=end)
        # log(time / cuBLAS) of every usable configuration at every probe: [M, N point, K point, configuration].
        scores = model.lattice_scores(ms=ms, lo=lo, hi=hi, columns=usable, terms=terms)
        cublas = term_rows(pairs=model.pairs, at_lo=model.cublas_values[position[lo]],
                           lo_weights=model.cublas_weights[position[lo]], at_hi=model.cublas_values[position[hi]],
                           hi_weights=model.cublas_weights[position[hi]])
        pool = cell_shortlists(scores=scores, size=candidates)
        for rank, (column, cells) in enumerate(pool.items()):
            config = model.configs[usable[column]]
            made.append(ShapeCandidate(
                m=start, m_end=end, rank=rank, table=config.table, kernel=config.family, config_id=config.config_id,
                registers=config.registers, smem_bytes=config.smem_bytes,
                bias_terms=term_rows(pairs=model.pairs, at_lo=terms.at_lo[column], lo_weights=terms.lo_weights[column],
                                     at_hi=terms.at_hi[column], hi_weights=terms.hi_weights[column]),
                cublas_terms=cublas, tunables=tuple((name.lower(), value) for name, value in config.tunables),
                cells=cell_runs([(LATTICE[i], LATTICE[j]) for i, j in cells])))
        if progress is not None:
            progress(done, len(spans))
    return SelectorBuild(model=model, candidates=tuple(made), tables=tuple(tables))
