"""Kernel families: entry names, shape checks and launch geometry (pure Python, no pycuda)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

Dim3 = tuple[int, int, int]

INT32_MAX = 2**31 - 1
REDUCE_THREADS = 256


@dataclass(frozen=True)
class Launch:
    """How to launch one configuration on one shape; reduce_* are None without split-K."""

    grid: Dim3
    block: Dim3
    smem_bytes: int
    workspace_bytes: int
    reduce_grid: Dim3 | None
    reduce_block: Dim3 | None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _int_define(defines: Mapping[str, object], name: str) -> int:
    """One integer tunable from a defines mapping (KeyError/ValueError name it)."""
    if name not in defines:
        raise KeyError(f"missing define {name}")
    value = defines[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"define {name} must be an integer, got {value!r}")
    return value


@dataclass(frozen=True)
class GemmMmaFamily:
    """C = A·Bᵀ (bf16, fp32 accumulate) through mma.sync; see kernels/gemm_mma.cu."""

    name: str = "gemm_mma"
    entry: str = "gemm_mma"
    reduce_entry: str = "gemm_mma_splitk_reduce"
    source: str = "kernels/gemm_mma.cu"

    def check_shape(self, M: int, N: int, K: int) -> None:
        """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
        for label, value in (("M", M), ("N", N), ("K", K)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"gemm_mma: {label} must be an integer, got {value!r}")
        if M < 1:
            raise ValueError(f"gemm_mma: M must be >= 1, got M={M}")
        if N < 8 or K < 8 or N % 8 or K % 8:
            raise ValueError(
                f"gemm_mma: N and K must be multiples of 8 (16-byte rows for cp.async), got N={N}, K={K}"
            )
        for label, value in (("M*K", M * K), ("N*K", N * K), ("M*N", M * N)):
            if value > INT32_MAX:
                raise ValueError(f"gemm_mma: {label}={value} exceeds the int32 range of the kernel's arguments")

    def threads(self, defines: Mapping[str, object]) -> int:
        """Threads per block: WARPS_M * WARPS_N warps of 32."""
        return _int_define(defines, "WARPS_M") * _int_define(defines, "WARPS_N") * 32

    def smem_bytes(self, defines: Mapping[str, object]) -> int:
        """Dynamic shared memory per block: STAGES bf16 tiles of A and B (same formula as the kernel)."""
        block_m = _int_define(defines, "BLOCK_M")
        block_n = _int_define(defines, "BLOCK_N")
        block_k = _int_define(defines, "BLOCK_K")
        stages = _int_define(defines, "STAGES")
        return stages * (block_m + block_n) * block_k * 2

    def launch(self, defines: Mapping[str, object], M: int, N: int, K: int) -> Launch:
        """Grid, block, shared memory and split-K workspace/reduction geometry for one shape."""
        self.check_shape(M, N, K)
        tiles_m = _ceil_div(M, _int_define(defines, "BLOCK_M"))
        tiles_n = _ceil_div(N, _int_define(defines, "BLOCK_N"))
        split_k = _int_define(defines, "SPLIT_K")
        grid = (tiles_m * tiles_n, 1, split_k)
        block = (self.threads(defines), 1, 1)
        if split_k == 1:
            return Launch(grid, block, self.smem_bytes(defines), 0, None, None)
        quads = M * N // 4  # the reduction handles four outputs per thread
        reduce_grid = (_ceil_div(quads, REDUCE_THREADS), 1, 1)
        return Launch(
            grid=grid,
            block=block,
            smem_bytes=self.smem_bytes(defines),
            workspace_bytes=split_k * M * N * 4,
            reduce_grid=reduce_grid,
            reduce_block=(REDUCE_THREADS, 1, 1),
        )


FAMILIES: dict[str, GemmMmaFamily] = {"gemm_mma": GemmMmaFamily()}
