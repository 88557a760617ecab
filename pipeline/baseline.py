"""The cuBLAS yardstick of a shape, shared by every recording that measured it, in each recording's session scale.

Each shard measures cuBLAS beside its configurations, and two tables are usually recorded in separate
sessions. A whole session can run faster or slower (clocks, thermals): dividing by the same session's
cuBLAS rows corrects that. But at some small shapes cuBLAS's own time is bimodal (two modes 8-12 % apart,
e.g. 256 x 4096 x 4096: 17.1 / 19.3 / 17.1 us in three shards; benchmarks/notes_gemm_wgmma_swap.md, "The
cuBLAS baseline between sessions"), while the kernels' rows repeat within 1 % between sessions; dividing
by one shard's row then moves a comparison between two tables by the baseline's mode, not by the kernels.

The yardstick fits log cuBLAS(recording r, shape s) = scale_r + level_s by least squares (the scales
summing to zero): level_s pools every recording's row of s, scale_r is what r's session ran faster or
slower over all the shapes it shares with the others. Recording r's yardstick at s is
exp(scale_r + level_s): a shape only one recording measured keeps that recording's own row.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

Shape = tuple[int, int, int]
Session = Hashable         # a recording's name (the selector's fit: (table, recording))
FIT_ROUNDS = 200          # alternating means (backfitting): a few dozen rounds reach the tolerance
FIT_TOLERANCE = 1e-12


def _levels(*, logs: Mapping[Session, Mapping[Shape, float]], scales: Mapping[Session, float]) -> dict[Shape, float]:
    """Per shape, the mean over its recordings of log cuBLAS minus the recording's scale."""
    sums: dict[Shape, list[float]] = {}
    for name, rows in logs.items():
        for shape, value in rows.items():
            sums.setdefault(shape, []).append(value - scales[name])
    return {shape: sum(values) / len(values) for shape, values in sums.items()}


def _logs(baselines: Mapping[Session, Mapping[Shape, float]]) -> dict[Session, dict[Shape, float]]:
    """log cuBLAS per recording and shape (rows without a positive time left out)."""
    return {name: {shape: math.log(ms) for shape, ms in rows.items() if ms > 0} for name, rows in baselines.items()}


def session_scales(*, baselines: Mapping[Session, Mapping[Shape, float]]) -> dict[Session, float]:
    """Per recording, log of how much slower its session ran cuBLAS than the pooled level (summing to zero).

    Fitted on the shapes two or more recordings measured; a recording sharing none keeps 0.
    """
    logs = _logs(baselines)
    counts: dict[Shape, int] = {}
    for rows in logs.values():
        for shape in rows:
            counts[shape] = counts.get(shape, 0) + 1
    shared = {name: {s: v for s, v in rows.items() if counts[s] > 1} for name, rows in logs.items()}
    fitted_names = [name for name, rows in shared.items() if rows]
    scales = {name: 0.0 for name in logs}
    for _ in range(FIT_ROUNDS):
        levels = _levels(logs=shared, scales=scales)
        fitted = {name: sum(v - levels[s] for s, v in shared[name].items()) / len(shared[name])
                  for name in fitted_names}
        centre = sum(fitted.values()) / len(fitted) if fitted else 0.0
        moved = max((abs(fitted[name] - centre - scales[name]) for name in fitted_names), default=0.0)
        scales.update({name: fitted[name] - centre for name in fitted_names})
        if moved < FIT_TOLERANCE:
            break
    return scales


def pooled_baselines(*, baselines: Mapping[Session, Mapping[Shape, float]]) -> dict[Session, dict[Shape, float]]:
    """Per recording, per shape it measured: its yardstick exp(scale + level), in the units of ``baselines``."""
    scales = session_scales(baselines=baselines)
    logs = _logs(baselines)
    levels = _levels(logs=logs, scales=scales)
    return {name: {shape: math.exp(scales[name] + levels[shape]) for shape in rows} for name, rows in logs.items()}
