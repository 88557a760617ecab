"""gemm_wgmma_swap: C = A·Bᵀ computed as Cᵀ = B·Aᵀ (swap-AB) through TMA + wgmma, persistent, in-kernel split-K.

The problem's M is the wgmma n (BLOCK_M: any multiple of 8 up to 256), so skinny and odd M fill
their tiles; N feeds the 64-row slices (BLOCK_N = CONSUMERS x 64 or 128 rows). Every fact of the
family, once: the typed tunables and the values derived from them (threads, shared memory: the
kernel's own formulas, which it static_asserts), the validity rules (gemm_wgmma_swap.cu's
static_asserts), the tensor maps and the persistent
launch geometry, the untuned heuristics. The persistent perf model ranks it with the tile as given
(its tile and work-item counts are the same either way round).
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
    fragment_workspace_bytes,
    int_define,
    tail_split_workspace_bytes,
)
from tunetable.kernels.tma import TensorMapSpec, encode

TMA_BOX_COLS = 64          # K elements per TMA box row: one 128-byte swizzle atom of bf16
SMEM_OVERHEAD_BYTES = 2048  # 1024 bytes of alignment slack (1024-byte aligned stages) + 1024 of barriers


@dataclass(frozen=True, kw_only=True)
class GemmWgmmaSwapTunables:
    """The kernel's -D tunables (lower case here, UPPER_CASE as defines), in grid order."""

    block_m: int      # columns of the Cᵀ tile: the problem's M, the wgmma n
    block_n: int      # rows of the Cᵀ tile: the problem's N, CONSUMERS x one or two m64 slices
    block_k: int
    stages: int
    consumers: int
    split_k: int

    @property
    def threads(self) -> int:
        """One producer warpgroup plus CONSUMERS consumer warpgroups."""
        return (self.consumers + 1) * 128

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: STAGES tiles of B and A, alignment slack and barriers."""
        return self.stages * (self.block_m + self.block_n) * self.block_k * 2 + SMEM_OVERHEAD_BYTES


@dataclass(frozen=True, kw_only=True)
class SwapTuningConfig(GemmWgmmaSwapTunables, TableEntry):
    """One tuned gemm_wgmma_swap configuration (swap-AB TMA + wgmma) for the M range [m, m_end) of one (N, K)."""


class GemmWgmmaSwapFamily(KernelFamily):
    """C = A·Bᵀ as Cᵀ = B·Aᵀ through TMA + wgmma, persistent; see gemm_wgmma_swap.cu."""

    name = "gemm_wgmma_swap"
    entry = "gemm_wgmma_swap"
    folder = Path(__file__).resolve().parent
    arg_format = "128s128sPPiii"    # tensor maps of B and A (by value), C, workspace, M, N, K
    zeroed_workspace = True         # the split-K tile counters must start at zero
    tunables = GemmWgmmaSwapTunables
    entry_type = SwapTuningConfig
    perf_model = "persistent"
    rules = (
        Rule("CONSUMERS in (1, 2)", "one or two consumer warpgroups"),
        Rule("BLOCK_N % (CONSUMERS * 64) == 0 and BLOCK_N // CONSUMERS in (64, 128)", "m64 slices per consumer"),
        Rule("BLOCK_M % 8 == 0 and 8 <= BLOCK_M <= 256", "the wgmma n"),
        Rule("BLOCK_K in (64, 128)", "whole 128-byte swizzle atoms"),
        Rule("(BLOCK_N // CONSUMERS) * BLOCK_M <= 24576", "<= 192 fp32 accumulators per consumer thread"),
        Rule("SPLIT_K == 1 or (BLOCK_N // CONSUMERS) * BLOCK_M <= 16384", "split-K tiles: <= 128 accumulators"),
        Rule("2 <= STAGES <= 8", "the kernel's stage bound"),
        Rule("STAGES * BLOCK_N * BLOCK_K * 2 >= (BLOCK_M - 8) * 128", "a shifted read of A stays in the tiles"),
        Rule("1 <= SPLIT_K <= 16", "the kernel's split-K bound"),
        Rule(f"SMEM_BYTES <= {MAX_SHARED_BYTES_PER_BLOCK}", "the kernel's static_assert on shared memory"),
    )
    # The untuned default and the small-M choice (both in the default grid).
    default_tunables = GemmWgmmaSwapTunables(block_m=128, block_n=128, block_k=64, stages=4, consumers=2, split_k=1)
    skinny_tunables = GemmWgmmaSwapTunables(block_m=64, block_n=128, block_k=128, stages=4, consumers=1, split_k=2)

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        check_gemm_shape(self.name, M, N, K, why="16-byte global strides for TMA")

    def tensor_maps(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int
    ) -> tuple[TensorMapSpec, TensorMapSpec]:
        """TMA boxes of 64 K-elements (one 128-byte swizzle atom): BLOCK_N rows of B, BLOCK_M rows of A."""
        return (
            TensorMapSpec(rows=N, cols=K, box_cols=TMA_BOX_COLS, box_rows=int_define(defines, "BLOCK_N")),
            TensorMapSpec(rows=M, cols=K, box_cols=TMA_BOX_COLS, box_rows=int_define(defines, "BLOCK_M")),
        )

    def kernel_arguments(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int, a: int, b: int, c: int, workspace: int
    ) -> tuple[object, ...]:
        """The kernel's arguments, in ``arg_format`` order: B's tensor map first (B is the wgmma A operand)."""
        spec_b, spec_a = self.tensor_maps(defines, M=M, N=N, K=K)
        return (encode(spec_b, address=b), encode(spec_a, address=a), c, workspace, M, N, K)

    def tiles(self, defines: Mapping[str, object], M: int, N: int) -> int:
        """Output tiles: BLOCK_N rows of Cᵀ (the problem's N) by BLOCK_M columns (the problem's M)."""
        return ceil_div(M, int_define(defines, "BLOCK_M")) * ceil_div(N, int_define(defines, "BLOCK_N"))

    def work_items(self, defines: Mapping[str, object], M: int, N: int, K: int) -> int:
        """Work items of one launch: tiles x SPLIT_K."""
        return self.tiles(defines, M, N) * int_define(defines, "SPLIT_K")

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int, *, sm_count: int = H200_SM_COUNT) -> Launch:
        """Persistent grid (at most one block per SM), block, shared memory, split-K workspace.

        A TAIL_SPLIT = 2 define (the stream-K tail of a probe variant, benchmarks/versions; not a tunable of the
        recorded kernel) takes every SM and the workspace of gemm_wgmma's stream-K plan for any grid up to it.
        """
        self.check_shape(M, N, K)
        split_k = int_define(defines, "SPLIT_K")
        tiles = self.tiles(defines, M, N)
        blocks = max(1, min(tiles * split_k, sm_count))
        workspace = fragment_workspace_bytes(defines, tiles=tiles)
        if defines.get("TAIL_SPLIT", 0):
            k_tiles = ceil_div(K, int_define(defines, "BLOCK_K"))
            blocks = max(1, min(tiles * k_tiles, sm_count))
            workspace = tail_split_workspace_bytes(defines, tiles=tiles, clusters=blocks, k_tiles=k_tiles, streamk=True)
        return Launch(
            grid=(blocks, 1, 1),
            block=(self.threads(defines), 1, 1),
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=workspace,
        )


FAMILY = GemmWgmmaSwapFamily()
