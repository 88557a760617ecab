"""Seeding a search from the shape selector's model (``tables.<t>.search.seed_from_selector``).

The search measures a table's configurations in the order the selector's model (tunetable.selector_fit,
fitted on the selector's tables' recordings) predicts them on a shape, fastest first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunetable.params import SelectorSpec, load_params, selector_specs, table_spec
from tunetable.selector_fit import Shape, SelectorModel, selector_model
from tunetable.selector_measurements import selector_tables


def seed_selector(*, params: Mapping[str, Any], path: str | Path = "params.yaml") -> SelectorSpec | None:
    """The selector a search is seeded from: the first declared one (None: none declared)."""
    specs = selector_specs(dict(params), path=path)
    return specs[0] if specs else None


def seed_tables(*, params: Mapping[str, Any], path: str | Path = "params.yaml") -> list[Any]:
    """The TableSpecs of the first declared selector's tables whose recording is present (none: no selector).

    Recordings resolve as the bench resolves them (``tunetable.measurement_plan.recording_path``: from the
    working folder).
    """

    selector = seed_selector(params=params, path=path)
    if selector is None:
        return []
    tables = [table_spec(dict(params), name, path=path) for name in selector.tables]
    return [spec for spec in tables if spec.recording and Path(spec.recording).is_file()]


def seed_coverage(*, params: Mapping[str, Any], path: str | Path = "params.yaml") -> str | None:
    """The first declared selector's coverage shapes CSV (None: none declared)."""
    selector = seed_selector(params=params, path=path)
    return selector.coverage if selector is not None else None


def seed_recordings(*, path: str | Path = "params.yaml") -> list[Path]:
    """The recordings a ``seed_from_selector`` search's seeds come from (what its content key hashes): the tables'
    and the coverage recordings present (``selector_tables`` merges them)."""

    params = load_params(path)
    specs = seed_tables(params=params, path=path)
    found = [spec.coverage_recording() for spec in specs] if seed_coverage(params=params, path=path) else []
    return [Path(spec.recording) for spec in specs] + [Path(p) for p in found if p and Path(p).is_file()]


def seed_model(*, params: Mapping[str, Any], path: str | Path = "params.yaml") -> SelectorModel | None:
    """The selector's model over every configuration of its tables, from their recordings (None: no selector)."""
    specs = seed_tables(params=params, path=path)
    if not specs:
        return None
    found = selector_tables(root=Path("."), specs=specs, coverage=seed_coverage(params=params, path=path))
    return selector_model(tables=found.tables)


def seed_ids(*, model: SelectorModel, table: str, shape: Shape) -> list[str]:
    """``table``'s configurations by the selector model's prediction on a shape, fastest first (ties: order)."""
    m, n, k = shape
    scores = model.scores(m=m, n=n, k=k)
    ranked = sorted((float(scores[i]), i) for i, config in enumerate(model.configs)
                    if config.table == table and math.isfinite(scores[i]))
    return [model.configs[i].config_id for _, i in ranked]
