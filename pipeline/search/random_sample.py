"""Random sampling without replacement: the baseline every other strategy must beat."""

from __future__ import annotations

from dataclasses import dataclass

from tunetable.search.base import SearchContext


@dataclass(frozen=True)
class RandomSample:
    """Measure configurations in a seeded random order (ignores priors and transfer seeds on purpose)."""

    name: str = "random"

    def run(self, *, context: SearchContext) -> None:
        """Evaluate a seeded permutation of the space, one configuration at a time."""
        for position in context.rng.permutation(len(context.space)):
            context.evaluator.evaluate(int(position))
