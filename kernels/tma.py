"""TMA tensor maps for the Hopper kernels: cuTensorMapEncodeTiled through ctypes on libcuda.

A tensor map describes a global matrix and the box one TMA copy moves; the kernel gets it by
value as a ``__grid_constant__ CUtensorMap`` parameter (128 opaque bytes). ``TensorMapSpec`` is
pure data (kernels/families/gemm_wgmma/family.py builds them without a GPU); ``encode`` needs the driver library
and is loaded lazily, so importing this module works on a machine without one.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
BF16_BYTES = 2

# CUtensorMap* enums (cuda.h)
DATA_TYPE_BFLOAT16 = 9
INTERLEAVE_NONE = 0
SWIZZLE_BYTES = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION_256B = 3
OOB_FILL_ZEROS = 0


@dataclass(frozen=True)
class TensorMapSpec:
    """A row-major bf16 [rows, cols] matrix read in [box_rows, box_cols] boxes with a byte swizzle."""

    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle: int = 128

    def check(self) -> None:
        """Raise ValueError when the driver would reject this map (limits of cuTensorMapEncodeTiled)."""
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"tensor map: empty matrix {self.rows}x{self.cols}")
        if (self.cols * BF16_BYTES) % 16:
            raise ValueError(f"tensor map: row stride {self.cols * BF16_BYTES} bytes is not a multiple of 16")
        if not (1 <= self.box_rows <= 256 and 1 <= self.box_cols <= 256):
            raise ValueError(f"tensor map: box {self.box_rows}x{self.box_cols} outside 1..256")
        if self.swizzle not in SWIZZLE_BYTES:
            raise ValueError(f"tensor map: swizzle {self.swizzle} is not one of {sorted(SWIZZLE_BYTES)}")
        if self.swizzle and self.box_cols * BF16_BYTES > self.swizzle:
            raise ValueError(
                f"tensor map: a {self.box_cols}-element box row exceeds the {self.swizzle}-byte swizzle span"
            )


class TensorMapError(RuntimeError):
    """The driver refused to encode a tensor map."""


@lru_cache(maxsize=1)
def _driver() -> ctypes.CDLL:
    """libcuda with cuTensorMapEncodeTiled's signature declared."""
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
    ]
    return lib


def encode(spec: TensorMapSpec, *, address: int) -> bytes:
    """The 128-byte CUtensorMap of ``spec`` over the device matrix at ``address``."""
    spec.check()
    if address % 16:
        raise ValueError(f"tensor map: global address {address:#x} is not 16-byte aligned")
    # The driver wants a 64-byte aligned CUtensorMap: over-allocate and align by hand.
    raw = ctypes.create_string_buffer(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN)
    offset = -ctypes.addressof(raw) % TENSOR_MAP_ALIGN
    target = ctypes.addressof(raw) + offset
    dims = (ctypes.c_uint64 * 2)(spec.cols, spec.rows)          # innermost first
    strides = (ctypes.c_uint64 * 1)(spec.cols * BF16_BYTES)     # bytes, all but the innermost
    box = (ctypes.c_uint32 * 2)(spec.box_cols, spec.box_rows)
    element_strides = (ctypes.c_uint32 * 2)(1, 1)
    status = _driver().cuTensorMapEncodeTiled(
        ctypes.c_void_p(target), DATA_TYPE_BFLOAT16, 2, ctypes.c_void_p(address), dims, strides, box,
        element_strides, INTERLEAVE_NONE, SWIZZLE_BYTES[spec.swizzle], L2_PROMOTION_256B, OOB_FILL_ZEROS,
    )
    if status != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled failed with CUresult {status} for {spec} at {address:#x}")
    return raw.raw[offset:offset + TENSOR_MAP_BYTES]
