"""The pycuda measurement, run inside a worker process that owns the GPU's primary context.

Per shape: enough input sets (A, B, C) to exceed l2_factor x the device's L2, filled with random
bf16 on the GPU (never zeros), and the cuBLAS reference of set 0. Per configuration: poison C
(NaN), run once, compare with the reference on the GPU (||C - Cref|| / ||Cref||), then a
time-based warm-up that also sizes the timed batch. Per sample: a spin kernel holds the stream
while the host queues the whole batch, CUDA events bracket the batch, and each launch reads the
next input set (cold L2). The cuBLAS baseline is measured the same way on the same buffers.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tunetable.bench.cublas import Cublas
from tunetable.bench.failures import LaunchFailure
from tunetable.bench.nvml import NvmlSampler
from tunetable.kernels.driver import DriverError
from tunetable.kernels.families import FAMILIES, Launch
from tunetable.kernels.runtime.plan import Loader, build_plan
from tunetable.kernels.runtime.timing import ColdL2Timer, input_sets

HARNESS_SOURCE = Path(__file__).with_name("harness.cu")
BF16_NAN = 0x7FC0
PTR = np.uintp                   # kernel pointer arguments, as pycuda's prepare() spells them


class CudaBackend:
    """The Backend on a real GPU (pycuda; cuBLAS via ctypes; NVML for clock and power)."""

    def __init__(self) -> None:
        # Lazy: the worker process is the only place the bench needs pycuda (the parent never does).
        import pycuda.driver as cuda
        from pycuda.compiler import SourceModule  # (with pycuda: the worker process only)

        self.cuda = cuda
        cuda.init()
        self.device = cuda.Device(0)
        self.context = self.device.retain_primary_context()
        self.context.push()
        self.stream = cuda.Stream()
        # The one cold-L2 timing method (shared with the runtime benchmarks and autotune), on this stream.
        self.timer = ColdL2Timer(cuda=cuda, stream=self.stream)
        major, minor = self.device.compute_capability()
        harness = SourceModule(HARNESS_SOURCE.read_text(), no_extern_c=True, arch=f"sm_{major}{minor}",
                               options=["-O3"])
        self.fill = harness.get_function("fill_random_bf16")
        self.err_sums = harness.get_function("rel_err_sums")
        self.fill.prepare([PTR, np.uint64, np.uint64])
        self.err_sums.prepare([PTR, PTR, np.uint64, PTR])
        self.cublas = Cublas(stream_handle=self.stream.handle)
        self.nvml = NvmlSampler(pci_bus_id=self.device.pci_bus_id())
        self.l2_bytes = int(self.device.get_attribute(cuda.device_attribute.L2_CACHE_SIZE))
        self.sm_count = int(self.device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))
        self.loader = Loader(cuda)
        self.sets: list[tuple[Any, Any, Any]] = []          # allocations, kept alive here
        self.pointers: list[tuple[int, int, int]] = []      # their device addresses
        self.ref = None
        self.workspaces: dict[str, Any] = {}                # config id -> its split-K workspace
        self.sums = cuda.mem_alloc(16)
        self.configs: dict[str, dict[str, Any]] = {}
        self.shape = (0, 0, 0)
        self.settings: dict[str, Any] = {}

    # -- errors ------------------------------------------------------------------------------------
    def _guard(self, action: Callable[[], Any], what: str) -> Any:
        """Run a CUDA action; a driver error means a lost context: LaunchFailure."""
        try:
            return action()
        except (self.cuda.Error, DriverError) as exc:
            raise LaunchFailure(f"{what}: {exc}") from None

    # -- description and shape -----------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Device, driver and the facts that shape the measurement."""
        major, minor = self.device.compute_capability()
        return {
            "device": self.device.name(),
            "driver": self.nvml.driver or f"cuda {self.cuda.get_driver_version()}",
            "compute_capability": f"{major}.{minor}", "l2_bytes": self.l2_bytes, "sm_count": self.sm_count,
            "cublas_version": self.cublas.version, "pid": os.getpid(),
        }

    def _free_shape(self) -> None:
        """Free the current shape's input sets, split-K workspaces and reference output."""
        for buffers in self.sets:
            for buffer in buffers:
                buffer.free()
        self.sets, self.pointers = [], []
        for buffer in self.workspaces.values():
            buffer.free()
        self.workspaces = {}
        if self.ref is not None:
            self.ref.free()
            self.ref = None

    def _fill(self, buffer: Any, count: int, seed: int) -> None:
        """Queue random bf16 values seeded by ``seed`` into the first ``count`` elements of ``buffer``."""
        blocks = min(max(1, math.ceil(count / 256)), 8 * self.sm_count)
        self.fill.prepared_async_call((blocks, 1, 1), (256, 1, 1), self.stream, int(buffer), count, seed)

    def prepare_shape(self, *, m: int, n: int, k: int, settings: dict[str, Any]) -> dict[str, Any]:
        """Input sets covering l2_factor x L2, random data, and the cuBLAS reference on set 0."""
        cuda = self.cuda
        self._free_shape()
        self.configs = {}
        self.shape, self.settings, self.timer.rotation = (m, n, k), settings, 0
        set_bytes = 2 * (m * k + n * k + m * n)
        count = input_sets(set_bytes=set_bytes, l2_bytes=self.l2_bytes, l2_factor=float(settings["l2_factor"]))
        seed = int(settings.get("seed", 0))

        def allocate() -> None:
            """Allocate and fill the input sets, then compute the cuBLAS reference on set 0."""
            for index in range(count):
                a, b, c = cuda.mem_alloc(2 * m * k), cuda.mem_alloc(2 * n * k), cuda.mem_alloc(2 * m * n)
                self._fill(a, m * k, seed + 2 * index)
                self._fill(b, n * k, seed + 2 * index + 1)
                self.sets.append((a, b, c))
            self.pointers = [tuple(int(buffer) for buffer in buffers) for buffers in self.sets]
            self.ref = cuda.mem_alloc(2 * m * n)
            self.cublas.gemm_bf16(a=self.pointers[0][0], b=self.pointers[0][1], c=int(self.ref), m=m, n=n, k=k)
            self.stream.synchronize()

        self._guard(allocate, f"preparing shape {m}x{n}x{k}")
        return {"sets": count, "set_bytes": set_bytes, "rotation_bytes": count * set_bytes}

    # -- one configuration ---------------------------------------------------------------------------
    def _workspace(self, config_id: str, nbytes: int, *, zeroed: bool) -> int:
        """This configuration's own split-K workspace on this shape (zeroed when its kernel keeps counters there).

        One per configuration, never shared or reallocated while its launches are queued: a shared
        buffer grown for a later configuration left earlier launchers pointing at freed memory, and
        one configuration's partials overwrote another's tile counters.
        """
        if nbytes <= 0:
            return 0
        previous = self.workspaces.pop(config_id, None)
        if previous is not None:
            previous.free()
        buffer = self.cuda.mem_alloc(nbytes)
        self.workspaces[config_id] = buffer
        if zeroed:
            self.cuda.memset_d8_async(int(buffer), 0, nbytes, self.stream)
        return int(buffer)

    def _launcher(self, config_id: str, payload: dict[str, Any]) -> Callable[[int], None]:
        """A function that queues one complete GEMM on input set i (one kernel: split-K reduces inside it)."""
        m, n, k = self.shape
        if payload["kind"] == "baseline":
            def run_cublas(index: int) -> None:
                """Queue the cuBLAS GEMM on input set ``index``."""
                a, b, c = self.pointers[index]
                self.cublas.gemm_bf16(a=a, b=b, c=c, m=m, n=n, k=k)
            return run_cublas
        # A family with no folder under kernels/families/ (a test kernel) takes the pointer ABI of gemm_mma:
        # (A, B, C, workspace, M, N, K).
        family = FAMILIES.get(payload.get("family") or "") or FAMILIES["gemm_mma"]
        geometry = Launch(grid=tuple(payload["grid"]), block=tuple(payload["block"]),
                          smem_bytes=int(payload["smem_bytes"]),
                          workspace_bytes=int(payload.get("workspace_bytes") or 0))
        # The runtime's plan builder (tunetable.kernels.runtime.plan), on this worker's stream.
        plan = build_plan(loader=self.loader, family=family, defines=dict(payload.get("defines") or {}),
                          cubin=payload["cubin"], geometry=geometry, m=m, n=n, k=k, stream=self.stream,
                          entry=payload["entry"],
                          workspace=lambda nbytes: self._workspace(config_id, nbytes, zeroed=family.zeroed_workspace))
        # Arguments built once per input set (the Hopper family's tensor maps embed the addresses).
        arguments = [plan.arguments(a, b, c) for a, b, c in self.pointers]

        def run_kernel(index: int) -> None:
            """Queue the kernel on input set ``index``."""
            plan.launch(arguments[index])
        run_kernel.grid = list(plan.grid)  # type: ignore[attr-defined]  # as launched (clusters may be cut)
        run_kernel.max_active_clusters = plan.max_active_clusters  # type: ignore[attr-defined]  # or None
        return run_kernel

    def _rel_err(self, launch: Callable[[int], None]) -> float:
        """Poison C of set 0, run once, and compare with the reference on the GPU."""
        cuda = self.cuda
        m, n, _ = self.shape
        c = self.pointers[0][2]
        cuda.memset_d16_async(c, BF16_NAN, m * n, self.stream)
        launch(0)
        cuda.memset_d32_async(self.sums, 0, 4, self.stream)
        blocks = min(max(1, math.ceil(m * n / 256)), 8 * self.sm_count)
        self.err_sums.prepared_async_call((blocks, 1, 1), (256, 1, 1), self.stream, c, int(self.ref), m * n,
                                           int(self.sums))
        self.stream.synchronize()
        sums = np.zeros(2, dtype=np.float64)
        cuda.memcpy_dtoh(sums, self.sums)
        err, norm = float(sums[0]), float(sums[1])
        return math.sqrt(err / norm) if norm > 0 else float("nan")

    def prepare(self, *, config_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Load, verify (a wrong result never gets timed), warm up for warmup_ms, size the batch."""
        launch = self._guard(lambda: self._launcher(config_id, payload), f"loading {config_id}")
        rel_err = self._guard(lambda: self._rel_err(launch), f"verifying {config_id}")
        rtol = float(self.settings["verify_rtol"])
        if not math.isfinite(rel_err) or rel_err > rtol:
            return {"status": "verify", "rel_err": rel_err if math.isfinite(rel_err) else None,
                    "error": f"rel_err {rel_err:.3g} > {rtol:g} against cuBLAS"}
        warmup_ms = float(self.settings["warmup_ms"])
        launches, per_launch = self._guard(
            lambda: self.timer.warm_up(launch, sets=len(self.sets), warmup_ms=warmup_ms), f"warming up {config_id}")
        batch = self.timer.batch_size(per_launch, min_batch_ms=float(self.settings["min_batch_ms"]))
        self.configs[config_id] = {"launch": launch, "batch": batch}
        extra = {}
        if payload["kind"] == "kernel":
            main = self.loader.function(payload["cubin"], payload["entry"], int(payload["smem_bytes"]))
            extra = {"num_regs": int(main.num_regs), "launch_grid": getattr(launch, "grid", None),
                     "max_active_clusters": getattr(launch, "max_active_clusters", None)}
        return {"status": "ok", "rel_err": rel_err, "batch": batch, "warmup_launches": launches,
                "warmup_ms_per_launch": per_launch, **extra}

    def sample(self, *, config_id: str) -> dict[str, Any]:
        """One timed batch: per-launch ms, with the SM clock and power read right after it."""
        state = self.configs[config_id]
        per_launch = self._guard(lambda: self.timer.sample(state["launch"], sets=len(self.sets), batch=state["batch"]),
                                 f"timing {config_id}")
        return {"sample_ms": per_launch, "batch": state["batch"], **self.nvml.read()}

    def close(self) -> None:
        """Release buffers, the cuBLAS handle and the context."""
        self._free_shape()
        self.cublas.close()
        self.context.pop()
