"""Host overhead per call of tunetable.gemm and the tunetable::gemm torch operator, against torch.mm on the same host.

GPU mode (the default; torch, pycuda and a GPU): per shape, the wall time of queuing HOST_CALLS calls while the
GPU sleeps (torch.cuda._sleep holds the stream, so the queue neither drains nor fills: host cost alone), median
of HOST_REPEATS, for each contender in the same run, interleaved round by round:
  torch.mm (allocates), torch.mm(out=), F.linear (nn.Linear's forward), tunetable.gemm(out=), tunetable.gemm
  (allocates), the prepared launch alone (addresses to cuLaunchKernel), torch.ops.tunetable.gemm under
  torch.inference_mode, torch.no_grad and grad mode (no input requires grad: how git 6adb683's figure of 53 µs
  was taken), the operator with its C++ kernel's cache turned off (inference_mode: every call through the Python
  kernel, as without the C++ kernel plus one C++-to-Python hop), tunetable.torch.Linear (inference_mode).
The operator's C++ kernel (kernels/runtime/torch_fast.cpp) is built or loaded on import; the run prints whether
it loaded and its build time (TUNETABLE_TORCH_EXT=0: the Python kernel for every operator contender).
Targets: the operator under TORCH_OP_TARGET_US (issue 50), and no more than torch.mm's own cost on the same host
(the ratio is what the host's speed does not change).

Stub mode (``--stub``: no GPU, the CPU build of torch): what this machine can say about the Python path.
  * dispatch: the operator's registration against torch.library.custom_op and a plain Library op, each with a
    dummy kernel on CPU tensors (no grad mode, no_grad, inference_mode);
  * path: tunetable.gemm(out=), gemm() and the operator on CPU tensors dressed as CUDA tensors of device 0 (a
    subclass answering is_cuda / get_device from Python, so a little dearer than a real CUDA tensor), their plan
    made by hand and libcuda's launch and current-context calls replaced by libc's ffs through ctypes with the
    same argument conversion: the runtime's own host path up to the driver, without the driver.

    python benchmarks/runtime_gemm_host.py [--stub] [--out benchmarks/results]

Writes runtime_gemm_host.json / .md (stub mode: runtime_gemm_host_stub.json / .md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402

HOST_CALLS = 200
HOST_REPEATS = 15
SLEEP_CYCLES = 40_000_000        # ~20 ms at <= 1.98 GHz: longer than queuing HOST_CALLS calls
TORCH_OP_TARGET_US = 10.0        # issue 50: the tunetable::gemm operator per call
SHAPES = ((1, 4096, 4096), (8, 14336, 4096), (2048, 4096, 4096))
CONTENDERS = ("torch_mm", "torch_mm_out", "f_linear", "gemm_out", "gemm_alloc", "prepared_launch", "torch_op",
              "torch_op_no_grad", "torch_op_grad_mode", "torch_op_python", "torch_linear")
LABELS = {"torch_mm": "torch.mm", "torch_mm_out": "torch.mm(out=)", "f_linear": "F.linear", "gemm_out": "gemm(out=)",
          "gemm_alloc": "gemm (allocates)", "prepared_launch": "prepared launch",
          "torch_op": "tunetable::gemm (inference_mode)", "torch_op_no_grad": "tunetable::gemm (no_grad)",
          "torch_op_grad_mode": "tunetable::gemm (grad mode)",
          "torch_op_python": "tunetable::gemm, Python kernel (inference_mode)",
          "torch_linear": "tunetable.torch.Linear"}


def per_call_us(calls: dict[str, Callable[[], Any]], *, before: Callable[[], None], after: Callable[[], None],
                contexts: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Median µs per call of each contender: HOST_REPEATS rounds of HOST_CALLS calls, contenders interleaved."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(HOST_REPEATS):
        for name, call in calls.items():
            before()
            with contexts.get(name, _nothing)():
                started = time.perf_counter()
                for _ in range(HOST_CALLS):
                    call()
                samples[name].append((time.perf_counter() - started) / HOST_CALLS * 1e6)
            after()
    return {name: statistics.median(values) for name, values in samples.items()}


class _nothing:
    """A context manager that does nothing (the contenders run in grad mode's default otherwise)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def gpu_shape(torch: Any, *, m: int, n: int, k: int) -> dict[str, float]:
    """Every contender on one shape on the GPU (module docstring), after each one's first call."""
    import tunetable.torch as tt
    from tunetable import gemm   # bound once, as `from tunetable import gemm` (tunetable.gemm resolves lazily)
    from tunetable.kernels.runtime import launch

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    weight = torch.nn.Parameter(b.clone(), requires_grad=False)
    linear = tt.Linear.from_linear(torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16))
    linear.weight = weight
    started = time.perf_counter()
    gemm(a, b, out=c)
    torch.cuda.synchronize()
    first_us = (time.perf_counter() - started) * 1e6
    stream = torch.cuda.current_stream().cuda_stream
    prepared = next(item for key, item in launch._prepared.items() if key[:5] == (m, n, k, 0, stream))
    a_ptr, b_ptr, c_ptr = a.data_ptr(), b.data_ptr(), c.data_ptr()
    calls = {
        "torch_mm": lambda: torch.mm(a, b.t()), "torch_mm_out": lambda: torch.mm(a, b.t(), out=c),
        "f_linear": lambda: torch.nn.functional.linear(a, weight), "gemm_out": lambda: gemm(a, b, out=c),
        "gemm_alloc": lambda: gemm(a, b), "prepared_launch": lambda: prepared(a_ptr, b_ptr, c_ptr),
        "torch_op": lambda: tt.gemm(a, weight), "torch_op_no_grad": lambda: tt.gemm(a, weight),
        "torch_op_grad_mode": lambda: tt.gemm(a, weight), "torch_op_python": lambda: tt.gemm(a, weight),
        "torch_linear": lambda: linear(a),
    }
    contexts = {name: torch.inference_mode for name in calls} | {"torch_op_no_grad": torch.no_grad,
                                                                 "torch_op_grad_mode": torch.enable_grad,
                                                                 "torch_op_python": python_kernel(torch)}
    for name, call in calls.items():     # first calls (plans, routes, cuBLAS heuristics) stay out of the figures
        with contexts[name]():
            call()
    torch.cuda.synchronize()
    counted = tt_counters()
    found = per_call_us(calls, before=lambda: torch.cuda._sleep(SLEEP_CYCLES), after=torch.cuda.synchronize,
                        contexts=contexts)
    served, sent = (after - before for after, before in zip(tt_counters(), counted))
    route = tt.route(m, n, k, 0)
    return {**{f"{name}_us": value for name, value in found.items()}, "first_call_us": first_us,
            "op_path": "torch" if route.torch else "tunetable", "op_source": route.source,
            "c_kernel_served": served, "c_kernel_sent_to_python": sent}


def tt_counters() -> tuple[int, int]:
    """(calls the operator's C++ kernel served, calls it sent to the Python kernel) so far (0, 0: not loaded)."""
    from tunetable.kernels.runtime import torch_ops

    found = torch_ops.fast_path()
    return found.get("hits", 0), found.get("fallbacks", 0)


def python_kernel(torch: Any) -> Callable[[], Any]:
    """A context (inference_mode) in which the operator's C++ kernel sends every call to its Python kernel."""
    import contextlib

    from tunetable.kernels.runtime import torch_ops

    @contextlib.contextmanager
    def context() -> Any:
        torch_ops.set_fast_path(False)
        try:
            with torch.inference_mode():
                yield
        finally:
            torch_ops.set_fast_path(True)

    return context


def c_kernel_status() -> dict[str, Any]:
    """Whether the operator's C++ kernel loaded, its build time (None: loaded from the cache) and its line."""
    import tunetable.torch  # noqa: F401 - builds or loads the C++ kernel
    from tunetable.kernels.runtime import torch_ops

    found = torch_ops.fast_path()
    return {"loaded": found["loaded"], "build_s": found["build_s"], "summary": found["summary"]}


def gpu_results(torch: Any) -> dict[str, Any]:
    """The GPU mode's figures for every shape, with the targets judged."""
    import warnings

    from tunetable.kernels.runtime.decide import FallbackWarning

    warnings.simplefilter("ignore", FallbackWarning)
    started = time.perf_counter()
    status = c_kernel_status()
    print(f"{status['summary']} (import of tunetable.torch: {time.perf_counter() - started:.1f} s)", flush=True)
    shapes = {f"{m}x{n}x{k}": gpu_shape(torch, m=m, n=n, k=k) for m, n, k in SHAPES}
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "shapes": shapes,
            "c_kernel": status, "targets": targets(shapes, c_kernel=status["loaded"])}


def targets(shapes: dict[str, dict[str, Any]], *, c_kernel: bool = True) -> dict[str, bool]:
    """The operator under TORCH_OP_TARGET_US; the operator and gemm(out=) at most torch.mm's cost (same host).

    The operator's figure is its C++ kernel's where that loaded (the targets' names say which ran)."""
    served = [item for item in shapes.values() if item.get("op_path", "tunetable") == "tunetable"]
    kernel = "C++ kernel" if c_kernel else "Python kernel: the C++ one did not load"
    return {f"tunetable::gemm ({kernel}) < {TORCH_OP_TARGET_US:g} µs per call": all(
                item["torch_op_us"] < TORCH_OP_TARGET_US for item in served),
            "tunetable::gemm <= torch.mm per call": all(item["torch_op_us"] <= item["torch_mm_us"] for item in served),
            "gemm(out=) <= torch.mm(out=) per call": all(item["gemm_out_us"] <= item["torch_mm_out_us"]
                                                          for item in served)}


def render_markdown(results: dict[str, Any]) -> str:
    """The human summary: one row per shape, µs per call of each contender, then the targets."""
    mode = "stub (CPU, no driver)" if results.get("stub") else "GPU"
    names = [name for name in CONTENDERS if any(f"{name}_us" in item for item in results["shapes"].values())]
    lines = [f"# Host overhead per call: tunetable.gemm and tunetable::gemm against torch.mm ({mode})", "",
             f"Device: {results['device']}, torch {results['torch']}, git {results['git_rev']}, {results['date']}. "
             f"{results['method']}", "",
             *([f"Operator: {results['c_kernel']['summary']}. Calls its C++ kernel served / sent to the Python "
                f"kernel while measuring, per shape: " + ", ".join(
                    f"{label} {item['c_kernel_served']} / {item['c_kernel_sent_to_python']}"
                    for label, item in results["shapes"].items()) + f" (the Python contender's "
                f"{HOST_REPEATS * HOST_CALLS} calls are the ones sent).", ""] if results.get("c_kernel") else []),
             "| shape | op path | " + " | ".join(LABELS[name] for name in names) + " | op / torch.mm |",
             "|---|---|" + "---|" * len(names) + "---|"]
    for label, item in results["shapes"].items():
        ratio = f"{item['torch_op_us'] / item['torch_mm_us']:.2f}" if "torch_mm_us" in item else "-"
        lines.append(f"| {label} | {item.get('op_path', '-')} | "
                     + " | ".join(f"{item[f'{name}_us']:.1f}" for name in names) + f" | {ratio} |")
    if results.get("dispatch"):
        lines += ["", "## Operator registration with a dummy CPU kernel (µs per call)", "",
                  "| grad mode | " + " | ".join(results["dispatch"]["columns"]) + " |",
                  "|---|" + "---|" * len(results["dispatch"]["columns"])]
        for mode_name, row in results["dispatch"]["rows"].items():
            lines.append(f"| {mode_name} | " + " | ".join(f"{row[column]:.2f}" for column in
                                                          results["dispatch"]["columns"]) + " |")
    if results.get("targets"):
        lines += ["", "## Targets", "", "Judged on the shapes whose op path is tunetable: a shape the operator "
                  "routes to torch costs torch.mm's own call plus the operator's hop.", ""]
        lines += [f"- {name}: {'met' if met else 'NOT met'}" for name, met in results["targets"].items()]
    else:
        lines += ["", "No targets judged here: the stub has no driver and torch.mm no GPU (GPU mode judges them)."]
    return "\n".join(lines) + "\n"


# --- stub mode: the Python path on this CPU, the driver replaced --------------------------------------------

def dispatch_variants(torch: Any) -> dict[str, Any]:
    """µs per call of a dummy CPU kernel called directly, as a custom_op, as a Library op (this runtime's
    registration: CPU kernel, fake, an Autograd kernel as torch_ops'), in each grad mode."""
    import contextlib

    def kernel(a: Any, b: Any) -> Any:
        return a.new_empty((a.shape[0], b.shape[0]))

    @torch.library.custom_op("tunetable_stub::custom", mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
    def custom(a: Any, b: Any) -> Any:
        return kernel(a, b)

    custom.register_fake(kernel)
    custom.register_autograd(lambda ctx, grad: (grad, grad))
    library = torch.library.Library("tunetable_stub", "FRAGMENT")
    library.define("plain(Tensor a, Tensor b) -> Tensor")
    library.impl("plain", kernel, "CPU")
    torch.library.register_fake("tunetable_stub::plain", kernel, lib=library)
    plain = torch.ops.tunetable_stub.plain.default

    def autograd(a: Any, b: Any) -> Any:
        """torch_ops._gemm_autograd's checks, then the kernel directly."""
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            raise RuntimeError("not measured")
        if type(a) is torch.Tensor and type(b) is torch.Tensor and not torch._C._len_torch_dispatch_stack():
            return kernel(a, b)
        with torch._C._AutoDispatchBelowAutograd():
            return plain(a, b)

    library.impl("plain", autograd, "Autograd")
    a, b = torch.randn(4, 8), torch.randn(16, 8)
    calls = {"kernel called directly": lambda: kernel(a, b), "torch.mm (CPU, 4x8x16)": lambda: torch.mm(a, b.t()),
             "custom_op": lambda: custom(a, b), "Library op (this runtime's)": lambda: plain(a, b)}
    rows = {}
    for mode, context in (("grad enabled", contextlib.nullcontext), ("no_grad", torch.no_grad),
                          ("inference_mode", torch.inference_mode)):
        rows[mode] = per_call_us(calls, before=lambda: None, after=lambda: None,
                                 contexts={name: context for name in calls})
    del library
    return {"columns": list(calls), "rows": rows}


def stub_runtime(torch: Any, *, m: int, n: int, k: int) -> None:
    """A device-0 runtime with gemm_mma's plan of (M, N, K) made by hand; libcuda's launch and context calls are
    libc's ffs (a C call through ctypes with the same argument conversion) and torch's stream getter answers 0."""
    import ctypes
    import ctypes.util

    from tunetable.kernels.families import FAMILIES
    from tunetable.kernels.runtime import launch, torch_ops
    from tunetable.kernels.runtime import prepared as prepared_module
    from tunetable.kernels.runtime.plan import LaunchPlan
    from tunetable.kernels.runtime.prepared import PreparedLaunch, ShapePlan

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    fake = type("FakeLibcuda", (), {"cuLaunchKernel": libc.ffs, "cuCtxGetCurrent": libc.ffs})()
    prepared_module.bare_libcuda = lambda: fake   # as prepared.bare_libcuda: no argument types declared
    kernel = type("FakeKernel", (), {"function": ctypes.c_void_p(0)})()
    plan = ShapePlan(plan=LaunchPlan(family=FAMILIES["gemm_mma"], defines={}, m=m, n=n, k=k, grid=(132, 1, 1),
                                     block=(128, 1, 1), smem_bytes=0, workspace_ptr=0, kernel=kernel))
    runtime = object.__new__(launch.DeviceRuntime)
    runtime.ordinal, runtime.handle, runtime.shape_plans = 0, None, {(m, n, k): plan}
    launch._runtimes[0] = runtime
    launch._torch.update(types=frozenset({FakeCuda, torch.nn.Parameter}), bf16=torch.bfloat16,
                         stream=lambda device: 0)
    import threading

    launch._prepared[(m, n, k, 0, 0, threading.get_ident())] = PreparedLaunch(plan, stream=0, context=None)
    torch_ops._routes[(m, n, k, 0)] = torch_ops.Route(m=m, n=n, k=k, device=0, why_torch=None, source="stub")
    torch_ops._PLAIN = frozenset({FakeCuda, torch.nn.Parameter})
    fragment = torch.library.Library("tunetable", "IMPL")
    fragment.impl("gemm", torch_ops._gemm_cuda, "CPU")
    _keep.append(fragment)


_keep: list[Any] = []   # the stub's CPU registration lives as long as the process


def _fake_cuda_type(torch: Any) -> type:
    """A CPU tensor subclass that says it is a CUDA tensor of device 0 (torch functions return plain tensors)."""

    class Dressed(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

        @property
        def is_cuda(self) -> bool:
            return True

        def get_device(self) -> int:
            return 0

    return Dressed


FakeCuda: Any = None


def stub_results(torch: Any) -> dict[str, Any]:
    """Stub mode's figures: the dispatch variants, then gemm(out=), gemm() and the operator through the stub."""
    global FakeCuda
    import tunetable.torch as tt
    from tunetable import gemm   # bound once, as in GPU mode

    FakeCuda = _fake_cuda_type(torch)
    m, n, k = 8, 4096, 4096
    stub_runtime(torch, m=m, n=n, k=k)
    a = torch.randn(m, k, dtype=torch.bfloat16).as_subclass(FakeCuda)
    b = torch.randn(n, k, dtype=torch.bfloat16).as_subclass(FakeCuda)
    c = torch.empty(m, n, dtype=torch.bfloat16).as_subclass(FakeCuda)
    linear = tt.Linear.from_linear(torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16))
    linear._parameters.pop("weight")
    linear.__dict__["weight"] = b   # the dressed tensor (a Parameter cannot wrap a subclass)
    calls = {"gemm_out": lambda: gemm(a, b, out=c), "gemm_alloc": lambda: gemm(a, b),
             "torch_op": lambda: tt.gemm(a, b), "torch_op_no_grad": lambda: tt.gemm(a, b),
             "torch_linear": lambda: linear(a)}   # torch.mm on the CPU computes the product: no yardstick here
    contexts = {name: torch.inference_mode for name in calls} | {"torch_op_no_grad": torch.no_grad}
    found = per_call_us(calls, before=lambda: None, after=lambda: None, contexts=contexts)
    shape = {f"{name}_us": value for name, value in found.items()}
    return {"device": "CPU (stub: no driver)", "torch": torch.__version__, "stub": True,
            "shapes": {f"{m}x{n}x{k}": {**shape, "op_path": "tunetable"}}, "dispatch": dispatch_variants(torch)}


def run_host(*, stub: bool, out: Path) -> dict[str, Any]:
    """Measure (GPU or stub mode), write runtime_gemm_host[_stub].json / .md under ``out``, print the table."""
    import torch

    from tunetable.keys import git_revision

    results = stub_results(torch) if stub else gpu_results(torch)
    stem = "runtime_gemm_host_stub" if stub else "runtime_gemm_host"
    results.update(git_rev=os.environ.get("TUNETABLE_GIT_REV") or git_revision(REPO),
                   date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   method=f"median of {HOST_REPEATS} rounds of {HOST_CALLS} calls, contenders interleaved per round"
                   + ("" if stub else ", queued behind torch.cuda._sleep (host cost alone)"))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{stem}.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    text = render_markdown(results)
    atomic_write_text(out / f"{stem}.md", text)
    print(text)
    return results


def main() -> None:
    """Parse the options and measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", action="store_true", help="no GPU: the dispatch variants and the stubbed path")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    run_host(stub=args.stub, out=args.out)


if __name__ == "__main__":
    main()
