"""The tunetable::gemm operator's C++ kernel, the parts that need no torch: the switch, the cache folder and key,
the compiler and its command, the build (a stand-in compiler: success, failure, timeout, never half a file) and
the argument sets the C++ kernel launches with (packed from a prepared launch, libcuda replaced)."""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from pathlib import Path

import pytest

from tunetable.kernels.runtime import torch_ext
from tunetable.kernels.runtime.prepared import C_SENTINEL


def test_the_switch_reads_tunetable_torch_ext() -> None:
    assert torch_ext.enabled({}) and torch_ext.enabled({"TUNETABLE_TORCH_EXT": "1"})   # on by default
    for off in ("0", "false", "OFF", " no "):
        assert not torch_ext.enabled({"TUNETABLE_TORCH_EXT": off}), off


def _stand_in_torch(cuda: str | None) -> object:
    """What ``load`` reads of torch before building: its version and the CUDA it was built with."""
    version = type("version", (), {"cuda": cuda})
    return type("torch", (), {"version": version, "__version__": "2.11.0"})


def test_a_torch_without_cuda_builds_nothing_and_warns_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                 recwarn: pytest.WarningsRecorder) -> None:
    monkeypatch.setattr(torch_ext, "_status", {})
    monkeypatch.delenv("TUNETABLE_TORCH_EXT", raising=False)
    found = torch_ext.load(_stand_in_torch(None))
    assert not found.loaded and found.reason == "torch 2.11.0 is built without CUDA"
    assert not [w for w in recwarn if issubclass(w.category, torch_ext.TorchExtensionWarning)]


def test_switched_off_nothing_is_built_and_the_reason_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                                       recwarn: pytest.WarningsRecorder) -> None:
    monkeypatch.setattr(torch_ext, "_status", {})
    monkeypatch.setenv("TUNETABLE_TORCH_EXT", "off")
    found = torch_ext.load(_stand_in_torch("13.0"))
    assert not found.loaded and found.reason == "TUNETABLE_TORCH_EXT=off" and not recwarn.list


def test_a_cuda_torch_that_cannot_build_warns_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(torch_ext, "_status", {})
    monkeypatch.delenv("TUNETABLE_TORCH_EXT", raising=False)
    monkeypatch.setenv("TUNETABLE_TORCH_EXT_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-compiler"))
    stand_in = _stand_in_torch("13.0")
    stand_in._C = type("_C", (), {"_GLIBCXX_USE_CXX11_ABI": True})
    with pytest.warns(torch_ext.TorchExtensionWarning, match="no C.. compiler"):
        found = torch_ext.load(stand_in)
    assert not found.loaded and torch_ext.load(stand_in) is found   # decided once per process
    assert list(tmp_path.iterdir()) == []


def test_the_cache_folder_follows_its_variable_then_xdg(tmp_path: Path) -> None:
    assert torch_ext.cache_root({"TUNETABLE_TORCH_EXT_CACHE": str(tmp_path)}) == tmp_path
    assert torch_ext.cache_root({"XDG_CACHE_HOME": "/x/cache"}) == Path("/x/cache/tunetable/torch_ext")
    assert torch_ext.cache_root({}) == Path.home() / ".cache" / "tunetable" / "torch_ext"


def test_the_cache_key_changes_with_each_input_and_nothing_else() -> None:
    base = dict(source=b"int x;", torch_version="2.11.0+cu130", cuda_version="13.0", python_tag="cpython-312",
                cxx11_abi=True)
    key = torch_ext.cache_key(**base)
    assert key == torch_ext.cache_key(**base) and len(key) == 20
    changed = {"source": b"int y;", "torch_version": "2.11.1+cu130", "cuda_version": "12.8",
               "python_tag": "cpython-311", "cxx11_abi": False}
    keys = {name: torch_ext.cache_key(**{**base, name: value}) for name, value in changed.items()}
    assert key not in keys.values() and len(set(keys.values())) == len(keys)


def fake_compiler(folder: Path, body: str) -> str:
    """An executable shell script standing in for c++ (``body`` runs with the compiler's arguments)."""
    path = folder / "fake-c++"
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


# Writes "built" to the file after -o, as a compiler writes its output.
WRITES_OUTPUT = 'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then echo built > "$2"; fi; shift; done'


def test_the_compiler_is_cxx_else_cpp_else_gpp(tmp_path: Path) -> None:
    compiler = fake_compiler(tmp_path, "exit 0")
    assert torch_ext.find_compiler({"CXX": compiler}) == compiler
    assert torch_ext.find_compiler({"CXX": str(tmp_path / "missing")}) is None


def test_the_command_builds_a_shared_library_against_torchs_folders(tmp_path: Path) -> None:
    command = torch_ext.build_command(compiler="g++", source=Path("/src/torch_fast.cpp"), output=tmp_path / "x.so",
                                      include_dirs=["/t/include", "/cuda/include"], library_dirs=["/t/lib"],
                                      cxx11_abi=False)
    assert command[0] == "g++" and {"-shared", "-fPIC", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0"} <= set(command)
    assert command.index("-I/t/include") < command.index("-I/cuda/include") < command.index("/src/torch_fast.cpp")
    assert command[command.index("-o") + 1] == str(tmp_path / "x.so")
    assert {"-L/t/lib", "-Wl,-rpath,/t/lib", "-lc10", "-ltorch_cpu", "-ltorch_cuda", "-ldl"} <= set(command)
    assert "-lcuda" not in command and "-lcudart" not in command   # libcuda is dlopen'ed, no toolkit library


def test_a_build_renames_the_finished_library_into_place_and_leaves_no_temp(tmp_path: Path) -> None:
    output = tmp_path / "cache" / "key" / "lib.so"
    command = [fake_compiler(tmp_path, WRITES_OUTPUT), "x.cpp", "-o", str(output)]
    assert torch_ext.build(command=command, output=output) is None
    assert output.read_text() == "built\n"
    assert sorted(item.name for item in output.parent.iterdir()) == ["build.log", "lib.so"]


def test_a_failed_build_says_why_and_leaves_the_entry_untouched(tmp_path: Path) -> None:
    output = tmp_path / "key" / "lib.so"
    compiler = fake_compiler(tmp_path, WRITES_OUTPUT + '\necho "x.cpp:3:1: error: boom" >&2\nexit 1')
    why = torch_ext.build(command=[compiler, "x.cpp", "-o", str(output)], output=output)
    assert why.startswith("the compiler failed (exit 1): x.cpp:3:1: error: boom (full log: ")
    assert not output.exists() and [item.name for item in output.parent.iterdir()] == ["build.log"]
    assert "error: boom" in (output.parent / "build.log").read_text()


def test_a_build_past_its_time_is_stopped_and_leaves_nothing(tmp_path: Path) -> None:
    output = tmp_path / "key" / "lib.so"
    compiler = fake_compiler(tmp_path, "exec sleep 30")
    why = torch_ext.build(command=[compiler, "-o", str(output)], output=output, timeout_s=0.5)
    assert why == "the compiler ran past 0.5 s" and list(output.parent.iterdir()) == []


def test_a_cache_folder_that_cannot_be_written_is_a_reason_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    output = blocker / "key" / "lib.so"
    why = torch_ext.build(command=[fake_compiler(tmp_path, WRITES_OUTPUT), "-o", str(output)], output=output)
    assert why.startswith(f"cannot write the cache folder {blocker / 'key'} (")


def test_a_build_whose_compiler_cannot_run_says_so(tmp_path: Path) -> None:
    output = tmp_path / "key" / "lib.so"
    why = torch_ext.build(command=[str(tmp_path / "no-such-c++"), "-o", str(output)], output=output)
    assert why.startswith("the compiler could not run (") and not output.exists()


def test_arguments_are_packed_each_at_its_own_alignment() -> None:
    pointer, scalar, tensor_map = b"\x11" * 8, b"\x22" * 4, b"\x33" * 128
    blob, offsets = torch_ext.pack_arguments([pointer, scalar, tensor_map, pointer, scalar, scalar])
    assert offsets == (0, 8, 64, 192, 200, 204) and len(blob) == 208
    assert blob[8:12] == scalar and blob[12:64] == bytes(52) and blob[64:192] == tensor_map
    # The TMA families' layout, 128s128sPPiii: the tensor maps first, no padding anywhere.
    assert torch_ext.pack_arguments([tensor_map, tensor_map, pointer, pointer, scalar, scalar, scalar])[1] == (
        0, 128, 256, 264, 272, 276, 280)


def test_a_prepared_launchs_argument_set_becomes_the_c_kernels_route_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """gemm_mma's pointer arguments (A, B, C, workspace, then M, N, K) from a prepared launch (libcuda replaced)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_runtime_frontend import RecordingLibcuda, prepared_launch

    prepared = prepared_launch(monkeypatch, RecordingLibcuda(context=0x77))
    found = prepared.encode(0x1000, 0x2000)
    route, blob = torch_ext.fast_route(prepared, found)
    assert route == torch_ext.FastRoute(function=0x4242, geometry=(64, 1, 2, 128, 1, 1, 4096), context=0x77,
                                        offsets=(0, 8, 16, 24, 32, 36, 40), c_slot=2, size=44)
    assert struct.unpack_from("<4Q", blob) == (0x1000, 0x2000, C_SENTINEL, 0x5000)
    assert struct.unpack_from("<3i", blob, 32) == (7, 4096, 4096)
    # The bytes are the argument set's own: what the Python prepared launch hands cuLaunchKernel.
    arguments, _ = found
    assert blob[32:36] == bytes(arguments.storage[4]) and ctypes.sizeof(arguments.storage[0]) == 8


@pytest.mark.skipif(os.name != "posix", reason="a shell-script compiler")
def test_the_extension_is_never_half_written_when_two_builds_race(tmp_path: Path) -> None:
    """Each build compiles into its own temp folder and renames: both finish with one whole file."""
    import threading

    output = tmp_path / "key" / "lib.so"
    compiler = fake_compiler(tmp_path, "sleep 0.3\n" + WRITES_OUTPUT)
    results: list[str | None] = []
    threads = [threading.Thread(target=lambda: results.append(torch_ext.build(
        command=[compiler, "-o", str(output)], output=output))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [None, None] and output.read_text() == "built\n"
    assert sorted(item.name for item in output.parent.iterdir()) == ["build.log", "lib.so"]
