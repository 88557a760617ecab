"""Real nvcc compiles of gemm_mma.cu (kernels/families/gemm_mma/) for sm_90a: valid configs build, invalid ones stop
at a static_assert."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tunetable.grid import compile_rules, first_failed_rule
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.jit import include_flags

pytestmark = pytest.mark.nvcc

GEMM = FAMILIES["gemm_mma"]
FLAGS = ["-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v", *include_flags()]

VALID = {
    "big_128x256": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, WARPS_M=2, WARPS_N=4, WARPS_K=1, STAGES=4, SPLIT_K=1,
                        GROUP_M=8),
    "wide_256x128_16warps": dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, WARPS_M=4, WARPS_N=4, WARPS_K=1, STAGES=3,
                                 SPLIT_K=1, GROUP_M=8),
    "skinny_split4": dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, WARPS_M=1, WARPS_N=4, WARPS_K=1, STAGES=4, SPLIT_K=4,
                          GROUP_M=1),
    # Sliced K: 2 k slices of 1 x 4 warps with split-K; 4 k slices (16 warps, 512 threads) on a 16 x 64 tile.
    "sliced_k2_32x64_split2": dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, WARPS_M=1, WARPS_N=4, WARPS_K=2, STAGES=4,
                                   SPLIT_K=2, GROUP_M=1),
    "sliced_k4_16x64": dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, WARPS_M=1, WARPS_N=4, WARPS_K=4, STAGES=4, SPLIT_K=1,
                            GROUP_M=1),
    "sliced_k4_16x32_split2": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, WARPS_M=1, WARPS_N=2, WARPS_K=4, STAGES=4,
                                   SPLIT_K=2, GROUP_M=1),
    # The 8-stage ring of the 16 x 32 four-slice tile (the recorded winner at M <= 8 of N = 4096).
    "ring8_16x32_k4": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, WARPS_M=1, WARPS_N=2, WARPS_K=4, STAGES=8,
                           SPLIT_K=1, GROUP_M=1),
}


def nvcc(*, source: Path, defines: dict[str, int], out: Path) -> subprocess.CompletedProcess:
    """Compile one configuration to a cubin; return the finished process."""
    args = [f"-D{k}={v}" for k, v in defines.items()]
    return subprocess.run(["nvcc", *FLAGS, *args, "-o", str(out), str(source)], capture_output=True, text=True)


def with_derived(defines: dict[str, int]) -> dict[str, int]:
    """Add the family's derived THREADS and SMEM_BYTES, as the grid does."""
    return {**defines, **GEMM.derived(defines)}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_config_compiles_without_spills(name, repo_root, tmp_path):
    """The gemm_mma entry is in the cubin, no reduction kernel (split-K reduces inside it); no spills."""
    cubin = tmp_path / f"{name}.cubin"
    proc = nvcc(source=repo_root / GEMM.source, defines=with_derived(VALID[name]), out=cubin)
    assert proc.returncode == 0, proc.stderr
    data = cubin.read_bytes()
    assert GEMM.entry.encode() in data and b"gemm_mma_splitk_reduce" not in data
    report = proc.stdout + proc.stderr
    main_section = report[report.index(f"Function properties for {GEMM.entry}\n"):]
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", main_section)
    assert spills is not None and spills.groups() == ("0", "0"), main_section[:300]


@pytest.mark.parametrize(
    "change,message",
    [
        ({"BLOCK_M": 96, "WARPS_M": 4}, "BLOCK_M must be a multiple of WARPS_M \\* 16"),
        ({"BLOCK_N": 136}, "BLOCK_N must be a multiple of WARPS_N \\* 16"),
        ({"BLOCK_K": 48}, "BLOCK_K must be 16, 32, 64 or 128"),
        ({"STAGES": 1}, "STAGES must be between 2 and 8"),
        ({"BLOCK_N": 512, "STAGES": 4}, "exceeds the 227 KB per-block limit"),
        ({"BLOCK_M": 256, "BLOCK_N": 256, "STAGES": 2}, "warp tile too large"),
        # 4 k16 steps per 64-wide k-tile cannot be shared by 8 k slices (1 x 4 x 8 warps = 1024 threads).
        ({"BLOCK_M": 16, "BLOCK_N": 64, "WARPS_M": 1, "WARPS_K": 8, "SPLIT_K": 4, "GROUP_M": 1},
         "each k slice owns whole k16 steps"),
        # The other slice's 128 x 256 fp32 tile (128 KiB) does not fit in 2 stages of 32-wide k-tiles (48 KiB).
        ({"BLOCK_K": 32, "STAGES": 2, "WARPS_K": 2}, "sliced-K reduction"),
    ],
)
def test_invalid_config_fails_with_static_assert(change, message, repo_root, tmp_path):
    """Values that cannot work stop the build with the kernel's static_assert text."""
    defines = {**VALID["big_128x256"], **change}
    proc = nvcc(source=repo_root / GEMM.source, defines=defines, out=tmp_path / "bad.cubin")
    assert proc.returncode != 0
    assert re.search(r"static assertion failed with \"[^\"]*" + message, proc.stderr), proc.stderr[-800:]


@pytest.mark.parametrize("stages,rule", [(1, "2 <= STAGES <= 8"), (2, None), (8, None), (9, "2 <= STAGES <= 8")])
def test_the_family_stage_rule_is_the_kernels_bound(stages, rule, repo_root, tmp_path):
    """The grid prunes exactly the ring depths the kernel's static_assert refuses (16 x 32 tile: shared memory fits)."""
    defines = with_derived({**VALID["ring8_16x32_k4"], "STAGES": stages})
    rules = compile_rules({"groups": [], "rules": []}, names=list(defines), path="params.yaml", table="gemm_mma",
                          family=GEMM)
    failed = first_failed_rule(defines, rules)
    assert (None if failed is None else failed.expression.source) == rule
    proc = nvcc(source=repo_root / GEMM.source, defines=defines, out=tmp_path / "ring.cubin")
    assert (proc.returncode == 0) == (rule is None), proc.stderr[-800:]
    assert rule is None or "STAGES must be between 2 and 8" in proc.stderr, proc.stderr[-800:]


def test_smem_define_must_agree_with_the_kernel(repo_root, tmp_path):
    """A SMEM_BYTES define that disagrees with the kernel's formula is a compile error."""
    defines = {**with_derived(VALID["big_128x256"]), "SMEM_BYTES": 1024}
    proc = nvcc(source=repo_root / GEMM.source, defines=defines, out=tmp_path / "bad.cubin")
    assert proc.returncode != 0
    assert "SMEM_BYTES define disagrees" in proc.stderr


def test_missing_define_is_named(repo_root, tmp_path):
    """Compiling without the tunables stops at the #error listing them."""
    proc = nvcc(source=repo_root / GEMM.source, defines={}, out=tmp_path / "bad.cubin")
    assert proc.returncode != 0
    assert "needs -DBLOCK_M" in proc.stderr
