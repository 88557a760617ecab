"""Real nvcc compiles of gemm_wgmma.cu for sm_90a: the family's rules mirror the kernel's static_asserts.

Every configuration the default grid keeps compiles with no local-memory spills; configurations the
rules reject stop at the static_assert that says why; valid ones outside the default grid build too.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.jit import default_cache_dir, include_flags
from tunetable.compile import compile_configs, main_function, parse_ptxas
from tunetable.grid import DeviceLimits, compile_rules, expand, first_failed_rule
from tunetable.params import table_spec
from tunetable.sass import cubin_loop_stats, find_cuobjdump
from tunetable.yamlio import load_yaml_file

pytestmark = pytest.mark.nvcc

REPO = Path(__file__).resolve().parents[1]
FAMILY = FAMILIES["gemm_wgmma"]
FLAGS = ["-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v", *include_flags()]
PARAMS = load_yaml_file(REPO / "params.yaml")
SPEC = table_spec(PARAMS, "gemm_wgmma")

BASE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER_M": 2, "CLUSTER_N": 1,
        "RASTER": 0, "GROUP_M": 8, "SPLIT_K": 1, "TAIL_SPLIT": 0}
VALID = {
    "large_128x256_cluster2": BASE,
    "tall_256x128": {**BASE, "BLOCK_M": 256, "BLOCK_N": 128, "CLUSTER_M": 1},
    "skinny_split8": {**BASE, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 8, "CONSUMERS": 1, "CLUSTER_M": 1,
                      "GROUP_M": 1, "SPLIT_K": 8},
    # Outside the default grid, still valid: n192, a column cluster, raster along N, two stages, K128.
    "n192_clusterN_raster1": {**BASE, "BLOCK_N": 192, "STAGES": 2, "CLUSTER_M": 1, "CLUSTER_N": 2, "RASTER": 1},
    "k128_split16": {**BASE, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "STAGES": 7, "CONSUMERS": 1,
                     "CLUSTER_M": 1, "SPLIT_K": 16},
    # The last wave split along K, in 2 x 1 clusters (the grid's tail_split group) and on a one-consumer tile.
    "tail_split_cluster2": {**BASE, "TAIL_SPLIT": 1},
    "tail_split_one_consumer": {**BASE, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 8, "CONSUMERS": 1, "CLUSTER_M": 1,
                                "TAIL_SPLIT": 1},
    # N tiles that are not a multiple of 32 (a 16-column remainder in the epilogue), with split-K partials.
    "n144_clusterN_split2": {**BASE, "BLOCK_N": 144, "STAGES": 6, "CLUSTER_M": 1, "CLUSTER_N": 2, "SPLIT_K": 2},
    "n80_one_consumer_tail": {**BASE, "BLOCK_M": 64, "BLOCK_N": 80, "STAGES": 8, "CONSUMERS": 1, "CLUSTER_M": 1,
                              "TAIL_SPLIT": 1},
    # Two m64 slices per consumer at 192 accumulators (256 x 192), three consumers (192-row tiles) at the widest
    # fragment they hold, in 2 x 1 clusters, and split along K.
    "two_slices_256x192": {**BASE, "BLOCK_M": 256, "BLOCK_N": 192, "CLUSTER_M": 1},
    "three_consumers_192x192_cluster2": {**BASE, "BLOCK_M": 192, "BLOCK_N": 192, "CONSUMERS": 3},
    "three_consumers_192x128_split4": {**BASE, "BLOCK_M": 192, "BLOCK_N": 128, "STAGES": 5, "CONSUMERS": 3,
                                       "CLUSTER_M": 1, "SPLIT_K": 4},
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


@pytest.fixture(scope="module")
def compile_valid(tmp_path_factory: pytest.TempPathFactory):
    """Compile a VALID configuration once for this file's tests (its ptxas report and its SASS are checked by two):
    the cubin's path and the finished nvcc process, by name."""
    folder = tmp_path_factory.mktemp("valid")
    done: dict[str, tuple[Path, subprocess.CompletedProcess]] = {}

    def compiled(name: str) -> tuple[Path, subprocess.CompletedProcess]:
        if name not in done:
            cubin = folder / f"{name}.cubin"
            done[name] = cubin, nvcc(defines=with_derived(VALID[name]), out=cubin)
        return done[name]

    return compiled


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_config_is_kept_by_the_rules_and_compiles_without_spills(name: str, compile_valid) -> None:
    assert failed_rule(VALID[name]) is None
    cubin, proc = compile_valid(name)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert FAMILY.entry.encode() in cubin.read_bytes()
    main = main_function(parse_ptxas(proc.stdout + proc.stderr), entry=FAMILY.entry)
    assert main is not None and (main.spill_stores, main.spill_loads) == (0, 0), proc.stderr[-1500:]


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_k_loop_builds_its_wgmma_descriptors_in_uniform_registers(name: str, compile_valid) -> None:
    # v16 (benchmarks/notes_gemm_wgmma.md): descriptors built in vector registers cost an R2UR each and ~20
    # instructions per HGMMA (78 instead of 38 per k-tile at 128 x 128); the kernel builds them by uniform adds.
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm: the dev extra)")
    cubin, proc = compile_valid(name)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loops = cubin_loop_stats(cubin=cubin, tool=tool, issuing="HGMMA", opcodes=("HGMMA", "R2UR"))
    assert loops, f"{name}: no loop issuing HGMMA in the SASS"
    for stats in loops:
        # Before v16 two per HGMMA; now none, or one per k-tile in clusters (the CTA id that the shared window's
        # base is rebuilt from).
        assert stats.count("R2UR") <= 1, f"{name}: {stats.count('R2UR')} R2UR for {stats.count('HGMMA')} HGMMA"


@pytest.mark.parametrize(
    "change,rule,message",
    [
        ({"CONSUMERS": 4, "BLOCK_M": 256}, "CONSUMERS in (1, 2, 3)", "CONSUMERS must be 1, 2 or 3"),
        ({"BLOCK_M": 96}, "BLOCK_M % (CONSUMERS * 64) == 0", "BLOCK_M / CONSUMERS must be 64 or 128"),
        ({"BLOCK_M": 512, "BLOCK_N": 64}, "BLOCK_M % (CONSUMERS * 64) == 0", "BLOCK_M / CONSUMERS must be 64 or 128"),
        ({"BLOCK_N": 88}, "BLOCK_N % 16 == 0", "BLOCK_N must be a multiple of 16 from 32 to 256"),
        ({"BLOCK_N": 272, "BLOCK_M": 64, "CONSUMERS": 1}, "BLOCK_N % 16 == 0", "BLOCK_N must be a multiple of 16"),
        ({"BLOCK_K": 32}, "BLOCK_K in (64, 128)", "BLOCK_K must be 64 or 128"),
        ({"BLOCK_M": 256, "STAGES": 2}, "(BLOCK_M // CONSUMERS) * BLOCK_N <= 24576", "consumer tile too large"),
        # Three consumers: ptxas fits an m64n192 fragment in the 128 registers of 512 threads, not n208.
        ({"CONSUMERS": 3, "BLOCK_M": 192, "BLOCK_N": 208, "CLUSTER_M": 1},
         "CONSUMERS < 3 or (BLOCK_M // CONSUMERS) * BLOCK_N <= 12288", "(<= 96 with 3 consumers)"),
        ({"STAGES": 1}, "2 <= STAGES <= 16", "STAGES must be between 2 and 16"),
        ({"STAGES": 5}, "SMEM_BYTES <= 232448", "exceeds the 227 KB per-block limit"),
        ({"CLUSTER_N": 4}, "CLUSTER_M in (1, 2) and CLUSTER_N in (1, 2)", "CLUSTER_M and CLUSTER_N must be 1 or 2"),
        ({"RASTER": 2}, "RASTER in (0, 1)", "RASTER must be 0"),
        ({"GROUP_M": 0}, "GROUP_M >= 1", "GROUP_M must be at least 1"),
        ({"SPLIT_K": 17}, "1 <= SPLIT_K <= 16", "SPLIT_K must be between 1 and 16"),
        ({"TAIL_SPLIT": 2}, "TAIL_SPLIT in (0, 1)", "TAIL_SPLIT must be 0 or 1"),
        ({"TAIL_SPLIT": 1, "SPLIT_K": 2}, "TAIL_SPLIT == 0 or SPLIT_K == 1", "TAIL_SPLIT splits K itself"),
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


def test_every_kept_config_of_the_default_grid_compiles_without_spills() -> None:
    """The whole default grid through the compile stage, into the runtime's cubin cache (conftest.py's
    TUNETABLE_CUBIN_CACHE: a fresh clone's is empty): the same keys as the runtime's, so test_dispatch.py's warm cache
    of this table's entries finds them compiled instead of compiling them again. A cache entry holds its compile's
    ptxas log, read below either way."""
    kept = expand(SPEC, limits=DeviceLimits.from_params(PARAMS)).kept
    assert len(kept) >= 30
    results = compile_configs(kept, kernel_path=REPO / SPEC.kernel, flags=PARAMS["compile"]["nvcc_flags"],
                              arch=SPEC.arch, cache_dir=default_cache_dir(), workers=os.cpu_count() or 2)
    assert sorted(results) == sorted(config.id for config in kept)
    failed = {cid: r.error for cid, r in results.items() if r.status != "ok"}
    assert not failed, failed
    spilled = {}
    for config_id, result in results.items():
        main = main_function(parse_ptxas(result.ptxas_log), entry=FAMILY.entry)
        if main is None or main.spill_stores or main.spill_loads or main.stack_bytes:
            spilled[config_id] = main
    assert not spilled, spilled
