"""The kernel families: one folder each (``kernels/families/<name>/``: the .cu, the snippet, family.py).

``FAMILIES`` maps each folder's name to its ``family.py``'s ``FAMILY`` (a
``tunetable.kernels.families.common.KernelFamily``), found by listing this folder: adding a family
is adding a folder (docs/families.md). Pure Python: nothing here needs a GPU.
"""

from __future__ import annotations

import importlib

from tunetable.kernels.families.common import (
    FAMILIES_DIR,
    INT32_MAX,
    Launch,
    KernelFamily,
    Rule,
    TableEntry,
    cluster_blocks,
)

__all__ = [
    "FAMILIES", "INT32_MAX", "KernelFamily", "Launch", "Rule", "TableEntry", "cluster_blocks",
    "family_names",
]


def family_names() -> list[str]:
    """The family folders (those holding a family.py), sorted."""
    return sorted(path.parent.name for path in FAMILIES_DIR.glob("*/family.py"))


def _load(name: str) -> KernelFamily:
    """The ``FAMILY`` of ``kernels/families/<name>/family.py``, checked to be that family."""
    module = importlib.import_module(f"{__name__}.{name}.family")
    found = getattr(module, "FAMILY", None)
    if not isinstance(found, KernelFamily) or found.name != name:
        raise ImportError(f"{module.__file__}: FAMILY must be the KernelFamily named '{name}' (its folder's name)")
    return found


FAMILIES: dict[str, KernelFamily] = {name: _load(name) for name in family_names()}
