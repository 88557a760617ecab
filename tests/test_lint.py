"""Lint gate: ``ruff check`` (settings under [tool.ruff] in pyproject.toml) passes on the project's Python code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINTED = ("kernels", "pipeline", "benchmarks", "tests", "scripts")


def test_ruff_check_is_clean() -> None:
    pytest.importorskip("ruff", reason="ruff (dev extra) is not installed: pip install -e '.[dev]' for the lint gate")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *LINTED],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, (
        f"`ruff check {' '.join(LINTED)}` exited {done.returncode}; fix the findings below "
        f"(configuration: [tool.ruff] in pyproject.toml):\n{done.stdout}{done.stderr}"
    )
