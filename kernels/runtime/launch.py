"""The runtime's launch step: cubins, per-shape plans and ``gemm()`` / ``gemm_with()``.

Plans come from the one launch-plan builder (``tunetable.kernels.runtime.plan.build_plan``), which
the bench's worker uses too, so the runtime launches what was measured.

A configuration's cubin comes from ``tunetable.kernels.jit`` (compiled on first use, cached by
content key) with the build settings codegen wrote into the generated file (``BUILDS``): no
params.yaml, no build module. Plans are memoised per (configuration, shape), and ``gemm()`` keeps
the plan of each shape's decision, so a call after the first costs a dictionary lookup, the operand
checks and the launch. pycuda is imported on the first GEMM, so importing this module needs no GPU.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tunetable.kernels.families import FAMILIES, KernelFamily
from tunetable.kernels.families.common import TableEntry, config_id
from tunetable.kernels.jit import CompileResult, compile_config, compile_many, default_cache_dir
from tunetable.kernels.runtime.decide import (
    DEFAULT_TABLE,
    dispatcher,
    explicit_entry,
    make_entry,
    on_dispatcher_change,
    shape_selector,
    tunables_of,
)
from tunetable.kernels.runtime import online
from tunetable.kernels.runtime.operands import Operand, cai_numpy_dtype, check_out, check_problem, operand
from tunetable.kernels.runtime.plan import LaunchPlan, Loader, build_plan
from tunetable.kernels.tuning_configs import BUILDS, TABLES

# Struct-argument kernels: encoded argument sets kept per plan, one per (A, B, C) address triple seen
# (TMA tensor maps embed the A and B addresses).
ARGUMENT_CACHE_SIZE = 16


class NoGpuError(RuntimeError):
    """pycuda or a CUDA device is missing: GEMMs cannot run on this machine."""


# --- cubins: the generated build settings + the JIT leaf ---------------------------------------------

def table_of_family(family: str) -> str:
    """The table whose build settings a family's configurations compile with (its own name, else the first)."""
    if family in BUILDS:
        return family
    for table, build in BUILDS.items():
        if build.family == family:
            return table
    raise ValueError(f"{family}: no build settings in kernels/tuning_configs.py BUILDS (tables: "
                     f"{', '.join(sorted(BUILDS)) or 'none'}): declare `builds:` in params.yaml and run "
                     "`tunetable codegen --all`")


def entry_defines(entry: TableEntry) -> dict[str, int]:
    """Every -D define of a table entry (its tunables, then the family's derived values), its id checked."""
    defines = FAMILIES[entry.kernel].defines_of(entry)
    found = config_id(family=entry.kernel, params=tunables_of(entry))
    if found != entry.config_id:
        raise ValueError(
            f"{entry.kernel}: table entry for N={entry.n}, K={entry.k}, M=[{entry.m}, {entry.m_end}) says "
            f"config_id {entry.config_id} but its tunables hash to {found} (regenerate the table)")
    return defines


def cubin_for(entry: TableEntry, *, cache_dir: str | os.PathLike[str] | None = None) -> str:
    """The entry's cubin from the content-addressed cache, compiled now when missing."""
    family = FAMILIES[entry.kernel]
    build = BUILDS[table_of_family(entry.kernel)]
    result = compile_config(kernel_path=family.source, defines=entry_defines(entry), flags=build.nvcc_flags,
                            arch=build.arch, cache_dir=cache_dir or default_cache_dir())
    if result.status != "ok" or result.cubin is None:
        raise RuntimeError(f"{entry.kernel}: configuration {entry.config_id} failed to compile: {result.error}")
    return result.cubin


def warm_cache(*, table: str = DEFAULT_TABLE, workers: int = 0,
               cache_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Compile every configuration the runtime may run (table entries, heuristics) in parallel; id -> status."""
    family = FAMILIES[BUILDS[table].family]
    build = BUILDS[table]
    entries = list(TABLES[table]) + [
        make_entry(tunables=asdict(tunables), n=8, k=8, kernel=family.name)
        for tunables in (family.skinny_tunables, family.default_tunables)
    ]
    unique = {item.config_id: entry_defines(item) for item in entries}
    results: dict[str, CompileResult] = compile_many(
        unique.items(), kernel_path=family.source, flags=build.nvcc_flags, arch=build.arch,
        cache_dir=cache_dir or default_cache_dir(), workers=workers or os.cpu_count() or 1)
    return {config_id: result.status for config_id, result in results.items()}


@dataclass
class ShapePlan:
    """gemm()'s plan of one (configuration, shape): the launch plan, its workspace, its argument sets.

    Pointer-argument kernels pack their arguments per call; struct-argument kernels (TMA tensor maps
    embed the A and B addresses) keep the ``ARGUMENT_CACHE_SIZE`` most recent address triples'
    arguments, so a repeated call encodes nothing.
    """

    plan: LaunchPlan
    workspace: Any = None  # DeviceAllocation or None, kept alive with the plan
    arguments: OrderedDict = field(default_factory=OrderedDict)
    encodes: int = 0  # argument sets built for a struct kernel (a cached address triple builds none)

    def arguments_for(self, a_ptr: int, b_ptr: int, c_ptr: int) -> Any:
        """The arguments of one address triple, built on first use, least recently used dropped."""
        key = (a_ptr, b_ptr, c_ptr)
        found = self.arguments.get(key)
        if found is not None:
            self.arguments.move_to_end(key)
            return found
        found = self.plan.arguments(a_ptr, b_ptr, c_ptr)
        self.encodes += 1
        self.arguments[key] = found
        if len(self.arguments) > ARGUMENT_CACHE_SIZE:
            self.arguments.popitem(last=False)
        return found

    def launch(self, a_ptr: int, b_ptr: int, c_ptr: int) -> None:
        """Enqueue the GEMM on the default stream."""
        if self.plan.kernel is None:
            self.plan.launch(self.plan.arguments(a_ptr, b_ptr, c_ptr))
        else:
            self.plan.launch(self.arguments_for(a_ptr, b_ptr, c_ptr))


# --- the process's GPU state ------------------------------------------------------------------------

class Runtime:
    """The pycuda context, loaded cubins and per-(configuration, shape) plans of one process."""

    def __init__(self) -> None:
        try:
            import pycuda.driver as cuda  # lazy: importing the runtime needs no GPU and no pycuda
        except ImportError as exc:
            raise NoGpuError(
                f"tunetable.gemm needs pycuda and a CUDA GPU, and pycuda cannot be imported here ({exc}); "
                "install the 'cuda' extra on a machine with an NVIDIA GPU"
            ) from None
        try:
            cuda.init()
            count = cuda.Device.count()
        except cuda.Error as exc:
            raise NoGpuError(f"tunetable.gemm: no usable CUDA driver or device ({exc})") from None
        if count == 0:
            raise NoGpuError("tunetable.gemm: no CUDA device is visible")
        self.cuda = cuda
        self.device = cuda.Device(0)
        # The primary context is the one torch and CuPy use, so pointers are shared with them.
        self.context = self.device.retain_primary_context()
        self.context.push()
        _thread.has_context = True
        atexit.register(self._close)
        self.loader = Loader(cuda)
        self.plans: dict[tuple[str, int, int, int], ShapePlan] = {}

    def enter_thread(self) -> None:
        """Make the context current in a thread other than the creator (pycuda's stack is per thread)."""
        self.context.push()
        _thread.has_context = True

    def _close(self) -> None:
        """Pop the context at interpreter exit (nothing when it is already gone)."""
        try:
            self.context.pop()
        except self.cuda.Error:
            pass  # already gone at interpreter exit

    def plan(self, entry: TableEntry, *, m: int, n: int, k: int) -> ShapePlan:
        """The plan of ``entry`` on (M, N, K), built on first use."""
        key = (entry.config_id, m, n, k)
        found = self.plans.get(key)
        if found is None:
            found = self.plans[key] = self._build(entry, m=m, n=n, k=k)
        return found

    def _build(self, entry: TableEntry, *, m: int, n: int, k: int) -> ShapePlan:
        """A new plan: the cubin (compiled on first use), the family's geometry, a zeroed workspace."""
        family = FAMILIES[entry.kernel]
        defines = entry_defines(entry)
        allocations: list[Any] = []

        def workspace(nbytes: int) -> int:
            """A new split-K workspace, zeroed when the family says so."""
            buffer = self.cuda.mem_alloc(nbytes)
            if family.zeroed_workspace:
                self.cuda.memset_d8(buffer, 0, nbytes)  # split-K tile counters start at zero
            allocations.append(buffer)
            return int(buffer)

        plan = build_plan(loader=self.loader, family=family, defines=defines, cubin=cubin_for(entry),
                          geometry=family.launch(defines, m, n, k), m=m, n=n, k=k, workspace=workspace)
        return ShapePlan(plan=plan, workspace=allocations[0] if allocations else None)

    def empty_like(self, like: Any, library: str, *, m: int, n: int) -> tuple[Any, int]:
        """A new M x N bf16 output from the same library as the input ``like``, and its address."""
        if library == "torch":
            out = like.new_empty((m, n))  # same dtype and device, cheaper than torch.empty
            return out, out.data_ptr()
        if library == "cupy":
            out = sys.modules["cupy"].empty((m, n), dtype=like.dtype)
            return out, int(out.data.ptr)
        import numpy as np  # lazy, with pycuda: only pycuda and CUDA-array-interface inputs need them
        from pycuda import gpuarray  # (with numpy, above)

        dtype = like.dtype if library == "pycuda" else cai_numpy_dtype(like)
        out = gpuarray.empty((m, n), dtype=np.dtype(dtype))
        return out, int(out.gpudata)


_state: dict[str, Any] = {}
_lock = threading.Lock()
_thread = threading.local()  # has_context: this thread has the runtime's context pushed
# (M, N, K) -> plan of the dispatch's choice: after the first call of a shape, gemm() goes straight
# from the operands to the launch (the shape was validated when the plan was made).
_shape_plans: dict[tuple[int, int, int], ShapePlan] = {}
on_dispatcher_change(_shape_plans.clear)


def runtime() -> Runtime:
    """The process-wide GPU runtime, created on the first GEMM."""
    found = _state.get("runtime")
    if found is None:
        with _lock:
            found = _state.get("runtime")
            if found is None:
                found = _state["runtime"] = Runtime()
    if not getattr(_thread, "has_context", False):
        found.enter_thread()
    return found


# --- the public entry points -------------------------------------------------------------------

def _launch(plan: ShapePlan, a: Any, a_op: Operand, b_op: Operand, out: Any, m: int, n: int) -> Any:
    """Check or allocate the output, then launch."""
    if not getattr(_thread, "has_context", False):
        runtime()  # a new thread: push the context first
    if out is None:
        out, c_ptr = _state["runtime"].empty_like(a, a_op.library, m=m, n=n)
    else:
        out_op = operand("out", out)
        check_out(out_op, m=m, n=n)
        c_ptr = out_op.ptr
    plan.launch(a_op.ptr, b_op.ptr, c_ptr)
    return out


def gemm(a: Any, b: Any, out: Any = None) -> Any:
    """C = a · bᵀ in bf16 (a: M x K, b: N x K, row-major on the GPU) with the tuned family and configuration.

    The dispatch list picks the kernel family for the shape, that family's table the configuration
    (tunetable.kernels.runtime.decide). Accepts pycuda GPUArrays, torch tensors, CuPy arrays or any
    object with ``__cuda_array_interface__``; returns ``out`` (allocated like ``a`` when None). The
    kernel is enqueued on the legacy default stream (torch's and CuPy's default too) of device 0, the
    first visible GPU (choose it with CUDA_VISIBLE_DEVICES), and the call returns without waiting.
    """
    a_op = operand("a", a)
    b_op = operand("b", b)
    if a_op.cols != b_op.cols:
        check_problem(a_op, b_op, family=FAMILIES[DEFAULT_TABLE])  # raises the mismatched-K error
    m, n, k = a_op.rows, b_op.rows, a_op.cols
    plan = _shape_plans.get((m, n, k))
    if plan is None:
        check_problem(a_op, b_op, family=FAMILIES[DEFAULT_TABLE])
        decision = dispatcher().decide(m=m, n=n, k=k)
        entry = decision.entry
        if decision.prediction is not None and online.enabled():
            entry = _tuned_entry(a=a, b=b, out=out, m=m, n=n, k=k)
        plan = _shape_plans[(m, n, k)] = runtime().plan(entry, m=m, n=n, k=k)
    return _launch(plan, a, a_op, b_op, out, m, n)


_online: dict[str, online.OnlineTuner] = {}


def _tuned_entry(*, a: Any, b: Any, out: Any, m: int, n: int, k: int) -> TableEntry:
    """TUNETABLE_AUTOTUNE: the fastest of the selector's top candidates on these inputs (runtime.online)."""
    tuner = _online.setdefault("tuner", online.OnlineTuner())
    chosen = tuner.choose(m=m, n=n, k=k, a=a, b=b, out=out, ranking=online.ranking(shape_selector(), m=m, n=n, k=k))
    return explicit_entry(chosen["family"], tuple(chosen["tunables"].items()), n, k)


def gemm_with(tunables: Mapping[str, int], a: Any, b: Any, out: Any = None, *, family: str = DEFAULT_TABLE) -> Any:
    """C = a · bᵀ with an explicit configuration of ``family`` (lower-case tunables), bypassing the tables."""
    a_op = operand("a", a)
    b_op = operand("b", b)
    found: KernelFamily | None = FAMILIES.get(family)
    if found is None:
        raise ValueError(f"unknown kernel family '{family}' (known: {', '.join(sorted(FAMILIES))})")
    m, n, k = check_problem(a_op, b_op, family=found)
    entry = explicit_entry(family, tuple(tunables.items()), n, k)
    return _launch(runtime().plan(entry, m=m, n=n, k=k), a, a_op, b_op, out, m, n)
