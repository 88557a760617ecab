"""The runtime's PyTorch front end and device/stream rules that need no GPU and no torch.

Which nn.Linear layers patch() takes (through the same choice tunetable.torch uses, on layer
descriptions), which shapes the operator hands to torch's matmul (on the generated tables and selector), the
prepared launch (libcuda replaced by a recorder), the operator's fake shape rule, the recorded-shapes file and
its import, the device
identification for per-device tables, the caller's-stream and device errors, and the layering:
`import tunetable` and the runtime import neither torch nor each other in a circle.
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import datetime as dt
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tunetable.kernels.runtime import devices, launch, record
from tunetable.kernels.families.devices import GpuInfo
from tunetable.kernels.runtime.devices import UnsupportedDeviceError, table_device
from tunetable.kernels.runtime import decide
from tunetable.kernels.runtime.layers import (
    CONFIDENT_SPEEDUP,
    LayerChoice,
    LayerView,
    PatchReport,
    choose_layer,
    gemm_output_shape,
    layer_left,
    smallest_recorded_floor_s,
    torch_serves,
)
from tunetable.kernels.runtime.operands import Operand, cai_stream, operand
from tunetable.kernels.tuning_configs import FamilyChoice
from tunetable.shapes import read_workload

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
H200 = GpuInfo(ordinal=0, name="NVIDIA H200", sm_count=132, memory_bytes=int(139.8 * GIB), compute_capability=(9, 0))
H100 = GpuInfo(ordinal=1, name="NVIDIA H100 80GB HBM3", sm_count=132, memory_bytes=int(79.2 * GIB),
               compute_capability=(9, 0))


# --- which layers patch() takes --------------------------------------------------------------------

def llama_layers() -> list[LayerView]:
    """One Llama-3-8B decoder layer's projections, its lm_head, and layers the kernels do not serve."""
    sizes = {"q_proj": (4096, 4096), "k_proj": (4096, 1024), "v_proj": (4096, 1024), "o_proj": (4096, 4096),
             "gate_proj": (4096, 14336), "up_proj": (4096, 14336), "down_proj": (14336, 4096)}
    views = [LayerView(name=f"model.layers.0.{name}", in_features=k, out_features=n, dtype="torch.bfloat16",
                       device_type="cuda") for name, (k, n) in sizes.items()]
    bf16 = "torch.bfloat16"
    return [*views,
            LayerView(name="lm_head", in_features=4096, out_features=128256, dtype=bf16, device_type="cuda"),
            LayerView(name="score", in_features=4096, out_features=3, dtype=bf16, device_type="cuda"),
            LayerView(name="fp32_head", in_features=4096, out_features=4096, dtype="torch.float32", device_type="cuda"),
            LayerView(name="cpu_proj", in_features=4096, out_features=4096, dtype=bf16, device_type="cpu"),
            LayerView(name="strided", in_features=4096, out_features=4096, dtype=bf16, device_type="cuda",
                      contiguous=False)]


def test_patch_takes_bf16_cuda_layers_of_served_shapes_and_says_why_it_left_the_rest() -> None:
    report = PatchReport()
    for view in llama_layers():
        report.add(choose_layer(view))
    assert report.taken == [f"model.layers.0.{name}" for name in
                            ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")] + ["lm_head"]
    reasons = {item.name: item.reason for item in report.left}
    assert "N=3, K=4096" in reasons["score"] and "multiple" in reasons["score"]
    assert reasons["fp32_head"] == "weight dtype float32: the kernels serve bfloat16"
    assert reasons["cpu_proj"] == "weight on cpu: the kernels run on a CUDA GPU"
    assert reasons["strided"] == "weight not contiguous"
    summary = report.summary()
    assert summary.startswith("tunetable.torch.patch: took 8 of 12 nn.Linear layers; left to torch: score (")
    assert summary.endswith("; and 1 more")


def test_the_summary_groups_layers_left_for_one_reason() -> None:
    report = PatchReport()
    for index in range(32):
        report.add(LayerChoice(f"model.layers.{index}.self_attn.k_proj", False, "N=1024, K=4096: torch serves"))
    report.add(LayerChoice("lm_head", True))
    assert report.summary() == ("tunetable.torch.patch: took 1 of 33 nn.Linear layers; left to torch: "
                                "model.layers.0.self_attn.k_proj and 31 more (N=1024, K=4096: torch serves)")


def test_a_model_with_every_layer_taken_says_so_in_one_line() -> None:
    report = PatchReport()
    report.add(choose_layer(llama_layers()[0]))
    assert report.summary() == "tunetable.torch.patch: took 1 of 1 nn.Linear layers"


def test_the_operators_fake_shape_rule() -> None:
    assert gemm_output_shape((5, 4096), "torch.bfloat16", (1024, 4096), "torch.bfloat16") == (5, 1024)
    with pytest.raises(ValueError, match=r"mismatched K: a is \(5, 4096\) \(M x K\), b is \(1024, 2048\)"):
        gemm_output_shape((5, 4096), "torch.bfloat16", (1024, 2048), "torch.bfloat16")
    with pytest.raises(TypeError, match="tunetable::gemm: b must be bfloat16, got float16"):
        gemm_output_shape((5, 4096), "torch.bfloat16", (1024, 4096), "torch.float16")
    with pytest.raises(ValueError, match=r"a must be 2-D, got shape \(2, 5, 4096\)"):
        gemm_output_shape((2, 5, 4096), "torch.bfloat16", (1024, 4096), "torch.bfloat16")


# --- shapes recorded from a running model ------------------------------------------------------------

def test_recorded_blocks_append_and_import_with_counts_summed(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "shapes.csv"
    recorder = record.ShapeRecorder(path)
    for shape, times in (((1, 4096, 4096), 6), ((1, 14336, 4096), 2), ((2048, 4096, 4096), 1)):
        for _ in range(times):
            recorder.add(*shape)
    assert recorder.flush() == 3 and recorder.flush() == 0     # nothing new: nothing appended
    recorder.add(1, 4096, 4096)
    assert recorder.flush() == 1
    lines = path.read_text().splitlines()
    assert lines[0].startswith(f"# tunetable.gemm shapes: pid {__import__('os').getpid()}, ")
    assert lines[0].endswith(", 3 shapes, 9 calls")
    assert lines[1:4] == ["1,4096,4096,6", "2048,4096,4096,1", "1,14336,4096,2"]   # sorted by (N, K, M)
    assert lines[4].endswith(", 1 shapes, 1 calls") and lines[5] == "1,4096,4096,1"
    imported = {item.shape: item.count for item in read_workload(path)}
    assert imported == {(1, 4096, 4096): 7, (2048, 4096, 4096): 1, (1, 14336, 4096): 2}


def test_block_text_is_the_csv_the_shapes_import_command_reads(tmp_path: Path) -> None:
    when = dt.datetime(2026, 12, 6, 2, 30, tzinfo=dt.timezone.utc)
    text = record.block_text({(8, 1024, 4096): 2}, pid=42, when=when)
    assert text == "# tunetable.gemm shapes: pid 42, 2026-12-06T02:30:00Z, 1 shapes, 2 calls\n8,1024,4096,2\n"
    path = tmp_path / "recorded.csv"
    path.write_text(text + text)
    done = subprocess.run([sys.executable, "-m", "tunetable", "shapes", "import", str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "M,N,K,count\n8,1024,4096,4\n"


def test_the_environment_variable_and_the_api_start_and_stop_recording(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(record.RECORD_ENV, str(tmp_path / "env.csv"))
    recorder = record.start_from_environment()
    assert record.active() is recorder and recorder.path == tmp_path / "env.csv"
    recorder.add(1, 4096, 4096)
    api = record.record_shapes(tmp_path / "api.csv")         # replaces it, flushing what it counted
    assert record.active() is api and (tmp_path / "env.csv").read_text().splitlines()[1] == "1,4096,4096,1"
    assert record.stop_recording() == tmp_path / "api.csv" and record.active() is None
    assert not (tmp_path / "api.csv").exists()               # nothing counted: nothing written
    monkeypatch.setenv(record.RECORD_ENV, "")
    assert record.start_from_environment() is None


# --- which recorded device serves a GPU ------------------------------------------------------------------

def test_a_recorded_device_is_served_its_own_tables() -> None:
    assert table_device(H200) == devices.TableDevice(device="h200", identified="h200")


def test_an_h100_is_served_its_own_tables_now_that_they_are_recorded() -> None:
    assert table_device(H100) == devices.TableDevice(device="h100", identified="h100")   # no warning


def test_an_h100_runs_its_fallback_devices_tables_with_one_warning_naming_both() -> None:
    found = table_device(H100, recorded=("h200",))     # as before the H100's tables were recorded
    assert found.device == "h200" and found.identified == "h100"
    assert found.warning.startswith("tunetable.gemm: cuda:1 (NVIDIA H100 80GB HBM3, 132 SMs, 79.2 GiB, sm_90) is "
                                    "device h100 with no tables of its own; running device h200's tables")
    assert "declare it in params.yaml's devices: and record on it (docs/devices.md" in found.warning
    assert "running device h200's tables, measured on NVIDIA H200 (recorded: h200)" in found.warning
    # Either way round: the GPU named is the one codegen wrote for the serving device (its manifests' provenance).
    assert "device h100's tables, measured on NVIDIA H100 80GB HBM3 (" in table_device(H200, recorded=("h100",)).warning
    # With both devices recorded, each is served its own.
    assert table_device(H100, recorded=("h200", "h100")).warning is None
    assert table_device(H100, recorded=("h200", "h100")).device == "h100"


def test_a_device_whose_manifests_name_no_gpu_is_named_by_its_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    unnamed = dataclasses.replace(devices.DEVICE_TABLES["h200"], measured_on=None)
    monkeypatch.setitem(devices.DEVICE_TABLES, "h200", unnamed)
    assert "running device h200's tables, measured on an H200 (" in table_device(H100, recorded=("h200",)).warning


def _hopper(name: str, sm_count: int, gib: float) -> GpuInfo:
    return GpuInfo(ordinal=0, name=name, sm_count=sm_count, memory_bytes=int(gib * GIB), compute_capability=(9, 0))


def test_an_unknown_hopper_part_is_served_the_nearest_recorded_device_of_its_arch() -> None:
    # No declared device matches these; the nearest recorded one serves: the SM count first, then memory size
    # (params.yaml: h200 132 SMs and >= 130 GiB, h100 132 SMs and < 96 GiB).
    h800 = table_device(_hopper("NVIDIA H800", 132, 79.6), recorded=("h100", "h200"))
    assert h800.device == "h100" and h800.identified is None     # 80 GiB lies in the H100's range, not the H200's
    assert "a Hopper GPU that no declared device matches" in h800.warning
    assert "running device h100's tables, the nearest by SM count, then memory, measured on" in h800.warning
    assert table_device(_hopper("NVIDIA H100 PCIe", 114, 79.2), recorded=("h100", "h200")).device == "h100"
    assert table_device(_hopper("NVIDIA H20", 78, 95.0), recorded=("h100", "h200")).device == "h100"
    assert table_device(_hopper("NVIDIA GH200 144G HBM3e", 132, 139.8), recorded=("h100", "h200")).device == "h200"
    # A device left unrecorded cannot serve: the H800 runs the H200's tables while only those exist.
    assert table_device(_hopper("NVIDIA H800", 132, 79.6), recorded=("h200",)).device == "h200"


def test_a_gpu_of_another_architecture_is_one_clear_error() -> None:
    ampere = GpuInfo(ordinal=0, name="NVIDIA A100-SXM4-80GB", sm_count=108, memory_bytes=80 * GIB,
                     compute_capability=(8, 0))
    with pytest.raises(UnsupportedDeviceError, match=r"cuda:0 \(NVIDIA A100-SXM4-80GB, 108 SMs, 80.0 GiB, sm_80\) "
                                                     r"has compute capability 8.0; the kernels need sm_90a"):
        table_device(ampere)


# --- which shapes the operator hands to torch's matmul ------------------------------------------------------

class Candidate:
    """What a shape selector's prediction names: its table and configuration."""

    table = "gemm_wgmma"
    config_id = "c0000000000"


class Prediction:
    """A shape selector prediction: its time and cuBLAS's predicted time (seconds)."""

    def __init__(self, seconds: float, cublas_seconds: float):
        self.candidate, self.seconds, self.cublas_seconds = Candidate(), seconds, cublas_seconds

    @property
    def speedup_vs_cublas(self) -> float:
        return self.cublas_seconds / self.seconds


class Decision:
    """decide.Decision's fields the rule reads."""

    def __init__(self, prediction: Prediction | None = None, choice: object = None):
        self.prediction, self.choice, self.index, self.entry = prediction, choice, 3, None


def test_a_table_entry_runs_tunetable_unless_its_recording_measured_cublas_faster() -> None:
    assert torch_serves(Decision(), m=2048, n=4096, k=4096, smallest_floor_s=8e-6) is None  # no dispatch entry

    def entry(speedup: float) -> FamilyChoice:
        return FamilyChoice(m=1024, m_end=4096, n=4096, k=4096, kernel="gemm_wgmma", table="gemm_wgmma",
                            config_id="c0000000000", speedup_vs_cublas=speedup)

    shape = dict(m=2048, n=4096, k=4096, smallest_floor_s=8e-6)
    assert torch_serves(Decision(choice=entry(0.97)), **shape) == (
        "its recording measured cuBLAS faster (dispatch entry at M=1024: 0.9700x cuBLAS's speed)")
    assert torch_serves(Decision(choice=entry(0.9999)), **shape).endswith("0.9999x cuBLAS's speed)")
    assert torch_serves(Decision(choice=entry(1.0)), **shape) is None      # as fast as cuBLAS: tunetable's kernel
    assert torch_serves(Decision(choice=entry(1.25)), **shape) is None


def test_a_selector_prediction_runs_tunetable_only_when_credible_and_confidently_faster() -> None:
    # 2048 x 4096 x 4096: 68.7 GFLOP, a roofline floor of 85.9 µs at 800 TFLOP/s.
    shape = dict(m=2048, n=4096, k=4096, smallest_floor_s=8e-6)
    assert torch_serves(Decision(Prediction(100e-6, 100e-6 * (CONFIDENT_SPEEDUP + 0.01))), **shape) is None
    slower = torch_serves(Decision(Prediction(100e-6, 100e-6 * 0.98)), **shape)
    assert slower == ("the shape selector predicts 0.98x cuBLAS's speed, not confidently faster "
                      f"(< {CONFIDENT_SPEEDUP:.2f}x)")
    below = torch_serves(Decision(Prediction(80e-6, 120e-6)), **shape)
    assert below == "the shape selector's prediction (80.0 µs) is below the roofline floor (85.9 µs): not credible"
    tiny = torch_serves(Decision(Prediction(9e-6, 30e-6)), m=1, n=1024, k=1024, smallest_floor_s=8e-6)
    assert tiny == "smaller than every recorded shape: the shape selector's 3.33x cuBLAS's speed is extrapolated"
    slow_and_tiny = torch_serves(Decision(Prediction(9e-6, 4e-6)), m=1, n=1024, k=1024, smallest_floor_s=8e-6)
    assert slow_and_tiny.startswith("the shape selector predicts 0.44x cuBLAS's speed")


def test_a_prediction_is_judged_against_the_floor_of_the_gpu_it_runs_on() -> None:
    # 250 x 18944 x 3584 (33.9 GFLOP, 147.05 MB): its floor is 42.4 µs on the H200's ceilings (800 TFLOP/s) and
    # 48.4 µs on the H100's measured 3.04 TB/s. A prediction of 47.7 µs (the H100 selector's for it) is credible on
    # the first only.
    from tunetable.kernels.tuning_configs import DEVICES

    shape = dict(m=250, n=18944, k=3584, smallest_floor_s=8e-6)
    prediction = Decision(Prediction(47.7e-6, 47.7e-6 * 1.24))
    assert torch_serves(prediction, **shape) is None
    assert torch_serves(prediction, **shape, ceilings=DEVICES["h200"].ceilings) is None
    assert torch_serves(prediction, **shape, ceilings=DEVICES["h100"].ceilings) == (
        "the shape selector's prediction (47.7 µs) is below the roofline floor (48.4 µs): not credible")


def test_a_gpu_s_ceilings_are_its_own_device_s_else_the_serving_device_s() -> None:
    from tunetable.kernels.families.devices import Ceilings
    from tunetable.kernels.runtime.devices import TableDevice, gpu_ceilings
    from tunetable.kernels.tuning_configs import DEVICES

    h100, h200 = DEVICES["h100"].ceilings, DEVICES["h200"].ceilings
    assert h100 == Ceilings(copy_tb_s=3.04, tflops=782.1) and h200 != h100
    assert gpu_ceilings(table_device(H100)) == h100
    assert gpu_ceilings(table_device(H200)) == h200
    assert gpu_ceilings(table_device(H100, recorded=("h200",))) == h100   # the H200's tables, the H100's floor
    assert gpu_ceilings(TableDevice(device="h100", identified=None)) == h100   # an unknown part: the nearest's
    bare = tuple(dataclasses.replace(spec, ceilings=None) for spec in DEVICES.values())
    assert gpu_ceilings(table_device(H100), devices=bare) is None        # none declared: perfmodel's reference


def test_on_the_generated_tables_llamas_kv_projection_goes_to_torch_and_its_table_shapes_to_tunetable() -> None:
    """The H200's selector predicts cuBLAS faster for N=1024, K=4096 (no table holds it) at every recorded M, and
    the lm_head's predictions fall below the roofline floor at M=1 and 2048; q_proj's table serves M=1024, and
    hands M=2048 to torch: its recording measured cuBLAS faster there (0.993x, device_tables.json)."""
    selector = decide.shape_selector()
    smallest = smallest_recorded_floor_s(ms=selector.starts, pairs=selector.pairs)

    def why(m: int, n: int, k: int) -> str | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", decide.FallbackWarning)   # memoised: only a first decision warns
            found = decide.dispatcher().decide(m=m, n=n, k=k)
        return torch_serves(found, m=m, n=n, k=k, smallest_floor_s=smallest)

    assert why(1024, 4096, 4096) is None
    assert why(2048, 4096, 4096).startswith("its recording measured cuBLAS faster (dispatch entry at M=2048: 0.99")
    assert "not confidently faster" in why(2048, 1024, 4096)
    assert "below the roofline floor" in why(1, 128256, 4096)
    left = layer_left(n=1024, k=4096, ms=sorted(set(selector.starts)), why_at=lambda m: why(m, 1024, 4096))
    assert left.startswith("N=1024, K=4096: torch's matmul serves every recorded M (1-8192); at M=1: ")
    assert layer_left(n=4096, k=4096, ms=[1, 2048], why_at=lambda m: why(m, 4096, 4096)) is None


# --- the prepared launch (libcuda replaced by a recorder) ------------------------------------------------

class RecordingLibcuda:
    """cuLaunchKernel / cuCtxGetCurrent stand-ins: each launch's arguments and C's slot value at that moment."""

    def __init__(self, context: int | None):
        self.launches: list[tuple] = []
        self.context = context

    def cuLaunchKernel(self, *args: object) -> int:
        function, gx, gy, gz, bx, by, bz, smem, stream, params, extra = args
        values = [ctypes.c_uint64.from_address(ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[i]).value
                  for i in range(4)]
        self.launches.append(((gx, gy, gz), (bx, by, bz), smem, stream.value, values))
        return 0

    def cuCtxGetCurrent(self, ref: object) -> int:
        ctypes.cast(ref, ctypes.POINTER(ctypes.c_void_p))[0] = self.context
        return 0


def prepared_launch(monkeypatch: pytest.MonkeyPatch, lib: RecordingLibcuda) -> object:
    """A PreparedLaunch of gemm_mma's pointer arguments on stream 0x55 (workspace 0x5000) over ``lib``."""
    from tunetable.kernels.families import FAMILIES
    from tunetable.kernels.runtime import prepared as plan_module
    from tunetable.kernels.runtime.plan import LaunchPlan

    monkeypatch.setattr(plan_module, "bare_libcuda", lambda: lib)
    kernel = type("Kernel", (), {"function": ctypes.c_void_p(0x4242)})()
    shape_plan = plan_module.ShapePlan(plan=LaunchPlan(
        family=FAMILIES["gemm_mma"], defines={}, m=7, n=4096, k=4096, grid=(64, 1, 2), block=(128, 1, 1),
        smem_bytes=4096, workspace_ptr=0x5000, kernel=kernel))
    return plan_module.PreparedLaunch(shape_plan, stream=0x55, context=0x77)


def test_a_prepared_launch_encodes_once_per_a_b_pair_and_writes_c_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = RecordingLibcuda(context=0x77)
    launch_now = prepared_launch(monkeypatch, lib)
    launch_now(0x1000, 0x2000, 0x3000)
    launch_now(0x1000, 0x2000, 0x3100)
    launch_now(0x1100, 0x2000, 0x3200)
    assert len(launch_now.sets) == 2 and launch_now.plan.encodes == 2   # a new C alone encodes nothing
    assert [item[4] for item in lib.launches] == [[0x1000, 0x2000, 0x3000, 0x5000], [0x1000, 0x2000, 0x3100, 0x5000],
                                                   [0x1100, 0x2000, 0x3200, 0x5000]]
    assert lib.launches[0][:4] == ((64, 1, 2), (128, 1, 1), 4096, 0x55)


def test_a_prepared_launch_pushes_its_context_only_when_another_is_current(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetable.kernels import driver

    pushed: list[object] = []
    monkeypatch.setattr(driver, "push_context", lambda handle: pushed.append(handle))
    monkeypatch.setattr(driver, "pop_context", lambda: pushed.append("pop"))
    lib = RecordingLibcuda(context=0x77)
    launch_now = prepared_launch(monkeypatch, lib)
    launch_now(0x1000, 0x2000, 0x3000)
    assert pushed == []
    lib.context = 0x99   # another device's context is current
    launch_now(0x1000, 0x2000, 0x3000)
    assert pushed == [0x77, "pop"] and len(lib.launches) == 2


def test_a_failed_launch_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetable.kernels import driver

    lib = RecordingLibcuda(context=0x77)
    lib.cuLaunchKernel = lambda *args: 700
    with pytest.raises(driver.DriverError, match="cuLaunchKernel failed with CUresult 700"):
        prepared_launch(monkeypatch, lib)(0x1000, 0x2000, 0x3000)


# --- the caller's device and stream ----------------------------------------------------------------------

def test_operands_on_two_devices_are_one_clear_error() -> None:
    a = Operand(0x1000, 8, 4096, "torch", 0)
    b = Operand(0x2000, 4096, 4096, "torch", 1)
    with pytest.raises(ValueError, match=r"operands on two devices: a on cuda:0, b on cuda:1 \(move them"):
        launch.device_of(a, b)
    assert launch.device_of(a, Operand(0x2000, 4096, 4096, "cupy", 0)) == 0


class Stream:
    """A torch-like stream object: its device and raw handle."""

    def __init__(self, handle: int, device: int):
        self.cuda_stream = handle
        self.device_index = device


def test_an_explicit_stream_is_read_from_any_library() -> None:
    assert launch.stream_handle(0x77, device=0) == 0x77
    assert launch.stream_handle(Stream(0x88, 1), device=1) == 0x88
    with pytest.raises(ValueError, match="stream= is a stream of cuda:1 but the operands live on cuda:0"):
        launch.stream_handle(Stream(0x88, 1), device=0)
    with pytest.raises(TypeError, match="stream=: expected a CUstream handle .* got builtins.str"):
        launch.stream_handle("default", device=0)


class Interface:
    """A __cuda_array_interface__ v3 object with a producer stream."""

    def __init__(self, stream: object, version: int = 3):
        self.__cuda_array_interface__ = {"shape": (8, 4096), "typestr": "<V2", "data": (0x10000, False),
                                         "version": version, "strides": None, "stream": stream}


def test_the_cuda_array_interface_stream_is_read_with_its_rules() -> None:
    assert operand("a", Interface(0x1234)).stream == 0x1234
    assert operand("a", Interface(1)).stream == 1                 # the legacy default stream
    assert operand("a", Interface(None)).stream is None           # no synchronisation needed
    assert operand("a", Interface(0x1234, version=2)).stream is None   # v2 has no stream field
    assert operand("a", Interface(0x1234)).device == -1           # the launch asks the driver
    with pytest.raises(ValueError, match="a: __cuda_array_interface__ 'stream' is 0, which the interface disallows"):
        operand("a", Interface(0))
    with pytest.raises(ValueError, match="'stream' must be None or a stream handle, got 'x'"):
        cai_stream("b", {"version": 3, "stream": "x"})


# --- layering ---------------------------------------------------------------------------------------------

def test_import_tunetable_and_the_runtime_load_no_torch() -> None:
    script = ("import sys, tunetable, tunetable.kernels.runtime.launch, tunetable.kernels.runtime.layers\n"
              "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_online_tuner_is_handed_gemm_with_instead_of_importing_the_launch_step() -> None:
    tree = ast.parse((REPO / "kernels" / "runtime" / "online.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(name and name.endswith("runtime.launch") for name in imported)
