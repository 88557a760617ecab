"""Statistics shared by the pipeline and the benchmark scripts, on the standard library alone: the scripts that
run on the GPU machine (which has no polars) import it there."""

from __future__ import annotations

import math
from collections.abc import Iterable


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there are none)."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None
