"""The one launch-plan builder, shared by the bench's worker and ``gemm()`` (families and libcuda only).

``build_plan`` takes a family, its defines, a cubin and the launch geometry of one shape; it loads
the kernel (pycuda for pointer arguments, libcuda's kernelParams for by-value structs:
kernels/driver.py says why), cuts a persistent grid to the clusters resident at once, and packs
arguments in the family's ``arg_format``. It imports no generated table, so the bench (whose
results the tables are generated from) can launch through it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tunetable.kernels.driver import DriverKernel, KernelArguments, has_struct_arguments, kernel_arguments
from tunetable.kernels.families import Launch, cluster_blocks


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
