"""tunetable.compile and tunetable.kernels.jit without nvcc: ptxas parsing (real captured text), cache keys,
invalidation, records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunetable.compile import (
    FunctionResources,
    build_records,
    compile_document,
    main_function,
    parse_ptxas,
    resolve_workers,
)
from tunetable.kernels.jit import (
    CompileResult,
    cache_key,
    cache_paths,
    define_flags,
    first_error_lines,
    gencode,
    lookup,
)
from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.grid import DeviceLimits, Pruned
from tunetable.keys import kernel_source_hash

PTXAS = Path(__file__).parent / "fixtures" / "ptxas"
NVCC = "Build cuda_13.0.r13.0/compiler.36424714_0"


def test_parse_ptxas_two_kernels_with_spills() -> None:
    # Captured from nvcc 13.0 -Xptxas -v -maxrregcount=32 on sm_90a.
    functions = parse_ptxas((PTXAS / "two_kernels_spills_sm90a.txt").read_text())
    assert functions == {
        "other": FunctionResources(name="other", registers=10, smem_bytes=0, stack_bytes=0, spill_stores=0,
                                   spill_loads=0, barriers=1, entry=True),
        "spilly": FunctionResources(name="spilly", registers=32, smem_bytes=0, stack_bytes=2096, spill_stores=5508,
                                    spill_loads=6500, barriers=0, entry=True),
    }


def test_parse_ptxas_static_smem_and_stack() -> None:
    functions = parse_ptxas((PTXAS / "stack_smem_sm90a.txt").read_text())
    assert functions == {
        "scale": FunctionResources(name="scale", registers=32, smem_bytes=1024, stack_bytes=256, spill_stores=0,
                                   spill_loads=0, barriers=1, entry=True),
    }


def test_main_function_prefers_the_family_entry_else_the_hungriest_kernel() -> None:
    functions = parse_ptxas((PTXAS / "two_kernels_spills_sm90a.txt").read_text())
    assert main_function(functions, entry="other").name == "other"
    assert main_function(functions, entry="absent").name == "spilly"
    assert main_function(functions, entry=None).name == "spilly"
    assert main_function({}, entry=None) is None


def test_command_line_pieces() -> None:
    assert gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert gencode("sm_80") == "-gencode=arch=compute_80,code=sm_80"
    with pytest.raises(TuneTableError, match="arch 'ampere'"):
        gencode("ampere")
    assert define_flags({"BLOCK_M": 128, "SWIZZLE": True, "EPI": "relu", "OFF": False}) == [
        "-DBLOCK_M=128", "-DSWIZZLE=1", "-DEPI=relu", "-DOFF=0",
    ]


def test_first_error_lines_drop_ptxas_chatter_and_cap_length() -> None:
    stderr = ("ptxas info    : 0 bytes gmem\nk.cu(5): error: static assertion failed\n"
              + "".join(f"line {i}\n" for i in range(20)))
    lines = first_error_lines(stderr, limit=3).splitlines()
    assert lines == ["k.cu(5): error: static assertion failed", "line 0", "line 1"]


# --- cache keys and invalidation ---------------------------------------------------------

def key_for(kernel: Path, defines: dict, *, flags=("-O3",), nvcc: str = NVCC, arch: str = "sm_90a") -> str:
    """The cache key of one configuration of ``kernel``."""
    return cache_key(kernel_hash=kernel_source_hash(kernel), defines=defines, flags=list(flags), nvcc=nvcc, arch=arch)


def test_key_ignores_define_order_but_not_values() -> None:
    base = cache_key(kernel_hash="k", defines={"A": 1, "B": 2}, flags=["-O3"], nvcc=NVCC, arch="sm_90a")
    assert base == cache_key(kernel_hash="k", defines={"B": 2, "A": 1}, flags=["-O3"], nvcc=NVCC, arch="sm_90a")
    variants = [
        cache_key(kernel_hash="k2", defines={"A": 1, "B": 2}, flags=["-O3"], nvcc=NVCC, arch="sm_90a"),
        cache_key(kernel_hash="k", defines={"A": 1, "B": 3}, flags=["-O3"], nvcc=NVCC, arch="sm_90a"),
        cache_key(kernel_hash="k", defines={"A": 1}, flags=["-O3"], nvcc=NVCC, arch="sm_90a"),
        cache_key(kernel_hash="k", defines={"A": 1, "B": 2}, flags=["-O2"], nvcc=NVCC, arch="sm_90a"),
        cache_key(kernel_hash="k", defines={"A": 1, "B": 2}, flags=["-O3"], nvcc="Build cuda_12.8", arch="sm_90a"),
        cache_key(kernel_hash="k", defines={"A": 1, "B": 2}, flags=["-O3"], nvcc=NVCC, arch="sm_100a"),
    ]
    assert len({base, *variants}) == 1 + len(variants)


def test_changes_invalidate_exactly_the_affected_entries(tmp_path: Path) -> None:
    (tmp_path / "common.cuh").write_text("#define SCALE 2\n")
    with_header = tmp_path / "a.cu"
    with_header.write_text('#include "common.cuh"\n__global__ void a() {}\n')
    standalone = tmp_path / "b.cu"
    standalone.write_text("__global__ void b() {}\n")
    configs = [{"BLOCK": block, "STAGES": stages} for block in (64, 128) for stages in (3, 4)]

    def keys(flags=("-O3",), nvcc=NVCC) -> dict[tuple[str, int], str]:
        return {
            (kernel.name, index): key_for(kernel, defines, flags=flags, nvcc=nvcc)
            for kernel in (with_header, standalone)
            for index, defines in enumerate(configs)
        }

    def changed(before: dict, after: dict) -> set:
        return {name for name in before if before[name] != after[name]}

    original = keys()
    assert len(set(original.values())) == len(original)

    standalone.write_text("__global__ void b() { /* edited */ }\n")
    after_source = keys()
    assert changed(original, after_source) == {("b.cu", i) for i in range(4)}

    (tmp_path / "common.cuh").write_text("#define SCALE 3\n")
    after_header = keys()
    assert changed(after_source, after_header) == {("a.cu", i) for i in range(4)}

    # One define of one configuration: only that configuration's entry.
    edited = key_for(with_header, {**configs[2], "STAGES": 5})
    assert edited not in after_header.values()
    assert changed(after_header, keys(flags=("-O2",))) == set(after_header)
    assert changed(after_header, keys(nvcc="Build cuda_12.8")) == set(after_header)
    assert keys() == after_header  # nothing changed: every entry still hits


def test_lookup_treats_missing_or_torn_entries_as_misses(tmp_path: Path) -> None:
    key = "0" * 32
    cubin, sidecar = cache_paths(tmp_path, key)
    assert lookup(cache_dir=tmp_path, key=key) is None
    sidecar.write_text('{"key": "' + key + '", "status": "ok", "ptxas_lo')  # torn write
    assert lookup(cache_dir=tmp_path, key=key) is None
    sidecar.write_text(json.dumps({"key": key, "status": "ok", "ptxas_log": "", "compile_s": 1.5}))
    assert lookup(cache_dir=tmp_path, key=key) is None  # the sidecar says ok but there is no cubin
    cubin.write_bytes(b"\x7fELF")
    hit = lookup(cache_dir=tmp_path, key=key)
    assert hit is not None and hit.cached and hit.status == "ok" and hit.compile_s == 1.5 and hit.cubin == str(cubin)
    sidecar.write_text(json.dumps({"key": "f" * 32, "status": "ok"}))
    assert lookup(cache_dir=tmp_path, key=key) is None  # an entry for another key


def test_lookup_serves_cached_build_failures_without_a_cubin(tmp_path: Path) -> None:
    key = "1" * 32
    _, sidecar = cache_paths(tmp_path, key)
    sidecar.write_text(json.dumps({"key": key, "status": "build", "error": "k.cu(3): error: boom", "compile_s": 0.2}))
    hit = lookup(cache_dir=tmp_path, key=key)
    assert hit is not None and hit.status == "build" and hit.cubin is None and hit.error == "k.cu(3): error: boom"


# --- records and pruning -------------------------------------------------------------------

def config(threads: int, label: int) -> KernelConfig:
    """A configuration with a THREADS define."""
    return KernelConfig(family="none", params=(("ID", label),), derived=(("THREADS", threads),))


def test_records_prune_on_ptxas_resources_and_keep_build_failures() -> None:
    spilly_log = (PTXAS / "two_kernels_spills_sm90a.txt").read_text()
    smem_log = (PTXAS / "stack_smem_sm90a.txt").read_text()
    fits, too_many_regs, too_much_smem, broken, limit_pruned, rule_pruned = (
        config(256, 1), config(1024, 2), config(128, 3), config(128, 4), config(2048, 5), config(64, 6)
    )
    results = {
        fits.id: CompileResult(key="a", status="ok", cubin="/cache/a.cubin", compile_s=0.41234, ptxas_log=spilly_log),
        # 32 regs x 1024 threads = 32768 fits 65536; with a 16384 limit it does not.
        too_many_regs.id: CompileResult(key="b", status="ok", cubin="/cache/b.cubin", compile_s=0.5,
                                        ptxas_log=spilly_log),
        too_much_smem.id: CompileResult(key="c", status="ok", cubin="/cache/c.cubin", compile_s=0.3,
                                        ptxas_log=smem_log),
        broken.id: CompileResult(key="d", status="build", cubin=None, compile_s=0.2, ptxas_log="",
                                 error="k.cu(5): error: static assertion failed"),
    }
    limits = DeviceLimits(max_shared_bytes_per_block=512, max_registers_per_block=16384, max_threads_per_block=1024)
    records = build_records(
        [fits, too_many_regs, too_much_smem, broken],
        results=results,
        limits=limits,
        entry="spilly",
        grid_pruned=[Pruned(limit_pruned, "2048 threads > 1024 per block", "limit"),
                     Pruned(rule_pruned, "rules[0] 'x' is false", "rule")],
        relative_to="/cache",
    )
    summary = [(r.config_id, r.status, r.registers, r.smem_bytes, r.spill_bytes, r.stack_bytes, r.reason)
               for r in records]
    assert summary == [
        (fits.id, "ok", 32, 0, 5508 + 6500, 2096, None),
        (too_many_regs.id, "pruned", 32, 0, 12008, 2096, "32 registers x 1024 threads = 32768 > 16384 per block"),
        (too_much_smem.id, "pruned", 32, 1024, 0, 256, "1024 B shared memory > 512 B per block"),
        (broken.id, "build", None, None, None, None, None),
        (limit_pruned.id, "pruned", None, None, None, None, "2048 threads > 1024 per block"),
    ]
    assert records[0].cubin == "a.cubin" and records[0].compile_s == 0.412
    assert records[3].error == "k.cu(5): error: static assertion failed"
    document = compile_document(records, table="t", kernel_hash="h", nvcc=NVCC, arch="sm_90a", flags=["-O3"])
    assert set(document) >= {"table", "kernel_hash", "nvcc", "arch", "records"}
    expected_fields = {"config_id", "status", "cubin", "registers", "smem_bytes", "spill_bytes", "stack_bytes",
                       "compile_s", "error", "reason"}
    assert all(expected_fields <= set(record) and "cached" not in record for record in document["records"])


def test_resolve_workers_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNETABLE_COMPILE_WORKERS", "3")
    assert resolve_workers(requested=5, configured=2) == 5
    assert resolve_workers(requested=None, configured=2) == 3
    monkeypatch.delenv("TUNETABLE_COMPILE_WORKERS")
    assert resolve_workers(requested=None, configured=2) == 2
    assert resolve_workers(requested=None, configured=0) >= 1
    monkeypatch.setenv("TUNETABLE_COMPILE_WORKERS", "many")
    with pytest.raises(TuneTableError, match="TUNETABLE_COMPILE_WORKERS: expected a positive integer, got 'many'"):
        resolve_workers(requested=None, configured=0)


# --- the command without a compiler or a kernel -------------------------------------------

def _toy_params(folder: Path) -> None:
    """A one-table params.yaml whose kernel file does not exist."""
    import yaml

    params = {
        "tables": {
            "toy": {
                "family": "toy", "kernel": "kernels/absent.cu", "dtype": "bf16",
                "shapes": {"NK": [[64, 64]], "M": [1]},
                "grid": {"groups": [{"BLOCK": [64]}]},
                "codegen": {"manifest": "m.yaml", "snippet": "s", "target": "t.py", "begin_marker": "B",
                            "end_marker": "E", "source_label": "l"},
            }
        },
        "compile": {}, "bench": {}, "select": {},
    }
    (folder / "params.yaml").write_text(yaml.safe_dump(params))


def test_compile_without_nvcc_on_path_is_one_line_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    _toy_params(tmp_path)
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}  # a PATH with no CUDA toolkit on it
    done = subprocess.run(
        [sys.executable, "-m", "tunetable", "compile", "--table", "toy"], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "error: compile: nvcc not found on PATH (install the CUDA toolkit to compile)\n"
    assert not (tmp_path / "results").exists()


@pytest.mark.nvcc
def test_compile_with_a_missing_kernel_names_the_table_key(tmp_path: Path) -> None:
    import subprocess
    import sys

    _toy_params(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "tunetable", "compile", "--table", "toy"], cwd=tmp_path, capture_output=True, text=True,
        check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.endswith(
        "kernels/absent.cu: tables.toy.kernel: kernel source not found\n")
