"""Learned cost model: what other shapes' measurements say about this one (never its own).

Each training shape ``t`` with a complete profile (every configuration of the space measured,
failures included) gives a residual vector over the configurations::

    r_t(c) = log(time_t(c)) - log(model_t(c))      (model: the perf model; 0 without one)

centred per shape (only the *relative* speed of configurations carries over between shapes).
For a target shape ``s`` the training shapes are weighted by ``exp(-d(s, t) / SHAPE_SCALE)``,
``d`` the euclidean distance of (log2 M, log2 N, log2 K), and the residual of ``s`` is modelled
as Gaussian: mean the weighted mean of the ``r_t``, covariance their weighted covariance plus a
small nugget and a large constant term (the unknown overall level of ``s``). Conditioning on
the configurations measured so far at ``s`` gives every other configuration's posterior mean
and variance: the model-based search (``model.BayesianOptimisation``) measures by lower
confidence bound under it. Configurations that no training profile covers get the perf model's
prediction with a large independent variance.

The training profiles come from a recording of the same table (``search: learn_from``), with
every row of the shape being tuned left out; benchmarks/search_efficiency.py evaluates it
leave-one-shape-out on the H200 recording.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tunetable.search.space import SearchSpace

Shape = tuple[int, int, int]

SHAPE_SCALE = 1.0        # octaves of shape distance per e-fold of weight
NUGGET = 1e-2            # independent log-time variance per configuration (run-to-run noise, model slack)
LEVEL_VARIANCE = 100.0   # variance of the shape's overall level: effectively unknown until measured
FAILURE_MARGIN = 1.0     # a failed configuration counts as e^1 slower than the shape's slowest success
UNCOVERED_VARIANCE = 1.0  # log-time variance of a configuration no training profile measured
MIN_PROFILES = 2         # fewer complete training profiles than this: no learned model


@dataclass(frozen=True)
class Profile:
    """Every configuration of one training shape: config id -> median ms (inf: failed)."""

    shape: Shape
    times: Mapping[str, float]


@dataclass(frozen=True)
class LearnedPrior:
    """A Gaussian over the log seconds of every configuration of one shape's space."""

    mean: np.ndarray           # [configs]: predicted log seconds (up to the shape's unknown level)
    cov: np.ndarray            # [configs, configs]
    shapes: tuple[Shape, ...]  # the training shapes, nearest first

    def posterior(
        self, *, seen: Sequence[int], values: np.ndarray, unseen: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of log seconds at ``unseen`` given ``values`` at ``seen``."""
        unseen_idx = np.asarray(unseen, dtype=np.int64)
        if not len(seen):
            return self.mean[unseen_idx], np.sqrt(np.diag(self.cov)[unseen_idx])
        seen_idx = np.asarray(seen, dtype=np.int64)
        gram = self.cov[np.ix_(seen_idx, seen_idx)]
        cross = self.cov[np.ix_(unseen_idx, seen_idx)]
        chol = np.linalg.cholesky(gram)
        solved = np.linalg.solve(chol, cross.T)
        weights = np.linalg.solve(chol, np.asarray(values, dtype=float) - self.mean[seen_idx])
        mean = self.mean[unseen_idx] + solved.T @ weights
        variance = np.diag(self.cov)[unseen_idx] - (solved**2).sum(axis=0)
        return mean, np.sqrt(np.maximum(variance, 1e-12))


def shape_distance(a: Shape, b: Shape) -> float:
    """Euclidean distance of two shapes in (log2 M, log2 N, log2 K)."""
    return math.sqrt(sum((math.log2(x) - math.log2(y)) ** 2 for x, y in zip(a, b)))


def log_times(times: Sequence[float]) -> np.ndarray:
    """log(ms) per configuration; failures (inf, nan) become the slowest success + FAILURE_MARGIN."""
    values = np.asarray(times, dtype=float)
    finite = np.isfinite(values) & (values > 0)
    logs = np.full(len(values), np.nan)
    logs[finite] = np.log(values[finite])
    ceiling = logs[finite].max() + FAILURE_MARGIN if finite.any() else 0.0
    logs[~finite] = ceiling
    return logs


def learned_prior(
    *,
    space: SearchSpace,
    shape: Shape,
    profiles: Sequence[Profile],
    base: Callable[[Shape], np.ndarray | None],
) -> LearnedPrior | None:
    """The learned Gaussian for ``shape`` from the other shapes' complete profiles (None: too few).

    ``base(shape)``: the perf model's predicted seconds per configuration of ``space`` (or None);
    a profile of ``shape`` itself is never used.
    """
    ids = [config.id for config in space.configs]
    usable = [p for p in profiles if tuple(p.shape) != tuple(shape) and any(i in p.times for i in ids)]
    if len(usable) < MIN_PROFILES:
        return None
    covered = np.array([all(i in p.times for p in usable) for i in ids])
    if covered.sum() < 2:
        return None
    own_base = _log_base(base(shape), size=len(ids))
    residuals = []
    for profile in usable:
        logs = log_times([profile.times.get(i, math.nan) for i in ids]) + math.log(1e-3)
        residual = logs - _log_base(base(profile.shape), size=len(ids))
        residuals.append(residual - residual[covered].mean())
    matrix = np.array(residuals)[:, covered]
    weights = np.array([math.exp(-shape_distance(shape, p.shape) / SHAPE_SCALE) for p in usable])
    weights = weights / weights.sum()
    centre = weights @ matrix
    spread = matrix - centre
    covariance = (weights[:, None] * spread).T @ spread
    size = len(ids)
    mean = own_base.copy()
    mean[covered] += centre
    cov = np.diag(np.full(size, UNCOVERED_VARIANCE))
    cov[np.ix_(covered, covered)] = covariance
    cov += NUGGET * np.eye(size) + LEVEL_VARIANCE
    order = sorted(range(len(usable)), key=lambda j: (-weights[j], usable[j].shape))
    return LearnedPrior(mean=mean, cov=cov, shapes=tuple(usable[j].shape for j in order))


def _log_base(predicted: np.ndarray | None, *, size: int) -> np.ndarray:
    """log of the perf model's seconds; zeros without a model; ruled-out configurations above the worst."""
    if predicted is None:
        return np.zeros(size)
    values = np.asarray(predicted, dtype=float)
    finite = np.isfinite(values) & (values > 0)
    logs = np.zeros(size)
    logs[finite] = np.log(values[finite])
    logs[~finite] = (logs[finite].max() + FAILURE_MARGIN) if finite.any() else 0.0
    return logs


def profiles_from_outcomes(outcomes: Mapping[Shape, Mapping[str, object]]) -> list[Profile]:
    """Profiles from a recording's outcomes (shape -> config id -> ms or Failure): failures as inf."""
    profiles = []
    for shape, by_id in outcomes.items():
        times = {cid: (float(v) if isinstance(v, (int, float)) else math.inf) for cid, v in by_id.items()}
        profiles.append(Profile(shape=tuple(shape), times=times))
    return profiles
