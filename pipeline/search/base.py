"""Search over a table's grid: the strategy protocol, budgets and the budgeted cost function.

Kernel Tuner's split: a *strategy* decides which configuration to try next; an *evaluator*
owns the budget and calls a cost function ``measure(config) -> float | Failure`` that either
drives the real bench runner or replays a recording. Strategies never see the runner, so the
same code tunes on the H200 and is measured offline on the recording.

Rules shared by every strategy:
- only unique evaluations count; asking for a configuration again is free (served from memory);
- failures count as evaluations and rank as +inf;
- the budget is ``max_fevals`` (unique evaluations) and ``time_limit`` (seconds on ``clock``);
- all randomness comes from one ``numpy.random.Generator`` seeded by the search's seed, and
  ties are broken by position in the space, so a seed fixes the whole trace.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from tunetable.config import KernelConfig
from tunetable.search.space import SearchSpace

if TYPE_CHECKING:
    from tunetable.search.learned import LearnedPrior


@dataclass(frozen=True)
class Failure:
    """A configuration that produced no time (status build, verify, launch, timeout, missing)."""

    status: str
    error: str | None = None


Outcome = float | Failure
MeasureFn = Callable[[KernelConfig], Outcome]
BatchMeasureFn = Callable[[Sequence[KernelConfig]], Sequence[Outcome]]


@dataclass(frozen=True)
class Budget:
    """How much a search may spend: unique evaluations and/or seconds (None: unlimited)."""

    max_fevals: int | None = None
    time_limit: float | None = None


@dataclass(frozen=True)
class Evaluation:
    """One unique evaluation, in the order the strategy asked for it."""

    step: int            # 0-based position in the trace
    config: int          # position of the configuration in the search space
    config_id: str
    outcome: Outcome
    elapsed_s: float

    @property
    def cost(self) -> float:
        """The measured time, or +inf for a failure (the value strategies minimise)."""
        return objective(self.outcome)


class BudgetExhausted(Exception):
    """Raised inside a strategy when the budget is spent; ``run_search`` catches it."""


def objective(outcome: Outcome) -> float:
    """The value strategies minimise: the time, or +inf for a failure."""
    return math.inf if isinstance(outcome, Failure) else float(outcome)


class Evaluator:
    """The budgeted cost function a strategy calls: counts unique evaluations, failures included."""

    def __init__(
        self,
        *,
        space: SearchSpace,
        measure: MeasureFn,
        budget: Budget,
        clock: Callable[[], float] = time.monotonic,
        measure_batch: BatchMeasureFn | None = None,
    ):
        self.space = space
        self.budget = budget
        self._measure = measure
        self._measure_batch = measure_batch
        self._clock = clock
        self._start = clock()
        self._outcomes: dict[int, Outcome] = {}
        self.trace: list[Evaluation] = []

    def remaining(self) -> int:
        """Unique evaluations still allowed (the space size bounds it)."""
        cap = len(self.space) if self.budget.max_fevals is None else min(self.budget.max_fevals, len(self.space))
        return max(cap - len(self._outcomes), 0)

    def elapsed(self) -> float:
        """Seconds on the clock since the search started."""
        return self._clock() - self._start

    def done(self) -> bool:
        """True when no further unique evaluation is allowed."""
        if self.remaining() == 0:
            return True
        return self.budget.time_limit is not None and self.elapsed() >= self.budget.time_limit

    def seen(self, position: int) -> bool:
        """True if ``position`` was already evaluated."""
        return position in self._outcomes

    def outcome(self, position: int) -> Outcome | None:
        """The outcome of an evaluated position, or None."""
        return self._outcomes.get(position)

    def evaluated(self) -> list[tuple[int, float]]:
        """(position, objective) of every unique evaluation so far, in trace order."""
        return [(e.config, e.cost) for e in self.trace]

    def evaluate(self, position: int) -> float:
        """Measure one configuration (free if already seen); raises BudgetExhausted when spent."""
        return self.evaluate_many([position])[0]

    def evaluate_many(self, positions: Sequence[int]) -> list[float]:
        """Measure several configurations as one batch (the bench interleaves them); same budget rules."""
        fresh = [p for p in dict.fromkeys(positions) if p not in self._outcomes]
        if fresh and self.done():
            raise BudgetExhausted()
        allowed = fresh[: self.remaining()]
        if self._measure_batch is not None and allowed:
            # A batch is interleaved by the bench, so the time limit is checked between batches.
            configs = [self.space.configs[p] for p in allowed]
            for position, result in zip(allowed, self._measure_batch(configs)):
                self._record(position, result)
        else:
            for position in allowed:
                if self.done():
                    raise BudgetExhausted()
                self._record(position, self._measure(self.space.configs[position]))
        if len(allowed) < len(fresh):
            raise BudgetExhausted()
        return [objective(self._outcomes[p]) for p in positions]

    def _record(self, position: int, result: Outcome) -> None:
        """Store one configuration's outcome and append it to the trace."""
        self._outcomes[position] = result
        self.trace.append(
            Evaluation(len(self.trace), position, self.space.configs[position].id, result, self.elapsed())
        )

    def best(self) -> tuple[int, float] | None:
        """(position, time) of the fastest successful evaluation, ties to the earlier position."""
        ok = [(objective(o), p) for p, o in self._outcomes.items() if not isinstance(o, Failure)]
        if not ok:
            return None
        value, position = min(ok)
        return position, value


@dataclass(frozen=True)
class SearchContext:
    """What a strategy works with: the space, the budgeted cost function, its rng and the priors."""

    space: SearchSpace
    evaluator: Evaluator
    rng: np.random.Generator
    prior: np.ndarray | None = None      # predicted time per configuration (perf model), lower is better
    seeds: tuple[int, ...] = ()          # positions to try first (winners of neighbouring shapes)
    related: tuple["Related", ...] = ()  # measurements of neighbouring shapes (model-based search learns from them)
    learned: LearnedPrior | None = None  # other shapes' complete profiles (learned.py): the model's Gaussian prior


@dataclass(frozen=True)
class Related:
    """A measurement on a neighbouring shape, as the model-based search sees it."""

    config: int            # position in this space
    distance: float        # how far the shape is (|log2 M - log2 M'| at the same N, K)
    log_residual: float    # log(measured / predicted) on that shape: the perf model's error there


class Strategy(Protocol):
    """A search strategy: asks the evaluator for configurations until done or out of budget."""

    name: str

    def run(self, *, context: SearchContext) -> None:
        """Drive ``context.evaluator``; may stop early; BudgetExhausted may propagate."""


@dataclass(frozen=True)
class SearchResult:
    """The outcome of one search: its trace and the best configuration found."""

    strategy: str
    seed: int
    trace: tuple[Evaluation, ...]
    best_config_id: str | None
    best_ms: float | None
    stop_reason: str   # "finished" (strategy returned), "max_fevals" or "time_limit"

    def evaluations_to_within(self, *, target_ms: float, tolerance: float) -> int | None:
        """Unique evaluations until one is within ``tolerance`` of ``target_ms`` (None: never)."""
        limit = target_ms * (1.0 + tolerance)
        for evaluation in self.trace:
            if evaluation.cost <= limit:
                return evaluation.step + 1
        return None


def prior_order(prior: np.ndarray) -> list[int]:
    """Positions sorted by predicted time (ties by position): the perf model's ranking."""
    return sorted(range(len(prior)), key=lambda p: (float(prior[p]), p))


def run_search(
    *,
    strategy: Strategy,
    space: SearchSpace,
    measure: MeasureFn,
    budget: Budget,
    seed: int,
    prior: np.ndarray | None = None,
    seeds: Sequence[int] = (),
    related: Sequence[Related] = (),
    clock: Callable[[], float] = time.monotonic,
    measure_batch: BatchMeasureFn | None = None,
    learned: LearnedPrior | None = None,
) -> SearchResult:
    """Run ``strategy`` over ``space`` within ``budget``; deterministic for a given seed and cost function."""
    if prior is not None and len(prior) != len(space):
        raise ValueError(f"prior has {len(prior)} entries for a space of {len(space)} configurations")
    evaluator = Evaluator(space=space, measure=measure, budget=budget, clock=clock, measure_batch=measure_batch)
    context = SearchContext(
        space=space,
        evaluator=evaluator,
        rng=np.random.default_rng(seed),
        prior=None if prior is None else np.asarray(prior, dtype=float),
        seeds=tuple(dict.fromkeys(int(s) for s in seeds)),
        related=tuple(related),
        learned=learned,
    )
    stop_reason = "finished"
    try:
        strategy.run(context=context)
    except BudgetExhausted:
        stop_reason = "max_fevals" if evaluator.remaining() == 0 else "time_limit"
    best = evaluator.best()
    return SearchResult(
        strategy=strategy.name,
        seed=seed,
        trace=tuple(evaluator.trace),
        best_config_id=None if best is None else space.configs[best[0]].id,
        best_ms=None if best is None else best[1],
        stop_reason=stop_reason,
    )
