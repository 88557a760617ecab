"""Runtime dispatch on the CPU: table lookup, fallback, memoisation, input checks, no-GPU error."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kernels
from kernels.dispatch import (
    DEFAULT_TUNABLES,
    INT32_MAX,
    SKINNY_TUNABLES,
    Dispatcher,
    FallbackWarning,
    NoGpuError,
    cubin_for,
    kernel_config,
    lookup,
    make_entry,
    most_common_entry,
    operand,
)
from kernels.tuning_configs import TABLES, TuningConfig

SMALL = {"block_m": 16, "block_n": 64, "block_k": 64, "warps_m": 1, "warps_n": 4, "stages": 4, "split_k": 4, "group_m": 1}
MEDIUM = {"block_m": 64, "block_n": 128, "block_k": 64, "warps_m": 2, "warps_n": 4, "stages": 4, "split_k": 1, "group_m": 8}
LARGE = {"block_m": 128, "block_n": 256, "block_k": 64, "warps_m": 2, "warps_n": 4, "stages": 3, "split_k": 1, "group_m": 8}


def entry(tunables: dict[str, int], *, m: int, m_end: int, n: int = 4096, k: int = 4096) -> TuningConfig:
    """A table entry as codegen writes it (config_id from the tunables)."""
    full = make_entry(tunables=tunables, n=n, k=k)
    return TuningConfig(**{**full.__dict__, "m": m, "m_end": m_end})


class DeviceMatrix:
    """A minimal producer of the CUDA array interface (v3), as any GPU library exposes it."""

    def __init__(self, shape: tuple[int, ...], *, typestr: str = "<V2", ptr: int = 0x7F0000000000, strides: Any = None):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides, "version": 3,
        }


# --- lookup ----------------------------------------------------------------------------------

def test_first_matching_entry_wins_in_manifest_order() -> None:
    entries = [
        entry(SMALL, m=1, m_end=64, n=8192, k=8192),   # other (N, K): never matches 4096
        entry(MEDIUM, m=1, m_end=256),
        entry(LARGE, m=1, m_end=INT32_MAX),             # overlaps: shadowed below 256
    ]
    assert lookup(entries, m=100, n=4096, k=4096) == 1
    assert lookup(entries, m=300, n=4096, k=4096) == 2
    assert lookup(entries, m=5, n=8192, k=8192) == 0


def test_ranges_are_half_open() -> None:
    entries = [entry(SMALL, m=1, m_end=64), entry(MEDIUM, m=64, m_end=512)]
    assert lookup(entries, m=63, n=4096, k=4096) == 0
    assert lookup(entries, m=64, n=4096, k=4096) == 1
    assert lookup(entries, m=511, n=4096, k=4096) == 1
    assert lookup(entries, m=512, n=4096, k=4096) is None


def test_gap_and_unknown_nk_find_nothing() -> None:
    entries = [entry(SMALL, m=1, m_end=64), entry(LARGE, m=128, m_end=INT32_MAX)]
    assert lookup(entries, m=100, n=4096, k=4096) is None  # the gap [64, 128)
    assert lookup(entries, m=1, n=4096, k=1024) is None
    assert lookup(entries, m=1, n=1024, k=4096) is None


def test_most_common_entry_counts_winners_and_breaks_ties_by_order() -> None:
    assert most_common_entry([]) is None
    entries = [entry(SMALL, m=1, m_end=64), entry(LARGE, m=64, m_end=INT32_MAX),
               entry(LARGE, m=1, m_end=INT32_MAX, n=14336)]
    assert most_common_entry(entries).config_id == entries[1].config_id
    tied = [entry(MEDIUM, m=1, m_end=64), entry(SMALL, m=64, m_end=INT32_MAX)]
    assert most_common_entry(tied).config_id == tied[0].config_id


# --- fallback, warnings, memoisation -----------------------------------------------------------

def test_uncovered_shape_runs_the_most_common_winner_and_warns_once() -> None:
    entries = [entry(SMALL, m=1, m_end=64), entry(LARGE, m=64, m_end=INT32_MAX),
               entry(LARGE, m=1, m_end=INT32_MAX, n=14336)]
    table = Dispatcher(table="gemm_mma", entries=entries)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = table.decide(m=77, n=4096, k=1024)
        again = table.decide(m=77, n=4096, k=1024)
        other = table.decide(m=333, n=4096, k=1024)
    assert first.fallback and first.index is None
    assert first.entry.config_id == entries[1].config_id
    assert again is first
    messages = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(messages) == 2  # one per uncovered shape, not per call
    assert "M=77, N=4096, K=1024" in messages[0]
    assert "M=333, N=4096, K=1024" in messages[1]
    assert other.entry.config_id == entries[1].config_id


def test_fallback_prefers_the_most_common_winner_at_the_same_m() -> None:
    entries = [
        entry(SMALL, m=1, m_end=64), entry(LARGE, m=64, m_end=INT32_MAX),
        entry(SMALL, m=1, m_end=64, n=14336), entry(LARGE, m=64, m_end=INT32_MAX, n=14336),
        entry(MEDIUM, m=1, m_end=INT32_MAX, n=6144),
    ]
    table = Dispatcher(table="gemm_mma", entries=entries)
    assert table.fallback_entry.config_id == entries[0].config_id  # table-wide: SMALL (first of a tie)
    with pytest.warns(FallbackWarning, match="most common winner at this M"):
        small = table.decide(m=7, n=11008, k=4096)
    with pytest.warns(FallbackWarning, match="most common winner at this M"):
        large = table.decide(m=1000, n=11008, k=4096)
    assert small.entry.config_id == entries[0].config_id
    assert large.entry.config_id == entries[1].config_id  # not SMALL: M=1000 is outside its ranges


def test_empty_table_uses_the_size_heuristic() -> None:
    table = Dispatcher(table="gemm_mma", entries=[])
    with pytest.warns(FallbackWarning, match="table is empty"):
        small = table.decide(m=7, n=4096, k=4096)
    with pytest.warns(FallbackWarning):
        large = table.decide(m=4096, n=4096, k=4096)
    assert small.entry.block_m == SKINNY_TUNABLES["block_m"]
    assert large.entry.block_m == DEFAULT_TUNABLES["block_m"]
    assert (small.entry.n, small.entry.k) == (4096, 4096)


def test_covered_shapes_do_not_warn_and_are_memoised() -> None:
    entries = [entry(SMALL, m=1, m_end=64), entry(LARGE, m=64, m_end=INT32_MAX)]
    table = Dispatcher(table="gemm_mma", entries=entries)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decisions = [table.decide(m=m, n=4096, k=4096) for m in (1, 7, 1, 7, 4096, 4096)]
    assert [d.index for d in decisions] == [0, 0, 0, 0, 1, 1]
    assert decisions[0] is decisions[2]
    assert table.lookups == 3  # one table scan per distinct shape
    assert set(table.decisions) == {(1, 4096, 4096), (7, 4096, 4096), (4096, 4096, 4096)}


# --- the generated table and configurations ---------------------------------------------------

def test_every_generated_entry_matches_its_config_id_and_grid_defines() -> None:
    for table, entries in TABLES.items():
        for item in entries:
            config = kernel_config(item)
            defines = config.defines()
            assert config.id == item.config_id, (table, item)
            assert defines["THREADS"] == item.warps_m * item.warps_n * 32
            assert defines["BLOCK_M"] == item.block_m and defines["SPLIT_K"] == item.split_k


def test_entry_with_a_stale_config_id_is_a_clear_error() -> None:
    good = entry(MEDIUM, m=1, m_end=INT32_MAX)
    stale = TuningConfig(**{**good.__dict__, "config_id": "c0000000000"})
    with pytest.raises(ValueError, match="config_id c0000000000 but its tunables hash to"):
        kernel_config(stale)


def test_default_configuration_is_in_the_grid() -> None:
    from pipeline.grid import expand
    from pipeline.params import load_params, table_spec

    spec = table_spec(load_params(Path(kernels.__file__).parents[1] / "params.yaml"), "gemm_mma")
    kept = {config.id for config in expand(spec).kept}
    for tunables in (DEFAULT_TUNABLES, SKINNY_TUNABLES):
        assert make_entry(tunables=tunables, n=4096, k=4096).config_id in kept


@pytest.mark.nvcc
def test_cubin_comes_from_the_compile_cache_compiled_on_first_use() -> None:
    item = TABLES["gemm_mma"][0]
    path = Path(cubin_for(item))
    assert path.suffix == ".cubin" and path.is_file()
    assert b"gemm_mma" in path.read_bytes()  # the kernel's symbol is in the binary
    assert cubin_for(item) == str(path)  # a second call is a cache hit on the same file


# --- operands ----------------------------------------------------------------------------------

def test_bf16_device_matrix_is_accepted() -> None:
    op = operand("a", DeviceMatrix((77, 4096), ptr=0x1000))
    assert (op.ptr, op.rows, op.cols) == (0x1000, 77, 4096)


def test_wrong_dtype_is_rejected_with_the_typestr() -> None:
    with pytest.raises(TypeError, match=r"a: expected bfloat16 .*got '<f4'"):
        operand("a", DeviceMatrix((8, 8), typestr="<f4"))
    with pytest.raises(TypeError, match="float16"):
        operand("b", DeviceMatrix((8, 8), typestr="<f2"))


def test_host_arrays_and_other_objects_are_rejected() -> None:
    with pytest.raises(TypeError, match=r"a: expected a GPU matrix.*numpy\.ndarray \(host memory"):
        operand("a", np.zeros((8, 8), dtype=np.float32))
    with pytest.raises(TypeError, match="b: expected a GPU matrix"):
        operand("b", [[1.0]])


def test_layout_and_alignment_errors() -> None:
    with pytest.raises(ValueError, match="a: expected a 2-D matrix, got shape \\(64,\\)"):
        operand("a", DeviceMatrix((64,)))
    with pytest.raises(ValueError, match="b: must be C-contiguous row-major"):
        operand("b", DeviceMatrix((16, 32), strides=(2, 32)))  # a transposed view
    assert operand("a", DeviceMatrix((16, 32), strides=(64, 2))).cols == 32  # explicit row-major strides
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        operand("a", DeviceMatrix((16, 32), ptr=0x1002))


def test_mismatched_k_and_bad_n_k_are_rejected_before_any_gpu_work() -> None:
    with pytest.raises(ValueError, match="mismatched K: a is 7x4096 .* b is 4096x1024"):
        kernels.gemm(DeviceMatrix((7, 4096)), DeviceMatrix((4096, 1024)))
    with pytest.raises(ValueError, match="multiples of 8"):
        kernels.gemm(DeviceMatrix((7, 4100)), DeviceMatrix((4096, 4100)))
    with pytest.raises(ValueError, match="multiples of 8"):
        kernels.gemm(DeviceMatrix((7, 4096)), DeviceMatrix((4090, 4096)))


def test_wrong_out_shape_is_rejected() -> None:
    from kernels.dispatch import check_out

    with pytest.raises(ValueError, match=r"out: expected shape \(7, 4096\)"):
        check_out(operand("out", DeviceMatrix((4096, 7))), m=7, n=4096)


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
def test_no_gpu_is_a_clear_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(NoGpuError, match="needs pycuda and a CUDA GPU"):
            kernels.gemm(DeviceMatrix((7, 4096)), DeviceMatrix((4096, 4096)))


def test_import_needs_no_pycuda() -> None:
    import subprocess
    import sys

    code = "import sys, kernels; kernels.gemm; kernels.autotune; print('pycuda' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(kernels.__file__).parents[1])
    assert done.stdout.strip() == "False"


@pytest.mark.nvcc
def test_warm_cache_compiles_every_configuration_the_runtime_may_run() -> None:
    from kernels.dispatch import warm_cache

    statuses = warm_cache()
    expected = {item.config_id for item in TABLES["gemm_mma"]} | {
        make_entry(tunables=t, n=8, k=8).config_id for t in (DEFAULT_TUNABLES, SKINNY_TUNABLES)
    }
    assert set(statuses) == expected
    assert set(statuses.values()) == {"ok"}
