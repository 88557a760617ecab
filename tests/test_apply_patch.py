"""scripts/apply_patch.py: probe variants of a kernel kept as one-file unified diffs, or as the kernel's section of a
prepared adoption (a `git diff`)."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import written_variant

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from apply_patch import PatchError, apply_unified, kernel_section  # noqa: E402

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
        pytest.skip("no probe patch is committed (adopted ones live in their kernels, the others in git history)")
    for patch in patches:
        source = written_variant(patch=patch, folder=tmp_path).read_text()
        base = REPO / patch.read_text().splitlines()[0].removeprefix("--- ")
        assert source != base.read_text() and source.count("\n") > 300


def test_a_patch_of_a_real_kernel_writes_that_variant(tmp_path: Path) -> None:
    # A probe variant as `git diff` would write it: a line inserted into gemm_mma.cu, three lines of context.
    base_path = "kernels/families/gemm_mma/gemm_mma.cu"
    base = (REPO / base_path).read_text().splitlines(keepends=True)
    changed = next(i for i, line in enumerate(base) if line.startswith("#include"))
    variant = [*base[:changed], "// probe variant\n", *base[changed:]]
    patch = tmp_path / "variant.patch"
    patch.write_text("".join(difflib.unified_diff(base, variant, fromfile=base_path, tofile=base_path)))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(patch)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "variant.cu").read_text() == "".join(variant)


def test_the_prepared_adoptions_still_apply_to_the_tree() -> None:
    """A change waiting for a recording (benchmarks/versions/*.diff: kernel, family, tests) applies to today's files."""
    diffs = sorted((REPO / "benchmarks" / "versions").glob("*.diff"))
    if not diffs:
        pytest.skip("no prepared adoption is committed")
    for diff in diffs:
        proc = subprocess.run(["git", "apply", "--check", str(diff)], cwd=REPO, capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, (f"{diff.name} no longer applies (refresh it, or remove it once adopted): "
                                      f"{proc.stderr}")


def test_a_prepared_adoptions_probe_variant_is_the_kernel_git_apply_adopts(tmp_path: Path) -> None:
    diffs = sorted((REPO / "benchmarks" / "versions").glob("*.diff"))
    if not diffs:
        pytest.skip("no prepared adoption is committed")
    for diff in diffs:
        variant = written_variant(patch=diff, folder=tmp_path)
        # git apply, outside any repository, on a copy of the kernel alone: the expected file comes from git.
        base = kernel_section(lines=diff.read_text().splitlines(), name=diff.name)[0].removeprefix("--- ")
        tree = tmp_path / diff.stem
        (tree / base).parent.mkdir(parents=True)
        (tree / base).write_text((REPO / base).read_text())
        subprocess.run(["git", "apply", f"--include={base}", str(diff)], cwd=tree, check=True, capture_output=True)
        assert variant.read_text() == (tree / base).read_text()


def test_a_diff_without_one_family_kernel_section_is_refused_naming_it(tmp_path: Path) -> None:
    two = ["diff --git a/x.py b/x.py", "--- a/x.py", "+++ b/x.py", "@@ -1 +1 @@", "-a", "+b"]
    with pytest.raises(PatchError, match=r"^d.diff:1: expected one family kernel section .*found 0$"):
        kernel_section(lines=two, name="d.diff")
    diff = tmp_path / "d.diff"
    diff.write_text("\n".join(two) + "\n")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(diff)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "found 0" in proc.stderr
    assert not diff.with_suffix(".cu").exists()
