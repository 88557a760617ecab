"""The search space of one table: its valid configurations in grid order, their values, features and neighbours.

Its own module so that the strategies' machinery (``base``) and the learned cost model
(``learned``), which both work over a space, import it without importing each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tunetable.config import KernelConfig, Value


@dataclass(frozen=True)
class SearchSpace:
    """The valid configurations of one table (the grid's rules already applied), in grid order."""

    configs: tuple[KernelConfig, ...]
    names: tuple[str, ...]
    values: tuple[tuple[Value, ...], ...]
    _index: dict[tuple[Value, ...], int] = field(repr=False, compare=False, hash=False)

    @classmethod
    def from_configs(cls, configs: Sequence[KernelConfig]) -> "SearchSpace":
        """Build from a grid's configurations; value lists keep first-appearance order, sorted if numeric."""
        if not configs:
            raise ValueError("a search space needs at least one configuration")
        names = tuple(name for name, _ in configs[0].params)
        for position, config in enumerate(configs):
            if tuple(name for name, _ in config.params) != names:
                raise ValueError(
                    f"configuration {position} ({config.id}) has parameters {config.label()}, expected {names}"
                )
        values = tuple(value_list([dict(c.params)[name] for c in configs]) for name in names)
        index: dict[tuple[Value, ...], int] = {}
        for position, config in enumerate(configs):
            key = tuple(value for _, value in config.params)
            if key in index:
                raise ValueError(f"configuration {position} ({config.id}) repeats configuration {index[key]}")
            index[key] = position
        return cls(configs=tuple(configs), names=names, values=values, _index=index)

    def __len__(self) -> int:
        return len(self.configs)

    def key(self, position: int) -> tuple[Value, ...]:
        """The parameter values of configuration ``position``, in ``names`` order."""
        return tuple(value for _, value in self.configs[position].params)

    def find(self, values: Sequence[Value]) -> int | None:
        """Position of the configuration with these parameter values, or None if it is not valid."""
        return self._index.get(tuple(values))

    def position_of(self, config_id: str) -> int | None:
        """Position of the configuration with this id, or None."""
        for position, config in enumerate(self.configs):
            if config.id == config_id:
                return position
        return None

    def subset(self, positions: Sequence[int]) -> "SearchSpace":
        """The space restricted to ``positions`` (kept in the given order)."""
        return SearchSpace.from_configs([self.configs[p] for p in positions])

    def value_indices(self) -> np.ndarray:
        """Matrix [configs, params] of each value's index in its parameter's value list."""
        lookup = [{value: i for i, value in enumerate(vals)} for vals in self.values]
        return np.array([[lookup[j][v] for j, v in enumerate(self.key(p))] for p in range(len(self))], dtype=np.int64)

    def features(self) -> np.ndarray:
        """Matrix [configs, params] in [0, 1]: log2 of numeric values (ordinal index otherwise), min-max scaled."""
        raw = np.zeros((len(self), len(self.names)), dtype=float)
        for j, vals in enumerate(self.values):
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in vals)
            scale = {v: (math.log2(v) if numeric else float(i)) for i, v in enumerate(vals)}
            raw[:, j] = [scale[self.key(p)[j]] for p in range(len(self))]
        low, high = raw.min(axis=0), raw.max(axis=0)
        span = np.where(high > low, high - low, 1.0)
        return (raw - low) / span

    def neighbours(self, position: int) -> list[int]:
        """Valid configurations that differ from ``position`` in exactly one parameter (Hamming 1)."""
        own = self.key(position)
        found = []
        for j, vals in enumerate(self.values):
            for value in vals:
                if value == own[j]:
                    continue
                other = self.find(own[:j] + (value,) + own[j + 1 :])
                if other is not None:
                    found.append(other)
        return sorted(found)


def value_list(values: Iterable[Value]) -> tuple[Value, ...]:
    """The distinct values in first-appearance order, sorted when all are numbers (bools are not)."""
    unique = list(dict.fromkeys(values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in unique):
        return tuple(sorted(unique))
    return tuple(unique)
