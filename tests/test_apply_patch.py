"""scripts/apply_patch.py: probe variants of a kernel kept as one-file unified diffs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from apply_patch import PatchError, apply_unified  # noqa: E402

BASE = ["a", "b", "c", "d", "e", "f", "g"]


def test_a_hunk_replaces_a_line_and_inserts_another() -> None:
    patch = ["--- base", "+++ new", "@@ -2,3 +2,4 @@", " b", "-c", "+C", "+c2", " d"]
    assert apply_unified(base=BASE, patch=patch, name="p") == ["a", "b", "C", "c2", "d", "e", "f", "g"]


def test_two_hunks_and_a_pure_insertion() -> None:
    patch = ["--- base", "+++ new", "@@ -0,0 +1 @@", "+top", "@@ -6,2 +7,1 @@", "-f", " g"]
    assert apply_unified(base=BASE, patch=patch, name="p") == ["top", "a", "b", "c", "d", "e", "g"]


def test_a_base_that_moved_on_is_refused_naming_the_patch_line() -> None:
    patch = ["--- base", "+++ new", "@@ -2,2 +2,2 @@", " b", "-x", "+y"]
    with pytest.raises(PatchError, match=r"^p:5: the base differs here \(line 3 of the base\)"):
        apply_unified(base=BASE, patch=patch, name="p")


def test_the_committed_probe_patches_apply_to_the_kernels_they_name(tmp_path: Path) -> None:
    patches = sorted((REPO / "benchmarks" / "versions").glob("*.patch"))
    if not patches:
        pytest.skip("no probe patch is committed (each probe so far was adopted into its kernel)")
    for patch in patches:
        copy = tmp_path / patch.name
        copy.write_text(patch.read_text())
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(copy)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        base = REPO / patch.read_text().splitlines()[0].removeprefix("--- ")
        source = copy.with_suffix(".cu").read_text()
        assert source != base.read_text() and source.count("\n") > 300
