"""Every table, dispatch list and selector declared in params.yaml is fresh: its checked-in region matches its manifest.

A failure means a manifest, snippet or marker changed without regenerating: run
``tunetable codegen --all`` and commit the result.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_yaml_file(REPO / "params.yaml")
DECLARED = list(PARAMS["tables"])
DISPATCH_LISTS = list(PARAMS.get("dispatch") or {})
SELECTORS = list(PARAMS.get("selector") or {})


@pytest.mark.parametrize("table", [*DECLARED, *DISPATCH_LISTS, *SELECTORS])
def test_declared_table_is_fresh(table: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tunetable", "codegen", "--table", table, "--check", "--params", "params.yaml"],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"table {table} is stale or broken:\n{done.stderr}"
    assert done.stderr == ""


def test_generated_tables_import_and_list_every_declared_table() -> None:
    from tunetable.kernels.families import FAMILIES
    from tunetable.kernels.tuning_configs import BUILDS, DISPATCH, TABLES, FamilyChoice

    assert sorted(TABLES) == sorted(DECLARED) == sorted(BUILDS)
    for name, entries in TABLES.items():
        family = PARAMS["tables"][name]["family"]
        assert all(type(entry) is FAMILIES[family].entry_type for entry in entries)
        assert (BUILDS[name].family, BUILDS[name].arch) == (family, PARAMS["tables"][name]["arch"])
        assert list(BUILDS[name].nvcc_flags) == PARAMS["compile"]["nvcc_flags"]
    assert sorted(DISPATCH) == sorted(DISPATCH_LISTS)
    assert all(isinstance(entry, FamilyChoice) for entries in DISPATCH.values() for entry in entries)
    from tunetable.kernels.families.common import ShapeCandidate
    from tunetable.kernels.runtime.decide import selector_candidates
    from tunetable.kernels.tuning_configs import SELECTOR_FILES

    # A selector is its data file (kernels/data/<name>.json), recorded by sha256: it loads and holds candidates.
    assert sorted(SELECTOR_FILES) == sorted(SELECTORS)
    for name, record in SELECTOR_FILES.items():
        assert f"kernels/{record.path}" == PARAMS["selector"][name]["data"]
        found = selector_candidates(name)
        assert len(found) == record.candidates > 0 and all(isinstance(entry, ShapeCandidate) for entry in found)


def test_whole_generated_file_is_fresh() -> None:
    done = subprocess.run([sys.executable, "-m", "tunetable", "codegen", "--all", "--check"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_generated_wgmma_ops_header_is_fresh() -> None:
    """kernels/common/wgmma_ops.cuh is what scripts/gen_wgmma_ops.py writes (the kernels' hashes cover it)."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_wgmma_ops.py"), "--check"],
                          cwd=REPO, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    header = (REPO / "kernels" / "common" / "wgmma_ops.cuh").read_text()
    assert header.count("struct WgmmaN<") == 32 and "m64n200k16" in header
