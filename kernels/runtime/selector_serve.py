"""The shape selector: a family and configuration for shapes no tuning table holds (pure Python).

For (M, N, K) the selector's candidates (``ShapeCandidate`` entries, read from its data file
kernels/data/<selector>.json, fitted by ``tunetable select --selector`` on every table's
recording) give the shortlist of the M range that holds M at the ``LATTICE`` point nearest (N, K)
(``nearest_cell``; the candidate's ``cells``): at most a few configurations of any family (online
tuning also measures the same point's shortlists of the two neighbouring ranges: a shortlist is
chosen at its range's recorded Ms, and between them the winner is often a neighbour's; as the untuned
choice the wider ranking did worse when each recorded M was left out in turn). Each candidate's time
is predicted as

    log(time / cuBLAS time) = log(perf model time / roofline floor) + bias(M, N, K)

where the perf model (tunetable.kernels.perfmodel, the search's model, times (padded rows / M) **
PADDING_EXPONENT x (M tiles) ** M_TILES_EXPONENT: ``model_function``) carries what depends on N and K
(waves, tiles, split-K traffic) and on how M fills its tiles, and ``bias`` is what the recordings measured against
that model: at each end of the range, the mean of the recorded (N', K')'s terms, each weighted by
its own weight (e^-1 per octave of M beyond the Ms that (N', K') measured) times
e^(-d / BIAS_NK_SCALE), d the distance from (N, K) to (N', K') in octaves (``nk_closeness``,
``nk_shares``, ``nk_mean``); linear in log M between the range's ends. The predicted cuBLAS time is
the same mean of log(cuBLAS / floor) with CUBLAS_NK_SCALE. The candidate with the lowest predicted
time wins; equal predictions go to the lower ``rank``. A shape's ranking is computed once and
memoised (a few microseconds per candidate; the closeness of each (N', K') once per shape).

The same functions score every configuration when the build chooses the shortlists
(tunetable.selector_fit), so the build and the runtime cannot disagree on a prediction. This module
reads no generated table (the build imports it): the process-wide selector over the data file that
``SELECTOR_FILES`` names is ``tunetable.kernels.runtime.decide.shape_selector``.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import ShapeCandidate
from tunetable.kernels.perfmodel import (
    LAUNCH_OVERHEAD_S,
    GemmTile,
    PersistentTile,
    Resources,
    persistent_model,
    roofline_floor_s,
    tiled_model,
)

SELECTOR = "gemm_selector"
INT32_MAX = 2**31 - 1  # the last range ends here (every M >= 1 is covered)
ModelFn = Callable[[int, int, int], float]
# A configuration's bias at (M, N, K): a recorded (N', K') weighs e^(-d / BIAS_NK_SCALE) at d octaves from
# (N, K) (times its own weight; None: every (N', K') alike). Chosen leaving each recorded (N, K) out in turn on
# the tables' recordings (benchmarks/unseen_shapes.py's folds, 70 shapes; never the validation recordings):
# within 5 % / geomean regret of the runtime's shortlist of 12, (every configuration), [leaving each M out]:
# on the recordings of 7672953 (before gemm_wgmma's TAIL_SPLIT):
#   unweighted  91.4 % / 2.13 %  (92.9 % / 1.30 %)  [75.7 % / 5.66 %]
#   0.5         94.3 % / 1.37 %  (94.3 % / 0.95 %)  [71.4 % / 6.62 %]
#   1           92.9 % / 1.19 %  (95.7 % / 0.86 %)  [71.4 % / 6.71 %]
#   1.5, 2      92.9 % / 1.19 %  (94.3 % / 0.90 %)  [75.7 % / 5.70 %]
#   3, 4        94.3 % / 1.11-1.16 %  (94.3 % / 0.90 %)  [75.7 % / 5.68 %]
#   6           91.4 % / 2.13 %  (92.9 % / 1.30 %)  [75.7 % / 5.68 %]
# on gemm_wgmma's re-recording at 78eeb52fb378 (74 configurations, with TAIL_SPLIT):
#   unweighted  90.0 % / 2.04 %  (91.4 % / 1.61 %)
#   1           88.6 % / 2.12 %  (88.6 % / 1.87 %)
#   2, 3, 4     88.6 % / 2.13-2.18 %  (90.0 % / 1.81 %)
#   6           90.0 % / 2.06 %  (91.4 % / 1.63 %)
# The gain of a scale is one to three shapes of 70 and changed sign with the re-recording; unweighted is the
# setting that keeps >= 90 % on both recordings. Shortlists of 10 / 14 give 84.3 % / 90.0 % now: 12 stays.
# Tried at gemm_wgmma v11 (51f809283766) and not kept: instead of a mean, a weighted least-squares plane in
# (log2 N, log2 K) through each configuration's terms, its slopes shrunk by a ridge (leave-one-(N, K)-out, the
# folds above, cut the residual's error by a fifth once the shift common to all configurations is removed):
# ridge 0.5 / 1: 85.7 % / 3.23 % and 90.0 % / 2.17 % [84.3 % / 2.72 % and 2.70 %] against 90.0 % / 2.02 %
# [84.3 % / 2.64 %]; extrapolated beyond the five recorded (N, K) the planes pick worse (the validation recordings,
# read after: 6.84 % / 5.80 % geomean regret against 4.41 %).
BIAS_NK_SCALE: float | None = None
# cuBLAS's time on a shape: an (N', K') weighs e^(-d / 0.5). Leave-one-(N, K)-out on the recordings: median
# error 4.3 % (8.3 % unweighted); 0.25-2 give 4.9-6.6 %.
CUBLAS_NK_SCALE: float | None = 0.5
# The selector's model: the perf model's time x (padded rows / M) ** PADDING_EXPONENT. Measured against the perf
# model, a configuration's time grows faster with the rows its last M tile wastes than the model charges (within
# one configuration and (N, K), log(measured / model) rises 0.16 per unit of log(padded rows / M) on the swap
# recording, 0.11 on gemm_wgmma's), and a bias interpolated between a range's ends cannot follow a tile that fits
# M in three parts at one end and badly inside. Chosen by the folds of benchmarks/unseen_shapes.py (the tables'
# recordings, never the validation ones): runtime shortlist within 5 % / geomean regret, leave-one-(N, K)-out
# [leave-one-M-out], on the recordings of gemm_wgmma_swap v5 (ab00d3cb3a2a):
#   0     94.3 % / 1.44 %  [70.0 % / 8.48 %]      0.3   94.3 % / 1.45 %  [74.3 % / 4.74 %]
#   0.15  94.3 % / 1.70 %  [70.0 % / 8.11 %]      0.4   95.7 % / 1.43 %  [71.4 % / 4.84 %]
#   0.25  91.4 % / 1.66 %  [72.9 % / 5.11 %]      0.5   94.3 % / 1.56 %  [70.0 % / 4.98 %]
#   0.8   92.9 % / 1.60 %  [67.1 % / 5.89 %]
# 0.3 has the lowest summed regret of the two folds. Read after, on the validation recordings: gemm()'s pick
# 0.918x the exhaustive best at 0 and at 0.3 (0.934x at 0.5, 0.943x at 0.8); online's best of 8, 83.3 % / 2.74 %
# -> 86.7 % / 2.55 %.
PADDING_EXPONENT: float = 0.3
# And x (M tiles) ** M_TILES_EXPONENT: at one M, a tile that splits M into more parts costs more than the model
# says (M = 160 of 5120 x 13824: three 72-row tiles measure 0.65x cuBLAS, two 80-row ones 0.93x). With the
# shortlists per (N, K) lattice point and PADDING_EXPONENT 0.3, the folds as above, at ab00d3cb3a2a:
#   0     94.3 % / 1.34 %  [88.6 % / 2.38 %]      0.15  94.3 % / 1.31 %  [88.6 % / 1.94 %]
#   0.05  94.3 % / 1.31 %  [88.6 % / 2.35 %]      0.25  94.3 % / 1.31 %  [88.6 % / 2.02 %]
#   0.1   94.3 % / 1.31 %  [90.0 % / 1.84 %]
# (at 0.1, PADDING_EXPONENT 0.2 / 0.45: 1.34 / 1.31 %, [2.38 / 2.02 %]). 0.1 has the lowest regret of both. Read
# after, on the validation recordings: gemm()'s pick 0.937x the exhaustive best at 0, 0.05 and 0.1 (0.948x at 0.15,
# 0.954x at 0.25).
# Both swept again on the recordings of gemm_wgmma v11 (51f809283766; benchmarks/unseen_shapes.py's folds, as above):
#   0.3 / 0.1   90.0 % / 2.02 %  [84.3 % / 2.64 %]
#   PADDING 0.2 / 0.4 / 0.5   [84.3 / 82.9 / 82.9 % / 3.13 / 2.83 / 2.76 %]
#   M_TILES 0 / 0.2   [84.3 / 82.9 % / 3.13 / 2.83 %]  (leave-one-(N, K)-out 90.0 % / 2.02-2.06 % at every setting)
# so both stay; OUTSIDE_DECAY 0.5 / 2 changed no pick, 12 probes per range [81.4 % / 3.26 %]. Read after, on the
# validation recordings: 66.7 % / 4.41 % at 0.3 / 0.1, 70.0-73.3 % / 4.25-4.32 % at PADDING 0.4-0.5 or M_TILES 0.2
# (gemm() 0.958x / 0.959x the exhaustive best): not chosen on them.
M_TILES_EXPONENT: float = 0.1
# Tried on 2026-12-04 and not kept (benchmarks/unseen_shapes.py's folds, runtime shortlist within 5 % / geomean
# regret, leave-one-(N, K)-out [leave-one-M-out]). Beyond the recorded (N, K) a configuration whose perf model
# misses by far can be predicted below the roofline floor: gemm_mma's c540ba05a15 (64 x 128 tiles) is modelled at
# 6-22x the floor at M <= 64 and measures 1.3-3.8x, so its bias is about -1.3; at 5 x 18944 x 3584 (validation) a less
# pessimistic model put it at 0.77x the floor and it measured 1.21x the best. On the recordings of dd77fad:
#   the model's log ratio x 0.75 / 0.5, the bias refit   91.4 / 85.7 % / 1.69 / 2.34 %  [81.4 / 71.4 % / 4.26 / 6.57 %]
#   predictions below the floor mirrored above it      80.0 % / 3.53 %  [67.1 % / 5.35 %]
#   x e^(p |bias + log(cuBLAS / floor)|), how far the model misses, p = 0 / 0.05 / 0.1 / 0.15 / 0.2:
#     91.4 / 91.4 / 91.4 / 91.4 / 88.6 % / 1.73 / 1.49 / 1.47 / 1.59 / 1.92 %  [82.9 / 84.3 / 84.3 / 84.3 / 82.9 % /
#     3.11 / 2.87 / 2.77 / 2.80 / 3.02 %]
# and at 7a9c40f's re-recording p = 0 / 0.1: 91.4 / 91.4 % / 1.32 / 1.33 %  [85.7 / 84.3 % / 2.54 / 2.69 %]: no gain
# (one or two shapes of 70 either way), and the pick at 5 / 64 x 18944 x 3584 stays c540ba05a15 at 0.1. A floor on the
# predictions alone changes no pick (it keeps their order); the pick is predicted below the floor at 15 [25] of the 70
# held-out shapes, so the level of the predictions is off more than their order.
# And (2026-12-04, at 727ef8e's recordings) PADDING_EXPONENT per family, after benchmarks/partial_tiles.py found
# gemm_mma's partial tiles 0.97x their whole-tile time and the TMA families' up to 2.7x: gemm_mma 0 / the TMA families
# 0.3   94.3 % / 1.14 %  [80.0 % / 3.70 %];  gemm_mma 0 / the TMA families 0.45   95.7 % / 1.08 %  [77.1 % / 4.07 %];
# against 0.3 for all, 94.3 % / 1.14 %  [81.4 % / 3.49 %]: not kept. The TMA penalty is not a power of the padding
# (it grows with the rows past M and with A's share of a stage), and the kernels may lose it (TAIL_SHIFT, notes).
# And (2026-12-06, issue 49, at df43932's recordings, both devices: the folds of benchmarks/unseen_shapes.py
# --folds-only on the H200's and the H100's default recordings, never the validation ones) a conservative bias: the
# terms' weighted mean plus 0.5 x their weighted standard deviation over the recorded (N', K') (a configuration the
# (N', K') disagree about predicted slower, in the build and the runtime alike). Leave-one-(N, K)-out
# [leave-one-M-out] within 5 % / geomean regret, H200 94.3 % / 1.02 % -> 92.9 % / 1.19 % [87.1 % / 2.35 % ->
# 82.9 % / 2.59 %], H100 91.4 % / 1.44 % -> 87.1 % / 1.92 % [85.7 % / 2.74 % -> 82.9 % / 3.07 %]: worse on both,
# not kept.
# The (N, K) lattice of the shortlists: each M range has one per point (ShapeCandidate.cells), and a shape is
# scored on the shortlist of the point nearest its (N, K): 1024 ... 32768 (LLM projections) in half octaves.
LATTICE: tuple[int, ...] = tuple(int(1024 * 2 ** (i / 2)) // 64 * 64 for i in range(11))
Terms = tuple[tuple[int, int, float, float, float, float], ...]   # (N', K', value at start, weight, at end, weight)


class Prediction(NamedTuple):
    """One candidate's predicted time on one shape, and the cuBLAS time predicted for the shape."""

    candidate: ShapeCandidate
    seconds: float
    cublas_seconds: float

    @property
    def speedup_vs_cublas(self) -> float:
        """Predicted cuBLAS time over predicted time (> 1: faster than cuBLAS)."""
        return self.cublas_seconds / self.seconds


class _Scored(NamedTuple):
    """A shortlisted candidate ready to score: its perf model and BLOCK_M (``model_parts``), its terms' values over
    the selector's (N', K') list (at the range's start, then its end) and its weights (an index into the
    selector's distinct weight pairs)."""

    model: ModelFn
    block_m: int
    values: tuple[float, ...]
    weights: int
    candidate: ShapeCandidate


class _Cublas(NamedTuple):
    """A range's cuBLAS terms over the selector's (N', K') list, its weights as indices of distinct vectors."""

    at_start: tuple[float, ...]
    at_end: tuple[float, ...]
    start_weights: int
    end_weights: int


class _Near(NamedTuple):
    """What one (N, K) gives every candidate: the shares of each distinct weight vector (bias and cuBLAS), and the
    lattice point whose shortlists score it (None: the candidates name no cells)."""

    bias: tuple[tuple[float, ...], ...]
    cublas: tuple[tuple[float, ...], ...]
    cell: tuple[int, int] | None


def nk_octaves(*, n: int, k: int, pairs: Sequence[tuple[int, int]]) -> tuple[float, ...]:
    """The distance from (N, K) to each (N', K') of ``pairs`` in octaves: hypot(log2 N'/N, log2 K'/K)."""
    log_n, log_k = math.log2(n), math.log2(k)
    return tuple(math.hypot(math.log2(p) - log_n, math.log2(q) - log_k) for p, q in pairs)


def nk_closeness(*, octaves: Sequence[float], scale: float | None) -> tuple[float, ...]:
    """e^(-d / scale) per distance d in octaves (``nk_octaves``); scale None: 1 each (unweighted)."""
    if scale is None:
        return (1.0,) * len(octaves)
    return tuple(math.exp(-d / scale) for d in octaves)


def nk_shares(*, weights: Sequence[Any], closeness: Sequence[float]) -> tuple[Any, ...]:
    """Each term's share of the weighted mean: its weight x closeness over their sum.

    ``weights`` per (N', K'): floats (one configuration) or arrays (one entry per configuration: the build).
    """
    products = list(map(operator.mul, weights, closeness))
    return tuple(map(operator.mul, products, repeat(1.0 / sum(products))))


def range_shares(*, start: Sequence[Any], end: Sequence[Any], t: float) -> tuple[Any, ...]:
    """The shares of a range's start terms then its end terms at log position ``t`` (0: start, 1: end): with
    them ``nk_mean`` over the start's then the end's values is the bias linear in log M between the ends."""
    return (*map(operator.mul, start, repeat(1.0 - t)), *map(operator.mul, end, repeat(t)))


def nk_mean(*, values: Sequence[Any], shares: Sequence[Any]) -> Any:
    """The terms' weighted mean: sum of value x share (floats, or arrays as in ``nk_shares``)."""
    return sum(map(operator.mul, values, shares))


def model_tile(*, family: str, tunables: Mapping[str, int], registers: int,
               smem_bytes: int) -> PersistentTile | tuple[GemmTile, Resources]:
    """What one configuration's perf model reads (tunables: lower-case or -D names): a ``PersistentTile``, or a
    ``GemmTile`` with its block's resources.

    The family says which model ranks it (``KernelFamily.perf_model``): "persistent" (TMA +
    wgmma warpgroups, clusters) or "tiled" (mma.sync tiles, with the recorded registers and shared
    memory per block for occupancy).
    """
    model = FAMILIES[family].perf_model
    defines = {name.upper(): int(value) for name, value in tunables.items()}
    if model not in ("persistent", "tiled"):
        raise ValueError(f"family {family}: no perf model '{model}' (known: persistent, tiled)")
    if model == "persistent":
        return PersistentTile.from_defines(defines)
    tile = GemmTile.from_defines(defines)
    return tile, Resources(registers=int(registers), smem_bytes=int(smem_bytes), threads=tile.threads)


def model_parts(*, family: str, tunables: Mapping[str, int], registers: int, smem_bytes: int) -> tuple[ModelFn, int]:
    """One configuration's perf model as ``f(m, n, k) -> seconds`` and its BLOCK_M (``model_tile``'s model):
    ``model_function`` without ``m_fit_factor``, which the runtime applies once per BLOCK_M."""
    found = model_tile(family=family, tunables=tunables, registers=registers, smem_bytes=smem_bytes)
    if isinstance(found, PersistentTile):
        return persistent_model(found), found.block_m
    tile, resources = found
    return tiled_model(tile=tile, resources=resources), tile.block_m


def m_fit_factor(*, m: int, block_m: int) -> float:
    """(padded rows / M) ** PADDING_EXPONENT x (M tiles) ** M_TILES_EXPONENT: what the selector's model charges
    for how BLOCK_M fits M (the rows past M in the last M tile, the parts M is split into)."""
    tiles = -(-m // block_m)
    return (tiles * block_m / m) ** PADDING_EXPONENT * tiles ** M_TILES_EXPONENT


def model_function(*, family: str, tunables: Mapping[str, int], registers: int, smem_bytes: int) -> ModelFn:
    """The selector's model of one configuration as ``f(m, n, k) -> seconds``: the perf model's time
    (``model_parts``) x ``m_fit_factor``."""
    base, block_m = model_parts(family=family, tunables=tunables, registers=registers, smem_bytes=smem_bytes)

    def seconds(m: int, n: int, k: int) -> float:
        """The perf model's time x m_fit_factor."""
        return base(m, n, k) * m_fit_factor(m=m, block_m=block_m)

    return seconds


def lattice_bounds(values: Sequence[int]) -> tuple[float, ...]:
    """The log2 midpoints between neighbouring lattice values (ascending): where the nearest value changes."""
    return tuple((math.log2(a) + math.log2(b)) / 2 for a, b in zip(values, values[1:]))


def lattice_point(*, log_n: float, log_k: float, bounds: Sequence[float]) -> tuple[int, int]:
    """The LATTICE point nearest (log2 N, log2 K) along each axis (ties: the lower), given its ``lattice_bounds``."""
    return LATTICE[bisect.bisect_left(bounds, log_n)], LATTICE[bisect.bisect_left(bounds, log_k)]


def nearest_cell(*, n: int, k: int) -> tuple[int, int]:
    """The LATTICE point (N', K') nearest (N, K) in log2 along each axis (ties: the lower), clamped to its ends."""
    return lattice_point(log_n=math.log2(n), log_k=math.log2(k), bounds=lattice_bounds(LATTICE))


def cell_runs(points: Sequence[tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """LATTICE points (N', K') as runs (N', first K', last K') of neighbouring K' at one N' (sorted)."""
    runs: list[list[int]] = []
    for n, k in sorted(points):
        if runs and runs[-1][0] == n and LATTICE.index(runs[-1][2]) + 1 == LATTICE.index(k):
            runs[-1][2] = k
        else:
            runs.append([n, k, k])
    return tuple((n, first, last) for n, first, last in runs)


def cell_points(runs: Sequence[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The LATTICE points of ``cell_runs``' runs: (N', K') for every lattice K' from first to last."""
    return [(n, k) for n, first, last in runs for k in LATTICE if first <= k <= last]


def log_position(*, m: int, start: int, end: int) -> float:
    """Where M lies between ``start`` and ``end`` in log M: 0 at start, 1 at end, clamped."""
    if end <= start or m <= start:
        return 0.0
    if m >= end:
        return 1.0
    return math.log(m / start) / math.log(end / start)


def interpolate(*, m: int, start: int, end: int, at_start: float, at_end: float) -> float:
    """A value given at M = start and M = end, linear in log M between them (constant outside)."""
    if at_start == at_end:
        return at_start
    t = log_position(m=m, start=start, end=end)
    return at_start + t * (at_end - at_start)


_UNDECIDED = object()   # a shape choose() has not decided yet (None: decided, no candidate)


class ShapeSelector:
    """Predictions over a generated candidate list, memoised per shape (and what depends on (N, K) alone, per
    (N, K): a workload's many Ms of one (N, K) share it)."""

    def __init__(self, candidates: Sequence[ShapeCandidate], *, name: str = SELECTOR):
        self.name = name
        self.candidates = tuple(candidates)
        ranges: dict[tuple[int, int], list[ShapeCandidate]] = {}
        for candidate in self.candidates:
            ranges.setdefault((candidate.m, candidate.m_end), []).append(candidate)
        self.ranges = sorted(ranges)
        self.starts = [start for start, _ in self.ranges]
        self.shortlists = {span: sorted(found, key=lambda c: c.rank) for span, found in ranges.items()}
        # Each range's shortlist per LATTICE point (ShapeCandidate.cells), in rank order; a range whose candidates
        # name no cells scores them all on every (N, K).
        self.cells: dict[tuple[tuple[int, int], tuple[int, int]], tuple[int, ...]] = {}
        for span, found in self.shortlists.items():
            per_cell: dict[tuple[int, int], list[int]] = {}
            for index, candidate in enumerate(found):
                for cell in cell_points(candidate.cells):
                    per_cell.setdefault(cell, []).append(index)
            self.cells.update({(span, cell): tuple(indices) for cell, indices in per_cell.items()})
        self.bounds = lattice_bounds(LATTICE)
        # Every (N', K') any candidate's terms name, and the distinct weight vectors over them (most candidates
        # share one): their shares on a shape's (N, K) are computed once for every candidate.
        self.pairs = tuple(sorted({(row[0], row[1]) for c in self.candidates
                                   for row in (*c.bias_terms, *c.cublas_terms)}))
        self.column = {pair: i for i, pair in enumerate(self.pairs)}
        self.bias_vectors: dict[tuple[float, ...], int] = {}
        self.bias_pairs: dict[tuple[int, int], int] = {}        # (start, end) bias weight vectors
        self.cublas_vectors: dict[tuple[float, ...], int] = {}
        self.terms = {span: tuple(self._bias(c) for c in shortlist) for span, shortlist in self.shortlists.items()}
        self.cublas = {span: self._cublas(shortlist[0]) for span, shortlist in self.shortlists.items()}
        self.bias_pair_list = list(self.bias_pairs)   # index -> (start, end) bias weight vectors
        self.log_pairs = tuple((math.log2(p), math.log2(q)) for p, q in self.pairs)
        # Unweighted (BIAS_NK_SCALE None), the bias shares do not depend on (N, K): computed once.
        self.bias_shares = None if BIAS_NK_SCALE is not None else tuple(
            nk_shares(weights=weights, closeness=(1.0,) * len(self.pairs)) for weights in self.bias_vectors)
        self.scored: dict[tuple[tuple[int, int], int], _Scored] = {}
        self.scored_cells: dict[tuple[tuple[int, int], tuple[int, int] | None], tuple[_Scored, ...]] = {}
        self.near: dict[tuple[int, int], _Near] = {}
        self.rankings: dict[tuple[int, int, int, bool], tuple[Prediction, ...]] = {}
        self.choices: dict[tuple[int, int, int], Prediction | None] = {}

    def _span(self, m: int) -> tuple[int, int] | None:
        """The M range holding ``m`` (None: no selector, or M outside every range)."""
        position = bisect.bisect_right(self.starts, m) - 1
        if position < 0:
            return None
        span = self.ranges[position]
        return span if span[0] <= m < span[1] else None

    def shortlist(self, *, m: int, n: int | None = None, k: int | None = None) -> list[ShapeCandidate]:
        """The candidates of the M range holding ``m`` in rank order (empty: none); with ``n`` and ``k``, those
        of the shortlist that scores (M, N, K)."""
        span = self._span(m)
        if span is None:
            return []
        if n is None or k is None:
            return list(self.shortlists[span])
        return [s.candidate for s in self._scored_cell(span, self._near(n, k).cell)]

    def _dense(self, terms: Terms) -> tuple[tuple[float, ...], ...]:
        """Terms over the selector's (N', K') list: values and weights at the start, then at the end (0: absent)."""
        columns = [[0.0] * len(self.pairs) for _ in range(4)]
        for n, k, *numbers in terms:
            for column, number in zip(columns, numbers):
                column[self.column[(n, k)]] = float(number)
        return tuple(tuple(column) for column in columns)

    def _bias(self, candidate: ShapeCandidate) -> tuple[tuple[float, ...], int]:
        """A candidate's bias values (start, then end) and the index of its (start, end) weight vectors."""
        at_start, start_weights, at_end, end_weights = self._dense(candidate.bias_terms)
        pair = tuple(self.bias_vectors.setdefault(w, len(self.bias_vectors)) for w in (start_weights, end_weights))
        return (*at_start, *at_end), self.bias_pairs.setdefault(pair, len(self.bias_pairs))

    def _cublas(self, candidate: ShapeCandidate) -> _Cublas:
        """A range's cuBLAS terms (every candidate of a range carries the same)."""
        at_start, start_weights, at_end, end_weights = self._dense(candidate.cublas_terms)
        start, end = (self.cublas_vectors.setdefault(w, len(self.cublas_vectors)) for w in (start_weights, end_weights))
        return _Cublas(at_start=at_start, at_end=at_end, start_weights=start, end_weights=end)

    def _scored_one(self, span: tuple[int, int], index: int) -> _Scored:
        """One of the range's candidates with its perf model, built on first use."""
        key = (span, index)
        found = self.scored.get(key)
        if found is None:
            c = self.shortlists[span][index]
            values, pair = self.terms[span][index]
            found = self.scored[key] = _Scored(*model_parts(family=c.kernel, tunables=dict(c.tunables),
                                                            registers=c.registers, smem_bytes=c.smem_bytes),
                                               values=values, weights=pair, candidate=c)
        return found

    def _scored_cell(self, span: tuple[int, int], cell: tuple[int, int] | None) -> tuple[_Scored, ...]:
        """The range's candidates on the shortlist of a lattice point (all of them where the point has none)."""
        key = (span, cell)
        found = self.scored_cells.get(key)
        if found is None:
            indices = self.cells.get(key, range(len(self.shortlists[span])))
            found = self.scored_cells[key] = tuple(self._scored_one(span, i) for i in indices)
        return found

    def _near(self, n: int, k: int) -> _Near:
        """Each distinct weight vector's shares on (N, K), computed once per (N, K)."""
        found = self.near.get((n, k))
        if found is None:
            log_n, log_k = math.log2(n), math.log2(k)   # nk_octaves, with the pairs' logs taken once
            octaves = tuple(math.hypot(p - log_n, q - log_k) for p, q in self.log_pairs)
            bias = self.bias_shares
            if bias is None:
                closeness = nk_closeness(octaves=octaves, scale=BIAS_NK_SCALE)
                bias = tuple(nk_shares(weights=weights, closeness=closeness) for weights in self.bias_vectors)
            near = nk_closeness(octaves=octaves, scale=CUBLAS_NK_SCALE)
            # nearest_cell, with the lattice's bounds computed once
            cell = lattice_point(log_n=log_n, log_k=log_k, bounds=self.bounds) if self.cells else None
            found = self.near[(n, k)] = _Near(
                bias=bias, cublas=tuple(nk_shares(weights=weights, closeness=near) for weights in self.cublas_vectors),
                cell=cell)
        return found

    def rank(self, *, m: int, n: int, k: int, neighbours: bool = False) -> tuple[Prediction, ...]:
        """Every candidate of M's range on (M, N, K), fastest predicted first (ties: shortlist rank);
        with ``neighbours`` the two neighbouring ranges' candidates too (what online tuning measures)."""
        key = (m, n, k, neighbours)
        found = self.rankings.get(key)
        if found is None:
            scores, scale, cublas = self._scores(m=m, n=n, k=k, neighbours=neighbours)
            scores.sort(key=operator.itemgetter(0))   # stable: ties keep M's own range first, then shortlist rank
            found = tuple(self._prediction(value=value, candidate=c, scale=scale, cublas=cublas)
                          for value, c in scores)
            chosen = None if neighbours else self.choices.get(key[:3])
            if chosen is not None:   # the same object choose() answered
                found = (chosen, *found[1:])
            self.rankings[key] = found
        return found

    def choose(self, *, m: int, n: int, k: int) -> Prediction | None:
        """The fastest predicted candidate for (M, N, K), or None when the selector has none for M (``rank``'s
        first, without building every other prediction: gemm()'s first call of a shape asks only this)."""
        key = (m, n, k)
        found = self.choices.get(key, _UNDECIDED)
        if found is _UNDECIDED:
            ranking = self.rankings.get((m, n, k, False))
            if ranking is not None:
                return ranking[0] if ranking else None
            scores, scale, cublas = self._scores(m=m, n=n, k=k, neighbours=False)
            found = None
            if scores:
                value, candidate = min(scores, key=operator.itemgetter(0))   # the first of equal predictions
                found = self._prediction(value=value, candidate=candidate, scale=scale, cublas=cublas)
            self.choices[key] = found
        return found

    @staticmethod
    def _prediction(*, value: float, candidate: ShapeCandidate, scale: float, cublas: float) -> Prediction:
        """A candidate's Prediction from its predicted time / cuBLAS x floor."""
        # Both times are ratios to the roofline floor, which knows no launch: on a launch-bound shape
        # (5 x 8 x 8) cuBLAS would take 0.0001 us; no kernel finishes before its launch (the perf model's
        # term). The order is the unclamped one.
        return Prediction(candidate, max(value * scale, LAUNCH_OVERHEAD_S), max(cublas, LAUNCH_OVERHEAD_S))

    def _scores(self, *, m: int, n: int, k: int, neighbours: bool
                ) -> tuple[list[tuple[float, ShapeCandidate]], float, float]:
        """One shape's (predicted time / cuBLAS x floor, candidate) in shortlist order, computed now, with the
        scale to seconds and cuBLAS's predicted time: the shortlist of M's range and, with ``neighbours``, of
        the ranges on either side (each candidate's bias held at its own range's nearer end outside it), a
        configuration listed twice counted once (M's own range first)."""
        span = self._span(m)
        if span is None:
            return [], 1.0, 0.0
        spans = [span]
        if neighbours:
            position = self.ranges.index(span)
            spans += [*self.ranges[max(0, position - 1):position], *self.ranges[position + 1:position + 2]]
        near = self._near(n, k)
        scored = [self._scored_cell(each, near.cell) for each in spans]
        floor = roofline_floor_s(m=m, n=n, k=k)
        # cuBLAS's log(time / floor) at both ends of M's range, then linear in log M between them.
        terms = self.cublas[span]
        start = nk_mean(values=terms.at_start, shares=near.cublas[terms.start_weights])
        end = nk_mean(values=terms.at_end, shares=near.cublas[terms.end_weights])
        cublas = floor * math.exp(start + log_position(m=m, start=span[0], end=span[1]) * (end - start))
        pairs = self.bias_pair_list
        found, seen, exp = [], set(), math.exp
        fits: dict[int, float] = {}   # m_fit_factor per BLOCK_M (a shortlist has a few)
        for each, items in zip(spans, scored):
            t = log_position(m=m, start=each[0], end=each[1])   # clamped: a neighbour keeps its nearer end
            shares: dict[int, tuple[float, ...]] = {}
            for model, block_m, values, pair, candidate in items:
                if neighbours:   # (a range's own shortlist names each configuration once)
                    key = (candidate.table, candidate.config_id)
                    if key in seen:
                        continue
                    seen.add(key)
                factor = fits.get(block_m)
                if factor is None:
                    factor = fits[block_m] = m_fit_factor(m=m, block_m=block_m)
                seconds = model(m, n, k) * factor   # model_function's product
                if seconds < math.inf:   # a block that cannot be resident is never a pick
                    weights = shares.get(pair)
                    if weights is None:
                        first, last = pairs[pair]
                        weights = shares[pair] = range_shares(start=near.bias[first], end=near.bias[last], t=t)
                    found.append((seconds * exp(nk_mean(values=values, shares=weights)), candidate))
        return found, cublas / floor, cublas
