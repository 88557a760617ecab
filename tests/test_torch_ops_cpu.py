"""The tunetable::gemm operator and its routes on a machine without a GPU (skipped where torch is not installed).

Registration and dispatch on meta and fake tensors (the fake kernel, torch.compile with fullgraph, the
inference-only backward, CPU tensors refused), the per-shape routes to torch's matmul on the generated tables,
the layers patch() leaves to torch, and the fast path of torch tensors up to the prepared launch (CPU tensors
dressed as CUDA tensors of device 0, the launch replaced by a recorder).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import tunetable.torch as tt  # noqa: E402
from tunetable.kernels.runtime import decide, launch, torch_ops  # noqa: E402
from tunetable.kernels.runtime.layers import BACKWARD_ERROR  # noqa: E402

BF16 = torch.bfloat16


def meta(rows: int, cols: int, dtype: "torch.dtype" = BF16) -> "torch.Tensor":
    return torch.empty(rows, cols, device="meta", dtype=dtype)


def test_the_fake_kernel_gives_the_output_on_meta_and_fake_cuda_tensors() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    out = tt.gemm(meta(5, 4096), meta(1024, 4096))
    assert out.shape == (5, 1024) and out.dtype == BF16 and out.device.type == "meta"
    with FakeTensorMode():
        out = tt.gemm(torch.empty(3, 64, device="cuda", dtype=BF16), torch.empty(16, 64, device="cuda", dtype=BF16))
        assert out.shape == (3, 16) and out.device.type == "cuda"
    with pytest.raises(TypeError, match="tunetable::gemm: b must be bfloat16, got float16"):
        tt.gemm(meta(5, 4096), meta(1024, 4096, torch.float16))


def test_torch_compile_traces_the_operator_with_fullgraph_and_no_break() -> None:
    def model(a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
        return torch.ops.tunetable.gemm(a, b).relu() * 2

    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(meta(8, 256), meta(128, 256))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    assert compiled(meta(8, 256), meta(128, 256)).shape == (8, 128)
    torch._dynamo.reset()


def test_a_backward_through_the_operator_is_the_inference_only_error() -> None:
    a = meta(4, 64).requires_grad_(True)
    out = tt.gemm(a, meta(32, 64))
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="tunetable::gemm is inference-only"):
        out.sum().backward()
    with torch.no_grad():
        assert not tt.gemm(a, meta(32, 64)).requires_grad
    assert BACKWARD_ERROR.startswith("tunetable::gemm is inference-only")


def test_cpu_tensors_are_refused_by_the_dispatcher() -> None:
    with pytest.raises(NotImplementedError, match="Could not run 'tunetable::gemm' with arguments from the 'CPU'"):
        tt.gemm(torch.zeros(4, 64, dtype=BF16), torch.zeros(32, 64, dtype=BF16))


@pytest.fixture
def h200_routes(monkeypatch: pytest.MonkeyPatch):
    """Routes decided on the H200's tables for device 0 (no GPU: the serving device is named), from fresh decisions."""
    monkeypatch.setattr(torch_ops, "_serving", lambda device: "h200")
    decide.set_dispatcher(None)      # fresh decisions: each shape's first decision warns again; routes cleared
    yield
    decide.set_dispatcher(None)


def test_shapes_the_data_do_not_say_tunetable_wins_go_to_torch_and_say_why(h200_routes: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kv = tt.route(2048, 1024, 4096, 0)
        q = tt.route(1024, 4096, 4096, 0)
        q_slower = tt.route(2048, 4096, 4096, 0)
        head = tt.route(1, 128256, 4096, 0)
    assert kv.torch and "not confidently faster" in kv.why and kv.source.startswith("selector ")
    assert head.torch and "below the roofline floor" in head.why
    assert not q.torch and q.why == "tunetable's kernel" and q.source.startswith("table gemm_wgmma[")
    # The H200's recording measured gemm_wgmma's winner at 2048 x 4096^2 slower than cuBLAS (0.993x, its shard).
    assert q_slower.torch and q_slower.why.startswith("its recording measured cuBLAS faster (dispatch entry at M=2048")
    assert not [item for item in caught if issubclass(item.category, decide.FallbackWarning)]   # none ran untuned
    listed = {(item["M"], item["N"], item["K"]): item["path"] for item in tt.decisions()}
    assert listed == {(2048, 1024, 4096): "torch", (1024, 4096, 4096): "tunetable", (2048, 4096, 4096): "torch",
                      (1, 128256, 4096): "torch"}


def test_a_selector_shape_tunetable_serves_still_warns_that_it_is_untuned(h200_routes: None) -> None:
    with pytest.warns(decide.UntunedShapeWarning, match="no tuning table holds M=512, N=128256, K=4096"):
        found = tt.route(512, 128256, 4096, 0)
    assert not found.torch


class Layer:
    """An nn.Linear's sizes and its weight's device, as patch() reads them."""

    def __init__(self, out_features: int, in_features: int):
        self.out_features, self.in_features = out_features, in_features
        self.weight = torch.empty(0)

    @property
    def device(self) -> int:
        return 0


def test_patch_leaves_a_layer_torch_serves_at_every_recorded_m(h200_routes: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    left = torch_ops._left_by_route(Layer(1024, 4096), {})
    assert left.startswith("N=1024, K=4096: torch's matmul serves every recorded M (1-8192); at M=1: ")
    assert torch_ops._left_by_route(Layer(4096, 4096), {}) is None
    assert tt.decisions() == []     # deciding a layer's routes serves nothing


# --- the fast path of torch tensors ---------------------------------------------------------------------

class Dressed(torch.Tensor):
    """A CPU tensor answering as a CUDA tensor of device 0."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def get_device(self) -> int:
        return 0


@pytest.fixture
def fast_path(monkeypatch: pytest.MonkeyPatch):
    """A recorder in place of the prepared launch of (8, 64, 32) on device 0, torch's stream 0, this thread."""
    import threading

    calls: list[tuple[int, int, int]] = []
    monkeypatch.setitem(launch._torch, "types", frozenset({Dressed}))
    monkeypatch.setitem(launch._torch, "bf16", BF16)
    monkeypatch.setitem(launch._torch, "stream", lambda device: 0)
    monkeypatch.setitem(launch._prepared, (8, 64, 32, 0, 0, threading.get_ident()),
                        lambda a, b, c: calls.append((a, b, c)))
    return calls


def dressed(rows: int, cols: int, dtype: "torch.dtype" = BF16) -> "torch.Tensor":
    return torch.zeros(rows, cols, dtype=dtype).as_subclass(Dressed)


def test_the_fast_path_launches_with_the_operands_addresses(fast_path: list) -> None:
    a, b, c = dressed(8, 32), dressed(64, 32), dressed(8, 64)
    assert launch._torch_fast(a, b, c) is c
    out = launch._torch_fast(a, b, None)
    assert out.shape == (8, 64) and out.dtype == BF16
    assert fast_path == [(a.data_ptr(), b.data_ptr(), c.data_ptr()), (a.data_ptr(), b.data_ptr(), out.data_ptr())]


def test_the_fast_path_leaves_what_a_cache_cannot_answer_to_the_full_path(fast_path: list) -> None:
    a, b = dressed(8, 32), dressed(64, 32)
    wide = dressed(8, 40)
    cases = {
        "float16 a": (dressed(8, 32, torch.float16), b, None),
        "transposed b": (a, dressed(32, 64).t(), None),
        "misaligned a": (wide[:, 1:33], b, None),
        "3-D a": (torch.zeros(2, 4, 32, dtype=BF16).as_subclass(Dressed), b, None),
        "mismatched K": (dressed(8, 16), b, None),
        "another shape": (dressed(9, 32), b, None),
        "out of the wrong shape": (a, b, dressed(8, 65)),
        "out of another dtype": (a, b, dressed(8, 64, torch.float32)),
        "a plain CPU out": (a, b, torch.zeros(8, 64, dtype=BF16)),
    }
    for name, (x, y, out) in cases.items():
        assert launch._torch_fast(x, y, out) is None, name
    assert fast_path == []
