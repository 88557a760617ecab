"""The shape selector: a family and configuration for shapes no tuning table holds (pure Python).

For (M, N, K) the generated list ``SELECTORS[name]`` (``ShapeCandidate`` entries, codegen from
manifests/<selector>.yaml, built by ``tunetable select --selector`` from every table's
recording) gives the shortlist of the M range that holds M: at most a few configurations of
any family (online tuning also measures the two neighbouring ranges' shortlists: a shortlist is
chosen at its range's recorded Ms, and between them the winner is often a neighbour's; as the untuned
choice the wider ranking did worse when each recorded M was left out in turn). Each candidate's time
is predicted as

    log(time / cuBLAS time) = log(perf model time / roofline floor) + bias(M)

where the perf model (tunetable.kernels.perfmodel, the search's model) carries what depends on
N and K (waves, tiles, split-K traffic) and ``bias`` is what the recordings measured against
that model, averaged over their (N, K) and interpolated in log M between the range's ends. The
candidate with the lowest predicted time wins; equal predictions go to the lower ``rank``. A
shape's ranking is computed once and memoised (a few microseconds per candidate).

The same functions score every configuration when the build chooses the shortlists
(tunetable.selector), so the build and the runtime cannot disagree on a prediction. This module
reads no generated table (the build imports it): the process-wide selector over ``SELECTORS`` is
``tunetable.kernels.runtime.decide.shape_selector``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import ShapeCandidate
from tunetable.kernels.perfmodel import (
    LAUNCH_OVERHEAD_S,
    GemmTile,
    PersistentTile,
    Resources,
    predict_persistent_seconds,
    predict_seconds,
    roofline_floor_s,
)

SELECTOR = "gemm_selector"
INT32_MAX = 2**31 - 1  # the last range ends here (every M >= 1 is covered)
ModelFn = Callable[[int, int, int], float]


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
    """A shortlisted candidate ready to score: its model, bias at the range's start and the change to its end."""

    model: ModelFn
    bias: float
    bias_change: float
    candidate: ShapeCandidate


def model_function(*, family: str, tunables: Mapping[str, int], registers: int, smem_bytes: int) -> ModelFn:
    """The perf model of one configuration as ``f(m, n, k) -> seconds`` (tunables: lower-case or -D names).

    The family says which model ranks it (``KernelFamily.perf_model``): "persistent" (TMA +
    wgmma warpgroups, clusters) or "tiled" (mma.sync tiles, with the recorded registers and shared
    memory per block for occupancy).
    """
    model = FAMILIES[family].perf_model
    defines = {name.upper(): int(value) for name, value in tunables.items()}
    if model not in ("persistent", "tiled"):
        raise ValueError(f"family {family}: no perf model '{model}' (known: persistent, tiled)")
    if model == "persistent":
        persistent = PersistentTile.from_defines(defines)

        def persistent_seconds(m: int, n: int, k: int) -> float:
            return predict_persistent_seconds(tile=persistent, m=m, n=n, k=k)

        return persistent_seconds
    tile = GemmTile.from_defines(defines)
    resources = Resources(registers=int(registers), smem_bytes=int(smem_bytes), threads=tile.threads)

    def tiled_seconds(m: int, n: int, k: int) -> float:
        return predict_seconds(tile=tile, resources=resources, m=m, n=n, k=k)

    return tiled_seconds


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


class ShapeSelector:
    """Predictions over a generated candidate list, memoised per shape."""

    def __init__(self, candidates: Sequence[ShapeCandidate], *, name: str = SELECTOR):
        self.name = name
        self.candidates = tuple(candidates)
        ranges: dict[tuple[int, int], list[ShapeCandidate]] = {}
        for candidate in self.candidates:
            ranges.setdefault((candidate.m, candidate.m_end), []).append(candidate)
        self.ranges = sorted(ranges)
        self.starts = [start for start, _ in self.ranges]
        self.shortlists = {span: sorted(found, key=lambda c: c.rank) for span, found in ranges.items()}
        self.scored: dict[tuple[int, int], tuple[_Scored, ...]] = {}
        self.rankings: dict[tuple[int, int, int], tuple[Prediction, ...]] = {}

    def _span(self, m: int) -> tuple[int, int] | None:
        """The M range holding ``m`` (None: no selector, or M outside every range)."""
        position = bisect.bisect_right(self.starts, m) - 1
        if position < 0:
            return None
        span = self.ranges[position]
        return span if span[0] <= m < span[1] else None

    def shortlist(self, *, m: int) -> list[ShapeCandidate]:
        """The candidates of the M range holding ``m``, in shortlist order (empty: none)."""
        span = self._span(m)
        return list(self.shortlists[span]) if span is not None else []

    def _scored(self, span: tuple[int, int]) -> tuple[_Scored, ...]:
        """The range's candidates with their perf models, built on first use."""
        found = self.scored.get(span)
        if found is None:
            found = tuple(_Scored(model=model_function(family=c.kernel, tunables=dict(c.tunables),
                                                        registers=c.registers, smem_bytes=c.smem_bytes),
                                  bias=c.bias, bias_change=c.bias_end - c.bias, candidate=c)
                          for c in self.shortlists[span])
            self.scored[span] = found
        return found

    def rank(self, *, m: int, n: int, k: int, neighbours: bool = False) -> tuple[Prediction, ...]:
        """Every candidate of M's range on (M, N, K), fastest predicted first (ties: shortlist rank);
        with ``neighbours`` the two neighbouring ranges' candidates too (what online tuning measures)."""
        key = (m, n, k, neighbours)
        found = self.rankings.get(key)
        if found is None:
            found = self._rank(m=m, n=n, k=k, neighbours=neighbours)
            self.rankings[key] = found
        return found

    def _rank(self, *, m: int, n: int, k: int, neighbours: bool) -> tuple[Prediction, ...]:
        """The predictions of one shape, computed now: the shortlist of M's range and, with ``neighbours``, of
        the ranges on either side (each candidate's bias held at its own range's nearer end outside it), a
        configuration listed twice counted once (M's own range first)."""
        span = self._span(m)
        if span is None:
            return ()
        spans = [span]
        if neighbours:
            position = self.ranges.index(span)
            spans += [*self.ranges[max(0, position - 1):position], *self.ranges[position + 1:position + 2]]
        first = self.shortlists[span][0]
        floor = roofline_floor_s(m=m, n=n, k=k)
        cublas = floor * math.exp(first.cublas + log_position(m=m, start=span[0], end=span[1])
                                  * (first.cublas_end - first.cublas))
        found, seen = [], set()
        for order, each in enumerate(spans):
            t = log_position(m=m, start=each[0], end=each[1])   # clamped: a neighbour keeps its nearer end
            for place, item in enumerate(self._scored(each)):
                key = (item.candidate.table, item.candidate.config_id)
                if key in seen:
                    continue
                seen.add(key)
                seconds = item.model(m, n, k)
                if seconds < math.inf:   # a block that cannot be resident is never a pick
                    found.append((seconds * math.exp(item.bias + t * item.bias_change), order, place, item.candidate))
        found.sort(key=lambda row: row[:3])
        scale = cublas / floor
        # Both times are ratios to the roofline floor, which knows no launch: on a launch-bound shape
        # (5 x 8 x 8) cuBLAS would take 0.0001 us; no kernel finishes before its launch (the perf model's
        # term). The order above is the unclamped one.
        return tuple(Prediction(candidate=c, seconds=max(value * scale, LAUNCH_OVERHEAD_S),
                                cublas_seconds=max(cublas, LAUNCH_OVERHEAD_S))
                     for value, _, _, c in found)

    def choose(self, *, m: int, n: int, k: int) -> Prediction | None:
        """The fastest predicted candidate for (M, N, K), or None when the selector has none for M."""
        ranking = self.rank(m=m, n=n, k=k)
        return ranking[0] if ranking else None
