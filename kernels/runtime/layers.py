"""What ``tunetable.torch`` decides without torch: which ``nn.Linear`` layers it takes, the operator's shapes.

``choose_layer`` takes a layer (as a ``LayerView``: its sizes, dtype, device and layout) when the
kernels serve it: bf16 weights on a CUDA device, contiguous, N (out_features) and K (in_features)
within the family's shape rules (multiples of 8, int32); the bias is added after the GEMM. Anything
else stays with torch, with the reason. ``gemm_output_shape`` is the ``tunetable::gemm`` operator's
shape rule, shared by its fake (meta) implementation.

``torch_serves`` is the operator's per-shape rule: a shape goes to torch's matmul (cuBLAS) where what the
runtime knows does not say tunetable's choice is faster. A shape a table holds runs tunetable's kernel unless
its dispatch entry's ``speedup_vs_cublas`` (what the recording measured at the entry's first M: cuBLAS's
yardstick / the winner's median; the list never merges an M where cuBLAS ran faster with one where it did
not) is below 1; a shape the shape selector answers runs it only when the prediction is credible (not
below the shape's roofline floor on the GPU's measured ceilings), at least ``CONFIDENT_SPEEDUP`` x cuBLAS's
predicted speed, and not extrapolated (the shape is not smaller than every recorded shape); the first of these
that fails is the reason given. ``layer_left`` applies it to a layer's (N, K) at every recorded M: a layer torch
serves at each is left to torch by ``patch``. Pure Python, so all of it is tested without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunetable.kernels.families import FAMILIES, KernelFamily
from tunetable.kernels.families.common import cublas_measured_faster
from tunetable.kernels.families.devices import Ceilings
from tunetable.kernels.perfmodel import roofline_floor_s
from tunetable.kernels.runtime.decide import DEFAULT_TABLE

SERVED_DTYPE = "torch.bfloat16"
BACKWARD_ERROR = ("tunetable::gemm is inference-only: it has no backward. Run the model under torch.no_grad() or "
                  "torch.inference_mode(), or train an unpatched copy (tunetable.torch.patch swapped its nn.Linear "
                  "layers for tunetable.torch.Linear)")
# A selector prediction runs tunetable's kernel only at this many times cuBLAS's predicted speed or more: the
# prediction of cuBLAS's time misses by 4.3 % (median, leaving each recorded (N, K) out: selector_serve's
# CUBLAS_NK_SCALE) and the selector's pick is 4-5 % slower than the best (geomean, the validation shapes).
CONFIDENT_SPEEDUP = 1.10


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
        """One line: how many layers were taken, and which were left to torch and why (the first few reasons,
        each with its first layer and how many more share it)."""
        total = len(self.taken) + len(self.left)
        line = f"tunetable.torch.patch: took {len(self.taken)} of {total} nn.Linear layers"
        if self.left:
            groups: dict[str, list[str]] = {}
            for item in self.left:
                groups.setdefault(item.reason, []).append(item.name)
            shown = "; ".join(f"{names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''} ({reason})"
                              for reason, names in list(groups.items())[:3])
            rest = sum(len(names) for names in list(groups.values())[3:])
            more = f"; and {rest} more" if rest else ""
            line += f"; left to torch: {shown}{more}"
        return line


def decision_source(decision: Any) -> str:
    """Where a runtime decision (decide.Decision) comes from: 'table <table>[i]', 'selector <table> <id>', ..."""
    if decision.prediction is not None:
        candidate = decision.prediction.candidate
        return f"selector {candidate.table} {candidate.config_id}"
    table = decision.choice.table if decision.choice is not None else decision.entry.kernel
    if decision.index is None:
        return f"fallback of {table} {decision.entry.config_id}"
    return f"table {table}[{decision.index}] {decision.entry.config_id}"


def torch_serves(decision: Any, *, m: int, n: int, k: int, smallest_floor_s: float | None,
                 ceilings: Ceilings | None = None) -> str | None:
    """Why torch's matmul serves (M, N, K) rather than ``decision`` (decide.Decision), or None: tunetable's kernel.
    ``ceilings``: the GPU's measured ones (None: the H200's), for the roofline floor a prediction must not beat."""
    prediction = decision.prediction
    if prediction is None:
        choice = decision.choice   # None: a shape the dispatch list does not cover, served by the default table
        if choice is not None and cublas_measured_faster(speedup=choice.speedup_vs_cublas):
            return (f"its recording measured cuBLAS faster (dispatch entry at M={choice.m}: "
                    f"{choice.speedup_vs_cublas:.4f}x cuBLAS's speed)")
        return None
    floor = roofline_floor_s(m=m, n=n, k=k, ceilings=ceilings)
    if prediction.seconds < floor:
        return (f"the shape selector's prediction ({prediction.seconds * 1e6:.1f} µs) is below the roofline floor "
                f"({floor * 1e6:.1f} µs): not credible")
    if prediction.speedup_vs_cublas < CONFIDENT_SPEEDUP:
        return (f"the shape selector predicts {prediction.speedup_vs_cublas:.2f}x cuBLAS's speed, not confidently "
                f"faster (< {CONFIDENT_SPEEDUP:.2f}x)")
    if smallest_floor_s is not None and floor < smallest_floor_s:
        return (f"smaller than every recorded shape: the shape selector's {prediction.speedup_vs_cublas:.2f}x "
                "cuBLAS's speed is extrapolated")
    return None


def smallest_recorded_floor_s(*, ms: Sequence[int], pairs: Sequence[tuple[int, int]],
                              ceilings: Ceilings | None = None) -> float | None:
    """The lowest roofline floor of the recorded shapes (every recorded M with every recorded (N, K)), on
    ``ceilings`` (None: the H200's)."""
    if not ms or not pairs:
        return None
    return min(roofline_floor_s(m=min(ms), n=n, k=k, ceilings=ceilings) for n, k in pairs)


def layer_left(*, n: int, k: int, ms: Sequence[int], why_at: Callable[[int], str | None]) -> str | None:
    """Why a layer of (N, K) is left to torch: torch serves it at every recorded M (``why_at(M)``); None: taken."""
    reasons = [why_at(m) for m in ms]
    if not reasons or any(reason is None for reason in reasons):
        return None
    return f"N={n}, K={k}: torch's matmul serves every recorded M ({ms[0]}-{ms[-1]}); at M={ms[0]}: {reasons[0]}"


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
