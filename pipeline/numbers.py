"""One number format per kind of column, shared by every table the CLI prints and by its CSV and Markdown files.

Times, ratios and other measured floats print as kprofile prints them: three decimals (``0.500``, ``3.000``);
correlations (Kendall tau) at four (``0.0190``, ``-0.0264``). An integer column stays an integer, a missing
value is an empty cell, and a NaN is ``nan``. CSV output carries the same decimals (polars' ``float_precision``).
"""

from __future__ import annotations

import math
from typing import Any

# kprofile's rounding of times and ratios.
MEASURED_DECIMALS = 3
# Kendall tau at a fixed precision: 4 decimals tell apart the small correlations a grid shows (0.0190, -0.0264).
CORRELATION_DECIMALS = 4


def number_cell(value: Any, *, decimals: int = MEASURED_DECIMALS) -> str:
    """A value as a table cell: empty for None, floats at ``decimals`` (``nan`` for NaN), anything else as text."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{decimals}f}"
    return str(value)
