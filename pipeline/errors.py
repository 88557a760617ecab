"""Typed user-facing errors: one line naming the file and the place, exit status 2.

``TuneTableError`` is a ``ValueError``, as Modular's ``tuning_codegen`` errors are: code written
against that module (``except ValueError``, ``pytest.raises(ValueError, match=...)``) works on
ours. The other way round, a project ``except ValueError`` around code that can raise a
TuneTableError must let it through (``except TuneTableError: raise`` first), so a user error is
never mistaken for a failed measurement or an unmodelled configuration.
"""

from __future__ import annotations

from pathlib import Path


class TuneTableError(ValueError):
    """A user error (bad input, missing file): printed as one line, never a traceback."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | Path | None = None, where: str | None = None):
        self.path = str(path) if path is not None else None
        self.where = where
        parts = [p for p in (self.path, where) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class StaleError(TuneTableError):
    """A ``--check`` found a generated file out of date (exit status 1, like Modular's)."""

    exit_code = 1
