"""Real nvcc compiles of gemm_wgmma_swap.cu for sm_90a: the family's rules mirror the kernel's static_asserts.

Every configuration the default grid keeps compiles with no local-memory spills (the split-K sum reads
its batches of partials in what the accumulators leave of the registers: the largest tiles, with any
split, compile clean); configurations the rules reject stop at the static_assert that says why; the
derived defines must agree with the kernel.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tunetable.compile import compile_configs, main_function, parse_ptxas
from tunetable.grid import DeviceLimits, compile_rules, expand, first_failed_rule
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.jit import include_flags
from tunetable.params import table_spec
from tunetable.sass import cubin_loop_stats, find_cuobjdump
from tunetable.yamlio import load_yaml_file

pytestmark = pytest.mark.nvcc

REPO = Path(__file__).resolve().parents[1]
FAMILY = FAMILIES["gemm_wgmma_swap"]
FLAGS = ["-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v", *include_flags()]
PARAMS = load_yaml_file(REPO / "params.yaml")
SPEC = table_spec(PARAMS, "gemm_wgmma_swap")
BASE = {"BLOCK_M": 208, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "SPLIT_K": 2}
# Winners of the table and validation shapes, one and two consumers, one and two m64 slices, with and without split-K.
WINNERS = {
    "n40_one_consumer": {"BLOCK_M": 40, "BLOCK_N": 64, "BLOCK_K": 128, "STAGES": 8, "CONSUMERS": 1, "SPLIT_K": 1},
    "n64_one_consumer": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "STAGES": 7, "CONSUMERS": 1, "SPLIT_K": 1},
    "n72_two_consumers": {"BLOCK_M": 72, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 8, "CONSUMERS": 2, "SPLIT_K": 1},
    "n72_split2": {"BLOCK_M": 72, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 8, "CONSUMERS": 2, "SPLIT_K": 2},
    "n200_two_consumers": {"BLOCK_M": 200, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 5, "CONSUMERS": 2, "SPLIT_K": 1},
    "n128_two_slices": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "SPLIT_K": 1},
}


def with_derived(defines: dict[str, int]) -> dict[str, int]:
    """Add the family's derived THREADS and SMEM_BYTES, as the grid does."""
    return {**defines, **FAMILY.derived(defines)}


def nvcc(*, defines: dict[str, int], out: Path) -> subprocess.CompletedProcess:
    """Compile one configuration to a cubin; return the finished process."""
    args = [f"-D{k}={v}" for k, v in defines.items()]
    return subprocess.run(["nvcc", *FLAGS, *args, "-o", str(out), str(REPO / FAMILY.source)],
                          capture_output=True, text=True, check=False)


def failed_rule(defines: dict[str, int]) -> str | None:
    """The source of the first grid rule the configuration fails (None: the rules accept it)."""
    rules = compile_rules(SPEC.grid, names=list(with_derived(defines)), path="params.yaml", table=SPEC.name,
                          family=FAMILY)
    rule = first_failed_rule(with_derived(defines), rules)
    return None if rule is None else rule.expression.source


@pytest.mark.parametrize("name", sorted(WINNERS))
def test_the_k_loop_builds_its_wgmma_descriptors_in_uniform_registers(name: str, tmp_path: Path) -> None:
    # v9 (benchmarks/notes_gemm_wgmma_swap.md): two R2UR per HGMMA before (18.3 instructions per HGMMA over the
    # grid), none since the descriptors are two built once plus uniform offsets (9.9).
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm: the dev extra)")
    defines = with_derived(WINNERS[name])
    assert failed_rule(WINNERS[name]) is None
    cubin = tmp_path / f"{name}.cubin"
    proc = nvcc(defines=defines, out=cubin)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loops = cubin_loop_stats(cubin=cubin, tool=tool, issuing="HGMMA", opcodes=("HGMMA", "R2UR"))
    assert loops, f"{name}: no loop issuing HGMMA in the SASS"
    for stats in loops:
        assert stats.count("R2UR") == 0, f"{name}: {stats.count('R2UR')} R2UR for {stats.count('HGMMA')} HGMMA"


@pytest.mark.parametrize(
    "change,rule,message",
    [
        ({"CONSUMERS": 3, "BLOCK_N": 192}, "CONSUMERS in (1, 2)", "CONSUMERS must be 1 or 2"),
        ({"BLOCK_N": 96}, "BLOCK_N % (CONSUMERS * 64) == 0", "BLOCK_N / CONSUMERS must be 64 or 128"),
        ({"BLOCK_M": 200 + 4}, "BLOCK_M % 8 == 0", "BLOCK_M is the wgmma n"),
        ({"BLOCK_M": 264, "SPLIT_K": 1}, "BLOCK_M % 8 == 0", "BLOCK_M is the wgmma n"),
        ({"BLOCK_K": 32}, "BLOCK_K in (64, 128)", "BLOCK_K must be 64 or 128"),
        ({"BLOCK_N": 256, "BLOCK_M": 200, "SPLIT_K": 1, "STAGES": 2}, "(BLOCK_N // CONSUMERS) * BLOCK_M <= 24576",
         "consumer tile too large"),
        # 160 accumulators fit one consumer thread, not with the split-K sum's batches beside them.
        ({"BLOCK_N": 256, "BLOCK_M": 160, "SPLIT_K": 2, "STAGES": 2}, "SPLIT_K == 1 or",
         "split-K tiles hold at most 128 accumulators"),
        ({"STAGES": 1}, "2 <= STAGES <= 8", "STAGES must be between 2 and 8"),
        ({"STAGES": 8}, "SMEM_BYTES <= 232448", "exceeds the 227 KB per-block limit"),
        ({"SPLIT_K": 17}, "1 <= SPLIT_K <= 16", "SPLIT_K must be between 1 and 16"),
        # The last tile of M reads A up to BLOCK_M - 8 rows past its stage: 2 stages of 64 weight rows leave 16 KB of
        # B's stages after A's, and 248 shifted rows need 31 KB.
        ({"BLOCK_M": 256, "BLOCK_N": 64, "CONSUMERS": 1, "STAGES": 2, "SPLIT_K": 1},
         "STAGES * BLOCK_N * BLOCK_K * 2 >= (BLOCK_M - 8) * 128", "a shifted read of A's last stage would leave"),
    ],
)
def test_rule_rejected_config_stops_at_the_kernels_static_assert(change: dict[str, int], rule: str, message: str,
                                                                 tmp_path: Path) -> None:
    defines = {**BASE, **change}
    source = failed_rule(defines)
    assert source is not None and source.startswith(rule), source
    proc = nvcc(defines=defines, out=tmp_path / "bad.cubin")  # no THREADS/SMEM_BYTES: the kernel's own checks
    assert proc.returncode != 0
    assert re.search(r"static assertion failed with \"[^\"]*" + re.escape(message), proc.stderr), proc.stderr[-800:]


def test_derived_defines_must_agree_with_the_kernel(tmp_path: Path) -> None:
    for name, wrong in (("SMEM_BYTES", 1024), ("THREADS", 256)):
        proc = nvcc(defines={**with_derived(BASE), name: wrong}, out=tmp_path / "bad.cubin")
        assert proc.returncode != 0 and f"{name} define disagrees" in proc.stderr, proc.stderr[-800:]


@pytest.mark.parametrize("block_m,split_k", [(256, 2), (256, 16), (240, 3), (208, 4), (64, 8)])
def test_split_k_never_spills_up_to_the_largest_consumer_tile(block_m: int, split_k: int, tmp_path: Path) -> None:
    """The rules admit split-K on every tile the accumulators allow, and ptxas spills none of them."""
    defines = {**BASE, "BLOCK_M": block_m, "SPLIT_K": split_k}
    assert failed_rule(defines) is None
    proc = nvcc(defines=with_derived(defines), out=tmp_path / "split.cubin")
    assert proc.returncode == 0, proc.stderr[-1500:]
    main = main_function(parse_ptxas(proc.stdout + proc.stderr), entry=FAMILY.entry)
    assert (main.spill_stores, main.spill_loads, main.stack_bytes) == (0, 0, 0), main


@pytest.mark.parametrize("block_m", [160, 168, 192])
def test_two_slice_consumers_hold_up_to_192_accumulators_without_spills(block_m: int, tmp_path: Path) -> None:
    """256 rows of N by up to 192 columns of M (two m64 slices per consumer): admitted, and ptxas spills none."""
    defines = {**BASE, "BLOCK_M": block_m, "BLOCK_N": 256, "SPLIT_K": 1}
    assert failed_rule(defines) is None
    proc = nvcc(defines=with_derived(defines), out=tmp_path / "wide.cubin")
    assert proc.returncode == 0, proc.stderr[-1500:]
    main = main_function(parse_ptxas(proc.stdout + proc.stderr), entry=FAMILY.entry)
    assert (main.spill_stores, main.spill_loads, main.stack_bytes) == (0, 0, 0), main


@pytest.mark.slow
def test_every_kept_config_of_the_default_grid_compiles_without_spills(tmp_path: Path) -> None:
    """The whole default grid through the compile stage (a fresh cache: every config really compiles)."""
    kept = expand(SPEC, limits=DeviceLimits.from_params(PARAMS)).kept
    assert len(kept) >= 30
    results = compile_configs(kept, kernel_path=REPO / SPEC.kernel, flags=PARAMS["compile"]["nvcc_flags"],
                              arch=SPEC.arch, cache_dir=tmp_path / "cubins", workers=os.cpu_count() or 2)
    failed = {cid: r.error for cid, r in results.items() if r.status != "ok"}
    assert not failed, failed
    spilled = {}
    for config_id, result in results.items():
        main = main_function(parse_ptxas(result.ptxas_log), entry=FAMILY.entry)
        if main is None or main.spill_stores or main.spill_loads or main.stack_bytes:
            spilled[config_id] = main
    assert not spilled, spilled
