"""Transfer between shapes: start a shape's search from the winners of its neighbours.

Neighbours share N and K and have the nearest M (distance in log2 M, ties to the smaller M).
Shapes are tuned in descending M within each (N, K), so every shape but the first of its group
has a tuned neighbour, and the chain starts where the analytical model is most reliable (large,
compute-bound shapes) rather than on latency-bound skinny ones. On the H200 recording the
descending chain reached within 2 % of the optimum within 10 % of the grid on more shapes than
the ascending one (benchmarks/search_efficiency.py); the order was chosen after that comparison.

``seed_shapes`` picks whose winners a shape starts from: the nearest tuned shape of the same
(N, K), then the tuned shape of another (N, K) with the most similar M (the winning tile
follows M more than N and K). Against two same-(N, K) neighbours, this raised the share of
shapes within 2 % in 10 % of the grid from 74.5 % to 81.8 % on the H200 recording and from
81.8 % to 89.1 % on its separate re-measurement (h200_gemm_mma_rerun).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tunetable.search.space import SearchSpace

Shape = tuple[int, int, int]


def tuning_order(shapes: Sequence[Shape]) -> list[Shape]:
    """Shapes grouped by (N, K) in first-appearance order, descending M inside a group."""
    groups: dict[tuple[int, int], list[int]] = {}
    for m, n, k in shapes:
        groups.setdefault((n, k), []).append(m)
    return [(m, n, k) for (n, k), ms in groups.items() for m in sorted(set(ms), reverse=True)]


def neighbours(*, shape: Shape, solved: Sequence[Shape], count: int = 2) -> list[Shape]:
    """The ``count`` solved shapes with the same N, K and the nearest M (log2 distance, ties to smaller M)."""
    m, n, k = shape
    same = [s for s in solved if s[1] == n and s[2] == k and s[0] != m]
    return sorted(same, key=lambda s: (abs(math.log2(s[0]) - math.log2(m)), s[0]))[:count]


def similar_m(*, shape: Shape, solved: Sequence[Shape], count: int = 1) -> list[Shape]:
    """The ``count`` solved shapes of *another* (N, K) with the nearest M (then nearest N, K; then smaller)."""
    m, n, k = shape
    other = [s for s in solved if (s[1], s[2]) != (n, k)]
    return sorted(other, key=lambda s: (abs(math.log2(s[0]) - math.log2(m)),
                                        abs(math.log2(s[1]) - math.log2(n))
                                        + abs(math.log2(s[2]) - math.log2(k)), s))[:count]


def seed_shapes(*, shape: Shape, solved: Sequence[Shape], same_nk: int = 1, other_nk: int = 1) -> list[Shape]:
    """Whose winners a shape starts from: the nearest solved shapes of its (N, K), then of another (N, K) by M."""
    return [*neighbours(shape=shape, solved=solved, count=same_nk),
            *similar_m(shape=shape, solved=solved, count=other_nk)]


def interleave(ranked_lists: Sequence[Sequence[str]]) -> list[str]:
    """Each list's first, then each list's second, ... without repeats."""
    merged: list[str] = []
    for rank in range(max((len(r) for r in ranked_lists), default=0)):
        for ranked in ranked_lists:
            if rank < len(ranked) and ranked[rank] not in merged:
                merged.append(ranked[rank])
    return merged


def neighbour_seeds(*, shape: Shape, winners: Mapping[Shape, Sequence[str]], space: SearchSpace) -> list[int]:
    """Positions in ``space`` of the seed shapes' winners (``seed_shapes``): each one's best first, then runners-up."""
    ranked = interleave([list(winners[s]) for s in seed_shapes(shape=shape, solved=list(winners))])
    positions = [space.position_of(config_id) for config_id in ranked]
    return [p for p in positions if p is not None]


def related_measurements(
    *,
    shape: Shape,
    history: Mapping[Shape, Sequence[tuple[str, float]]],
    predicted: Mapping[Shape, Mapping[str, float]],
    count: int = 2,
) -> list[tuple[str, float, float]]:
    """(config id, shape distance, log(measured / predicted)) of the nearest neighbours' successful measurements.

    ``history`` holds each tuned shape's (config id, ms) measurements, ``predicted`` the perf
    model's time per config id on that shape; the model-based search reads the residuals.
    """
    found = []
    for other in neighbours(shape=shape, solved=list(history), count=count):
        distance = abs(math.log2(other[0]) - math.log2(shape[0]))
        model = predicted[other]
        for config_id, measured_ms in history[other]:
            prediction = model.get(config_id, math.inf)
            if math.isfinite(measured_ms) and math.isfinite(prediction) and measured_ms > 0 and prediction > 0:
                found.append((config_id, distance, math.log(measured_ms * 1e-3 / prediction)))
    return found
