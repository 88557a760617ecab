"""tunetable.gemm inside a PyTorch program on a real GPU (`pytest -m gpu`): the caller's stream and device,
CUDA graphs, the tunetable::gemm operator under torch.compile, patch(model), the inference-only error and
shapes recorded from the running model.

Every result is compared with torch's own matmul of the same bf16 inputs (float32 reference).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("pycuda")

import tunetable  # noqa: E402
import tunetable.torch as tt  # noqa: E402
from tunetable.kernels.runtime import devices, launch, torch_ops  # noqa: E402
from tunetable.kernels.runtime.decide import FallbackWarning  # noqa: E402
from tunetable.shapes import read_workload  # noqa: E402

REL_TOL = 1e-2                 # bf16 output, fp32 accumulation
SLEEP_CYCLES = 50_000_000      # torch.cuda._sleep: ~25 ms at <= 1.98 GHz, far longer than queuing a GEMM
DECODE_SHAPES = [(1, 4096, 4096), (8, 14336, 4096), (64, 4096, 14336), (333, 6144, 4096), (1, 1024, 4096)]


@pytest.fixture(autouse=True)
def quiet_fallbacks():
    """Untuned shapes warn once; these tests check results, not that warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        yield


def rel_err(c: "torch.Tensor", ref: "torch.Tensor") -> float:
    """||C - ref|| / ||ref|| in float32."""
    return float((c.float() - ref.float()).norm() / ref.float().norm())


def reference(a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
    """torch's a · bᵀ in float32 from the same bf16 inputs."""
    return a.float() @ b.float().T


@pytest.mark.parametrize("call", ["gemm", "operator"])
@pytest.mark.parametrize("shape", DECODE_SHAPES, ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_inputs_written_on_a_side_stream_behind_a_long_kernel(shape: tuple[int, int, int], call: str) -> None:
    """gemm() in a side stream's context waits for the inputs that stream writes (today's code ran on the legacy
    default stream, which a non-blocking side stream does not order: it read unwritten inputs); the operator too,
    whose C++ kernel serves the repeated calls on that stream."""
    gemm = tunetable.gemm if call == "gemm" else tt.gemm
    hits = torch_ops.fast_path().get("hits", 0)
    m, n, k = shape
    side = torch.cuda.Stream()
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    sources = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    torch.cuda.synchronize()
    for trial in range(12):
        with torch.cuda.stream(side):
            a = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16)
            torch.cuda._sleep(SLEEP_CYCLES)
            a.copy_(sources[trial % len(sources)])
            c = gemm(a, b)
            ref = reference(a, b)
        side.synchronize()
        assert torch.isfinite(c.float()).all(), f"trial {trial}: the GEMM read inputs before they were written"
        assert rel_err(c, ref) < REL_TOL, f"trial {trial}"
    if call == "operator" and torch_ops.fast_path()["loaded"]:
        assert torch_ops.fast_path()["hits"] > hits     # the C++ kernel served some of them, on the side stream


def test_an_explicit_stream_argument_and_an_out_buffer() -> None:
    m, n, k = 8, 4096, 4096
    side = torch.cuda.Stream()
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    source = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    for _ in range(6):
        with torch.cuda.stream(side):
            a = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16)
            out.fill_(float("nan"))
            torch.cuda._sleep(SLEEP_CYCLES)
            a.copy_(source)
        tunetable.gemm(a, b, out=out, stream=side)   # called outside the context, queued on `side`
        side.synchronize()
        assert rel_err(out, reference(source, b)) < REL_TOL


@pytest.mark.parametrize("call", ["gemm", "operator"])
@pytest.mark.parametrize("shape", DECODE_SHAPES, ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_a_captured_graph_replays_with_new_inputs(shape: tuple[int, int, int], call: str) -> None:
    """torch's model: warm up, capture with static buffers, copy new inputs in, replay; the output follows (through
    tunetable.gemm, and through the operator, which may route the shape to torch's matmul)."""
    gemm = tunetable.gemm if call == "gemm" else tt.gemm
    m, n, k = shape
    static_a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    static_b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        gemm(static_a, static_b)          # the shape's first call: plan, cubin, workspace (or the route)
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_c = gemm(static_a, static_b)
        static_ref = static_a.float() @ static_b.float().T   # torch's own GEMM in the same graph
    previous = None
    for _ in range(4):
        new_a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        static_a.copy_(new_a)
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(static_c, reference(new_a, static_b)) < REL_TOL
        assert rel_err(static_c, static_ref) < REL_TOL      # changed as torch's did
        if previous is not None:
            assert not torch.equal(static_c, previous)
        previous = static_c.clone()


def test_repeated_calls_follow_new_buffers_outputs_and_streams() -> None:
    """After a shape's first call, torch tensors take the prepared launch: each call's own A, B and C addresses
    (argument sets per (A, B), C written per call), on each stream's own launch."""
    m, n, k = 8, 4096, 4096
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    inputs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    side = torch.cuda.Stream()
    outs = []
    for trial in range(12):
        a, b = inputs[trial % 3], weights[(trial // 3) % 3]
        with torch.cuda.stream(side if trial % 2 else torch.cuda.current_stream()):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            results = [tunetable.gemm(a, b), tunetable.gemm(a, b, out=out), tt.gemm(a, b)]
        outs.append((a, b, results))
    torch.cuda.synchronize()
    for trial, (a, b, results) in enumerate(outs):
        for which, c in enumerate(results):
            assert rel_err(c, reference(a, b)) < REL_TOL, f"trial {trial}, call {which}"
    assert any(key[:3] == (m, n, k) for key in launch._prepared)


def test_shapes_routed_to_torch_are_torch_bit_for_bit_and_listed() -> None:
    """N=1024, K=4096 (Llama's k/v projection): the selector predicts cuBLAS faster, so the operator runs torch.mm;
    a table shape runs tunetable's kernel. tunetable.torch.decisions() says which and why."""
    a = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(tt.gemm(a, kv), torch.mm(a, kv.t()))
    assert rel_err(tt.gemm(a, q), reference(a, q)) < REL_TOL
    paths = {(item["M"], item["N"], item["K"]): item for item in tt.decisions()}
    assert paths[(8, 1024, 4096)]["path"] == "torch" and "cuBLAS" in paths[(8, 1024, 4096)]["why"]
    assert paths[(8, 4096, 4096)]["path"] == "tunetable" and paths[(8, 4096, 4096)]["source"].startswith("table ")


def test_patch_leaves_a_layer_torch_serves_at_every_m(capsys: pytest.CaptureFixture) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4096, 1024, bias=False), torch.nn.Linear(1024, 4096, bias=False))
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        report = tt.patch(model, verbose=False)
        got = model(x)
    reasons = {item.name: item.reason for item in report.left}
    assert reasons["0"].startswith("N=1024, K=4096: torch's matmul serves every recorded M")
    assert type(model[0]) is torch.nn.Linear and rel_err(got, want) < REL_TOL


def test_a_shapes_first_call_inside_a_capture_is_a_clear_error() -> None:
    a = torch.randn(24, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(tunetable.GraphCaptureError, match="first call of M=24, N=2048, K=4096 .* before capturing"):
        with torch.cuda.graph(graph):
            tunetable.gemm(a, b)
    c = tunetable.gemm(a, b)        # outside the capture the shape prepares and runs
    torch.cuda.synchronize()
    assert rel_err(c, reference(a, b)) < REL_TOL


def test_the_current_device_and_context_are_left_as_they_were() -> None:
    torch.cuda.set_device(0)
    a = torch.randn(8, 4096, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda:0", dtype=torch.bfloat16)
    from tunetable.kernels import driver

    before = driver.current_context()
    c = tunetable.gemm(a, b)
    torch.cuda.synchronize()
    assert torch.cuda.current_device() == 0 and driver.current_context() == before
    assert launch.runtime(0).handle == before          # torch's context is the device's primary context
    assert rel_err(c, reference(a, b)) < REL_TOL


def test_the_gpu_is_identified_against_the_recorded_devices() -> None:
    found = launch.device_runtime(0)
    info = found.info
    props = torch.cuda.get_device_properties(0)
    assert info.compute_capability == (9, 0) and info.sm_count == props.multi_processor_count
    table = devices.table_device(info)
    assert table.device in devices.RECORDED_DEVICES
    if "H200" in info.name:
        assert table.identified == "h200" and table.warning is None
    elif "H100" in info.name and "h100" in devices.RECORDED_DEVICES:   # the H100's own tables (2026-12-06)
        assert table == devices.TableDevice(device="h100", identified="h100")
    elif "H100" in info.name:
        assert table.identified == "h100" and "H100" in table.warning and "measured on NVIDIA H200" in table.warning
    # Served as if its tables were not recorded: the fallback's, with the warning naming both GPUs.
    fallback = devices.table_device(info, recorded=("h200",))
    if "H100" in info.name:
        assert fallback.device == "h200" and "H100" in fallback.warning and "NVIDIA H200" in fallback.warning


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (operands on cuda:1)")
def test_operands_on_the_second_gpu_run_there_and_two_devices_are_an_error() -> None:
    torch.cuda.set_device(0)
    a = torch.randn(8, 4096, device="cuda:1", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda:1", dtype=torch.bfloat16)
    c = tunetable.gemm(a, b)
    assert c.device == a.device and torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    assert rel_err(c, reference(a, b)) < REL_TOL
    with torch.cuda.device(1):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            c = tunetable.gemm(a, b)
        side.synchronize()
    assert rel_err(c, reference(a, b)) < REL_TOL
    with pytest.raises(ValueError, match="operands on two devices: a on cuda:0, b on cuda:1"):
        tunetable.gemm(a.to("cuda:0"), b)


class Mlp(torch.nn.Module):
    """Llama's MLP shape (gate, up, down) with a bias on one layer and one layer the kernels cannot take."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(4096, 14336, bias=False)
        self.up = torch.nn.Linear(4096, 14336, bias=True)
        self.down = torch.nn.Linear(14336, 4096, bias=False)
        self.odd = torch.nn.Linear(4096, 100, bias=False)    # N = 100: not a multiple of 8

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        hidden = torch.nn.functional.silu(self.gate(x)) * self.up(x)
        out = self.down(hidden)
        return out, self.odd(out)


def mlp() -> Mlp:
    torch.manual_seed(0)
    return Mlp().to(device="cuda", dtype=torch.bfloat16).eval()


def test_patch_takes_the_layers_the_kernels_serve_and_matches_torch(capsys: pytest.CaptureFixture) -> None:
    model = mlp()
    x = torch.randn(2, 7, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want, want_odd = model(x)
        report = tt.patch(model)
        got, got_odd = model(x)
    assert report.taken == ["gate", "up", "down"] and [item.name for item in report.left] == ["odd"]
    assert "took 3 of 4 nn.Linear layers" in capsys.readouterr().err
    assert isinstance(model.gate, tt.Linear) and type(model.odd) is torch.nn.Linear
    assert got.shape == want.shape and rel_err(got, want) < REL_TOL and rel_err(got_odd, want_odd) < REL_TOL


def test_the_operator_compiles_with_fullgraph_and_no_graph_break() -> None:
    model = mlp()
    tt.patch(model, verbose=False)
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        eager, _ = model(x)
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(model, fullgraph=True)
        got, _ = compiled(x)
    torch.cuda.synchronize()
    assert rel_err(got, eager) < REL_TOL


def test_the_fake_implementation_gives_the_output_shape() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(5, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(1024, 4096, device="cuda", dtype=torch.bfloat16)
        c = torch.ops.tunetable.gemm(a, b)
        assert tuple(c.shape) == (5, 1024) and c.dtype == torch.bfloat16 and c.device.type == "cuda"


def test_a_backward_through_it_is_a_clear_error() -> None:
    model = mlp()
    tt.patch(model, verbose=False)
    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out, _ = model(x)
    with pytest.raises(RuntimeError, match="tunetable::gemm is inference-only"):
        out.float().sum().backward()


def test_shapes_served_are_recorded_and_import_as_a_workload(tmp_path: Path) -> None:
    path = tmp_path / "shapes.csv"
    a = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    tunetable.record_shapes(path)
    try:
        for _ in range(3):
            tunetable.gemm(a, b)
        tunetable.gemm(a[:1].clone(), b)
    finally:
        tunetable.stop_recording()
    tunetable.gemm(a, b)          # not recording any more
    shapes = {item.shape: item.count for item in read_workload(path)}
    assert shapes == {(8, 4096, 4096): 3, (1, 4096, 4096): 1}


# --- the operator's C++ kernel (kernels/runtime/torch_fast.cpp) ------------------------------------------------

def counters() -> tuple[int, int]:
    """(calls the C++ kernel served from its cache, calls it sent to the Python kernel) so far."""
    found = torch_ops.fast_path()
    return found["hits"], found["fallbacks"]


@pytest.fixture
def c_kernel():
    """The C++ kernel, loaded (the GPU machine has a compiler: it must build there) and serving."""
    found = torch_ops.fast_path()
    assert found["loaded"], found["summary"]
    torch_ops.set_fast_path(True)
    yield
    torch_ops.set_fast_path(True)


def warmed(m: int, n: int, k: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Operands whose (shape, stream, (A, B)) the C++ kernel holds: the shape's first call (full path), the second
    (the prepared launch encodes (A, B), handed to the C++ cache), then a third that it serves."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        tt.gemm(a, b)
    hits, fallbacks = counters()
    tt.gemm(a, b)
    assert counters() == (hits + 1, fallbacks), f"M={m}, N={n}, K={k}: the C++ kernel did not serve the third call"
    return a, b


@pytest.mark.parametrize("shape", DECODE_SHAPES, ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_the_c_kernel_gives_the_python_kernels_bits(shape: tuple[int, int, int], c_kernel: None) -> None:
    """Same inputs through the C++ kernel (inference_mode and no_grad: its Autograd kernel) and the Python one:
    bit for bit (tunetable's kernels sum split-K partials in split order; a torch-routed shape is torch.mm)."""
    a, b = warmed(*shape)     # grad mode, no input requiring grad: the Autograd kernel's way down
    hits, fallbacks = counters()
    with torch.inference_mode():
        served = tt.gemm(a, b)
    with torch.no_grad():
        served_no_grad = tt.gemm(a, b)
    assert counters() == (hits + 2, fallbacks)
    torch_ops.set_fast_path(False)
    with torch.inference_mode():
        python = tt.gemm(a, b)
    torch_ops.set_fast_path(True)
    assert counters() == (hits + 2, fallbacks + 1)
    torch.cuda.synchronize()
    assert torch.equal(served, python) and torch.equal(served_no_grad, python)
    assert rel_err(served, reference(a, b)) < REL_TOL


def test_new_operand_addresses_fall_back_once_then_the_c_kernel_serves_them(c_kernel: None) -> None:
    a, b = warmed(8, 4096, 4096)
    others = [(torch.randn_like(a), b), (a, torch.randn_like(b)), (torch.randn_like(a), torch.randn_like(b))]
    for x, y in others:
        hits, fallbacks = counters()
        first = tt.gemm(x, y)
        assert counters() == (hits, fallbacks + 1)       # a new (A, B): the Python kernel encodes it
        second = tt.gemm(x, y)
        assert counters() == (hits + 1, fallbacks + 1)   # then the C++ kernel serves it
        torch.cuda.synchronize()
        assert torch.equal(first, second) and rel_err(second, reference(x, y)) < REL_TOL


def test_a_new_shape_falls_back_to_the_python_kernel_until_it_is_prepared(c_kernel: None) -> None:
    """A shape's first call and its first (A, B) go to the Python kernel (tunetable's kernel: the second encodes
    (A, B); a torch-routed shape: its route is shared at once); the Python kernel's errors come through C++."""
    a = torch.randn(40, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    hits, fallbacks = counters()
    results = [tt.gemm(a, b) for _ in range(3)]
    routed_to_torch = tt.route(40, 4096, 4096, 0).torch
    assert counters() == ((hits + 2, fallbacks + 1) if routed_to_torch else (hits + 1, fallbacks + 2))
    torch.cuda.synchronize()
    assert all(rel_err(c, reference(a, b)) < REL_TOL for c in results)
    with pytest.raises(ValueError, match="mismatched K: a is 40x4000"):
        tt.gemm(a[:, :4000].contiguous(), b)
    with pytest.raises(TypeError, match="expected dtype bfloat16, got torch.float16"):
        tt.gemm(a.half(), b)


def test_a_graph_captured_through_the_c_kernel_replays_with_new_inputs(c_kernel: None) -> None:
    """Captured on a stream whose (shape, (A, B)) the C++ kernel holds: the capture records its launch (no Python
    during capture), and replays follow new inputs copied into the static buffers."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        static_a, static_b = warmed(8, 14336, 4096)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    hits, fallbacks = counters()
    with torch.cuda.graph(graph, stream=side):
        static_c = tt.gemm(static_a, static_b)
    assert counters() == (hits + 1, fallbacks)
    previous = None
    for _ in range(3):
        new_a = torch.randn_like(static_a)
        static_a.copy_(new_a)
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(static_c, reference(new_a, static_b)) < REL_TOL
        if previous is not None:
            assert not torch.equal(static_c, previous)
        previous = static_c.clone()


def test_recording_shapes_counts_every_operator_call(tmp_path: Path, c_kernel: None) -> None:
    a, b = warmed(8, 4096, 4096)
    path = tmp_path / "shapes.csv"
    tunetable.record_shapes(path)
    try:
        for _ in range(5):
            tt.gemm(a, b)
    finally:
        tunetable.stop_recording()
    assert {item.shape: item.count for item in read_workload(path)} == {(8, 4096, 4096): 5}
    hits, fallbacks = counters()
    tt.gemm(a, b)
    assert counters() == (hits + 1, fallbacks)      # serving again once recording stopped


def test_switched_off_the_operator_runs_its_python_kernel() -> None:
    import os
    import subprocess
    import sys

    script = ("import torch, tunetable.torch as tt; from tunetable.kernels.runtime import torch_ops; "
              "a = torch.randn(8, 4096, device='cuda', dtype=torch.bfloat16); "
              "b = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16); "
              "c = [tt.gemm(a, b) for _ in range(3)][-1]; "
              "err = float((c.float() - a.float() @ b.float().T).norm() / (a.float() @ b.float().T).norm()); "
              "print(torch_ops.fast_path()['summary'], err < 1e-2)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TUNETABLE_TORCH_EXT": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "C++ kernel not loaded: TUNETABLE_TORCH_EXT=0 True" in done.stdout
