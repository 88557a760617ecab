"""Kernels loaded and launched through libcuda directly (ctypes), for by-value struct parameters.

pycuda launches with one packed parameter buffer (``CU_LAUNCH_PARAM_BUFFER_POINTER``); on the
H200's driver that mislays the arguments of a kernel taking ``__grid_constant__ CUtensorMap``
parameters (128-byte aligned): the pointers after them read as garbage (illegal address). With
``kernelParams`` (one pointer per argument) the driver places each argument itself, as the CUDA
runtime does. This module does that for the families whose ``arg_format`` has struct arguments.
It runs in the caller's current context: the device's primary context, the one torch, CuPy and
pycuda's ``retain_primary_context`` share, so pointers and streams are valid across them. The
runtime's per-call helpers (the current context, a pointer's device, a stream's capture status, an
event wait between two streams) are here too: each is one libcuda call, safe during graph capture.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

_ARG = re.compile(r"(\d*)([sPi])")
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class DriverError(RuntimeError):
    """A libcuda call failed (the message names the call and the CUresult)."""


def parse_arg_format(arg_format: str) -> list[tuple[str, int]]:
    """'128s128sPPiii' -> [('s', 128), ('s', 128), ('P', 8), ('P', 8), ('i', 4), ...]."""
    items, position = [], 0
    for match in _ARG.finditer(arg_format):
        if match.start() != position:
            break
        count, kind = match.groups()
        if kind == "s":
            items.append(("s", int(count or 1)))
        else:
            items.extend([(kind, 8 if kind == "P" else 4)] * int(count or 1))
        position = match.end()
    if position != len(arg_format):
        raise ValueError(f"unsupported kernel argument format {arg_format!r} (known: <n>s, P, i)")
    return items


def has_struct_arguments(arg_format: str) -> bool:
    """True when some argument is passed by value as a byte struct (needs ``kernelParams``)."""
    return any(kind == "s" for kind, _ in parse_arg_format(arg_format))


@lru_cache(maxsize=1)
def _cuda() -> ctypes.CDLL:
    """The CUDA driver library, loaded once, with the argument types of the calls used here."""
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuModuleLoad.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
    lib.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    lib.cuModuleUnload.argtypes = [ctypes.c_void_p]
    lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                                 ctypes.POINTER(LaunchConfig)]
    lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.cuCtxGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
    lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.cuStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    return lib


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h), without launch attributes."""

    _fields_ = [("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("smem_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("num_attrs", ctypes.c_uint)]


def _check(status: int, call: str) -> None:
    """Raise DriverError naming the call when a driver status is not success (0)."""
    if status != 0:
        raise DriverError(f"{call} failed with CUresult {status}")


# --- contexts, pointers, streams (the runtime's per-call helpers) --------------------------------------

POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9      # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
EVENT_DISABLE_TIMING = 2                  # CU_EVENT_DISABLE_TIMING
STREAM_CAPTURE_STATUS_NONE = 0            # CU_STREAM_CAPTURE_STATUS_NONE


def current_context() -> int:
    """The calling thread's current CUcontext handle (0: none)."""
    handle = ctypes.c_void_p()
    _check(_cuda().cuCtxGetCurrent(ctypes.byref(handle)), "cuCtxGetCurrent")
    return handle.value or 0


def current_device() -> int | None:
    """The ordinal of the device of the thread's current context (None: no context is current)."""
    if not current_context():
        return None
    ordinal = ctypes.c_int(-1)
    _check(_cuda().cuCtxGetDevice(ctypes.byref(ordinal)), "cuCtxGetDevice")
    return ordinal.value


def push_context(handle: int) -> None:
    """Make ``handle`` current on top of the thread's context stack (pop_context undoes it)."""
    _check(_cuda().cuCtxPushCurrent_v2(ctypes.c_void_p(handle)), "cuCtxPushCurrent")


def pop_context() -> None:
    """Pop the context push_context made current (the caller's context is current again)."""
    handle = ctypes.c_void_p()
    _check(_cuda().cuCtxPopCurrent_v2(ctypes.byref(handle)), "cuCtxPopCurrent")


def pointer_device(ptr: int) -> int:
    """The ordinal of the device whose memory ``ptr`` points into (DriverError for a host or unknown pointer)."""
    ordinal = ctypes.c_int(-1)
    _check(_cuda().cuPointerGetAttribute(ctypes.byref(ordinal), POINTER_ATTRIBUTE_DEVICE_ORDINAL, int(ptr)),
           f"cuPointerGetAttribute(0x{int(ptr):x}, DEVICE_ORDINAL)")
    return ordinal.value


def stream_is_capturing(stream: int) -> bool:
    """Whether ``stream`` (a CUstream handle) is capturing a CUDA graph now."""
    status = ctypes.c_int(0)
    _check(_cuda().cuStreamIsCapturing(ctypes.c_void_p(stream), ctypes.byref(status)), "cuStreamIsCapturing")
    return status.value != STREAM_CAPTURE_STATUS_NONE


def new_event() -> int:
    """A CUevent without timing, for ordering one stream after another (wait_for)."""
    handle = ctypes.c_void_p()
    _check(_cuda().cuEventCreate(ctypes.byref(handle), EVENT_DISABLE_TIMING), "cuEventCreate")
    return handle.value or 0


def wait_for(*, waiter: int, producer: int, event: int) -> None:
    """Order ``waiter``'s later work after everything queued on ``producer`` so far (no host wait).

    The CUDA array interface v3 synchronisation rule: a consumer on another stream than the one the
    producer names makes its own stream wait for an event recorded on the producer's.
    """
    lib = _cuda()
    _check(lib.cuEventRecord(ctypes.c_void_p(event), ctypes.c_void_p(producer)), "cuEventRecord")
    _check(lib.cuStreamWaitEvent(ctypes.c_void_p(waiter), ctypes.c_void_p(event), 0), "cuStreamWaitEvent")


@dataclass
class KernelArguments:
    """ctypes storage for one launch's arguments and the pointer array the driver reads."""

    storage: list[Any]
    pointers: Any


def kernel_arguments(arg_format: str, values: Sequence[Any]) -> KernelArguments:
    """Build ``kernelParams`` for ``values`` laid out by ``arg_format`` (kept alive by the result)."""
    items = parse_arg_format(arg_format)
    if len(items) != len(values):
        raise ValueError(f"{len(values)} arguments for format {arg_format!r} ({len(items)} expected)")
    storage: list[Any] = []
    for (kind, size), value in zip(items, values):
        if kind == "s":
            data = bytes(value)
            if len(data) != size:
                raise ValueError(f"a {size}-byte struct argument got {len(data)} bytes")
            storage.append((ctypes.c_ubyte * size).from_buffer_copy(data))
        elif kind == "P":
            storage.append(ctypes.c_uint64(int(value)))
        else:
            storage.append(ctypes.c_int32(int(value)))
    pointers = (ctypes.c_void_p * len(storage))(*[ctypes.addressof(item) for item in storage])
    return KernelArguments(storage=storage, pointers=pointers)


def cut_to_resident(grid: Sequence[int], *, cluster: int, fits: int) -> tuple[int, int, int]:
    """A persistent grid of ``cluster``-block clusters cut to the ``fits`` clusters resident at once.

    A persistent kernel sized to the SM count assumes one wave; when fewer clusters fit (GPC
    boundaries, shared memory), the rest would run as a second wave with most SMs idle.
    ``fits`` is the driver's answer (cuOccupancyMaxActiveClusters); 0 means unknown: no cut.
    """
    if cluster > 1 and 0 < fits * cluster < grid[0]:
        return (fits * cluster, int(grid[1]), int(grid[2]))
    return (int(grid[0]), int(grid[1]), int(grid[2]))


class DriverKernel:
    """One entry of a cubin, loaded with cuModuleLoad in the current context."""

    def __init__(self, cubin: str, entry: str, *, smem_bytes: int):
        lib = _cuda()
        self.module = ctypes.c_void_p()
        _check(lib.cuModuleLoad(ctypes.byref(self.module), str(cubin).encode()), f"cuModuleLoad({cubin})")
        self.function = ctypes.c_void_p()
        _check(lib.cuModuleGetFunction(ctypes.byref(self.function), self.module, entry.encode()),
               f"cuModuleGetFunction({entry})")
        if smem_bytes > 0:
            _check(lib.cuFuncSetAttribute(self.function, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
                   "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def max_active_clusters(self, *, grid: Sequence[int], block: Sequence[int], smem_bytes: int) -> int:
        """How many of this kernel's clusters (its compile-time cluster shape) fit on the device at once."""
        config = LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], smem_bytes, None, None, 0)
        count = ctypes.c_int(0)
        _check(_cuda().cuOccupancyMaxActiveClusters(ctypes.byref(count), self.function, ctypes.byref(config)),
               "cuOccupancyMaxActiveClusters")
        return count.value

    def resident_grid(self, *, grid: Sequence[int], block: Sequence[int], smem_bytes: int,
                      cluster: int) -> tuple[tuple[int, int, int], int | None]:
        """``grid`` cut to this kernel's clusters resident at once, and their count (None without clusters)."""
        if cluster <= 1:
            return cut_to_resident(grid, cluster=1, fits=0), None
        fits = self.max_active_clusters(grid=grid, block=block, smem_bytes=smem_bytes)
        return cut_to_resident(grid, cluster=cluster, fits=fits), fits

    def launch(self, grid: Sequence[int], block: Sequence[int], smem_bytes: int, stream: int,
               arguments: KernelArguments) -> None:
        """Queue one launch on ``stream`` (a CUstream handle; 0 for the default stream)."""
        status = _cuda().cuLaunchKernel(self.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                        smem_bytes, ctypes.c_void_p(stream), arguments.pointers, None)
        _check(status, "cuLaunchKernel")
