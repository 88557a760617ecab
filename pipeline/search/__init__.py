"""Budgeted search over a table's grid, selected per table by ``search:`` in params.yaml.

``make_strategy(settings)`` turns a table's ``search:`` mapping
(``{strategy, max_fevals, time_limit, seed, top_k, transfer, learn_from}``) into a
``SearchPlan``; the bench (``tunetable.search.driver``) calls ``plan.run(...)`` per shape with a
cost function that measures through the bench runner (or serves the recording), and records
the search in every row (``tunetable.results.SEARCH_FIELDS``). Without ``search:`` (or with a
plain ``exhaustive`` and no budget) the bench measures every configuration, as it always did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunetable.config import KernelConfig
from tunetable.search.base import (
    BatchMeasureFn,
    Budget,
    BudgetExhausted,
    Evaluation,
    Failure,
    MeasureFn,
    Related,
    SearchResult,
    Strategy,
    run_search,
)
from tunetable.search.evolutionary import GeneticAlgorithm
from tunetable.search.exhaustive import Exhaustive
from tunetable.search.learned import Profile, Shape, learned_prior
from tunetable.search.model import BayesianOptimisation
from tunetable.search.prior import top_k as perf_top_k
from tunetable.search.random_sample import RandomSample
from tunetable.search.space import SearchSpace

STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "exhaustive": Exhaustive,
    "random": RandomSample,
    "model": BayesianOptimisation,
    "evolutionary": GeneticAlgorithm,
}
SETTING_KEYS = ("strategy", "max_fevals", "time_limit", "seed", "top_k", "transfer", "learn_from",
                "seed_from_selector")
# Part of every budgeted search's content key: bump it when a strategy's choices change for the
# same settings and measurements, so that shards of the old behaviour are never reused.
SEARCH_VERSION = 1

__all__ = [
    "Budget", "BudgetExhausted", "Evaluation", "Failure", "SearchPlan", "SearchResult", "SearchSettings",
    "SearchSpace", "STRATEGIES", "make_strategy", "run_search",
]


@dataclass(frozen=True)
class SearchSettings:
    """A table's ``search:`` settings (params.yaml), with defaults: exhaustive, no budget, seed 0."""

    strategy: str = "exhaustive"
    max_fevals: int | None = None
    time_limit: float | None = None
    seed: int = 0
    top_k: int | None = None
    transfer: bool = True
    learn_from: str | None = None   # a recording whose *other* shapes teach the model strategy
    seed_from_selector: bool = False  # measure the shape selector's candidates of this table first

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any] | None) -> "SearchSettings":
        """Validate a ``search:`` mapping; an unknown key or strategy raises ValueError naming it."""
        raw = dict(settings or {})
        unknown = sorted(set(raw) - set(SETTING_KEYS))
        if unknown:
            raise ValueError(f"unknown search setting(s) {', '.join(unknown)} (allowed: {', '.join(SETTING_KEYS)})")
        strategy = raw.get("strategy", "exhaustive")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown search strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
        if raw.get("learn_from") is not None and strategy != "model":
            raise ValueError(f"learn_from informs the model strategy only, not '{strategy}'")
        return cls(
            strategy=strategy,
            max_fevals=_positive_int(raw.get("max_fevals"), "max_fevals"),
            time_limit=None if raw.get("time_limit") is None else float(raw["time_limit"]),
            seed=int(raw.get("seed", 0)),
            top_k=_positive_int(raw.get("top_k"), "top_k"),
            transfer=bool(raw.get("transfer", True)),
            learn_from=None if raw.get("learn_from") is None else str(raw["learn_from"]),
            seed_from_selector=bool(raw.get("seed_from_selector", False)),
        )

    @property
    def label(self) -> str:
        """What results record: ``model(max_fevals=8,seed=0,top_k=24)`` (unset settings omitted)."""
        parts = [f"{name}={getattr(self, name)}" for name in ("max_fevals", "time_limit", "seed", "top_k")
                 if getattr(self, name) is not None]
        if not self.transfer:
            parts.append("transfer=False")
        if self.learn_from is not None:
            parts.append(f"learn_from={self.learn_from}")
        if self.seed_from_selector:
            parts.append("seed_from_selector=True")
        return f"{self.strategy}({','.join(parts)})"

    @property
    def measures_everything(self) -> bool:
        """True for the default: exhaustive with no budget and no pruning (seed and transfer change nothing)."""
        return (self.strategy == "exhaustive" and self.max_fevals is None and self.time_limit is None
                and self.top_k is None)

    def fingerprint(self, *, learn_from_hash: str | None = None, selector_hash: str | None = None) -> dict[str, Any]:
        """What a budgeted search adds to the shards' content key (``learn_from`` by content, not path)."""
        fingerprint = {"strategy": self.strategy, "max_fevals": self.max_fevals, "time_limit": self.time_limit,
                       "seed": self.seed, "top_k": self.top_k, "transfer": self.transfer,
                       "learn_from": learn_from_hash, "version": SEARCH_VERSION}
        if self.seed_from_selector:  # only when set: every existing search keeps its content key
            fingerprint["seed_from_selector"] = selector_hash
        return fingerprint


def _positive_int(value: Any, name: str) -> int | None:
    """``value`` when it is None or a positive int; ValueError naming the setting otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"search setting {name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class SearchPlan:
    """A configured search: strategy, budget, seed and perf-model pruning, ready to run per shape."""

    settings: SearchSettings
    strategy: Strategy

    @property
    def label(self) -> str:
        """The strategy and its settings, as recorded with the results."""
        return self.settings.label

    @property
    def budget(self) -> Budget:
        """The evaluation and time budget of one shape's search."""
        return Budget(max_fevals=self.settings.max_fevals, time_limit=self.settings.time_limit)

    def run(
        self,
        *,
        configs: Sequence[KernelConfig],
        measure: MeasureFn,
        prior: np.ndarray | None = None,
        seed_ids: Sequence[str] = (),
        related: Sequence[tuple[str, float, float]] = (),
        clock: Callable[[], float] = time.monotonic,
        measure_batch: BatchMeasureFn | None = None,
        shape: Shape | None = None,
        profiles: Sequence[Profile] = (),
        predict: Callable[[Shape], np.ndarray | None] | None = None,
    ) -> SearchResult:
        """Search one shape: prune to the ``top_k`` best-predicted configurations, then run the strategy.

        ``prior``: the perf model's predicted seconds per configuration; ``seed_ids``: neighbours'
        winners to measure first; ``related``: neighbours' (config id, shape distance, log residual)
        from ``transfer.related_measurements``. Transfer inputs are ignored when ``transfer`` is off.
        ``profiles``: other shapes' complete measurements (``learned.Profile``), from which the
        model strategy learns ``shape``'s Gaussian prior; ``predict(shape)``: the perf model's
        seconds per configuration of ``configs`` on any shape (residuals are learned against it).
        """
        positions = list(range(len(configs)))
        if self.settings.top_k is not None and prior is not None:
            positions = sorted(perf_top_k(predictions=np.asarray(prior, dtype=float), k=self.settings.top_k))
        space = SearchSpace.from_configs([configs[p] for p in positions])
        learned = None
        if profiles and shape is not None:
            def sub_predict(other: Shape) -> np.ndarray | None:
                """The perf model's prediction on ``other`` for the pruned configurations, or None."""
                full = None if predict is None else predict(other)
                return None if full is None else np.asarray(full, dtype=float)[positions]

            learned = learned_prior(space=space, shape=shape, profiles=profiles, base=sub_predict)
        sub_prior = None if prior is None else np.asarray(prior, dtype=float)[positions]
        seeded = self.settings.transfer or self.settings.seed_from_selector
        seeds = [space.position_of(i) for i in seed_ids] if seeded else []
        known = [] if not self.settings.transfer else [(space.position_of(i), d, r) for i, d, r in related]
        return run_search(
            strategy=self.strategy,
            space=space,
            measure=measure,
            budget=self.budget,
            seed=self.settings.seed,
            prior=sub_prior,
            seeds=[s for s in seeds if s is not None],
            related=[Related(config=p, distance=d, log_residual=r) for p, d, r in known if p is not None],
            clock=clock,
            measure_batch=measure_batch,
            learned=learned,
        )


def make_strategy(search_settings: Mapping[str, Any] | SearchSettings | None) -> SearchPlan:
    """The SearchPlan for a table's ``search:`` settings (TableSpec.search)."""
    settings = (search_settings if isinstance(search_settings, SearchSettings)
                else SearchSettings.from_mapping(search_settings))
    return SearchPlan(settings=settings, strategy=STRATEGIES[settings.strategy]())
