"""The runtime's launch step: cubins, per-shape plans and ``gemm()`` / ``gemm_with()``.

Plans come from the one launch-plan builder (``tunetable.kernels.runtime.plan.build_plan``), which
the bench's worker uses too, so the runtime launches what was measured.

A configuration's cubin comes from ``tunetable.kernels.jit`` (compiled on first use, cached by
content key) with the build settings codegen wrote into the generated file (``BUILDS``): no
params.yaml, no build module. pycuda is imported on the first GEMM, so importing this module needs
no GPU.

Device and stream. Each call runs on the GPU its operands live on (two devices: one error), in that
device's primary context (the one torch and CuPy use), and is queued on the caller's stream: an
explicit ``stream=``; else torch's current stream of that device for torch tensors, CuPy's current
stream for CuPy arrays, the ``stream`` of a ``__cuda_array_interface__`` (v3: an operand whose
producer stream differs from the launch stream is waited for with an event, no host sync); else the
legacy default stream. Loaded cubins, plans and split-K workspaces are per device (``DeviceRuntime``);
the device's tables come from ``devices.table_device`` and ``decide.dispatcher(device=...)`` (docs/devices.md).

CUDA graphs. A shape's first call on a device prepares its plan (cubin load, workspace) and must
run outside capture (inside one it raises ``GraphCaptureError``); later calls allocate nothing on the
host's behalf but torch's output, encode arguments into host memory and launch, which a capture
records. Each stream gets its own split-K workspace (no race between streams); the first capturing
stream without one takes the plan's spare, allocated with the plan. A call after the first costs the
operand checks, a dictionary lookup and the launch; torch tensors on torch's current stream take a shorter
path after their (shape, device, stream)'s first call in a thread: the checks no cache can answer (dtype,
layout, 16-byte alignment, one device) and a ``PreparedLaunch`` (launch bound once, argument sets per (A, B)).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from tunetable.kernels import driver
from tunetable.kernels.autotune import device_key
from tunetable.kernels.families import FAMILIES, KernelFamily
from tunetable.kernels.families.common import TableEntry, config_id
from tunetable.kernels.families.devices import GpuInfo, gpu_info
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
from tunetable.kernels.runtime import online, record
from tunetable.kernels.runtime.devices import DeviceTableWarning, TableDevice, table_device
from tunetable.kernels.runtime.operands import (
    ALIGNMENT,
    Operand,
    cai_numpy_dtype,
    check_out,
    check_problem,
    operand,
)
from tunetable.kernels.runtime.plan import Loader, build_plan
from tunetable.kernels.runtime.prepared import (  # noqa: F401 - ShapePlan, ARGUMENT_CACHE_SIZE: re-exported
    ARGUMENT_CACHE_SIZE,
    GraphCaptureError,
    PreparedLaunch,
    ShapePlan,
)
from tunetable.kernels.tuning_configs import BUILDS, TABLES

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


# --- the process's GPU state: one runtime per device --------------------------------------------------

def _pycuda() -> Any:
    """pycuda.driver, initialised (NoGpuError when pycuda or a device is missing)."""
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
    return cuda


class DeviceRuntime:
    """One device's primary context, loaded cubins, per-(configuration, shape) plans and table device."""

    def __init__(self, cuda: Any, ordinal: int) -> None:
        count = cuda.Device.count()
        if not 0 <= ordinal < count:
            raise ValueError(f"tunetable.gemm: no CUDA device {ordinal} ({count} visible)")
        self.cuda = cuda
        self.ordinal = ordinal
        self.info = gpu_info(cuda, ordinal)
        self.table: TableDevice = table_device(self.info)  # UnsupportedDeviceError off sm_90
        self.device = cuda.Device(ordinal)
        # The primary context is the one torch and CuPy use, so pointers and streams are shared with them.
        self.context = self.device.retain_primary_context()
        with self.entered():
            self.handle = driver.current_context()
            self.event = driver.new_event()   # the CUDA array interface's stream waits
        self.loader = Loader(cuda)
        self.plans: dict[tuple[str, int, int, int], ShapePlan] = {}
        # (M, N, K) -> plan of the dispatch's choice: after the first call of a shape on this device,
        # gemm() goes straight from the operands to the launch (the shape was validated then).
        self.shape_plans: dict[tuple[int, int, int], ShapePlan] = {}

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This device's context current (pycuda's stack too) for the block: loads and allocations."""
        self.context.push()
        try:
            yield
        finally:
            self.context.pop()

    def enter_thread(self) -> None:
        """Keep the context on pycuda's stack in this thread (pycuda's own allocations need it there).

        Only where no other device's context is current: pushing over torch's current device would
        move it (torch.cuda.current_device() reads the current context).
        """
        if driver.current_context() in (0, self.handle):
            self.context.push()
            _thread.pushed = [*getattr(_thread, "pushed", []), self]
            if threading.current_thread() is threading.main_thread():
                atexit.register(self._close)

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
            with self.entered():
                found = self.plans[key] = self._build(entry, m=m, n=n, k=k)
        return found

    def _build(self, entry: TableEntry, *, m: int, n: int, k: int) -> ShapePlan:
        """A new plan: the cubin (compiled on first use), the family's geometry, a zeroed workspace and a spare."""
        family = FAMILIES[entry.kernel]
        defines = entry_defines(entry)
        allocations: list[Any] = []
        sizes: list[int] = []

        def workspace(nbytes: int) -> int:
            """A new split-K workspace, zeroed when the family says so."""
            buffer = self.cuda.mem_alloc(nbytes)
            if family.zeroed_workspace:
                self.cuda.memset_d8(buffer, 0, nbytes)  # split-K tile counters start at zero
                # The memset is queued on the legacy stream, which the caller's non-blocking stream does not
                # wait for: finish it now (preparation only, never inside a capture).
                self.cuda.Context.synchronize()
            allocations.append(buffer)
            sizes.append(nbytes)
            return int(buffer)

        plan = build_plan(loader=self.loader, family=family, defines=defines, cubin=cubin_for(entry),
                          geometry=family.launch(defines, m, n, k), m=m, n=n, k=k, workspace=workspace,
                          driver=True)
        if not allocations:
            return ShapePlan(plan=plan)

        def new_workspace() -> int:
            """Another workspace of the plan's size (a new stream's), in this device's context."""
            with self.entered():
                return workspace(sizes[0])

        shape_plan = ShapePlan(plan=plan, workspace=allocations, new_workspace=new_workspace,
                               spare=new_workspace())
        return shape_plan

    def empty_like(self, like: Any, library: str, *, m: int, n: int, stream: int) -> tuple[Any, int]:
        """A new M x N bf16 output from the same library as the input ``like``, and its address."""
        if library == "torch":
            out = like.new_empty((m, n))  # same dtype and device (a graph's pool during capture)
            return out, out.data_ptr()
        if driver.stream_is_capturing(stream):
            raise GraphCaptureError(f"gemm: allocating a {library} output during CUDA graph capture would break "
                                    "it: pass out= (a static buffer allocated before the capture)")
        with self.entered():
            if library == "cupy":
                out = sys.modules["cupy"].empty((m, n), dtype=like.dtype)
                return out, int(out.data.ptr)
            import numpy as np  # lazy, with pycuda: only pycuda and CUDA-array-interface inputs need them
            from pycuda import gpuarray  # (with numpy, above)

            dtype = like.dtype if library == "pycuda" else cai_numpy_dtype(like)
            out = gpuarray.empty((m, n), dtype=np.dtype(dtype))
            return out, int(out.gpudata)


Runtime = DeviceRuntime   # the name before devices were per device

_state: dict[str, Any] = {}
_runtimes: dict[int, DeviceRuntime] = {}
_lock = threading.Lock()
_thread = threading.local()  # pushed: the device runtimes whose context this thread keeps on pycuda's stack


def _clear_shape_plans() -> None:
    """The dispatcher changed: every device forgets its per-shape plan choices."""
    for found in _runtimes.values():
        found.shape_plans.clear()
    _prepared.clear()


on_dispatcher_change(_clear_shape_plans)


def device_runtime(ordinal: int) -> DeviceRuntime:
    """The runtime of device ``ordinal``, created on its first GEMM (one DeviceTableWarning where the GPU has
    no tables of its own)."""
    found = _runtimes.get(ordinal)
    if found is None:
        with _lock:
            found = _runtimes.get(ordinal)
            if found is None:
                cuda = _state.get("cuda") or _state.setdefault("cuda", _pycuda())
                found = DeviceRuntime(cuda, ordinal)
                if found.table.warning:
                    warnings.warn(found.table.warning, DeviceTableWarning, stacklevel=4)  # gemm()'s caller
                _runtimes[ordinal] = found
    return found


def runtime(device: int | None = None) -> DeviceRuntime:
    """The runtime of ``device`` (default: the current context's device, else 0), its context kept current in
    this thread for pycuda where that moves no other library's device."""
    if device is None:
        _state.setdefault("cuda", _pycuda())
        device = driver.current_device()
        device = 0 if device is None else device
    found = device_runtime(device)
    if found not in getattr(_thread, "pushed", []):
        found.enter_thread()
    return found


# --- the caller's device and stream ---------------------------------------------------------------

def device_of(a: Operand, b: Operand) -> int:
    """The one device both operands live on (a driver query for pycuda and CUDA-array-interface inputs)."""
    da = a.device if a.device >= 0 else _pointer_device("a", a)
    db = b.device if b.device >= 0 else _pointer_device("b", b)
    if da != db:
        raise ValueError(f"operands on two devices: a on cuda:{da}, b on cuda:{db} (move them to one GPU first)")
    return da


def _pointer_device(name: str, op: Operand) -> int:
    """The device of an operand's address (the driver's answer), or one clear error."""
    _state.setdefault("cuda", _pycuda())
    try:
        return driver.pointer_device(op.ptr)
    except driver.DriverError:
        raise ValueError(f"{name}: address 0x{op.ptr:x} is not device memory the driver knows") from None


def stream_handle(stream: Any, *, device: int) -> int:
    """A raw CUstream handle from an explicit ``stream=``: an int, a torch, CuPy or pycuda stream."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    index = getattr(stream, "device_index", None)   # torch streams know their device
    if index is not None and index != device:
        raise ValueError(f"stream= is a stream of cuda:{index} but the operands live on cuda:{device}")
    for name in ("cuda_stream", "ptr", "handle"):    # torch, CuPy, pycuda
        value = getattr(stream, name, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"stream=: expected a CUstream handle (int) or a torch, CuPy or pycuda stream, got "
                    f"{type(stream).__module__}.{type(stream).__qualname__}")


def caller_stream(op: Operand, *, device: int) -> int:
    """The stream of the operands' library: torch's or CuPy's current stream, the CUDA array interface's."""
    if op.library == "torch":
        return sys.modules["torch"]._C._cuda_getCurrentRawStream(device)   # what Triton launches on
    if op.library == "cupy":
        return int(sys.modules["cupy"].cuda.get_current_stream(device).ptr)
    if op.library == "cai" and op.stream is not None:
        return op.stream   # 1: the legacy default stream, 2: the per-thread one; both valid handles
    return 0


def _wait_for_producers(found: DeviceRuntime, stream: int, *ops: Operand) -> None:
    """CUDA array interface v3: each operand whose producer stream is not the launch stream is waited for."""
    for op in ops:
        if op.stream is not None and op.stream != stream:
            driver.wait_for(waiter=stream, producer=op.stream, event=found.event)


# --- the public entry points -------------------------------------------------------------------

def _launch(found: DeviceRuntime, plan: ShapePlan, a: Any, a_op: Operand, b_op: Operand, out: Any, m: int, n: int,
            stream: int) -> Any:
    """Check or allocate the output, order after CUDA-array-interface producers, launch in the device's context."""
    if out is None:
        out, c_ptr = found.empty_like(a, a_op.library, m=m, n=n, stream=stream)
        out_op = None
    else:
        out_op = operand("out", out)
        check_out(out_op, m=m, n=n)
        if out_op.device != found.ordinal:
            device = out_op.device if out_op.device >= 0 else _pointer_device("out", out_op)
            if device != found.ordinal:
                raise ValueError(f"out: on cuda:{device} but the operands live on cuda:{found.ordinal}")
        c_ptr = out_op.ptr
    current = driver.current_context()
    if current != found.handle:
        driver.push_context(found.handle)   # the kernel and the stream belong to the operands' device
    try:
        if a_op.stream is not None or b_op.stream is not None or (out_op is not None and out_op.stream is not None):
            _wait_for_producers(found, stream, a_op, b_op, *(() if out_op is None else (out_op,)))
        plan.launch(a_op.ptr, b_op.ptr, c_ptr, stream)
    finally:
        if current != found.handle:
            driver.pop_context()
    return out


def _prepare(found: DeviceRuntime, stream: int, *, m: int, n: int, k: int) -> None:
    """Refuse a shape's first call during graph capture (it would compile, load and allocate)."""
    if driver.stream_is_capturing(stream):
        raise GraphCaptureError(
            f"gemm: the first call of M={m}, N={n}, K={k} on cuda:{found.ordinal} ran during CUDA graph capture; "
            "it compiles, loads and allocates, which a capture cannot hold: call it once before capturing (the "
            "warm-up torch.cuda.graph asks for)")


def gemm(a: Any, b: Any, out: Any = None, *, stream: Any = None) -> Any:
    """C = a · bᵀ in bf16 (a: M x K, b: N x K, row-major on the GPU) with the tuned family and configuration.

    The dispatch list picks the kernel family for the shape, that family's table the configuration
    (tunetable.kernels.runtime.decide). Accepts pycuda GPUArrays, torch tensors, CuPy arrays or any
    object with ``__cuda_array_interface__``; returns ``out`` (allocated like ``a`` when None). Runs on
    the device the operands live on, queued on ``stream`` or the caller's library's current stream
    (module docstring), and returns without waiting. Capturable in a CUDA graph after the shape's first call.
    """
    if stream is None and type(a) in _torch["types"] and type(b) in _torch["types"]:
        served = _torch_fast(a, b, out)
        if served is not None:
            return served
    a_op = operand("a", a)
    b_op = operand("b", b)
    if a_op.cols != b_op.cols:
        check_problem(a_op, b_op, family=FAMILIES[DEFAULT_TABLE])  # raises the mismatched-K error
    m, n, k = a_op.rows, b_op.rows, a_op.cols
    # Torch / CuPy operands on one device whose runtime has planned this shape skip the shape checks.
    found = _runtimes.get(a_op.device) if a_op.device >= 0 and a_op.device == b_op.device else None
    plan = found.shape_plans.get((m, n, k)) if found is not None else None
    if plan is None:
        check_problem(a_op, b_op, family=FAMILIES[DEFAULT_TABLE])   # before any GPU work
        device = device_of(a_op, b_op)
        found = _runtimes.get(device) or device_runtime(device)
        plan = found.shape_plans.get((m, n, k))
    device = found.ordinal
    launch_stream = caller_stream(a_op, device=device) if stream is None else stream_handle(stream, device=device)
    if plan is None:
        _prepare(found, launch_stream, m=m, n=n, k=k)
        serving = found.table.device   # the recorded device whose tables serve this GPU (runtime.devices)
        decision = dispatcher(device=serving).decide(m=m, n=n, k=k)
        entry = decision.entry
        if decision.prediction is not None and online.enabled():
            entry = _tuned_entry(a=a, b=b, out=out, m=m, n=n, k=k, device=serving, gpu=found.info)
        plan = found.shape_plans[(m, n, k)] = found.plan(entry, m=m, n=n, k=k)
    recorder = record._state.get("recorder")
    if recorder is not None:
        recorder.add(m, n, k)
    result = _launch(found, plan, a, a_op, b_op, out, m, n, launch_stream)
    if stream is None and a_op.library == "torch" and b_op.library == "torch" and plan.plan.kernel is not None:
        _prepare_torch(found, plan, m=m, n=n, k=k, stream=launch_stream)
    return result


# --- torch tensors after their (shape, device, stream)'s first call --------------------------------------

# (M, N, K, device, stream, thread) -> the prepared launch; "types": the torch tensor types seen (none before
# the first torch call, so that no other input ever reaches the torch checks), "bf16", "stream": torch's getter.
_prepared: dict[tuple[int, int, int, int, int, int], PreparedLaunch] = {}
_torch: dict[str, Any] = {"types": frozenset()}


def _prepare_torch(found: DeviceRuntime, plan: ShapePlan, *, m: int, n: int, k: int, stream: int) -> None:
    """After a torch call on the full path: its (shape, device, stream, thread)'s prepared launch for the next."""
    torch = sys.modules["torch"]
    if not _torch["types"]:
        _torch.update(types=frozenset({torch.Tensor, torch.nn.Parameter}), bf16=torch.bfloat16,
                      stream=torch._C._cuda_getCurrentRawStream)
    key = (m, n, k, found.ordinal, stream, threading.get_ident())
    if key not in _prepared:
        _prepared[key] = PreparedLaunch(plan, stream=stream, context=found.handle)


def _torch_fast(a: Any, b: Any, out: Any) -> Any:
    """gemm() of torch tensors whose (shape, device, stream) this thread has run: the checks no cache can answer
    (dtype, layout, alignment, device) and the prepared launch; None sends the call down the full path."""
    bf16 = _torch["bf16"]
    if a.dtype is not bf16 or b.dtype is not bf16 or not a.is_contiguous() or not b.is_contiguous():
        return None
    try:
        m, k = a.shape
        n, kb = b.shape
    except ValueError:
        return None   # not 2-D: the full path's error
    device = a.get_device()
    a_ptr, b_ptr = a.data_ptr(), b.data_ptr()
    if kb != k or device < 0 or b.get_device() != device or (a_ptr | b_ptr) % ALIGNMENT:
        return None
    prepared = _prepared.get((m, n, k, device, _torch["stream"](device), threading.get_ident()))
    if prepared is None:
        return None
    if out is None:
        out = a.new_empty((m, n))
    elif (type(out) not in _torch["types"] or out.dtype is not bf16 or out.get_device() != device
          or not out.is_contiguous() or out.shape != (m, n) or out.data_ptr() % ALIGNMENT):
        return None
    prepared(a_ptr, b_ptr, out.data_ptr())
    recorder = record._state.get("recorder")
    if recorder is not None:
        recorder.add(m, n, k)
    return out


_online: dict[str, online.OnlineTuner] = {}


def _tuned_entry(*, a: Any, b: Any, out: Any, m: int, n: int, k: int, device: str, gpu: GpuInfo) -> TableEntry:
    """TUNETABLE_AUTOTUNE: the fastest of ``device``'s selector's top candidates on these inputs (runtime.online),
    tuned and cached for the GPU the operands live on (``gpu``), not the current CUDA device."""
    tuner = _online.setdefault("tuner", online.OnlineTuner(gemm_with=gemm_with))
    ranking = online.ranking(shape_selector(device=device), m=m, n=n, k=k)
    chosen = tuner.choose(m=m, n=n, k=k, a=a, b=b, out=out, ranking=ranking,
                          device=device_key(name=gpu.name, compute_capability=gpu.compute_capability))
    return explicit_entry(chosen["family"], tuple(chosen["tunables"].items()), n, k)


def gemm_with(tunables: Mapping[str, int], a: Any, b: Any, out: Any = None, *, family: str = DEFAULT_TABLE,
              stream: Any = None) -> Any:
    """C = a · bᵀ with an explicit configuration of ``family`` (lower-case tunables), bypassing the tables;
    device and stream as gemm()."""
    a_op = operand("a", a)
    b_op = operand("b", b)
    found_family: KernelFamily | None = FAMILIES.get(family)
    if found_family is None:
        raise ValueError(f"unknown kernel family '{family}' (known: {', '.join(sorted(FAMILIES))})")
    m, n, k = check_problem(a_op, b_op, family=found_family)
    device = device_of(a_op, b_op)
    found = _runtimes.get(device) or device_runtime(device)
    launch_stream = caller_stream(a_op, device=device) if stream is None else stream_handle(stream, device=device)
    entry = explicit_entry(family, tuple(tunables.items()), n, k)
    plan = found.plans.get((entry.config_id, m, n, k))
    if plan is None:
        _prepare(found, launch_stream, m=m, n=n, k=k)
        plan = found.plan(entry, m=m, n=n, k=k)
    return _launch(found, plan, a, a_op, b_op, out, m, n, launch_stream)


record.start_from_environment()
