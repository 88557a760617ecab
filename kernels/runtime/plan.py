"""The one launch-plan builder, shared by the bench's worker and ``gemm()`` (families and libcuda only).

``build_plan`` takes a family, its defines, a cubin and the launch geometry of one shape; it loads
the kernel (pycuda for pointer arguments, libcuda's kernelParams for by-value structs:
kernels/driver.py says why), cuts a persistent grid to the clusters resident at once, and packs
arguments in the family's ``arg_format``. It imports no generated table, so the bench (whose
results the tables are generated from) can launch through it.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tunetable.kernels import driver
from tunetable.kernels.driver import DriverKernel, KernelArguments, has_struct_arguments, kernel_arguments
from tunetable.kernels.families import Launch, cluster_blocks

# Encoded argument sets kept per plan, one per (A, B, C, workspace) address set seen (TMA tensor maps
# embed the A and B addresses; a graph captures the set of its static buffers).
ARGUMENT_CACHE_SIZE = 16
# A prepared launch keeps one argument set per (A, B) address pair (C is written into its slot per call): a
# model's layers of one shape each have their own weight, so it keeps many (a few hundred bytes each).
PREPARED_SETS = 1024
C_SENTINEL = 0x7E57_0000_0000   # an address no operand has: marks C's slot when an argument set is encoded


@functools.lru_cache(maxsize=1)
def bare_libcuda() -> ctypes.CDLL:
    """libcuda with no argument types declared: a prepared launch hands it ctypes values and small ints as they
    are, half the conversion cost of the typed calls (kernels/driver.py) per launch."""
    return ctypes.CDLL("libcuda.so.1")


class GraphCaptureError(RuntimeError):
    """A call that must load, compile or allocate ran while its stream was capturing a CUDA graph."""


class Loader:
    """Kernels of cubins loaded into the current context: pycuda functions and libcuda driver kernels."""

    def __init__(self, cuda: Any):
        self.cuda = cuda
        self.modules: dict[str, Any] = {}
        self.functions: dict[tuple[str, str], Any] = {}
        self.driver_kernels: dict[tuple[str, str], DriverKernel] = {}

    def function(self, cubin: str, entry: str, smem_bytes: int) -> Any:
        """The pycuda function ``entry`` of ``cubin``, allowed ``smem_bytes`` of dynamic shared memory."""
        key = (cubin, entry)
        found = self.functions.get(key)
        if found is None:
            module = self.modules.get(cubin)
            if module is None:
                module = self.modules[cubin] = self.cuda.module_from_file(cubin)
            found = self.functions[key] = module.get_function(entry)
        if smem_bytes > 0:
            found.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes)
        return found

    def driver_kernel(self, cubin: str, entry: str, smem_bytes: int) -> DriverKernel:
        """The driver-API kernel ``entry`` of ``cubin`` (for by-value struct arguments)."""
        key = (cubin, entry)
        found = self.driver_kernels.get(key)
        if found is None:
            found = self.driver_kernels[key] = DriverKernel(cubin, entry, smem_bytes=smem_bytes)
        return found


@dataclass
class LaunchPlan:
    """One configuration on one shape, resolved once: the kernel, its geometry as launched, its arguments.

    ``function`` is the pycuda function of a pointer-argument kernel, ``kernel`` the driver kernel of
    one with by-value structs (then ``grid`` is the persistent grid cut to the resident clusters,
    ``max_active_clusters`` the driver's count).
    """

    family: Any
    defines: Mapping[str, Any]
    m: int
    n: int
    k: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    workspace_ptr: int
    stream: Any = None                 # a pycuda Stream, or None: the legacy default stream
    function: Any = None
    kernel: DriverKernel | None = None
    max_active_clusters: int | None = None

    @property
    def num_regs(self) -> int | None:
        """Registers per thread of a pycuda-loaded kernel (None for driver kernels)."""
        return int(self.function.num_regs) if self.function is not None else None

    def arguments(self, a: int, b: int, c: int, workspace: int | None = None) -> bytes | KernelArguments:
        """The launch arguments of one (A, B, C) address triple (and workspace: None, the plan's), in the
        family's ``arg_format``."""
        values = self.family.kernel_arguments(self.defines, M=self.m, N=self.n, K=self.k, a=a, b=b, c=c,
                                              workspace=self.workspace_ptr if workspace is None else workspace)
        if self.kernel is None:
            return struct.pack(self.family.arg_format, *values)
        return kernel_arguments(self.family.arg_format, values)

    def launch(self, arguments: bytes | KernelArguments) -> None:
        """Enqueue one launch with prepared ``arguments`` on the plan's stream (split-K reduces inside it)."""
        if self.kernel is None:
            # What pycuda's prepared_async_call does, minus its per-call import, kwargs and legacy
            # block-shape bookkeeping: pack the arguments and launch (about half the host cost).
            self.function._launch_kernel(self.grid, self.block, arguments, self.smem_bytes, self.stream)
        else:
            handle = self.stream.handle if self.stream is not None else 0
            self.kernel.launch(self.grid, self.block, self.smem_bytes, handle, arguments)

    def launch_on(self, arguments: KernelArguments, stream: int) -> None:
        """Enqueue one launch of a driver kernel on ``stream``, a raw CUstream handle (the caller's stream)."""
        self.kernel.launch(self.grid, self.block, self.smem_bytes, stream, arguments)


def build_plan(*, loader: Loader, family: Any, defines: Mapping[str, Any], cubin: str, geometry: Launch,
               m: int, n: int, k: int, workspace: Callable[[int], int], stream: Any = None,
               entry: str | None = None, driver: bool = False) -> LaunchPlan:
    """Load the kernel and resolve one (configuration, shape) launch; ``workspace(nbytes)`` allocates the
    split-K workspace (zeroed as the family needs) and answers its address (0 for none). ``entry``
    overrides the family's kernel name (a test kernel with the family's argument layout). ``driver``
    loads pointer-argument kernels through libcuda too (the runtime: it launches on raw stream handles,
    the caller's, which pycuda's launch cannot take)."""
    entry = entry or family.entry
    smem = int(geometry.smem_bytes)
    grid = (int(geometry.grid[0]), int(geometry.grid[1]), int(geometry.grid[2]))
    block = (int(geometry.block[0]), int(geometry.block[1]), int(geometry.block[2]))
    workspace_ptr = workspace(int(geometry.workspace_bytes)) if geometry.workspace_bytes else 0
    common = dict(family=family, defines=dict(defines), m=m, n=n, k=k, block=block, smem_bytes=smem,
                  workspace_ptr=workspace_ptr, stream=stream)
    if driver or has_struct_arguments(family.arg_format):
        kernel = loader.driver_kernel(cubin, entry, smem)
        # Every launch of a persistent grid is cut the same way (bench and runtime alike).
        cut, fits = kernel.resident_grid(grid=grid, block=block, smem_bytes=smem, cluster=cluster_blocks(defines))
        return LaunchPlan(**common, grid=cut, kernel=kernel, max_active_clusters=fits)
    return LaunchPlan(**common, grid=grid, function=loader.function(cubin, entry, smem))


@dataclass
class ShapePlan:
    """gemm()'s plan of one (configuration, shape) on one device: the launch plan, workspaces, argument sets.

    Argument sets are kept for the ``ARGUMENT_CACHE_SIZE`` most recent (A, B, C, workspace) addresses,
    so a repeated call encodes nothing. A family with a split-K workspace gets one per stream
    (``new_workspace`` allocates it, outside capture) and a spare for the first capturing stream.
    """

    plan: LaunchPlan
    workspace: Any = None  # DeviceAllocation or None, kept alive with the plan
    arguments: OrderedDict = field(default_factory=OrderedDict)
    encodes: int = 0  # argument sets built (a cached address set builds none)
    new_workspace: Callable[[], int] | None = None
    workspaces: dict[int, int] = field(default_factory=dict)   # stream handle -> workspace address
    spare: int = 0   # a workspace for the first capturing stream that has none (0: none left)

    def arguments_for(self, a_ptr: int, b_ptr: int, c_ptr: int, workspace: int | None = None) -> Any:
        """The arguments of one address set, built on first use, least recently used dropped."""
        key = (a_ptr, b_ptr, c_ptr, workspace)
        found = self.arguments.get(key)
        if found is not None:
            self.arguments.move_to_end(key)
            return found
        found = self.plan.arguments(a_ptr, b_ptr, c_ptr, workspace)
        self.encodes += 1
        self.arguments[key] = found
        if len(self.arguments) > ARGUMENT_CACHE_SIZE:
            self.arguments.popitem(last=False)
        return found

    def workspace_for(self, stream: int) -> int | None:
        """The stream's own workspace address (None: the family needs none), made on its first use."""
        if self.new_workspace is None:
            return None
        found = self.workspaces.get(stream)
        if found is None:
            if driver.stream_is_capturing(stream):
                if not self.spare:
                    raise GraphCaptureError(
                        f"gemm: M={self.plan.m}, N={self.plan.n}, K={self.plan.k} needs a split-K workspace for "
                        "this capturing stream and the plan's spare is taken: call it once on this stream "
                        "before capturing")
                found, self.spare = self.spare, 0
            elif self.plan.workspace_ptr and self.plan.workspace_ptr not in self.workspaces.values():
                found = self.plan.workspace_ptr   # the one build_plan made goes to the first stream
            else:
                found = self.new_workspace()
            self.workspaces[stream] = found
        return found

    def launch(self, a_ptr: int, b_ptr: int, c_ptr: int, stream: int = 0) -> None:
        """Enqueue the GEMM on ``stream`` (a raw CUstream handle; 0: the legacy default stream)."""
        if self.plan.kernel is None:
            self.plan.launch(self.plan.arguments(a_ptr, b_ptr, c_ptr))
        else:
            arguments = self.arguments_for(a_ptr, b_ptr, c_ptr, self.workspace_for(stream))
            self.plan.launch_on(arguments, stream)


class PreparedLaunch:
    """One shape plan's launch on one stream from one thread, everything but the addresses resolved.

    The launch call (function, grid, block, shared memory, stream) is bound once; an argument set is encoded
    once per (A, B) address pair (the TMA families' tensor maps embed them) and C's address is written into
    its slot per call (the driver copies the arguments at launch, and a captured graph keeps its own copy).
    One per thread, so that no other thread writes the slot while the driver reads it. The caller's context
    is checked with one driver call and the plan's pushed only when another is current.
    """

    def __init__(self, plan: ShapePlan, *, stream: int, context: int):
        kernel = plan.plan.kernel
        if kernel is None:
            raise ValueError("a prepared launch needs a driver kernel (build_plan(driver=True))")
        self.plan = plan
        self.context = context
        self.workspace = plan.workspace_for(stream)   # GraphCaptureError: a capturing stream with no spare left
        lib = bare_libcuda()
        launch = plan.plan
        function = kernel.function if isinstance(kernel.function, ctypes.c_void_p) else ctypes.c_void_p(
            kernel.function)
        self._launch = functools.partial(lib.cuLaunchKernel, function, *launch.grid, *launch.block,
                                         launch.smem_bytes, ctypes.c_void_p(stream))
        self._current_context = functools.partial(lib.cuCtxGetCurrent, ctypes.byref(current := ctypes.c_void_p()))
        self._current = current
        self.sets: dict[tuple[int, int], tuple[KernelArguments, Any]] = {}

    def encode(self, a_ptr: int, b_ptr: int) -> tuple[KernelArguments, Any]:
        """The argument set of (A, B) and its C slot, encoded now (the oldest set dropped beyond PREPARED_SETS)."""
        arguments = self.plan.plan.arguments(a_ptr, b_ptr, C_SENTINEL, self.workspace)
        slots = [item for item in arguments.storage if isinstance(item, ctypes.c_uint64) and item.value == C_SENTINEL]
        if len(slots) != 1:
            raise ValueError(f"{self.plan.plan.family.name}: C's address is not one pointer argument of its launch")
        if len(self.sets) >= PREPARED_SETS:
            del self.sets[next(iter(self.sets))]
        found = self.sets[(a_ptr, b_ptr)] = (arguments, slots[0])
        return found

    def __call__(self, a_ptr: int, b_ptr: int, c_ptr: int) -> None:
        """Enqueue C = A · Bᵀ at these addresses on the bound stream."""
        found = self.sets.get((a_ptr, b_ptr)) or self.encode(a_ptr, b_ptr)
        arguments, c_slot = found
        c_slot.value = c_ptr
        self._current_context()
        if self._current.value == self.context:
            status = self._launch(arguments.pointers, None)
        else:
            driver.push_context(self.context)   # the kernel and the stream belong to the operands' device
            try:
                status = self._launch(arguments.pointers, None)
            finally:
                driver.pop_context()
        if status:
            raise driver.DriverError(f"cuLaunchKernel failed with CUresult {status}")
