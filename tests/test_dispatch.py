"""The runtime on the CPU: table lookup, fallback, memoisation, input checks, no-GPU error (kernels/runtime/)."""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunetable.kernels
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import INT32_MAX
from tunetable.kernels.families.common import covering_index as lookup
from tunetable.kernels.runtime.decide import (
    DISPATCH_LIST,
    Dispatcher,
    FallbackWarning,
    FamilyDispatcher,
    Untuned,
    make_entry,
    most_common_entry,
)
from tunetable.kernels.runtime.launch import NoGpuError, cubin_for, entry_defines
from tunetable.kernels.runtime.operands import check_out, operand
from tunetable.kernels.tuning_configs import TABLES, FamilyChoice, TuningConfig, WgmmaTuningConfig

DEFAULT_TUNABLES = asdict(FAMILIES["gemm_mma"].default_tunables)
SKINNY_TUNABLES = asdict(FAMILIES["gemm_mma"].skinny_tunables)
WGMMA_DEFAULT_TUNABLES = asdict(FAMILIES["gemm_wgmma"].default_tunables)
WGMMA_SKINNY_TUNABLES = asdict(FAMILIES["gemm_wgmma"].skinny_tunables)

SMALL = {"block_m": 16, "block_n": 64, "block_k": 64, "warps_m": 1, "warps_n": 4, "warps_k": 1, "stages": 4,
         "split_k": 4, "group_m": 1}
MEDIUM = {"block_m": 64, "block_n": 128, "block_k": 64, "warps_m": 2, "warps_n": 4, "warps_k": 1, "stages": 4,
          "split_k": 1, "group_m": 8}
LARGE = {"block_m": 128, "block_n": 256, "block_k": 64, "warps_m": 2, "warps_n": 4, "warps_k": 1, "stages": 3,
         "split_k": 1, "group_m": 8}


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

def test_every_generated_entry_compiles_with_the_grids_defines() -> None:
    """The runtime's defines of each table entry are exactly what the grid gave the bench for its config id."""
    from tunetable.grid import expand
    from tunetable.params import load_params, table_spec

    params = load_params(Path(tunetable.kernels.__file__).parents[1] / "params.yaml")
    for table, entries in TABLES.items():
        grid = {config.id: config for config in expand(table_spec(params, table)).kept}
        for item in entries:
            assert entry_defines(item) == grid[item.config_id].defines(), (table, item)


def test_every_generated_dispatch_entry_names_its_tables_entry() -> None:
    """The dispatch list's config ids are what the named table's own lookup gives (both generated together)."""
    from tunetable.kernels.tuning_configs import DISPATCH

    for choice in DISPATCH[DISPATCH_LIST]:
        entries = TABLES[choice.table]
        for m in {choice.m, choice.m_end - 1}:
            index = lookup(entries, m=m, n=choice.n, k=choice.k)
            assert index is not None, choice
            assert (entries[index].config_id, entries[index].kernel) == (choice.config_id, choice.kernel), choice


def test_entry_with_a_stale_config_id_is_a_clear_error() -> None:
    good = entry(MEDIUM, m=1, m_end=INT32_MAX)
    stale = TuningConfig(**{**good.__dict__, "config_id": "c0000000000"})
    with pytest.raises(ValueError, match="config_id c0000000000 but its tunables hash to"):
        entry_defines(stale)


def test_default_configuration_is_in_the_grid() -> None:
    from tunetable.grid import expand
    from tunetable.params import load_params, table_spec

    spec = table_spec(load_params(Path(tunetable.kernels.__file__).parents[1] / "params.yaml"), "gemm_mma")
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
        tunetable.kernels.gemm(DeviceMatrix((7, 4096)), DeviceMatrix((4096, 1024)))
    with pytest.raises(ValueError, match="multiples of 8"):
        tunetable.kernels.gemm(DeviceMatrix((7, 4100)), DeviceMatrix((4096, 4100)))
    with pytest.raises(ValueError, match="multiples of 8"):
        tunetable.kernels.gemm(DeviceMatrix((7, 4096)), DeviceMatrix((4090, 4096)))


def test_wrong_out_shape_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"out: expected shape \(7, 4096\)"):
        check_out(operand("out", DeviceMatrix((4096, 7))), m=7, n=4096)


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
def test_no_gpu_is_a_clear_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(NoGpuError, match="needs pycuda and a CUDA GPU"):
            tunetable.kernels.gemm(DeviceMatrix((7, 4096)), DeviceMatrix((4096, 4096)))


def test_import_needs_no_pycuda() -> None:
    import subprocess
    import sys

    code = "import sys, tunetable; tunetable.gemm; tunetable.autotune; print('pycuda' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(tunetable.kernels.__file__).parents[1])
    assert done.stdout.strip() == "False"


# --- the cross-family dispatch list ------------------------------------------------------------

def wgmma_entry(tunables: dict[str, int], *, m: int, m_end: int, n: int = 4096, k: int = 4096) -> WgmmaTuningConfig:
    full = make_entry(tunables=tunables, n=n, k=k, kernel="gemm_wgmma")
    return WgmmaTuningConfig(**{**full.__dict__, "m": m, "m_end": m_end})


def choice(table: str, *, m: int, m_end: int, config_id: str, n: int = 4096, k: int = 4096,
           speedup_vs_cublas: float = 1.05) -> FamilyChoice:
    return FamilyChoice(m=m, m_end=m_end, n=n, k=k, kernel=table, table=table, config_id=config_id,
                        speedup_vs_cublas=speedup_vs_cublas)


def family_dispatcher() -> FamilyDispatcher:
    """gemm_mma serves M < 64 and M >= 4096 of (4096, 4096), gemm_wgmma the Ms between; nothing else."""
    mma = [entry(SMALL, m=1, m_end=64), entry(LARGE, m=64, m_end=INT32_MAX),
           entry(MEDIUM, m=1, m_end=INT32_MAX, n=14336)]
    wgmma = [wgmma_entry(WGMMA_SKINNY_TUNABLES, m=1, m_end=256),
             wgmma_entry(WGMMA_DEFAULT_TUNABLES, m=256, m_end=INT32_MAX)]
    choices = [choice("gemm_mma", m=1, m_end=64, config_id=mma[0].config_id),
               choice("gemm_wgmma", m=64, m_end=256, config_id=wgmma[0].config_id),
               choice("gemm_wgmma", m=256, m_end=4096, config_id=wgmma[1].config_id),
               choice("gemm_mma", m=4096, m_end=INT32_MAX, config_id=mma[1].config_id)]
    return FamilyDispatcher(choices=choices, tables={"gemm_mma": mma, "gemm_wgmma": wgmma})


def test_dispatch_list_picks_the_table_then_the_table_picks_the_configuration() -> None:
    dispatch = family_dispatcher()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        picks = {m: dispatch.decide(m=m, n=4096, k=4096) for m in (1, 63, 64, 255, 256, 4095, 4096, 10**6)}
    assert {m: d.entry.kernel for m, d in picks.items()} == {
        1: "gemm_mma", 63: "gemm_mma", 64: "gemm_wgmma", 255: "gemm_wgmma", 256: "gemm_wgmma", 4095: "gemm_wgmma",
        4096: "gemm_mma", 10**6: "gemm_mma"}
    assert picks[64].entry.block_m == 64 and picks[256].entry.consumers == 2 and picks[4096].entry.warps_n == 4
    assert all(d.choice is not None and d.choice.table == d.entry.kernel and not d.fallback for d in picks.values())
    assert picks[255].choice.config_id == picks[255].entry.config_id
    assert dispatch.decide(m=64, n=4096, k=4096) is picks[64]  # memoised


def test_shapes_the_list_does_not_cover_go_to_gemm_mma_as_before() -> None:
    dispatch = family_dispatcher()
    covered = dispatch.decide(m=77, n=14336, k=4096)  # no dispatch entry, gemm_mma has the (N, K)
    assert covered.choice is None and covered.entry.kernel == "gemm_mma" and not covered.fallback

    def gemm_like(**shape: int):  # tunetable.kernels.gemm calls decide from one level below its caller
        return dispatch.decide(**shape)

    with pytest.warns(FallbackWarning, match="gemm_mma: no tuned entry for M=77, N=2048, K=1024") as caught:
        uncovered = gemm_like(m=77, n=2048, k=1024)
    assert uncovered.fallback and uncovered.entry.kernel == "gemm_mma"
    assert caught[0].filename == __file__  # the warning names gemm()'s caller (here: this test)


def test_an_empty_family_table_runs_its_own_heuristic() -> None:
    dispatch = FamilyDispatcher(choices=[choice("gemm_wgmma", m=1, m_end=INT32_MAX, config_id="c0")],
                                tables={"gemm_mma": [], "gemm_wgmma": []})
    with pytest.warns(FallbackWarning, match="gemm_wgmma: no tuned entry .* the table is empty"):
        small = dispatch.decide(m=7, n=4096, k=4096)
    with pytest.warns(FallbackWarning):
        large = dispatch.decide(m=4096, n=4096, k=4096)
    assert isinstance(small.entry, WgmmaTuningConfig) and small.entry.block_m == WGMMA_SKINNY_TUNABLES["block_m"]
    assert large.entry.consumers == WGMMA_DEFAULT_TUNABLES["consumers"]


def test_a_dispatch_list_naming_an_unknown_table_is_refused() -> None:
    with pytest.raises(ValueError, match="dispatch list names unknown tables gemm_other"):
        FamilyDispatcher(choices=[choice("gemm_other", m=1, m_end=8, config_id="c0")], tables={"gemm_mma": []})


def test_the_process_wide_dispatcher_is_the_generated_one_and_can_be_replaced() -> None:
    from tunetable.kernels.runtime import decide as module
    from tunetable.kernels.tuning_configs import DISPATCH

    generated = module.dispatcher()
    assert isinstance(generated, FamilyDispatcher) and generated.choices == tuple(DISPATCH[DISPATCH_LIST])
    assert module.dispatcher("gemm_mma") is generated.tables["gemm_mma"]
    assert module.dispatcher("gemm_mma").entries == tuple(TABLES["gemm_mma"])
    custom = family_dispatcher()
    try:
        module.set_dispatcher(custom)
        assert module.dispatcher() is custom
    finally:
        module.set_dispatcher(None)
    assert module.dispatcher() is not custom and module.dispatcher().choices == generated.choices


def test_make_entry_names_missing_and_unknown_tunables() -> None:
    with pytest.raises(ValueError, match=r"gemm_wgmma: tunables must be .* \(missing: cluster_m, cluster_n, consumers, "
                                         "raster, tail_split; unknown: warps_k, warps_m, warps_n"):
        make_entry(tunables=SMALL, n=4096, k=4096, kernel="gemm_wgmma")
    with pytest.raises(ValueError, match="unknown kernel family 'gemm_nope'"):
        make_entry(tunables=SMALL, n=4096, k=4096, kernel="gemm_nope")


def test_wgmma_entries_hash_like_the_grid() -> None:
    """A wgmma entry's config id and defines are the grid's (derived THREADS and SMEM_BYTES included)."""
    from tunetable.grid import expand
    from tunetable.params import load_params, table_spec

    spec = table_spec(load_params(Path(tunetable.kernels.__file__).parents[1] / "params.yaml"), "gemm_wgmma")
    by_id = {config.id: config for config in expand(spec).kept}
    for tunables in (WGMMA_DEFAULT_TUNABLES, WGMMA_SKINNY_TUNABLES):
        item = make_entry(tunables=tunables, n=4096, k=4096, kernel="gemm_wgmma")
        assert entry_defines(item) == by_id[item.config_id].defines()


def test_struct_plan_keeps_one_argument_set_per_address_triple() -> None:
    """The TMA plan's argument cache (exercised with gemm_mma's pointers: no libcuda needed here)."""
    from tunetable.kernels.runtime.launch import ARGUMENT_CACHE_SIZE, ShapePlan
    from tunetable.kernels.runtime.plan import LaunchPlan

    driver_kernel = object()  # a plan with a driver kernel builds kernelParams (ctypes), never packed bytes
    plan = ShapePlan(plan=LaunchPlan(family=FAMILIES["gemm_mma"], defines={}, m=7, n=4096, k=4096, grid=(1, 1, 1),
                                     block=(128, 1, 1), smem_bytes=0, workspace_ptr=0x5000, kernel=driver_kernel))
    first = plan.arguments_for(0x1000, 0x2000, 0x3000)
    assert plan.arguments_for(0x1000, 0x2000, 0x3000) is first and plan.encodes == 1
    assert [item.value for item in first.storage] == [0x1000, 0x2000, 0x3000, 0x5000, 7, 4096, 4096]
    # A stream's own workspace is part of the address set: another workspace, another argument set.
    other = plan.arguments_for(0x1000, 0x2000, 0x3000, 0x9000)
    assert other is not first and [item.value for item in other.storage][3] == 0x9000 and plan.encodes == 2
    assert plan.arguments_for(0x1000, 0x2000, 0x3000) is first and plan.encodes == 2
    for index in range(ARGUMENT_CACHE_SIZE):
        plan.arguments_for(0x10000 * (index + 2), 0x2000, 0x3000)
    assert len(plan.arguments) == ARGUMENT_CACHE_SIZE and (0x1000, 0x2000, 0x3000, None) not in plan.arguments
    assert plan.encodes == 2 + ARGUMENT_CACHE_SIZE


def test_pointer_plans_pack_the_familys_arguments_per_call() -> None:
    from tunetable.kernels.runtime.plan import LaunchPlan

    plan = LaunchPlan(family=FAMILIES["gemm_mma"], defines={}, m=7, n=4096, k=4096, grid=(1, 1, 1),
                      block=(128, 1, 1), smem_bytes=0, workspace_ptr=0x5000)
    import struct

    assert plan.arguments(0x1000, 0x2000, 0x3000) == struct.pack("PPPPiii", 0x1000, 0x2000, 0x3000, 0x5000,
                                                                 7, 4096, 4096)


def test_an_untuned_chooser_answers_before_the_fallback() -> None:
    """The seam a shape selector plugs into: asked only for shapes no entry covers; None falls back."""
    entries = [entry(SMALL, m=1, m_end=64), entry(LARGE, m=64, m_end=INT32_MAX)]
    picked = entry(MEDIUM, m=1, m_end=INT32_MAX, n=2048, k=1024)
    asked = []

    def chooser(*, table: str, family: str, m: int, n: int, k: int) -> Untuned | None:
        asked.append((table, family, m, n, k))
        return Untuned(entry=picked, why="the selector's pick") if n == 2048 else None

    table = Dispatcher(table="gemm_mma", entries=entries, untuned=chooser)
    assert table.decide(m=7, n=4096, k=4096).index == 0 and asked == []
    with pytest.warns(FallbackWarning, match="running the selector's pick"):
        chosen = table.decide(m=77, n=2048, k=1024)
    assert chosen.entry is picked and chosen.fallback
    with pytest.warns(FallbackWarning, match="most common winner"):
        table.decide(m=77, n=8192, k=1024)
    assert asked == [("gemm_mma", "gemm_mma", 77, 2048, 1024), ("gemm_mma", "gemm_mma", 77, 8192, 1024)]


@pytest.mark.nvcc
def test_warm_cache_compiles_the_wgmma_tables_configurations() -> None:
    from tunetable.kernels.runtime.launch import warm_cache

    statuses = warm_cache(table="gemm_wgmma")
    expected = {item.config_id for item in TABLES["gemm_wgmma"]} | {
        make_entry(tunables=t, n=8, k=8, kernel="gemm_wgmma").config_id
        for t in (WGMMA_DEFAULT_TUNABLES, WGMMA_SKINNY_TUNABLES)
    }
    assert set(statuses) == expected and set(statuses.values()) == {"ok"}


@pytest.mark.nvcc
def test_warm_cache_compiles_every_configuration_the_runtime_may_run() -> None:
    from tunetable.kernels.runtime.launch import warm_cache

    statuses = warm_cache()
    expected = {item.config_id for item in TABLES["gemm_mma"]} | {
        make_entry(tunables=t, n=8, k=8).config_id for t in (DEFAULT_TUNABLES, SKINNY_TUNABLES)
    }
    assert set(statuses) == expected
    assert set(statuses.values()) == {"ok"}


class FakeLoader:
    """The two kernel handles build_plan asks a loader for, recording what was asked (no GPU here)."""

    def __init__(self, *, fits: int):
        self.fits = fits
        self.asked: list[tuple[str, str, str, int]] = []

    def function(self, cubin: str, entry: str, smem_bytes: int) -> str:
        self.asked.append(("function", cubin, entry, smem_bytes))
        return "pycuda-function"

    def driver_kernel(self, cubin: str, entry: str, smem_bytes: int) -> Any:
        self.asked.append(("driver", cubin, entry, smem_bytes))
        fits = self.fits

        class Kernel:
            def resident_grid(self, *, grid, block, smem_bytes, cluster):
                from tunetable.kernels.driver import cut_to_resident

                return cut_to_resident(grid, cluster=cluster, fits=fits), fits
        return Kernel()


def test_the_launch_plan_builder_of_bench_and_runtime() -> None:
    """Pointer kernels load through pycuda with the family's geometry; struct kernels through libcuda, the
    persistent grid cut to the clusters resident at once; the workspace is asked for once, sized by the family."""
    from tunetable.kernels.runtime.plan import build_plan

    mma, wgmma = FAMILIES["gemm_mma"], FAMILIES["gemm_wgmma"]
    split = {name.upper(): value for name, value in {**SKINNY_TUNABLES, "split_k": 4}.items()}
    defines = mma.defines_of(mma.tunables(**{**SKINNY_TUNABLES, "split_k": 4}))
    assert defines == {**split, **mma.derived(split)}
    asked: list[int] = []
    loader = FakeLoader(fits=0)
    plan = build_plan(loader=loader, family=mma, defines=defines, cubin="a.cubin",
                      geometry=mma.launch(defines, 7, 4096, 4096), m=7, n=4096, k=4096,
                      workspace=lambda nbytes: asked.append(nbytes) or 0x9000)
    assert loader.asked == [("function", "a.cubin", "gemm_mma", mma.smem_bytes(defines))]
    assert (plan.function, plan.kernel, plan.workspace_ptr) == ("pycuda-function", None, 0x9000)
    assert asked == [mma.launch(defines, 7, 4096, 4096).workspace_bytes] and plan.grid == (64, 1, 4)

    pair = wgmma.defines_of(wgmma.tunables(**{**WGMMA_DEFAULT_TUNABLES, "cluster_m": 2}))
    geometry = wgmma.launch(pair, 4096, 4096, 4096)
    assert geometry.grid == (132, 1, 1)
    cut = build_plan(loader=FakeLoader(fits=60), family=wgmma, defines=pair, cubin="b.cubin", geometry=geometry,
                     m=4096, n=4096, k=4096, workspace=lambda nbytes: 0)
    assert cut.kernel is not None and cut.function is None
    assert (cut.grid, cut.max_active_clusters, cut.workspace_ptr) == ((120, 1, 1), 60, 0)
