"""Evolutionary search: a small genetic algorithm over the grid's value lists.

Genes are indices into each parameter's value list. Children come from tournament selection,
uniform crossover and mutation (a step to an adjacent value, or a random value); a child the
grid's rules reject is repaired to the nearest valid configuration, so only configurations of
the grid are ever measured. Generations are measured as batches (interleaved by the bench).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tunetable.search.base import SearchContext, prior_order


@dataclass(frozen=True)
class GeneticAlgorithm:
    """Elitist GA; the first population holds transfer seeds, the model's favourites, then random picks."""

    name: str = "evolutionary"
    population: int = 6
    elite: int = 2
    mutation_rate: float = 0.3     # chance per gene
    max_repairs: int = 20          # attempts to produce an unseen child before taking a random one

    def run(self, *, context: SearchContext) -> None:
        """Evolve until every configuration is measured or the budget runs out."""
        space, evaluator, rng = context.space, context.evaluator, context.rng
        genes = space.value_indices()
        current = _first_population(context, size=min(self.population, len(space)))
        evaluator.evaluate_many(current)
        while len(evaluator.trace) < len(space):
            ranked = sorted(current, key=lambda p: (evaluator.evaluate(p), p))
            children: list[int] = []
            while len(children) < self.population - self.elite and len(evaluator.trace) + len(children) < len(space):
                parent_a = _tournament(ranked, rng=rng)
                parent_b = _tournament(ranked, rng=rng)
                child = self._offspring(genes[parent_a], genes[parent_b], genes=genes, context=context, taken=children)
                children.append(child)
            evaluator.evaluate_many(children)
            current = ranked[: self.elite] + children

    def _offspring(
        self, a: np.ndarray, b: np.ndarray, *, genes: np.ndarray, context: SearchContext, taken: list[int]
    ) -> int:
        """An unseen valid child of ``a`` and ``b``; a random unseen configuration if repairs keep failing."""
        space, rng = context.space, context.rng
        sizes = np.array([len(v) for v in space.values])
        for _ in range(self.max_repairs):
            child = np.where(rng.random(len(a)) < 0.5, a, b)
            for j in np.flatnonzero(rng.random(len(a)) < self.mutation_rate):
                if sizes[j] > 1:
                    step = int(rng.choice([-1, 1])) if rng.random() < 0.5 else int(rng.integers(sizes[j])) - child[j]
                    child[j] = int(np.clip(child[j] + step, 0, sizes[j] - 1))
            position = _nearest_valid(child, genes=genes, rng=rng)
            if not context.evaluator.seen(position) and position not in taken:
                return position
        unseen = [p for p in range(len(space)) if not context.evaluator.seen(p) and p not in taken]
        return int(unseen[int(rng.integers(len(unseen)))])


def _first_population(context: SearchContext, *, size: int) -> list[int]:
    """Transfer seeds, then half the population from the model's ranking, then random fill."""
    chosen = list(context.seeds)[:size]
    if context.prior is not None:
        wanted = min(size, len(chosen) + max(size // 2, 1))
        for position in prior_order(context.prior):
            if len(chosen) >= wanted:
                break
            if position not in chosen:
                chosen.append(position)
    for position in context.rng.permutation(len(context.space)):
        if len(chosen) >= size:
            break
        if int(position) not in chosen:
            chosen.append(int(position))
    return chosen


def _tournament(ranked: list[int], *, rng: np.random.Generator) -> int:
    """Binary tournament: the faster of two random members (ties to the better-ranked one)."""
    a, b = (int(i) for i in rng.integers(len(ranked), size=2))
    return ranked[min(a, b)]


def _nearest_valid(child: np.ndarray, *, genes: np.ndarray, rng: np.random.Generator) -> int:
    """The valid configuration closest to ``child``: fewest differing genes, then smallest index distance."""
    differing = (genes != child).sum(axis=1)
    steps = np.abs(genes - child).sum(axis=1)
    score = differing * 1000 + steps
    candidates = np.flatnonzero(score == score.min())
    return int(candidates[int(rng.integers(len(candidates)))])
