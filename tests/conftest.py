"""Shared pytest fixtures and marker handling."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The runtime compiles into the project's cubin cache (compile.cache_dir: the keys `tunetable compile`
# uses) unless the environment names another one, so runtime tests reuse what the build compiled.
os.environ.setdefault("TUNETABLE_CUBIN_CACHE", str(REPO / ".cache" / "cubins"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `nvcc` tests with a message where the CUDA compiler is absent."""
    if shutil.which("nvcc") is not None:
        return
    skip = pytest.mark.skip(reason="nvcc not found on PATH: CUDA compile tests need the CUDA toolkit")
    for item in items:
        if "nvcc" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def repo_root() -> Path:
    """The project root (where params.yaml lives)."""
    return REPO
