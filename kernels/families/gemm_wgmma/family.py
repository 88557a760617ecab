"""gemm_wgmma: C = A·Bᵀ (bf16, fp32 accumulate): TMA + wgmma, persistent, clusters, split-K (fixed or the last wave's).

Every fact of the family, once: the typed tunables and the values derived from them (threads,
shared memory: the kernel's own formulas, which it static_asserts), the validity rules (the
static_asserts of gemm_wgmma.cu, so that no kept configuration fails to build), the tensor maps and
the persistent launch geometry, the untuned heuristics and the perf model that ranks it.
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
class GemmWgmmaTunables:
    """The kernel's -D tunables (lower case here, UPPER_CASE as defines), in grid order."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    consumers: int
    cluster_m: int
    cluster_n: int
    raster: int
    group_m: int
    split_k: int
    tail_split: int

    @property
    def threads(self) -> int:
        """One producer warpgroup plus CONSUMERS consumer warpgroups."""
        return (self.consumers + 1) * 128

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: STAGES tiles of A and B, alignment slack and barriers."""
        return self.stages * (self.block_m + self.block_n) * self.block_k * 2 + SMEM_OVERHEAD_BYTES

    @property
    def cluster_blocks(self) -> int:
        """Blocks per thread-block cluster."""
        return self.cluster_m * self.cluster_n


@dataclass(frozen=True, kw_only=True)
class WgmmaTuningConfig(GemmWgmmaTunables, TableEntry):
    """One tuned gemm_wgmma configuration (TMA + wgmma) for the M range [m, m_end) of one (N, K) shape."""


class GemmWgmmaFamily(KernelFamily):
    """C = A·Bᵀ through TMA + wgmma, persistent; see gemm_wgmma.cu."""

    name = "gemm_wgmma"
    entry = "gemm_wgmma"
    folder = Path(__file__).resolve().parent
    arg_format = "128s128sPPiii"    # tensor maps of A and B (by value), C, workspace, M, N, K
    zeroed_workspace = True         # the split-K tile counters must start at zero
    tunables = GemmWgmmaTunables
    entry_type = WgmmaTuningConfig
    perf_model = "persistent"
    rules = (
        Rule("CONSUMERS in (1, 2, 3)", "one to three consumer warpgroups"),
        Rule("BLOCK_M % (CONSUMERS * 64) == 0 and BLOCK_M // CONSUMERS in (64, 128)", "m64 slices per consumer"),
        Rule("BLOCK_N % 16 == 0 and 32 <= BLOCK_N <= 256", "one wgmma n: 32-256 in steps of 16"),
        Rule("BLOCK_K in (64, 128)", "whole 128-byte swizzle atoms"),
        Rule("(BLOCK_M // CONSUMERS) * BLOCK_N <= 24576", "<= 192 fp32 accumulators per consumer thread"),
        Rule("CONSUMERS < 3 or (BLOCK_M // CONSUMERS) * BLOCK_N <= 12288",
             "<= 96 accumulators with three consumers (128 registers at 512 threads)"),
        Rule("2 <= STAGES <= 16", "the kernel's stage bound"),
        Rule("CLUSTER_M in (1, 2) and CLUSTER_N in (1, 2)", "clusters of at most 2 x 2"),
        Rule("RASTER in (0, 1)", "down M first or along N first"),
        Rule("GROUP_M >= 1", "raster groups of at least one tile"),
        Rule("1 <= SPLIT_K <= 16", "the kernel's split-K bound"),
        Rule("TAIL_SPLIT in (0, 1)", "the last partial wave split or not"),
        Rule("TAIL_SPLIT == 0 or SPLIT_K == 1", "the tail split chooses its own splits"),
        Rule(f"SMEM_BYTES <= {MAX_SHARED_BYTES_PER_BLOCK}", "the kernel's static_assert on shared memory"),
    )
    # The untuned default and the small-M choice (both in the default grid).
    default_tunables = GemmWgmmaTunables(block_m=128, block_n=256, block_k=64, stages=4, consumers=2,
                                         cluster_m=1, cluster_n=1, raster=1, group_m=8, split_k=1,
                                         tail_split=0)
    skinny_tunables = GemmWgmmaTunables(block_m=64, block_n=128, block_k=128, stages=4, consumers=1,
                                        cluster_m=1, cluster_n=1, raster=0, group_m=1, split_k=2,
                                        tail_split=0)

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        check_gemm_shape(self.name, M, N, K, why="16-byte global strides for TMA")

    def tensor_maps(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int
    ) -> tuple[TensorMapSpec, TensorMapSpec]:
        """TMA boxes of 64 K-elements (one 128-byte swizzle atom) by the rows each block loads.

        In a cluster each block loads one slice of a shared tile for all: BLOCK_M / CLUSTER_N rows
        of A, BLOCK_N / CLUSTER_M rows of B.
        """
        return (
            TensorMapSpec(rows=M, cols=K, box_cols=TMA_BOX_COLS,
                          box_rows=int_define(defines, "BLOCK_M") // int_define(defines, "CLUSTER_N")),
            TensorMapSpec(rows=N, cols=K, box_cols=TMA_BOX_COLS,
                          box_rows=int_define(defines, "BLOCK_N") // int_define(defines, "CLUSTER_M")),
        )

    def kernel_arguments(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int, a: int, b: int, c: int, workspace: int
    ) -> tuple[object, ...]:
        """The kernel's arguments, in ``arg_format`` order (encodes two tensor maps: needs libcuda)."""
        spec_a, spec_b = self.tensor_maps(defines, M=M, N=N, K=K)
        return (encode(spec_a, address=a), encode(spec_b, address=b), c, workspace, M, N, K)

    def work_items(self, defines: Mapping[str, object], M: int, N: int, K: int) -> int:
        """Cluster work items of one launch: cluster tiles x SPLIT_K."""
        return cluster_tiles(defines, M=M, N=N) * int_define(defines, "SPLIT_K")

    def resident_clusters(self, defines: Mapping[str, object], M: int, N: int, K: int, *,
                          sm_count: int = H200_SM_COUNT) -> int:
        """Clusters of the persistent grid: one block per SM at most, never more than the work items
        (TAIL_SPLIT: every SM, which the last wave's splits fill)."""
        cluster = int_define(defines, "CLUSTER_M") * int_define(defines, "CLUSTER_N")
        work = self.work_items(defines, M, N, K)
        if int_define(defines, "TAIL_SPLIT"):
            work *= ceil_div(K, int_define(defines, "BLOCK_K"))
        return max(1, min(work, sm_count // cluster))

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int, *, sm_count: int = H200_SM_COUNT) -> Launch:
        """Persistent grid (at most one block per SM, whole clusters), block, shared memory, workspace."""
        self.check_shape(M, N, K)
        cluster = int_define(defines, "CLUSTER_M") * int_define(defines, "CLUSTER_N")
        clusters = self.resident_clusters(defines, M, N, K, sm_count=sm_count)
        if int_define(defines, "TAIL_SPLIT"):  # room for the plan of any grid up to this one (plan.py may cut it)
            workspace = tail_split_workspace_bytes(
                defines, tiles=cluster_tiles(defines, M=M, N=N), clusters=clusters, cluster=cluster,
                k_tiles=ceil_div(K, int_define(defines, "BLOCK_K")),
                streamk=int_define(defines, "TAIL_SPLIT") == 2)  # the stream-K tail (a benchmarks/versions variant)
        else:
            tiles = ceil_div(M, int_define(defines, "BLOCK_M")) * ceil_div(N, int_define(defines, "BLOCK_N"))
            workspace = fragment_workspace_bytes(defines, tiles=tiles)
        return Launch(
            grid=(clusters * cluster, 1, 1),
            block=(self.threads(defines), 1, 1),
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=workspace,
        )


def cluster_tiles(defines: Mapping[str, object], *, M: int, N: int) -> int:
    """Cluster tiles of the output: whole BLOCK_M x BLOCK_N tiles, grouped CLUSTER_M x CLUSTER_N."""
    tiles_m = ceil_div(M, int_define(defines, "BLOCK_M"))
    tiles_n = ceil_div(N, int_define(defines, "BLOCK_N"))
    return ceil_div(tiles_m, int_define(defines, "CLUSTER_M")) * ceil_div(tiles_n, int_define(defines, "CLUSTER_N"))


FAMILY = GemmWgmmaFamily()
