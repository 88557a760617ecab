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


# The longest test files, collected first: with `--dist loadfile --no-loadscope-reorder` (.ci/run's slow step)
# pytest-xdist hands files out in collection order, so these start at once on both workers instead of last.
# (Its default order, most tests first, put the two longest, of one or two tests each, at the end, often
# both on one worker.) The first and third start from the one fresh clone + main job of main_job_clone below,
# which the first builds: the second needs no clone, so the other worker works on it meanwhile instead of
# waiting on the clone's lock (with the two first, it waited as long as the main job took). xdist gives a worker
# another file at the start while two tests or fewer are pending on it, so the first worker (the README's two
# tests) queues the third behind them, and the clone is ready when it starts. The files after them go longest first
# too (their slow-step times, 2026-12-06): a worker takes its next file while it still runs one, so a long file
# handed out late ran alone on one worker while the other idled; short files last even the two workers out.
LONGEST_FIRST = ("test_readme_commands.py", "test_pipeline_workflow.py", "test_fresh_clone.py",
                 "test_main_job.py", "test_slurm.py", "test_gemm_wgmma_nvcc.py", "test_device_pipeline.py",
                 "test_gemm_wgmma_swap_nvcc.py", "test_probe_patches.py", "test_gemm_wgmma_schedule_nvcc.py",
                 "test_pipeline_dag.py", "test_kills.py", "test_inputs_properties.py", "test_shapes.py",
                 "test_dispatch.py", "test_gemm_mma_nvcc.py", "test_trace_dispatch.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest test files first (LONGEST_FIRST); skip `nvcc` tests with a message where the CUDA compiler is
    absent."""
    items.sort(key=lambda item: LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST
               else len(LONGEST_FIRST))    # stable: every other test keeps its place
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


@pytest.fixture(scope="session")
def main_job_clone(tmp_path_factory: pytest.TempPathFactory):
    """ONE fresh clone + main job per test run, shared by the tests that start from it (tests/test_fresh_clone.py,
    tests/test_readme_commands.py, tests/test_slurm.py): each copies or only reads it. Under pytest-xdist each worker
    is its own session, so the clone lives in the run's folder above the workers' and is built under a lock by
    whichever worker comes first."""
    from pipeline_repo import main_job_clone as build

    basetemp = tmp_path_factory.getbasetemp()
    run_folder = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    return build(run_folder / "main_job_clone")
