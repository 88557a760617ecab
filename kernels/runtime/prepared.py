"""gemm()'s per-device plan of one shape and its prepared launch (the runtime's; the bench launches through plan.py).

``ShapePlan`` is one (configuration, shape)'s launch plan on one device with its split-K workspaces per
stream and its argument sets; ``PreparedLaunch`` is its launch on one stream from one thread with everything
but the addresses resolved, what torch tensors take after their (shape, device, stream)'s first call. Apart
from plan.py so that the bench's launch-plan builder (a dependency of the measure stage) does not change
with the runtime's launch path.
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunetable.kernels import driver
from tunetable.kernels.driver import KernelArguments
from tunetable.kernels.runtime.plan import LaunchPlan

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
        self.plan.encodes += 1
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
