"""gemm_mma: C = A·Bᵀ (bf16, fp32 accumulate) through mma.sync, cp.async pipeline, sliced and split K.

Every fact of the family, once: the typed tunables and the values derived from them (threads,
shared memory: the kernel's own formulas, which it static_asserts), the validity rules (mirroring
gemm_mma.cu's static_asserts, so that no kept configuration fails to build), the launch geometry,
the untuned heuristics and the perf model that ranks it. params.yaml's table says only what to
tune (shapes, grid groups); the grid, the pruner, the perf model, the runtime and the tests read
this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tunetable.kernels.families.common import (
    H200_SM_COUNT,
    MAX_SHARED_BYTES_PER_BLOCK,
    KernelFamily,
    Launch,
    Rule,
    TableEntry,
    ceil_div,
    check_gemm_shape,
    int_define,
)


@dataclass(frozen=True, kw_only=True)
class GemmMmaTunables:
    """The kernel's -D tunables (lower case here, UPPER_CASE as defines), in grid order."""

    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    warps_k: int
    stages: int
    split_k: int
    group_m: int

    @property
    def threads(self) -> int:
        """WARPS_M * WARPS_N warps of 32 per k slice, WARPS_K slices."""
        return self.warps_m * self.warps_n * self.warps_k * 32

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: STAGES bf16 tiles of A and B."""
        return self.stages * (self.block_m + self.block_n) * self.block_k * 2


@dataclass(frozen=True, kw_only=True)
class TuningConfig(GemmMmaTunables, TableEntry):
    """One tuned gemm_mma configuration for the M range [m, m_end) of one (N, K) shape."""


class GemmMmaFamily(KernelFamily):
    """C = A·Bᵀ through mma.sync; see gemm_mma.cu."""

    name = "gemm_mma"
    entry = "gemm_mma"
    folder = Path(__file__).resolve().parent
    arg_format = "PPPPiii"          # A, B, C, workspace, M, N, K
    zeroed_workspace = True         # the split-K tile counters must start at zero (the kernel resets them)
    tunables = GemmMmaTunables
    entry_type = TuningConfig
    perf_model = "tiled"
    rules = (
        Rule("BLOCK_M % (WARPS_M * 16) == 0", "whole m16 fragments per warp"),
        Rule("BLOCK_N % (WARPS_N * 16) == 0", "ldmatrix.x4 loads two n8 fragments"),
        # fp32 accumulators per thread (BLOCK_M*BLOCK_N*WARPS_K/THREADS: every k slice holds a whole
        # tile) at most half the register cap (255 per thread, 65536 per block): beyond that ptxas spills.
        Rule("BLOCK_M * BLOCK_N * WARPS_K <= 128 * THREADS and BLOCK_M * BLOCK_N * WARPS_K <= 32768",
             "at most 128 fp32 accumulators per thread"),
        Rule("128 <= THREADS <= 512", "64-thread blocks spill (64x64 warp tile, many loads)"),
        Rule(f"SMEM_BYTES <= {MAX_SHARED_BYTES_PER_BLOCK}", "the kernel's static_assert on shared memory"),
        Rule("(BLOCK_K // 16) % WARPS_K == 0", "each k slice owns whole k16 steps"),
        Rule("(WARPS_K - 1) * BLOCK_M * BLOCK_N * 4 <= SMEM_BYTES",
             "the other k slices' fp32 accumulator tiles are summed through the pipeline's shared memory"),
        Rule("2 <= STAGES <= 8", "the kernel's stage bound"),
    )
    # The untuned default: a mid-sized tile valid on every shape (what runtime_gemm compares the
    # tuned table against, and what an empty table runs for large M); narrow tiles for small M.
    default_tunables = GemmMmaTunables(block_m=128, block_n=128, block_k=32, warps_m=2, warps_n=2, warps_k=1,
                                       stages=3, split_k=1, group_m=8)
    skinny_tunables = GemmMmaTunables(block_m=16, block_n=64, block_k=64, warps_m=1, warps_n=4, warps_k=1,
                                      stages=4, split_k=1, group_m=1)

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        check_gemm_shape(self.name, M, N, K, why="16-byte rows for cp.async")

    def kernel_arguments(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int, a: int, b: int, c: int, workspace: int
    ) -> tuple[object, ...]:
        """The kernel's arguments, in ``arg_format`` order."""
        return (a, b, c, workspace, M, N, K)

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int, *, sm_count: int = H200_SM_COUNT) -> Launch:
        """Grid (one block per tile and K split), block, shared memory and split-K workspace for one shape."""
        self.check_shape(M, N, K)
        tiles = ceil_div(M, int_define(defines, "BLOCK_M")) * ceil_div(N, int_define(defines, "BLOCK_N"))
        split_k = int_define(defines, "SPLIT_K")
        # Split-K: fp32 partials [SPLIT_K, M, N], then one int counter per tile that tells the
        # tile's last split to arrive to sum the partials and write C.
        workspace = split_k * M * N * 4 + tiles * 4 if split_k > 1 else 0
        return Launch(
            grid=(tiles, 1, split_k),
            block=(self.threads(defines), 1, 1),
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=workspace,
        )


FAMILY = GemmMmaFamily()
