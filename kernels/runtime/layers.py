"""What ``tunetable.torch`` decides without torch: which ``nn.Linear`` layers it takes, the operator's shapes.

``choose_layer`` takes a layer (as a ``LayerView``: its sizes, dtype, device and layout) when the
kernels serve it: bf16 weights on a CUDA device, contiguous, N (out_features) and K (in_features)
within the family's shape rules (multiples of 8, int32); the bias is added after the GEMM. Anything
else stays with torch, with the reason. ``gemm_output_shape`` is the ``tunetable::gemm`` operator's
shape rule, shared by its fake (meta) implementation. Pure Python, so both are tested without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tunetable.kernels.families import FAMILIES, KernelFamily
from tunetable.kernels.runtime.decide import DEFAULT_TABLE

SERVED_DTYPE = "torch.bfloat16"
BACKWARD_ERROR = ("tunetable::gemm is inference-only: it has no backward. Run the model under torch.no_grad() or "
                  "torch.inference_mode(), or train an unpatched copy (tunetable.torch.patch swapped its nn.Linear "
                  "layers for tunetable.torch.Linear)")


@dataclass(frozen=True)
class LayerView:
    """What the choice needs of one ``nn.Linear``: its name in the model, sizes, dtype, device, layout."""

    name: str
    in_features: int
    out_features: int
    dtype: str            # str(weight.dtype), e.g. "torch.bfloat16"
    device_type: str      # weight.device.type, e.g. "cuda"
    contiguous: bool = True


@dataclass(frozen=True)
class LayerChoice:
    """Whether one layer is taken, and why not."""

    name: str
    taken: bool
    reason: str = ""


def choose_layer(view: LayerView, *, family: KernelFamily | None = None) -> LayerChoice:
    """Take ``view`` when the kernels serve its weight (GEMM of any M by N = out_features, K = in_features)."""
    family = family or FAMILIES[DEFAULT_TABLE]
    if view.dtype != SERVED_DTYPE:
        return LayerChoice(view.name, False, f"weight dtype {view.dtype.removeprefix('torch.')}: the kernels "
                                             "serve bfloat16")
    if view.device_type != "cuda":
        return LayerChoice(view.name, False, f"weight on {view.device_type}: the kernels run on a CUDA GPU")
    if not view.contiguous:
        return LayerChoice(view.name, False, "weight not contiguous")
    try:
        family.check_shape(1, view.out_features, view.in_features)
    except ValueError as exc:
        return LayerChoice(view.name, False, f"N={view.out_features}, K={view.in_features}: {exc}")
    return LayerChoice(view.name, True)


@dataclass
class PatchReport:
    """What ``patch(model)`` did: the layers it took and those it left to torch (with reasons)."""

    taken: list[str] = field(default_factory=list)
    left: list[LayerChoice] = field(default_factory=list)

    def add(self, choice: LayerChoice) -> None:
        """Count one layer's choice."""
        if choice.taken:
            self.taken.append(choice.name)
        else:
            self.left.append(choice)

    def summary(self) -> str:
        """One line: how many layers were taken, and which were left to torch and why (the first few)."""
        total = len(self.taken) + len(self.left)
        line = f"tunetable.torch.patch: took {len(self.taken)} of {total} nn.Linear layers"
        if self.left:
            shown = "; ".join(f"{item.name} ({item.reason})" for item in self.left[:3])
            more = f"; and {len(self.left) - 3} more" if len(self.left) > 3 else ""
            line += f"; left to torch: {shown}{more}"
        return line


def gemm_output_shape(a_shape: tuple[Any, ...], a_dtype: str, b_shape: tuple[Any, ...],
                      b_dtype: str) -> tuple[Any, Any]:
    """(M, N) of tunetable::gemm(a, b) = a · bᵀ for a (M, K) and b (N, K) bf16; ValueError/TypeError otherwise.

    Sizes may be symbolic (torch.compile's dynamic shapes): they are compared, never converted.
    """
    for name, shape, dtype in (("a", a_shape, a_dtype), ("b", b_shape, b_dtype)):
        if dtype != SERVED_DTYPE:
            raise TypeError(f"tunetable::gemm: {name} must be bfloat16, got {dtype.removeprefix('torch.')}")
        if len(shape) != 2:
            raise ValueError(f"tunetable::gemm: {name} must be 2-D, got shape {tuple(shape)}")
    if a_shape[1] != b_shape[1]:
        raise ValueError(f"tunetable::gemm: mismatched K: a is {tuple(a_shape)} (M x K), b is {tuple(b_shape)} "
                         "(N x K); C = a @ b.T needs equal K")
    return a_shape[0], b_shape[0]
