"""Every table declared in params.yaml is fresh: its checked-in region matches its manifest.

A failure means a manifest, snippet or marker changed without regenerating: run
``tunetable codegen --all`` and commit the result.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DECLARED = list(yaml.safe_load((REPO / "params.yaml").read_text())["tables"])


@pytest.mark.parametrize("table", DECLARED)
def test_declared_table_is_fresh(table: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "codegen", "--table", table, "--check", "--params", "params.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"table {table} is stale or broken:\n{done.stderr}"
    assert done.stderr == ""


def test_generated_tables_import_and_list_every_declared_table() -> None:
    from kernels.tuning_configs import TABLES, TuningConfig

    assert sorted(TABLES) == sorted(DECLARED)
    assert all(isinstance(entry, TuningConfig) for entries in TABLES.values() for entry in entries)
