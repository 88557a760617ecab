"""cuBLAS through ctypes on the CUDA toolkit's libcublas: the reference and the baseline.

C[M,N] = A[M,K] · B[N,K]^T, row-major bf16, fp32 compute. Row-major C is column-major C^T
(N x M) = B · A^T, which is cuBLAS's "TN" GEMM on the same buffers, with no copies.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
LIBRARY_NAMES = ("libcublas.so", "libcublas.so.13", "libcublas.so.12")


def toolkit_lib_dirs() -> list[Path]:
    """Library folders of the CUDA toolkit: $CUDA_HOME, the nvcc on PATH, /usr/local/cuda."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parents[1]))
    roots.append("/usr/local/cuda")
    dirs = []
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
            candidate = Path(root) / sub
            if candidate.is_dir() and candidate not in dirs:
                dirs.append(candidate)
    return dirs


def load_libcublas() -> ctypes.CDLL:
    """The toolkit's libcublas (by absolute path first, then the loader's search path)."""
    tried = []
    for folder in toolkit_lib_dirs():
        for name in LIBRARY_NAMES:
            path = folder / name
            if path.exists():
                return ctypes.CDLL(str(path))
            tried.append(str(path))
    for name in LIBRARY_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            tried.append(name)
    raise OSError(f"libcublas not found (tried {', '.join(tried[:6])} ...)")


class Cublas:
    """A cuBLAS handle bound to one stream of the current context."""

    def __init__(self, *, stream_handle: int):
        self.lib = load_libcublas()
        self.lib.cublasGemmEx.restype = ctypes.c_int
        self.lib.cublasGemmEx.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
            ctypes.c_int, ctypes.c_int,
        ]
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream_handle)), "cublasSetStream")
        self.version = self._version()
        self._alpha = ctypes.c_float(1.0)
        self._beta = ctypes.c_float(0.0)

    def _version(self) -> int:
        """The cuBLAS version of the bound handle."""
        value = ctypes.c_int()
        self._check(self.lib.cublasGetVersion_v2(self.handle, ctypes.byref(value)), "cublasGetVersion")
        return value.value

    @staticmethod
    def _check(status: int, what: str) -> None:
        """Raise RuntimeError naming ``what`` when a cuBLAS call returned a non-zero status."""
        if status != 0:
            raise RuntimeError(f"{what} failed with cublasStatus {status}")

    def gemm_bf16(self, *, a: int, b: int, c: int, m: int, n: int, k: int) -> None:
        """Queue C[M,N] = A[M,K] · B[N,K]^T on the bound stream (device pointers)."""
        status = self.lib.cublasGemmEx(
            self.handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
            ctypes.byref(self._alpha), ctypes.c_void_p(b), CUDA_R_16BF, k,
            ctypes.c_void_p(a), CUDA_R_16BF, k,
            ctypes.byref(self._beta), ctypes.c_void_p(c), CUDA_R_16BF, n,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        )
        self._check(status, "cublasGemmEx")

    def close(self) -> None:
        """Destroy the handle."""
        if self.handle:
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = ctypes.c_void_p()
