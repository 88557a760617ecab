"""Figures recomputed from a committed recording's rows, independently of the pipeline (for the dispatch tests).

``recording_speedup``: cuBLAS median / a configuration's median in one shard. ``yardsticks_by_lstsq``: the shared
cuBLAS yardstick as a least-squares solve of log cuBLAS = scale(recording) + level(shape) with numpy, independent
of tunetable.baseline's alternating means.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl


def shape_rows(*, path: Path, m: int, n: int, k: int) -> pl.DataFrame:
    """The verified (``ok``) rows of one shape in a recording."""
    return pl.read_parquet(path).filter((pl.col("M") == m) & (pl.col("N") == n) & (pl.col("K") == k)
                                        & (pl.col("status") == "ok"))


def recording_median(*, path: Path, m: int, n: int, k: int, config_id: str) -> float:
    """A configuration's median at one shape, from the recording's row."""
    rows = shape_rows(path=path, m=m, n=n, k=k)
    winner = rows.filter((pl.col("kind") == "kernel") & (pl.col("config_id") == config_id))["median_ms"]
    assert winner.len() == 1, (path.name, m, n, k, config_id)
    return float(winner[0])


def recording_speedup(*, path: Path, m: int, n: int, k: int, config_id: str) -> float:
    """cuBLAS median / the configuration's median, both from the recording's rows of one shape."""
    cublas = shape_rows(path=path, m=m, n=n, k=k).filter(pl.col("kind") == "baseline")["median_ms"]
    assert cublas.len() == 1, (path.name, m, n, k)
    return float(cublas[0]) / recording_median(path=path, m=m, n=n, k=k, config_id=config_id)


def yardsticks_by_lstsq(shapes: dict[str, set[tuple[int, int, int]]],
                        recordings: dict[str, Path]) -> dict[str, dict[tuple[int, int, int], float]]:
    """Per table and shape, exp(scale + level) of the least-squares fit of log cuBLAS over the tables' rows
    (the scales summing to zero), from each recording's cuBLAS rows of its table's shapes."""
    rows = []
    for name, path in recordings.items():
        frame = pl.read_parquet(path).filter((pl.col("kind") == "baseline") & (pl.col("status") == "ok"))
        rows += [(name, (int(m), int(n), int(k)), math.log(float(ms)))
                 for m, n, k, ms in frame.select("M", "N", "K", "median_ms").iter_rows() if (m, n, k) in shapes[name]]
    names = sorted(recordings)
    every = sorted({shape for _, shape, _ in rows})
    column = {**{name: i for i, name in enumerate(names)}, **{s: len(names) + i for i, s in enumerate(every)}}
    design = np.zeros((len(rows) + 1, len(column)))
    target = np.zeros(len(rows) + 1)
    for i, (name, shape, value) in enumerate(rows):
        design[i, column[name]] = design[i, column[shape]] = 1.0
        target[i] = value
    design[-1, : len(names)] = 1.0   # the scales sum to zero
    solution = np.linalg.lstsq(design, target, rcond=None)[0]
    return {name: {shape: math.exp(solution[column[name]] + solution[column[shape]])
                   for owner, shape, _ in rows if owner == name} for name in names}
