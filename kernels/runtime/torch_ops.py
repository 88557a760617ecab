"""tunetable.gemm for PyTorch models: the ``tunetable::gemm`` operator, ``Linear`` and ``patch(model)``.

- ``torch.ops.tunetable.gemm(a, b)`` (also ``gemm`` here) is ``tunetable.gemm`` as a torch custom
  operator: a fake (meta) implementation gives torch.compile its output shape, so a model calling it
  traces with ``fullgraph=True``; it runs on the tensors' device and torch's current stream, and is
  capturable in a CUDA graph after each shape's first call. Inference only: a backward through it
  raises a clear error (``layers.BACKWARD_ERROR``).
- ``Linear`` is ``nn.Linear``'s forward through the operator (bias added after); inputs the kernels
  do not serve (not bf16, not CUDA) go to ``torch.nn.functional.linear``.
- ``patch(model)`` swaps the model's ``nn.Linear`` layers that the kernels serve for ``Linear``
  (sharing their parameters) and leaves the rest to torch; it says how many it took.

Importing this module imports torch (``tunetable`` itself never does); the user-facing name is
``tunetable.torch``.
"""

# No `from __future__ import annotations`: torch.library.custom_op reads the operator's schema from the
# annotations, which must be types, not strings.
import sys

import torch
from torch import nn
from torch.nn import functional

from tunetable.kernels.runtime import launch
from tunetable.kernels.runtime.layers import (
    BACKWARD_ERROR,
    LayerView,
    PatchReport,
    choose_layer,
    gemm_output_shape,
)


@torch.library.custom_op("tunetable::gemm", mutates_args=(), device_types="cuda")
def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = a · bᵀ (a: M x K, b: N x K, bf16, CUDA) through tunetable's tuned kernels, on torch's current stream."""
    return launch.gemm(a, b)


@gemm.register_fake
def _gemm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The output's shape, dtype and device, for tracing (no GPU work)."""
    m, n = gemm_output_shape(tuple(a.shape), str(a.dtype), tuple(b.shape), str(b.dtype))
    return a.new_empty((m, n))


def _gemm_backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """No gradient: tunetable's kernels are for inference."""
    raise RuntimeError(BACKWARD_ERROR)


gemm.register_autograd(_gemm_backward)


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
        if x.dtype != torch.bfloat16 or not x.is_cuda or x.numel() == 0:
            return functional.linear(x, self.weight, self.bias)
        rows = x.reshape(-1, self.in_features).contiguous()
        out = torch.ops.tunetable.gemm(rows, self.weight)
        if self.bias is not None:
            out = out.add_(self.bias)   # in place: the operator's output is ours
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        """As nn.Linear's, naming the operator."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                "op=tunetable::gemm")


def layer_view(name: str, layer: nn.Linear) -> LayerView:
    """What ``choose_layer`` needs of an nn.Linear."""
    weight = layer.weight
    return LayerView(name=name, in_features=layer.in_features, out_features=layer.out_features,
                     dtype=str(weight.dtype), device_type=weight.device.type, contiguous=weight.is_contiguous())


def patch(model: nn.Module, *, verbose: bool = True) -> PatchReport:
    """Swap the ``nn.Linear`` layers of ``model`` that the kernels serve for ``Linear`` (in place); the report
    says which were taken and which were left to torch (printed as one line on stderr when ``verbose``)."""
    report = PatchReport()
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:   # subclasses (quantised, LoRA, ...) keep their own forward
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            choice = choose_layer(layer_view(name, child))
            report.add(choice)
            if choice.taken:
                setattr(parent, child_name, Linear.from_linear(child))
    if verbose:
        print(report.summary(), file=sys.stderr)
    return report
