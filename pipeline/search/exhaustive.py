"""Exhaustive search: every configuration, in the perf model's order when one is given."""

from __future__ import annotations

from dataclasses import dataclass

from tunetable.search.base import SearchContext, prior_order


@dataclass(frozen=True)
class Exhaustive:
    """Measure the whole space; with a prior, best-predicted first so a cut-off budget keeps the likely winners."""

    name: str = "exhaustive"
    batch: int = 8   # configurations measured together (interleaved by the bench); time_limit is checked
                     # between batches

    def run(self, *, context: SearchContext) -> None:
        """Evaluate every configuration, ``batch`` at a time."""
        order = list(range(len(context.space))) if context.prior is None else prior_order(context.prior)
        for start in range(0, len(order), self.batch):
            context.evaluator.evaluate_many(order[start : start + self.batch])
