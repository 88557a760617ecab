"""Kernel families: entry names, shape checks and launch geometry (pure Python, no pycuda)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tunetable.kernels.tma import TensorMapSpec

Dim3 = tuple[int, int, int]

INT32_MAX = 2**31 - 1
H200_SM_COUNT = 132  # persistent grids size themselves to the device's multiprocessors


@dataclass(frozen=True)
class Launch:
    """How to launch one configuration on one shape: one kernel (split-K reduces inside it)."""

    grid: Dim3
    block: Dim3
    smem_bytes: int
    workspace_bytes: int


def _ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up."""
    return -(-a // b)


def check_gemm_shape(family: str, M: int, N: int, K: int, *, why: str) -> None:
    """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
    for label, value in (("M", M), ("N", N), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{family}: {label} must be an integer, got {value!r}")
    if M < 1:
        raise ValueError(f"{family}: M must be >= 1, got M={M}")
    if N < 8 or K < 8 or N % 8 or K % 8:
        raise ValueError(f"{family}: N and K must be multiples of 8 ({why}), got N={N}, K={K}")
    for label, value in (("M*K", M * K), ("N*K", N * K), ("M*N", M * N)):
        if value > INT32_MAX:
            raise ValueError(f"{family}: {label}={value} exceeds the int32 range of the kernel's arguments")


def _int_define(defines: Mapping[str, object], name: str) -> int:
    """One integer tunable from a defines mapping (KeyError/ValueError name it)."""
    if name not in defines:
        raise KeyError(f"missing define {name}")
    value = defines[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"define {name} must be an integer, got {value!r}")
    return value


def cluster_blocks(defines: Mapping[str, object]) -> int:
    """Blocks per thread-block cluster: CLUSTER_M x CLUSTER_N (1 for families without clusters)."""
    return int(defines.get("CLUSTER_M", 1)) * int(defines.get("CLUSTER_N", 1))


@dataclass(frozen=True)
class GemmMmaFamily:
    """C = A·Bᵀ (bf16, fp32 accumulate) through mma.sync; see kernels/gemm_mma.cu."""

    name: str = "gemm_mma"
    entry: str = "gemm_mma"
    source: str = "kernels/gemm_mma.cu"
    arg_format: str = "PPPPiii"  # A, B, C, workspace, M, N, K
    zeroed_workspace: bool = True  # the split-K tile counters must start at zero (the kernel resets them)

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        check_gemm_shape(self.name, M, N, K, why="16-byte rows for cp.async")

    def threads(self, defines: Mapping[str, object]) -> int:
        """Threads per block: WARPS_M * WARPS_N warps of 32 per k slice, WARPS_K slices."""
        warps = _int_define(defines, "WARPS_M") * _int_define(defines, "WARPS_N") * _int_define(defines, "WARPS_K")
        return warps * 32

    def smem_bytes(self, defines: Mapping[str, object]) -> int:
        """Dynamic shared memory per block: STAGES bf16 tiles of A and B (same formula as the kernel)."""
        block_m = _int_define(defines, "BLOCK_M")
        block_n = _int_define(defines, "BLOCK_N")
        block_k = _int_define(defines, "BLOCK_K")
        stages = _int_define(defines, "STAGES")
        return stages * (block_m + block_n) * block_k * 2

    def kernel_arguments(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int, a: int, b: int, c: int, workspace: int
    ) -> tuple[object, ...]:
        """The main kernel's arguments, in ``arg_format`` order."""
        return (a, b, c, workspace, M, N, K)

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int, *, sm_count: int = H200_SM_COUNT) -> Launch:
        """Grid (one block per tile and K split), block, shared memory and split-K workspace for one shape."""
        self.check_shape(M, N, K)
        tiles = _ceil_div(M, _int_define(defines, "BLOCK_M")) * _ceil_div(N, _int_define(defines, "BLOCK_N"))
        split_k = _int_define(defines, "SPLIT_K")
        # Split-K: fp32 partials [SPLIT_K, M, N], then one int counter per tile that tells the
        # tile's last split to arrive to sum the partials and write C.
        workspace = split_k * M * N * 4 + tiles * 4 if split_k > 1 else 0
        return Launch(
            grid=(tiles, 1, split_k),
            block=(self.threads(defines), 1, 1),
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=workspace,
        )


@dataclass(frozen=True)
class GemmWgmmaFamily:
    """C = A·Bᵀ (bf16, fp32 accumulate) through TMA + wgmma, persistent; see kernels/gemm_wgmma.cu."""

    name: str = "gemm_wgmma"
    entry: str = "gemm_wgmma"
    source: str = "kernels/gemm_wgmma.cu"
    arg_format: str = "128s128sPPiii"      # tensor maps of A and B (by value), C, workspace, M, N, K
    zeroed_workspace: bool = True          # the split-K tile counters must start at zero

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        check_gemm_shape(self.name, M, N, K, why="16-byte global strides for TMA")

    def threads(self, defines: Mapping[str, object]) -> int:
        """Threads per block: one producer warpgroup plus CONSUMERS consumer warpgroups."""
        return (_int_define(defines, "CONSUMERS") + 1) * 128

    def smem_bytes(self, defines: Mapping[str, object]) -> int:
        """Dynamic shared memory: STAGES tiles of A and B, 1024 bytes of alignment slack, 1024 of barriers."""
        block_m = _int_define(defines, "BLOCK_M")
        block_n = _int_define(defines, "BLOCK_N")
        block_k = _int_define(defines, "BLOCK_K")
        stages = _int_define(defines, "STAGES")
        return stages * (block_m + block_n) * block_k * 2 + 2048

    def tensor_maps(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int
    ) -> tuple[TensorMapSpec, TensorMapSpec]:
        """TMA boxes of 64 K-elements (one 128-byte swizzle atom) by the rows each block loads.

        In a cluster each block loads one slice of a shared tile for all: BLOCK_M / CLUSTER_N rows
        of A, BLOCK_N / CLUSTER_M rows of B.
        """
        return (
            TensorMapSpec(rows=M, cols=K, box_cols=64,
                          box_rows=_int_define(defines, "BLOCK_M") // _int_define(defines, "CLUSTER_N")),
            TensorMapSpec(rows=N, cols=K, box_cols=64,
                          box_rows=_int_define(defines, "BLOCK_N") // _int_define(defines, "CLUSTER_M")),
        )

    def kernel_arguments(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int, a: int, b: int, c: int, workspace: int
    ) -> tuple[object, ...]:
        """The main kernel's arguments, in ``arg_format`` order (encodes two tensor maps: needs libcuda)."""
        from tunetable.kernels.tma import encode

        spec_a, spec_b = self.tensor_maps(defines, M=M, N=N, K=K)
        return (encode(spec_a, address=a), encode(spec_b, address=b), c, workspace, M, N, K)

    def work_items(self, defines: Mapping[str, object], M: int, N: int, K: int) -> int:
        """Cluster work items of one launch: cluster tiles x SPLIT_K."""
        tiles_m = _ceil_div(M, _int_define(defines, "BLOCK_M"))
        tiles_n = _ceil_div(N, _int_define(defines, "BLOCK_N"))
        cluster_tiles = _ceil_div(tiles_m, _int_define(defines, "CLUSTER_M")) * _ceil_div(
            tiles_n, _int_define(defines, "CLUSTER_N"))
        return cluster_tiles * _int_define(defines, "SPLIT_K")

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int, *, sm_count: int = H200_SM_COUNT) -> Launch:
        """Persistent grid (at most one block per SM, whole clusters), block, shared memory, workspace."""
        self.check_shape(M, N, K)
        cluster = _int_define(defines, "CLUSTER_M") * _int_define(defines, "CLUSTER_N")
        clusters = max(1, min(self.work_items(defines, M, N, K), sm_count // cluster))
        split_k = _int_define(defines, "SPLIT_K")
        workspace = 0
        if split_k > 1:
            tiles = _ceil_div(M, _int_define(defines, "BLOCK_M")) * _ceil_div(N, _int_define(defines, "BLOCK_N"))
            workspace = split_k * M * N * 4 + tiles * _int_define(defines, "CONSUMERS") * 4
        return Launch(
            grid=(clusters * cluster, 1, 1),
            block=(self.threads(defines), 1, 1),
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=workspace,
        )


@dataclass(frozen=True)
class GemmWgmmaSwapFamily:
    """C = A·Bᵀ computed as Cᵀ = B·Aᵀ (swap-AB) through TMA + wgmma, persistent; see kernels/gemm_wgmma_swap.cu.

    The problem's M is the wgmma n (BLOCK_M: any multiple of 8 up to 256), so skinny and odd M fill
    their tiles; N feeds the 64-row slices (BLOCK_N = CONSUMERS x 64 or 128 rows).
    """

    name: str = "gemm_wgmma_swap"
    entry: str = "gemm_wgmma_swap"
    source: str = "kernels/gemm_wgmma_swap.cu"
    arg_format: str = "128s128sPPiii"      # tensor maps of B and A (by value), C, workspace, M, N, K
    zeroed_workspace: bool = True          # the split-K tile counters must start at zero

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        check_gemm_shape(self.name, M, N, K, why="16-byte global strides for TMA")

    def threads(self, defines: Mapping[str, object]) -> int:
        """Threads per block: one producer warpgroup plus CONSUMERS consumer warpgroups."""
        return (_int_define(defines, "CONSUMERS") + 1) * 128

    def smem_bytes(self, defines: Mapping[str, object]) -> int:
        """Dynamic shared memory: STAGES tiles of B and A, 1024 bytes of alignment slack, 1024 of barriers."""
        rows = _int_define(defines, "BLOCK_M") + _int_define(defines, "BLOCK_N")
        return _int_define(defines, "STAGES") * rows * _int_define(defines, "BLOCK_K") * 2 + 2048

    def tensor_maps(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int
    ) -> tuple[TensorMapSpec, TensorMapSpec]:
        """TMA boxes of 64 K-elements (one 128-byte swizzle atom): BLOCK_N rows of B, BLOCK_M rows of A."""
        return (
            TensorMapSpec(rows=N, cols=K, box_cols=64, box_rows=_int_define(defines, "BLOCK_N")),
            TensorMapSpec(rows=M, cols=K, box_cols=64, box_rows=_int_define(defines, "BLOCK_M")),
        )

    def kernel_arguments(
        self, defines: Mapping[str, object], *, M: int, N: int, K: int, a: int, b: int, c: int, workspace: int
    ) -> tuple[object, ...]:
        """The kernel's arguments, in ``arg_format`` order: B's tensor map first (it is the wgmma A operand)."""
        from tunetable.kernels.tma import encode

        spec_b, spec_a = self.tensor_maps(defines, M=M, N=N, K=K)
        return (encode(spec_b, address=b), encode(spec_a, address=a), c, workspace, M, N, K)

    def tiles(self, defines: Mapping[str, object], M: int, N: int) -> int:
        """Output tiles: BLOCK_N rows of Cᵀ (problem N) by BLOCK_M columns (problem M)."""
        return _ceil_div(M, _int_define(defines, "BLOCK_M")) * _ceil_div(N, _int_define(defines, "BLOCK_N"))

    def work_items(self, defines: Mapping[str, object], M: int, N: int, K: int) -> int:
        """Work items of one launch: tiles x SPLIT_K."""
        return self.tiles(defines, M, N) * _int_define(defines, "SPLIT_K")

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int, *, sm_count: int = H200_SM_COUNT) -> Launch:
        """Persistent grid (at most one block per SM), block, shared memory, split-K workspace."""
        self.check_shape(M, N, K)
        split_k = _int_define(defines, "SPLIT_K")
        tiles = self.tiles(defines, M, N)
        workspace = 0
        if split_k > 1:
            # Tile-contiguous fp32 partials [SPLIT_K][tiles][BLOCK_N][BLOCK_M], then a counter per tile and consumer.
            tile_elements = _int_define(defines, "BLOCK_N") * _int_define(defines, "BLOCK_M")
            workspace = split_k * tiles * tile_elements * 4 + tiles * _int_define(defines, "CONSUMERS") * 4
        return Launch(
            grid=(max(1, min(tiles * split_k, sm_count)), 1, 1),
            block=(self.threads(defines), 1, 1),
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=workspace,
        )


Family = GemmMmaFamily | GemmWgmmaFamily | GemmWgmmaSwapFamily
FAMILIES: dict[str, Family] = {
    "gemm_mma": GemmMmaFamily(), "gemm_wgmma": GemmWgmmaFamily(), "gemm_wgmma_swap": GemmWgmmaSwapFamily(),
}
