"""tunetable.gemm for PyTorch models: the ``tunetable::gemm`` operator, ``Linear`` and ``patch(model)``.

- ``torch.ops.tunetable.gemm(a, b)`` (also ``gemm`` here) is C = a · bᵀ as a torch operator: a fake (meta)
  implementation gives torch.compile its output shape, so a model calling it traces with ``fullgraph=True``;
  it runs on the tensors' device and torch's current stream, and is capturable in a CUDA graph after each
  shape's first call. Per shape it runs tunetable's kernel, or torch's matmul (cuBLAS) where what the runtime
  knows does not say tunetable's choice is faster (``layers.torch_serves``; ``decisions()`` lists each shape's
  path and why). Inference only: a backward through it raises a clear error (``layers.BACKWARD_ERROR``).
- ``Linear`` is ``nn.Linear``'s forward through the operator (bias added after); inputs the kernels
  do not serve (not bf16, not CUDA) go to ``torch.nn.functional.linear``.
- ``patch(model)`` swaps the model's ``nn.Linear`` layers that the kernels serve for ``Linear``
  (sharing their parameters) and leaves the rest to torch, with those whose (N, K) torch's matmul would serve
  at every recorded M; it says how many it took.

The operator is defined with ``torch.library.Library`` (a CUDA kernel, a fake kernel and an Autograd
kernel), not ``torch.library.custom_op``, whose Python wrapper cost more per call than the GEMM's own host
path (benchmarks/runtime_gemm_host.py). Its CUDA and Autograd kernels are C++ where ``torch_ext`` builds and
loads kernels/runtime/torch_fast.cpp (docs/pytorch.md): a cache of routes and argument sets that the Python
kernel fills (``tunetable::_gemm_python``, which serves every call the cache cannot answer), and calls that
want a gradient sent to ``tunetable::_gemm_requires_grad``. Otherwise the Python kernels serve: the Autograd
kernel calls the CUDA kernel directly for plain CUDA tensors with no gradient to record and no dispatch mode
active, redispatches below autograd otherwise (tracing: fake and functional tensors), and wraps the call in a
Function whose backward raises where a gradient is wanted.

Importing this module imports torch (``tunetable`` itself never does); the user-facing name is
``tunetable.torch``.
"""

import sys
import threading
import warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.runtime import decide, launch, record, torch_ext
from tunetable.kernels.runtime.devices import gpu_ceilings
from tunetable.kernels.runtime.layers import (
    BACKWARD_ERROR,
    LayerChoice,
    LayerView,
    PatchReport,
    choose_layer,
    decision_source,
    gemm_output_shape,
    layer_left,
    smallest_recorded_floor_s,
    torch_serves,
)
from tunetable.kernels.runtime.operands import check_problem, operand

_LIBRARY = torch.library.Library("tunetable", "DEF")
_LIBRARY.define("gemm(Tensor a, Tensor b) -> Tensor")
_PLAIN = frozenset({torch.Tensor, nn.Parameter})
_BF16 = torch.bfloat16


class Route:
    """Which library serves one shape on one device through the operator, and why."""

    __slots__ = ("m", "n", "k", "device", "torch", "source", "why")

    def __init__(self, *, m: int, n: int, k: int, device: int, why_torch: str | None, source: str):
        self.m, self.n, self.k, self.device = m, n, k, device
        self.torch = why_torch is not None
        self.source = source
        self.why = why_torch or "tunetable's kernel"

    def as_dict(self) -> dict:
        """The route as plain values (M, N, K, device, path, source, why)."""
        return {"M": self.m, "N": self.n, "K": self.k, "device": self.device,
                "path": "torch" if self.torch else "tunetable", "source": self.source, "why": self.why}


_routes: dict[tuple[int, int, int, int], Route] = {}
_route_lock = threading.Lock()


def _serving(device: int) -> str:
    """The recorded device whose tables serve GPU ``device`` (its runtime made on first use)."""
    return launch.device_runtime(device).table.device


def decide_route(m: int, n: int, k: int, device: int) -> tuple[Route, list[warnings.WarningMessage]]:
    """The operator's path for (M, N, K) on GPU ``device`` (the runtime's decision, then ``torch_serves``) and the
    warnings the decision gave (held back: they concern tunetable's kernel, which may not run)."""
    table = launch.device_runtime(device).table
    serving = table.device
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = decide.dispatcher(device=serving).decide(m=m, n=n, k=k)
    selector = decide.shape_selector(device=serving)
    ceilings = gpu_ceilings(table)   # the floor a prediction must not beat is this GPU's
    smallest = smallest_recorded_floor_s(ms=selector.starts, pairs=selector.pairs, ceilings=ceilings)
    why = torch_serves(decision, m=m, n=n, k=k, smallest_floor_s=smallest, ceilings=ceilings)
    return Route(m=m, n=n, k=k, device=device, why_torch=why, source=decision_source(decision)), list(caught)


def route(m: int, n: int, k: int, device: int) -> Route:
    """The path the operator serves (M, N, K) on GPU ``device`` with, decided on first use; the decision's warning
    is shown only where tunetable's kernel runs."""
    found = _routes.get((m, n, k, device))
    if found is not None:
        return found
    with _route_lock:
        found, caught = decide_route(m, n, k, device)
        found = _routes.setdefault((m, n, k, device), found)
    if not found.torch:
        for item in caught:
            warnings.warn(item.message, item.category, stacklevel=4)
    return found


def decisions() -> list[dict]:
    """Every shape the operator has served in this process: its path (tunetable or torch), source and why."""
    return [item.as_dict() for _, item in sorted(_routes.items())]


def _clear_routes() -> None:
    """The dispatcher changed: the routes are decided again."""
    _routes.clear()


decide.on_dispatcher_change(_clear_routes)


def _gemm_cuda(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The operator's CUDA kernel: tunetable's GEMM, or torch's matmul where the shape's route says so."""
    try:
        m, k = a.shape
        n, _ = b.shape
    except ValueError:
        return launch.gemm(a, b)   # not 2-D: the runtime's own error
    device = a.get_device()
    found = _routes.get((m, n, k, device))
    if found is None:
        check_problem(operand("a", a), operand("b", b), family=FAMILIES[decide.DEFAULT_TABLE])
        found = route(m, n, k, device)
    if found.torch and a.dtype is _BF16 and b.dtype is _BF16 and b.get_device() == device:
        return torch.mm(a, b.t())
    return launch.gemm(a, b)   # (also the runtime's errors: a dtype, two devices)


def _gemm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The output's shape, dtype and device, for tracing (no GPU work)."""
    m, n = gemm_output_shape(tuple(a.shape), str(a.dtype), tuple(b.shape), str(b.dtype))
    return a.new_empty((m, n))


class _InferenceOnly(torch.autograd.Function):
    """The operator where a gradient is wanted: the forward runs it, the backward raises BACKWARD_ERROR."""

    @staticmethod
    def forward(ctx: object, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return gemm(a, b)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise RuntimeError(BACKWARD_ERROR)


def _gemm_autograd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Autograd: the CUDA kernel directly for plain CUDA tensors outside tracing; a Function where a gradient is
    wanted; else below autograd (fake, functional or mode-traced tensors reach the fake kernel)."""
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _InferenceOnly.apply(a, b)
    if type(a) in _PLAIN and type(b) in _PLAIN and a.is_cuda and not torch._C._len_torch_dispatch_stack():
        return _gemm_cuda(a, b)
    with torch._C._AutoDispatchBelowAutograd():
        return gemm(a, b)


# --- the C++ kernel (kernels/runtime/torch_fast.cpp) and the Python one it falls back to ------------------------

def _gemm_python(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``tunetable::_gemm_python``, where the C++ kernel sends what its cache cannot answer: the Python kernel, then
    what that call prepared (its route; a prepared launch's argument set for these addresses) shared with the cache."""
    out = _gemm_cuda(a, b)
    if _fast_state["on"]:
        _share(a, b)
    return out


def _share(a: torch.Tensor, b: torch.Tensor) -> None:
    """Hand the C++ kernel's cache what the Python path now holds for this call: torch's route, or the prepared
    launch's argument set of (A, B) on this stream (nothing while shapes are recorded: each call must be counted)."""
    if (record.active() is not None or a.ndim != 2 or b.ndim != 2 or a.dtype is not _BF16 or b.dtype is not _BF16
            or not a.is_contiguous() or not b.is_contiguous()):
        return
    (m, k), n, device = a.shape, b.shape[0], a.get_device()
    found = _routes.get((m, n, k, device))
    if found is None or b.get_device() != device:
        return
    stream = torch._C._cuda_getCurrentRawStream(device)
    if found.torch:
        _FAST._fast_torch(device, stream, m, n, k)
        return
    prepared = launch._prepared.get((m, n, k, device, stream, threading.get_ident()))
    argument_set = prepared.sets.get((a.data_ptr(), b.data_ptr())) if prepared is not None else None
    if argument_set is None:
        return   # the first call of this pair on this stream went the full way: the next one encodes it
    layout, blob = torch_ext.fast_route(prepared, argument_set)
    if not layout.function:
        return
    _FAST._fast_kernel(device, stream, m, n, k, layout.function, list(layout.geometry), layout.context,
                       list(layout.offsets), layout.c_slot, a.data_ptr(), b.data_ptr(),
                       torch.frombuffer(bytearray(blob), dtype=torch.uint8))


def fast_path() -> dict[str, Any]:
    """The operator's C++ kernel: whether it is loaded (and why not), and its counters (calls served from its
    cache, calls sent to the Python kernel, routes and argument sets held)."""
    found = torch_ext.status()
    report: dict[str, Any] = {"loaded": bool(found and found.loaded), "summary": found.summary() if found else "",
                              "build_s": found.build_s if found else None}
    if report["loaded"]:
        enabled, hits, fallbacks, routes, sets = _FAST._fast_stats()
        report.update(enabled=bool(enabled), hits=hits, fallbacks=fallbacks, routes=routes, argument_sets=sets)
    return report


_fast_state = {"on": True, "wanted": True}   # the C++ kernel serves from its cache; what set_fast_path asked


def set_fast_path(on: bool) -> None:
    """Let the C++ kernel serve calls from its cache (True) or send every call to the Python kernel, which then
    shares nothing with it (False: an A/B in one process); shape recording turns it off while it runs."""
    _fast_state["wanted"] = bool(on)
    _serve(recording=record.active() is not None)


def _serve(*, recording: bool) -> None:
    """The C++ kernel serves when asked to and nothing records."""
    _fast_state["on"] = _fast_state["wanted"] and not recording
    if _EXTENSION.loaded:
        _FAST._fast_enable(_fast_state["on"])


_EXTENSION = torch_ext.load(torch)   # builds on first use (cached), registers the C++ CUDA kernel of gemm
_FAST = torch.ops.tunetable
if _EXTENSION.loaded:   # its CUDA and Autograd kernels are registered; the Python ones they call:
    _LIBRARY.define("_gemm_python(Tensor a, Tensor b) -> Tensor")
    _LIBRARY.impl("_gemm_python", _gemm_python, "CUDA")
    _LIBRARY.define("_gemm_requires_grad(Tensor a, Tensor b) -> Tensor")
    _LIBRARY.impl("_gemm_requires_grad", lambda a, b: _InferenceOnly.apply(a, b), "CompositeImplicitAutograd")
    _serve(recording=record.active() is not None)
    record.on_change(lambda recording: _serve(recording=recording))
    decide.on_dispatcher_change(_FAST._fast_clear)   # routes decided again: the cache's too
else:
    _LIBRARY.impl("gemm", _gemm_cuda, "CUDA")
    _LIBRARY.impl("gemm", _gemm_autograd, "Autograd")
torch.library.register_fake("tunetable::gemm", _gemm_fake, lib=_LIBRARY)
gemm = torch.ops.tunetable.gemm.default   # C = a · bᵀ (a: M x K, b: N x K, bf16, CUDA), on torch's current stream


class Linear(nn.Module):
    """``nn.Linear`` (y = x · Wᵀ + b) whose bf16 CUDA inputs run through ``tunetable::gemm``, the bias added after."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: torch.device | None = None,
                 dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty((out_features, in_features), device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None

    @classmethod
    def from_linear(cls, layer: nn.Linear) -> "Linear":
        """A Linear sharing ``layer``'s weight and bias (no copy: tied weights stay tied)."""
        found = cls.__new__(cls)
        nn.Module.__init__(found)
        found.in_features, found.out_features = layer.in_features, layer.out_features
        found.weight = layer.weight
        found.bias = layer.bias
        return found

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x · Wᵀ (+ b) through tunetable::gemm for bf16 CUDA input; anything else through F.linear."""
        if x.dtype is not _BF16 or not x.is_cuda or x.numel() == 0:
            return functional.linear(x, self.weight, self.bias)
        rows = x if x.ndim == 2 else x.reshape(-1, self.in_features)
        out = gemm(rows if rows.is_contiguous() else rows.contiguous(), self.weight)
        if self.bias is not None:
            out = out.add_(self.bias)   # in place: the operator's output is ours
        return out if x.ndim == 2 else out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        """As nn.Linear's, naming the operator."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                "op=tunetable::gemm")


def layer_view(name: str, layer: nn.Linear) -> LayerView:
    """What ``choose_layer`` needs of an nn.Linear."""
    weight = layer.weight
    return LayerView(name=name, in_features=layer.in_features, out_features=layer.out_features,
                     dtype=str(weight.dtype), device_type=weight.device.type, contiguous=weight.is_contiguous())


def _left_by_route(layer: nn.Linear, cache: dict) -> str | None:
    """Why a servable layer is left to torch: its (N, K) goes to torch's matmul at every recorded M (None: taken)."""
    n, k, device = layer.out_features, layer.in_features, layer.weight.get_device()
    if (n, k, device) not in cache:
        selector = decide.shape_selector(device=_serving(device))
        ms = sorted(set(selector.starts)) or [1]
        routes = {m: decide_route(m, n, k, device)[0] for m in ms}
        cache[(n, k, device)] = layer_left(n=n, k=k, ms=ms, why_at=lambda m: routes[m].why if routes[m].torch
                                           else None)
    return cache[(n, k, device)]


def patch(model: nn.Module, *, verbose: bool = True, keep_all: bool = False) -> PatchReport:
    """Swap the ``nn.Linear`` layers of ``model`` that the kernels serve for ``Linear`` (in place); the report
    says which were taken and which were left to torch (printed as one line on stderr when ``verbose``).

    A layer whose (N, K) the operator would hand to torch's matmul at every recorded M stays an nn.Linear
    (``keep_all``: take it anyway; the operator still routes each shape)."""
    report = PatchReport()
    left: dict = {}
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:   # subclasses (quantised, LoRA, ...) keep their own forward
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            choice = choose_layer(layer_view(name, child))
            if choice.taken and not keep_all:
                why = _left_by_route(child, left)
                choice = choice if why is None else LayerChoice(name, False, why)
            report.add(choice)
            if choice.taken:
                setattr(parent, child_name, Linear.from_linear(child))
    if verbose:
        print(report.summary(), file=sys.stderr)
    return report
