"""Kernel configurations as frozen values with a stable id (QuACK-style)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tunetable.kernels.families.common import config_id

Value = int | bool | str


@dataclass(frozen=True)
class KernelConfig:
    """One point of a table's grid: tunables (in grid order) plus values derived from them."""

    family: str
    params: tuple[tuple[str, Value], ...]
    derived: tuple[tuple[str, Value], ...] = ()

    @cached_property
    def id(self) -> str:   # cached: asked several times per configuration, 100 k configurations in a big grid
        """Stable id: a hash of the family and the tunables only (order-insensitive)."""
        return config_id(family=self.family, params=dict(self.params))

    def as_dict(self) -> dict[str, Value]:
        """Tunables as a dict, in grid order."""
        return dict(self.params)

    def defines(self) -> dict[str, Value]:
        """Every ``-D`` define the kernel is compiled with: tunables then derived values."""
        return {**dict(self.params), **dict(self.derived)}

    def label(self) -> str:
        """Readable spec fragment: ``BLOCK_M=128/BLOCK_N=128/...``."""
        return "/".join(f"{k}={v}" for k, v in self.params)

    @classmethod
    def from_dict(cls, family: str, params: dict[str, Any], derived: dict[str, Any] | None = None) -> "KernelConfig":
        """Build from plain dicts (e.g. a JSON grid file)."""
        return cls(family=family, params=tuple(params.items()), derived=tuple((derived or {}).items()))
