"""Model-based search: Bayesian optimisation with a small numpy Gaussian process.

The GP models log(time) over the configurations' scaled log2 parameter values. Its prior mean
is the analytical performance model (``tunetable.search.prior``), so the first measurement goes to the
model's favourite (or a neighbouring shape's winner) and the GP only has to learn where the
model is wrong. Measurements of neighbouring shapes (transfer) enter the GP as the model's
error there, one more input dimension holding the distance between the shapes, so what the
neighbours taught carries over in proportion to how close they are. Each step measures the
configuration with the highest expected improvement. Failures are fed to the GP as slow (worst
seen + a margin) so their neighbours lose appeal.

Where the model predicts many configurations within its error band of the best (large,
compute-bound shapes: the tile variants differ by a few per cent the model cannot resolve), the
first shape of a chain also measures a small space-filling design over that band.

With a learned prior (``learned.py``: other shapes' complete profiles), the GP over parameter
features is replaced by that Gaussian: it knows which configurations rise and fall together
across shapes, so each measurement here re-ranks all the others. Each step measures the lowest
confidence bound (posterior mean - LEARNED_EXPLORATION x std); transfer seeds are not needed
(the learned model already holds the neighbours' measurements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tunetable.search.base import SearchContext, prior_order

LENGTH_SCALES = (0.15, 0.25, 0.4, 0.6, 1.0)   # candidates, chosen by marginal likelihood each step
NOISE_VARIANCE = 1e-3                          # log-time noise: a few per cent run to run
FAILURE_MARGIN = 1.0                           # a failure counts as e^1 slower than the worst success
EI_EXPLORATION = 0.01                          # EI's xi in log-time units
DISTANCE_SCALE = 0.25                          # one octave of M between shapes, in feature units
MODEL_BAND = 0.10                              # predictions this close to the best are treated as ties
LEARNED_EXPLORATION = 0.5                      # LCB weight of the learned posterior's std (log-time units)


@dataclass(frozen=True)
class BayesianOptimisation:
    """Seeds (transfer), then the perf model's pick, then expected improvement under a GP."""

    name: str = "model"
    initial_random: int = 2      # random starts when no prior is given
    max_seeds: int = 2           # transfer seeds measured before the GP takes over
    band_picks: int = 2          # space-filling picks among near-ties of the model's favourite (first shape of a chain)

    def run(self, *, context: SearchContext) -> None:
        """Evaluate until the space or the budget is exhausted."""
        if context.learned is not None:
            self._run_learned(context)
            return
        space, evaluator = context.space, context.evaluator
        features = np.hstack([space.features(), np.zeros((len(space), 1))])
        prior_mean = _prior_log_mean(context.prior, size=len(space))
        # Residuals of other shapes only compare with this one's through the model: no prior, no transfer.
        related = context.related if context.prior is not None else ()
        related_x = np.array([[*features[r.config, :-1], r.distance * DISTANCE_SCALE] for r in related]).reshape(
            len(related), features.shape[1])
        related_y = np.array([r.log_residual for r in related], dtype=float)
        for position in self._starts(context, features=features[:, :-1], informed=bool(related)):
            evaluator.evaluate(position)
        while len(evaluator.trace) < len(space):
            seen = [e.config for e in evaluator.trace]
            logs = _log_targets(np.array([e.cost for e in evaluator.trace], dtype=float))
            unseen = np.array([p for p in range(len(space)) if not evaluator.seen(p)], dtype=np.int64)
            mean, std = _gp_posterior(
                np.vstack([features[seen], related_x]), np.concatenate([logs - prior_mean[seen], related_y]),
                features[unseen]
            )
            predicted = prior_mean[unseen] + mean
            if len(logs):
                improvement = expected_improvement(mean=predicted, std=std, best=float(np.min(logs)))
            else:
                improvement = np.zeros(len(unseen))   # nothing measured here yet: the best prediction goes first
            # Highest EI; ties go to the better predicted time, then to the earlier position.
            choice = min(range(len(unseen)), key=lambda i: (-improvement[i], predicted[i], unseen[i]))
            evaluator.evaluate(int(unseen[choice]))

    def _run_learned(self, context: SearchContext) -> None:
        """Lowest confidence bound under the learned Gaussian, conditioned on what was measured here."""
        space, evaluator, learned = context.space, context.evaluator, context.learned
        while len(evaluator.trace) < len(space):
            seen = [e.config for e in evaluator.trace]
            logs = _log_targets(np.array([e.cost for e in evaluator.trace], dtype=float)) + math.log(1e-3)
            unseen = [p for p in range(len(space)) if not evaluator.seen(p)]
            mean, std = learned.posterior(seen=seen, values=logs, unseen=unseen)
            bound = mean - LEARNED_EXPLORATION * std
            # Lowest bound; ties to the better mean, then to the earlier position.
            choice = min(range(len(unseen)), key=lambda i: (float(bound[i]), float(mean[i]), unseen[i]))
            evaluator.evaluate(int(unseen[choice]))

    def _starts(self, context: SearchContext, *, features: np.ndarray, informed: bool) -> list[int]:
        """First measurements: seeds, then the model's best (+ band design) or random picks without a model."""
        starts = list(context.seeds)[: self.max_seeds]
        if context.prior is None:
            starts += [int(p) for p in context.rng.permutation(len(context.space))[: self.initial_random]]
        elif not informed:
            starts += prior_order(context.prior)[:1]
            if not context.seeds:
                starts += band_design(prior=context.prior, features=features, first=starts, picks=self.band_picks)
        return list(dict.fromkeys(starts))


def band_design(*, prior: np.ndarray, features: np.ndarray, first: list[int], picks: int) -> list[int]:
    """Maximin picks among configurations predicted within MODEL_BAND of the best: the model cannot rank those."""
    finite = prior[np.isfinite(prior)]
    if not len(finite) or picks <= 0:
        return []
    band = [p for p in prior_order(prior) if prior[p] <= finite.min() * (1.0 + MODEL_BAND) and p not in first]
    chosen = list(first)
    added: list[int] = []
    for _ in range(min(picks, len(band))):
        # Farthest from everything chosen so far; ties to the better prediction (band is in prior order).
        distance = [min((np.abs(features[p] - features[c]).sum() for c in chosen), default=0.0) for p in band]
        pick = band[int(np.argmax(distance))]
        band.remove(pick)
        chosen.append(pick)
        added.append(pick)
    return added


def _prior_log_mean(prior: np.ndarray | None, *, size: int) -> np.ndarray:
    """log of the predicted times; configurations the model rules out sit above the worst finite one."""
    if prior is None:
        return np.zeros(size)
    finite = np.isfinite(prior) & (prior > 0)
    logs = np.zeros(size)
    logs[finite] = np.log(prior[finite])
    ceiling = logs[finite].max() + FAILURE_MARGIN if finite.any() else 0.0
    logs[~finite] = ceiling
    return logs


def _log_targets(costs: np.ndarray) -> np.ndarray:
    """log(time) of each evaluation; failures become the worst success + FAILURE_MARGIN."""
    finite = np.isfinite(costs)
    logs = np.zeros(len(costs))
    logs[finite] = np.log(costs[finite])
    ceiling = logs[finite].max() + FAILURE_MARGIN if finite.any() else 0.0
    logs[~finite] = ceiling
    return logs


def matern52(a: np.ndarray, b: np.ndarray, *, length_scale: float) -> np.ndarray:
    """Matern 5/2 kernel matrix between the rows of ``a`` and ``b`` (unit variance)."""
    distance = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0)) / length_scale
    root5 = math.sqrt(5.0) * distance
    return (1.0 + root5 + root5**2 / 3.0) * np.exp(-root5)


def _gp_posterior(x_seen: np.ndarray, y_seen: np.ndarray, x_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and std at ``x_new``; length scale by marginal likelihood, variance from the data."""
    if len(y_seen) == 0:
        return np.zeros(len(x_new)), np.ones(len(x_new))
    offset = float(y_seen.mean())
    centred = y_seen - offset
    variance = max(float(centred.var()), 1e-2)
    fits = [_fit(x_seen, centred, variance=variance, length_scale=ls) for ls in LENGTH_SCALES]
    chol, alpha, length_scale = max(fits, key=lambda fit: fit[3])[:3]
    cross = variance * matern52(x_new, x_seen, length_scale=length_scale)
    solved = np.linalg.solve(chol, cross.T)
    std = np.sqrt(np.maximum(variance - (solved**2).sum(axis=0), 1e-12))
    return offset + cross @ alpha, std


def _fit(
    x: np.ndarray, y: np.ndarray, *, variance: float, length_scale: float
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Cholesky factor, weights, length scale and log marginal likelihood (up to a constant)."""
    gram = variance * matern52(x, x, length_scale=length_scale) + NOISE_VARIANCE * np.eye(len(x))
    chol = np.linalg.cholesky(gram)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    evidence = -0.5 * float(y @ alpha) - float(np.log(np.diag(chol)).sum())
    return chol, alpha, length_scale, evidence


def expected_improvement(*, mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement below ``best`` (minimisation) for Gaussian predictions."""
    gap = best - mean - EI_EXPLORATION
    z = gap / std
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
    return gap * cdf + std * pdf
