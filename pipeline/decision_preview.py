"""What gemm() will run for a shape, and what it is expected to cost: table entry or selector prediction.

For each (M, N, K): the runtime's own decision (tunetable.kernels.runtime.decide: the dispatch list and
its table where they hold the shape's (N, K), else the shape selector), the family and
configuration, where they come from, the predicted kernel time and the predicted cuBLAS time.
A table entry at a shape its table's recording measured reports those medians (``measured``), and so does the
selector's pick at a shape a coverage recording measured (``coverage`` names that recording);
elsewhere the times are the selector's model (perf model + the recordings' bias), built from the
same recordings. A shape no family can run (alignment, int32 extents) says why. A prediction for a shape
whose roofline floor lies below every recorded shape's is marked ``extrapolated``: there a call's fixed cost,
which no recording measured, outweighs what the model and its bias carry; one faster than the shape's roofline
floor on the device's measured ceilings is marked ``below_floor``: not credible (the PyTorch operator runs torch's
matmul there, kernels/runtime/layers.py ``torch_serves``). Floors are the device's (``ceilings``; None: the H200's).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tunetable.kernels.families.devices import Ceilings
from tunetable.kernels.perfmodel import roofline_floor_s

Shape = tuple[int, int, int]


@dataclass(frozen=True)
class Suggestion:
    """The runtime's choice for one shape, with its predicted (or measured) time and cuBLAS's."""

    shape: Shape
    source: str                 # "table" | "selector" | "fallback" | "cannot run"
    table: str | None
    family: str | None
    config_id: str | None
    where: str | None           # e.g. "gemm_wgmma[12]", "gemm_selector[40]"
    seconds: float | None
    cublas_seconds: float | None
    measured: bool
    reason: str | None = None   # why the kernels cannot run the shape
    count: int = 1
    extrapolated: bool = False  # predicted for a shape smaller (roofline floor) than any recorded one
    below_floor: bool = False   # predicted faster than the shape's roofline floor on the device: not credible
    coverage: str | None = None  # the coverage recording a measured time comes from (None: the table's own)

    @property
    def speedup_vs_cublas(self) -> float | None:
        """cuBLAS's time over this time (> 1: faster than cuBLAS)."""
        if not self.seconds or self.cublas_seconds is None:
            return None
        return self.cublas_seconds / self.seconds


def cannot_run(shape: Shape, *, families: Sequence[Any]) -> str | None:
    """Why no family can run the shape (each family's shape check), or None when one can."""
    reasons = []
    for family in families:
        try:
            family.check_shape(*shape)
        except ValueError as exc:
            reasons.append(str(exc))
        else:
            return None
    return "; ".join(dict.fromkeys(reasons)) or "no kernel family"


@dataclass(frozen=True)
class MeasuredTime:
    """One configuration's recorded median at a shape, the cuBLAS time beside it and where it was recorded."""

    median_ms: float
    cublas_ms: float
    coverage: str | None   # the coverage recording of the shape (None: the table's own recording)


def measured_times(tables: Sequence[Any]) -> dict[tuple[str, str, Shape], MeasuredTime]:
    """(table, config id, shape) -> its MeasuredTime over the tables' recordings, coverage recordings merged in
    (cuBLAS as ``tables`` hold it: the shard's, or the shared yardstick)."""
    found = {}
    for table in tables:
        for shape, by_config in table.times.items():
            cublas = table.cublas.get(shape)
            if cublas is None:
                continue
            coverage = table.sessions.get(shape)
            for config_id, median in by_config.items():
                found[(table.table, config_id, shape)] = MeasuredTime(median_ms=median, cublas_ms=cublas,
                                                                      coverage=coverage)
    return found


def floor_s(shape: Shape, *, ceilings: Ceilings | None = None) -> float:
    """The shape's roofline floor in seconds on ``ceilings`` (tunetable.kernels.perfmodel; None: the H200's)."""
    m, n, k = shape
    return roofline_floor_s(m=m, n=n, k=k, ceilings=ceilings)


def smallest_recorded(tables: Sequence[Any], *, ceilings: Ceilings | None = None) -> tuple[Shape, float] | None:
    """The recorded shape with the lowest roofline floor over the tables' recordings, and that floor (None: none)."""
    shapes = {shape for table in tables for shape in table.times}
    if not shapes:
        return None
    shape = min(shapes, key=lambda s: (floor_s(s, ceilings=ceilings), s))
    return shape, floor_s(shape, ceilings=ceilings)


def predicted_ratio(model: Any, *, table: str, config_id: str, shape: Shape) -> float | None:
    """The selector model's time / cuBLAS time of one table configuration on a shape (None: unknown).

    (The model predicts log(time / cuBLAS); outputs show its inverse, the speedup over cuBLAS.)
    """
    column = next((i for i, c in enumerate(model.configs) if (c.table, c.config_id) == (table, config_id)), None)
    if column is None:
        return None
    m, n, k = shape
    score = float(model.scores(m=m, n=n, k=k, columns=[column])[0])
    return math.exp(score) if math.isfinite(score) else None


def suggest(*, shape: Shape, count: int = 1, dispatcher: Any, families: Sequence[Any], model: Any | None,
            measured: Mapping[tuple[str, str, Shape], MeasuredTime], selector_name: str,
            selector_entries: Sequence[Any], cublas: Callable[[Shape], float | None],
            smallest_floor_s: float | None = None, ceilings: Ceilings | None = None) -> Suggestion:
    """The runtime's decision for one shape and its expected time (the dispatcher's warning is silenced).

    The chosen configuration's time is ``measured`` where a recording holds it at the shape (a table's, or for the
    selector's pick a coverage recording's); elsewhere it is the predicted time / cuBLAS ratio times
    ``cublas(shape)``, cuBLAS's time as the recordings predict it, ``extrapolated`` where the shape's roofline floor
    is below ``smallest_floor_s`` (floors on the device's ``ceilings``), ``below_floor`` where the predicted time is
    below the shape's own floor.
    """
    reason = cannot_run(shape, families=families)
    if reason is not None:
        return Suggestion(shape=shape, source="cannot run", table=None, family=None, config_id=None, where=None,
                          seconds=None, cublas_seconds=None, measured=False, reason=reason, count=count)
    m, n, k = shape
    floor = floor_s(shape, ceilings=ceilings)
    below = smallest_floor_s is not None and floor < smallest_floor_s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decision = dispatcher.decide(m=m, n=n, k=k)
    entry = decision.entry
    if decision.prediction is not None:
        candidate = decision.prediction.candidate
        position = next(i for i, c in enumerate(selector_entries) if c is candidate)
        chosen = Suggestion(shape=shape, source="selector", table=candidate.table, family=candidate.kernel,
                            config_id=candidate.config_id, where=f"{selector_name}[{position}]", seconds=None,
                            cublas_seconds=None, measured=False, count=count)
        speedup = decision.prediction.speedup_vs_cublas
        return with_times(chosen, found=measured.get((candidate.table, candidate.config_id, shape)),
                          predicted=lambda baseline: baseline / speedup, cublas=cublas, below=below, floor=floor)
    table = decision.choice.table if decision.choice is not None else entry.kernel
    chosen = Suggestion(shape=shape, source="fallback" if decision.fallback else "table", table=table,
                        family=entry.kernel, config_id=entry.config_id,
                        where=f"{table}[{decision.index}]" if decision.index is not None else None,
                        seconds=None, cublas_seconds=None, measured=False, count=count)

    def predicted(baseline: float) -> float | None:
        ratio = predicted_ratio(model, table=table, config_id=entry.config_id, shape=shape) if model else None
        return None if ratio is None else ratio * baseline

    return with_times(chosen, found=measured.get((table, entry.config_id, shape)), predicted=predicted, cublas=cublas,
                      below=below, floor=floor)


def with_times(chosen: Suggestion, *, found: MeasuredTime | None, predicted: Callable[[float], float | None],
               cublas: Callable[[Shape], float | None], below: bool, floor: float) -> Suggestion:
    """``chosen`` with its times: the recorded ones where ``found``, else ``predicted`` from cuBLAS's predicted time
    (marked ``below_floor`` where faster than ``floor``, the shape's roofline floor on the device)."""
    if found is not None:
        return replace(chosen, seconds=found.median_ms * 1e-3, cublas_seconds=found.cublas_ms * 1e-3, measured=True,
                       coverage=found.coverage)
    baseline = cublas(chosen.shape)
    seconds = None if baseline is None else predicted(baseline)
    return replace(chosen, seconds=seconds, cublas_seconds=baseline, extrapolated=below and seconds is not None,
                   below_floor=seconds is not None and seconds < floor)


def workload_totals(suggestions: Sequence[Suggestion]) -> tuple[float, float] | None:
    """(sum of count x time, sum of count x cuBLAS time) over the shapes that have both (None: none has)."""
    timed = [s for s in suggestions if s.seconds is not None and s.cublas_seconds is not None]
    if not timed:
        return None
    return sum(s.count * s.seconds for s in timed), sum(s.count * s.cublas_seconds for s in timed)


def coverage_shapes(suggestions: Sequence[Suggestion]) -> dict[str, list[Shape]]:
    """Per coverage recording, the shapes whose measured times it gave (in the suggestions' order)."""
    found: dict[str, list[Shape]] = {}
    for s in suggestions:
        if s.coverage:
            found.setdefault(s.coverage, []).append(s.shape)
    return found
