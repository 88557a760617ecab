"""The tunetable::gemm operator's C++ kernel on a machine without a GPU (skipped where torch is not installed, and
where it cannot be built here: torch without CUDA, no compiler).

It builds and loads with the CUDA build of torch on a CPU; its cache takes what the Python kernel prepared (routes,
argument sets from a prepared launch, libcuda replaced) and answers with the bytes a launch would get, C written;
recording and a dispatcher change reach it; TUNETABLE_TORCH_EXT=0 and a missing compiler leave the Python kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tunetable.kernels.runtime import decide, record, torch_ext, torch_ops  # noqa: E402

DEVICE = 99   # a device no real call uses: these routes never meet a launch
OPS = torch.ops.tunetable


@pytest.fixture(autouse=True)
def loaded():
    """The C++ kernel loaded in this process (else skip, saying why); its cache emptied after each test."""
    found = torch_ops.fast_path()
    if not found["loaded"]:
        pytest.skip(found["summary"])
    yield
    OPS._fast_clear()


def test_the_c_kernel_serves_cuda_and_the_python_one_stays_beside_it() -> None:
    dump = torch._C._dispatch_dump("tunetable::gemm")
    cuda = next(line for line in dump.splitlines() if line.startswith("CUDA:"))
    assert "torch_fast.cpp" in cuda and "Meta:" in dump and "Autograd" in dump
    assert "torch_ops.py" in torch._C._dispatch_dump("tunetable::_gemm_python")
    assert torch_ext.status().loaded and torch_ext.status().path.endswith("tunetable_torch_fast.so")


def prepared(monkeypatch: pytest.MonkeyPatch):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_runtime_frontend import RecordingLibcuda, prepared_launch

    return prepared_launch(monkeypatch, RecordingLibcuda(context=0x77))


def register(found, a_ptr: int, b_ptr: int, *, stream: int = 0x55) -> None:
    """What torch_ops._share registers for one (A, B) set of a prepared launch of (7, 4096, 4096)."""
    route, blob = torch_ext.fast_route(found, found.sets[(a_ptr, b_ptr)])
    OPS._fast_kernel(DEVICE, stream, 7, 4096, 4096, route.function, list(route.geometry), route.context,
                     list(route.offsets), route.c_slot, a_ptr, b_ptr, torch.frombuffer(bytearray(blob),
                                                                                       dtype=torch.uint8))


def test_a_registered_set_launches_with_the_python_arguments_and_this_calls_c(monkeypatch: pytest.MonkeyPatch) -> None:
    found = prepared(monkeypatch)
    found.encode(0x1000, 0x2000)
    register(found, 0x1000, 0x2000)
    answer = OPS._fast_lookup(DEVICE, 0x55, 7, 4096, 4096, 0x1000, 0x2000, 0x3300)
    kind, count, size = answer[:3]
    offsets, blob = answer[3:3 + count], bytes(answer[3 + count:])
    assert (kind, count, size, offsets) == (2, 7, 44, [0, 8, 16, 24, 32, 36, 40])
    # The bytes the Python plan encodes for (A, B, C, workspace) with this C: what cuLaunchKernel must read.
    python = found.plan.plan.arguments(0x1000, 0x2000, 0x3300, found.workspace)
    assert blob == b"".join(bytes(item) for item in python.storage)
    assert OPS._fast_stats()[3:] == [1, 1]


def test_the_cache_misses_on_what_it_was_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    found = prepared(monkeypatch)
    found.encode(0x1000, 0x2000)
    register(found, 0x1000, 0x2000)
    assert OPS._fast_lookup(DEVICE, 0x55, 7, 4096, 4096, 0x1000, 0x2100, 0) == [0]    # another B
    assert OPS._fast_lookup(DEVICE, 0x56, 7, 4096, 4096, 0x1000, 0x2000, 0) == [0]    # another stream
    assert OPS._fast_lookup(DEVICE, 0x55, 8, 4096, 4096, 0x1000, 0x2000, 0) == [0]    # another shape
    OPS._fast_torch(DEVICE, 0x55, 1, 1024, 4096)                                      # torch's matmul serves it
    assert OPS._fast_lookup(DEVICE, 0x55, 1, 1024, 4096, 0x1000, 0x2000, 0) == [1]


def test_a_route_registered_again_keeps_its_sets_and_the_oldest_set_goes_past_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found = prepared(monkeypatch)
    found.encode(0x1000, 0x2000)
    register(found, 0x1000, 0x2000)
    register(found, 0x1000, 0x2000)
    assert OPS._fast_stats()[3:] == [1, 1]
    route, blob = torch_ext.fast_route(found, found.sets[(0x1000, 0x2000)])
    tensor = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    for index in range(1, 1025):   # 1024 more pairs: the first is dropped
        OPS._fast_kernel(DEVICE, 0x55, 7, 4096, 4096, route.function, list(route.geometry), route.context,
                         list(route.offsets), route.c_slot, 0x1000, 0x2000 + 16 * index, tensor)
    assert OPS._fast_stats()[4] == 1024
    assert OPS._fast_lookup(DEVICE, 0x55, 7, 4096, 4096, 0x1000, 0x2000, 0) == [0]
    assert OPS._fast_lookup(DEVICE, 0x55, 7, 4096, 4096, 0x1000, 0x2000 + 16 * 1024, 0)[0] == 2


def test_bad_registrations_are_refused_with_the_reason() -> None:
    geometry = [1, 1, 1, 128, 1, 1, 0]
    cases = {
        "C's slot 3 is not an argument": dict(offsets=[0, 8, 16], c_slot=3, size=24),
        "C's slot does not hold 8 bytes": dict(offsets=[0, 8, 16], c_slot=2, size=20),
        "an argument set of 5000 bytes": dict(offsets=[0], c_slot=0, size=5000),
        "offset 30 outside 24 bytes": dict(offsets=[0, 30], c_slot=0, size=24),
    }
    for message, case in cases.items():
        with pytest.raises(RuntimeError, match=message):
            OPS._fast_kernel(DEVICE, 1, 2, 3, 4, 0x10, geometry, 0x20, case["offsets"], case["c_slot"], 0, 0,
                             torch.zeros(case["size"], dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="the argument set is a contiguous 1-D CPU uint8 tensor"):
        OPS._fast_kernel(DEVICE, 1, 2, 3, 4, 0x10, geometry, 0x20, [0, 8], 1, 0, 0, torch.zeros(16))
    with pytest.raises(RuntimeError, match="geometry is grid"):
        OPS._fast_kernel(DEVICE, 1, 2, 3, 4, 0x10, geometry[:6], 0x20, [0, 8], 1, 0, 0,
                         torch.zeros(16, dtype=torch.uint8))
    assert OPS._fast_stats()[3:] == [0, 0]
    OPS._fast_kernel(DEVICE, 1, 2, 3, 4, 0x10, geometry, 0x20, [0, 8], 1, 0, 0, torch.zeros(16, dtype=torch.uint8))
    OPS._fast_kernel(DEVICE, 1, 2, 3, 4, 0x11, geometry, 0x20, [0, 8], 1, 0, 16, torch.zeros(16, dtype=torch.uint8))
    assert OPS._fast_stats()[3:] == [1, 1]      # another function: a new launch, the old launch's sets gone


def test_recording_shapes_turns_the_fast_path_off_and_back(tmp_path: Path) -> None:
    assert torch_ops.fast_path()["enabled"]
    record.record_shapes(tmp_path / "shapes.csv")
    try:
        assert not torch_ops.fast_path()["enabled"]
        torch_ops.set_fast_path(True)          # recording wins: every call must reach the recorder
        assert not torch_ops.fast_path()["enabled"]
    finally:
        record.stop_recording()
    assert torch_ops.fast_path()["enabled"]
    torch_ops.set_fast_path(False)
    assert not torch_ops.fast_path()["enabled"]
    torch_ops.set_fast_path(True)
    assert torch_ops.fast_path()["enabled"]


def test_a_dispatcher_change_empties_the_cache() -> None:
    OPS._fast_torch(DEVICE, 1, 2, 3, 4)
    assert OPS._fast_stats()[3] == 1
    decide.set_dispatcher(None)
    assert OPS._fast_stats()[3] == 0


PROBE = ("import warnings, torch; warnings.simplefilter('always'); import tunetable.torch; "
         "from tunetable.kernels.runtime import torch_ops; f = torch_ops.fast_path(); "
         "print('LOADED', f['loaded'], f['build_s'] is None); print('SUMMARY', f['summary']); "
         "dump = torch._C._dispatch_dump('tunetable::gemm').splitlines(); "
         "print('CUDA', next(line for line in dump if line.startswith('CUDA:')))")


def probe(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True,
                          env={**os.environ, **env})


def test_switched_off_the_python_kernel_serves_and_nothing_warns() -> None:
    done = probe(TUNETABLE_TORCH_EXT="0")
    assert "LOADED False" in done.stdout and "not loaded: TUNETABLE_TORCH_EXT=0" in done.stdout
    assert "torch_ops.py" in done.stdout.split("CUDA", 1)[1] and "TorchExtensionWarning" not in done.stderr


def test_without_a_compiler_the_python_kernel_serves_with_one_warning(tmp_path: Path) -> None:
    done = probe(TUNETABLE_TORCH_EXT_CACHE=str(tmp_path), CXX=str(tmp_path / "no-compiler"))
    assert "LOADED False" in done.stdout and "torch_ops.py" in done.stdout.split("CUDA", 1)[1]
    warned = [line for line in done.stderr.splitlines() if "TorchExtensionWarning" in line]
    assert len(warned) == 1 and "runs its Python kernel" in warned[0] and "no C++ compiler" in warned[0]
    assert list(tmp_path.iterdir()) == []


def test_a_second_process_loads_the_cached_library_without_building() -> None:
    done = probe(TUNETABLE_TORCH_EXT_CACHE=str(Path(torch_ext.status().path).parents[1]))
    assert "LOADED True True" in done.stdout and "loaded (cached)" in done.stdout
    assert "torch_fast.cpp" in done.stdout.split("CUDA", 1)[1]


class Dressed(torch.Tensor):
    """A CPU tensor answering as a tensor of device 0 (what _share reads of CUDA operands)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def get_device(self) -> int:
        return 0


def test_the_python_kernel_shares_its_route_and_argument_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """torch_ops._share after a Python-kernel call: the prepared launch's set of (A, B) on the caller's stream, a
    torch route as such, nothing while shapes are recorded or before the pair is encoded."""
    import threading

    from tunetable.kernels.runtime import launch

    found = prepared(monkeypatch)   # (7, 4096, 4096) on stream 0x55
    a = torch.zeros(7, 4096, dtype=torch.bfloat16).as_subclass(Dressed)
    b = torch.zeros(4096, 4096, dtype=torch.bfloat16).as_subclass(Dressed)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0x55)
    monkeypatch.setitem(launch._prepared, (7, 4096, 4096, 0, 0x55, threading.get_ident()), found)
    monkeypatch.setitem(torch_ops._routes, (7, 4096, 4096, 0),
                        torch_ops.Route(m=7, n=4096, k=4096, device=0, why_torch=None, source="test"))
    torch_ops._share(a, b)
    assert OPS._fast_stats()[3:] == [0, 0]          # (A, B) not encoded yet: the next Python call encodes it
    found.encode(a.data_ptr(), b.data_ptr())
    record.record_shapes(tmp_path / "shapes.csv")
    try:
        torch_ops._share(a, b)
    finally:
        record.stop_recording()
    assert OPS._fast_stats()[3:] == [0, 0]          # recording: every call must reach the recorder
    torch_ops._share(a, b)
    answer = OPS._fast_lookup(0, 0x55, 7, 4096, 4096, a.data_ptr(), b.data_ptr(), 0x3300)
    assert answer[0] == 2 and bytes(answer[3 + answer[1]:][:24]) == (
        a.data_ptr().to_bytes(8, "little") + b.data_ptr().to_bytes(8, "little") + (0x3300).to_bytes(8, "little"))
    monkeypatch.setitem(torch_ops._routes, (1, 4096, 4096, 0),
                        torch_ops.Route(m=1, n=4096, k=4096, device=0, why_torch="cuBLAS", source="test"))
    torch_ops._share(torch.zeros(1, 4096, dtype=torch.bfloat16).as_subclass(Dressed), b)
    assert OPS._fast_lookup(0, 0x55, 1, 4096, 4096, 0, 0, 0) == [1]
    torch_ops._share(a.float().as_subclass(Dressed), b)   # an operand the C++ kernel never serves: nothing
    assert OPS._fast_stats()[3:] == [2, 1]
