"""The runtime's operand checks: GPU matrices from torch, CuPy, pycuda or any CUDA array interface.

``operand`` validates one argument (bf16, 2-D, C-contiguous row-major, 16-byte aligned) and reads
its device address, its device (torch and CuPy say; -1: ask the driver) and, for a CUDA array
interface, its producer stream, without a GPU call; ``check_problem`` checks C = A·Bᵀ's shapes against a
family's rules. Pure Python: a library is touched only through the object handed in
(``sys.modules``), never imported here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tunetable.kernels.families import KernelFamily

ALIGNMENT = 16  # bytes: cp.async and TMA move 16-byte chunks


class Operand(NamedTuple):
    """A validated 2-D bf16 device matrix: its address, its shape, the library it came from, its device."""

    ptr: int
    rows: int
    cols: int
    library: str  # "torch" | "cupy" | "pycuda" | "cai"
    device: int = -1            # the device ordinal; -1: unknown here (the launch asks the driver)
    stream: int | None = None   # a CUDA array interface's producer stream (v3 'stream'); None: no wait


def _fail_type(name: str, obj: Any) -> TypeError:
    """The TypeError for an argument that is not a GPU matrix, naming its type (hinting at host arrays)."""
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    host = " (host memory: copy it to the GPU first)" if kind.startswith("numpy.") else ""
    return TypeError(
        f"{name}: expected a GPU matrix (pycuda GPUArray, torch or CuPy array, or any object with "
        f"__cuda_array_interface__), got {kind}{host}"
    )


def _check_2d(name: str, shape: Sequence[int]) -> tuple[int, int]:
    """(rows, cols) of a 2-D shape; ValueError otherwise."""
    if len(shape) != 2:
        raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _check_aligned(name: str, ptr: int) -> None:
    """Raise ValueError unless ``ptr`` is ALIGNMENT-byte aligned."""
    if ptr % ALIGNMENT:
        raise ValueError(
            f"{name}: data pointer 0x{ptr:x} is not {ALIGNMENT}-byte aligned (the kernel loads 16-byte "
            "chunks; a sliced view can cause this: pass a fresh contiguous copy)"
        )


def _check_row_major(name: str, *, rows: int, cols: int, strides: Sequence[int] | None, itemsize: int = 2) -> None:
    """C-contiguous row-major: unit column stride and rows packed back to back (byte strides)."""
    if strides is None:
        return
    row_ok = rows <= 1 or strides[0] == cols * itemsize
    col_ok = cols <= 1 or strides[1] == itemsize
    if not (row_ok and col_ok):
        raise ValueError(
            f"{name}: must be C-contiguous row-major, got byte strides {tuple(strides)} for shape "
            f"({rows}, {cols}) (a transposed or sliced view: make a contiguous copy first)"
        )


def _torch_operand(name: str, x: Any) -> Operand:
    """The Operand of a torch tensor: bfloat16, on CUDA, 2-D, contiguous, aligned."""
    torch = sys.modules["torch"]
    if x.dtype is not torch.bfloat16:
        raise TypeError(f"{name}: expected dtype bfloat16, got {x.dtype}")
    if not x.is_cuda:
        raise TypeError(f"{name}: torch tensor is on {x.device}, expected a CUDA tensor")
    rows, cols = _check_2d(name, x.shape)
    if not x.is_contiguous():
        raise ValueError(
            f"{name}: must be C-contiguous row-major, got strides {tuple(x.stride())} for shape "
            f"({rows}, {cols}) (call .contiguous() first)"
        )
    ptr = x.data_ptr()
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "torch", x.get_device())


def _is_bf16_numpy_dtype(dtype: Any) -> bool:
    """numpy-style dtypes: ml_dtypes' bfloat16 (or any 2-byte void, the CAI typestr '<V2')."""
    return getattr(dtype, "name", None) == "bfloat16" or (
        getattr(dtype, "kind", None) == "V" and getattr(dtype, "itemsize", None) == 2
    )


def _cupy_operand(name: str, x: Any) -> Operand:
    """The Operand of a CuPy array: bfloat16, 2-D, row-major, aligned."""
    if not _is_bf16_numpy_dtype(x.dtype):
        raise TypeError(f"{name}: expected dtype bfloat16 (ml_dtypes.bfloat16 in CuPy), got {x.dtype}")
    rows, cols = _check_2d(name, x.shape)
    _check_row_major(name, rows=rows, cols=cols, strides=x.strides)
    ptr = int(x.data.ptr)
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "cupy", int(x.device.id))


def _pycuda_operand(name: str, x: Any) -> Operand:
    """The Operand of a pycuda GPUArray: bfloat16 (or 2-byte void), 2-D, row-major, aligned."""
    if not _is_bf16_numpy_dtype(x.dtype):
        raise TypeError(
            f"{name}: expected dtype bfloat16 (ml_dtypes.bfloat16 or a 2-byte void 'V2'), got {x.dtype}"
        )
    rows, cols = _check_2d(name, x.shape)
    _check_row_major(name, rows=rows, cols=cols, strides=x.strides)
    ptr = int(x.gpudata)
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "pycuda")


def _cai_operand(name: str, x: Any) -> Operand:
    """The Operand of a __cuda_array_interface__ object: bfloat16 ('<V2'), 2-D, row-major, aligned."""
    interface = x.__cuda_array_interface__
    typestr = interface.get("typestr")
    if typestr != "<V2" and not _is_bf16_numpy_dtype(getattr(x, "dtype", None)):
        hint = " (float16 or a bfloat16 that its library reports as '<f2')" if typestr == "<f2" else ""
        raise TypeError(f"{name}: expected bfloat16 (CUDA array interface typestr '<V2'), got '{typestr}'{hint}")
    rows, cols = _check_2d(name, interface["shape"])
    _check_row_major(name, rows=rows, cols=cols, strides=interface.get("strides"))
    ptr = int(interface["data"][0])
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "cai", -1, cai_stream(name, interface))


def cai_stream(name: str, interface: Any) -> int | None:
    """The producer stream of a CUDA array interface (v3): None when absent or None, else a stream handle.

    0 is not allowed by the interface (ambiguous between the legacy and the per-thread default
    stream); 1 names the legacy default stream, 2 the per-thread default stream.
    """
    stream = interface.get("stream") if int(interface.get("version", 0)) >= 3 else None
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise ValueError(f"{name}: __cuda_array_interface__ 'stream' must be None or a stream handle, got {stream!r}")
    if stream == 0:
        raise ValueError(f"{name}: __cuda_array_interface__ 'stream' is 0, which the interface disallows "
                         "(1: the legacy default stream, 2: the per-thread default stream)")
    return stream


def _adapter_for(x: Any) -> Callable[[str, Any], Operand] | None:
    """The reader of an array's library, chosen by its type's module."""
    root = type(x).__module__.partition(".")[0]
    if root == "torch" and hasattr(x, "data_ptr"):
        return _torch_operand
    if root == "cupy" and hasattr(x, "data"):
        return _cupy_operand
    if root == "pycuda" and hasattr(x, "gpudata"):
        return _pycuda_operand
    if hasattr(x, "__cuda_array_interface__"):
        return _cai_operand
    return None


_ADAPTERS: dict[type, Callable[[str, Any], Operand] | None] = {}


def operand(name: str, x: Any) -> Operand:
    """Validate one argument (GPU, bf16, 2-D, row-major, 16-byte aligned) and read its address."""
    kind = type(x)
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _adapter_for(x)
        if adapter is None:
            raise _fail_type(name, x)
        _ADAPTERS[kind] = adapter
    return adapter(name, x)


def check_problem(a: Operand, b: Operand, *, family: KernelFamily) -> tuple[int, int, int]:
    """(M, N, K) of C = A·Bᵀ, with K matching and the family's shape rules (N, K multiples of 8)."""
    m, k = a.rows, a.cols
    n, kb = b.rows, b.cols
    if kb != k:
        raise ValueError(f"mismatched K: a is {m}x{k} (M x K) but b is {n}x{kb} (N x K); C = a @ b.T needs equal K")
    family.check_shape(m, n, k)
    return m, n, k


def check_out(out: Operand, *, m: int, n: int) -> None:
    """``out`` must be the M x N result matrix."""
    if (out.rows, out.cols) != (m, n):
        raise ValueError(f"out: expected shape ({m}, {n}) for C = a @ b.T, got ({out.rows}, {out.cols})")


def cai_numpy_dtype(like: Any) -> Any:
    """bf16 as numpy knows it: ml_dtypes' bfloat16 where installed, else a 2-byte void."""
    dtype = getattr(like, "dtype", None)
    if _is_bf16_numpy_dtype(dtype):
        return dtype
    try:
        import ml_dtypes  # optional: numpy's bfloat16 where installed (lazy: most users never need it)
    except ImportError:
        return "V2"
    return ml_dtypes.bfloat16
