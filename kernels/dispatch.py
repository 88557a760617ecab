"""Runtime dispatch: ``gemm(a, b)`` picks a kernel family, then its configuration, from generated tables.

Two steps, both with the lookup of kernels/tuning_configs.py (among the entries with this N and
K, the first, in manifest order, whose half-open range [m, m_end) holds M wins):

1. the dispatch list (``DISPATCH["gemm_dispatch"]``, ``FamilyChoice`` entries) names the table,
   i.e. the kernel family, that serves the shape; a shape it does not cover goes to gemm_mma;
2. that table gives the configuration. A shape the table does not cover runs the table's most
   common winner among the entries whose M range holds M (else the most common winner overall,
   or, for an empty table, a size heuristic of the family) and warns once naming the shape.

Decisions are memoised per shape, and so are the launch plans (function handles, geometry,
split-K workspace; for the TMA family also the encoded tensor maps per operand addresses), so a
call after the first costs a dictionary lookup, a few attribute reads and the launch itself.

The decision logic (``lookup``, ``most_common_entry``, ``Dispatcher``) and the input checks
(``operand``) are pure Python; pycuda is imported only when a kernel is about to run, so
``import tunetable.kernels`` works on a machine without a GPU.
"""

from __future__ import annotations

import atexit
import struct
import sys
import threading
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from tunetable.kernels.tuning_configs import (
    DISPATCH,
    TABLES,
    FamilyChoice,
    SwapTuningConfig,
    TuningConfig,
    WgmmaTuningConfig,
)

TABLE = "gemm_mma"             # the table that serves shapes the dispatch list does not cover
DISPATCH_LIST = "gemm_dispatch"
ROOT = Path(__file__).resolve().parents[1]
PARAMS_PATH = ROOT / "params.yaml"
INT32_MAX = 2**31 - 1
ALIGNMENT = 16  # bytes: cp.async moves 16-byte chunks
SHAPE_FIELDS = ("m", "m_end", "n", "k", "kernel", "config_id")
# The generated entry class of each family's table.
ENTRY_TYPES: Mapping[str, type] = {
    "gemm_mma": TuningConfig, "gemm_wgmma": WgmmaTuningConfig, "gemm_wgmma_swap": SwapTuningConfig,
}
Entry = TuningConfig | WgmmaTuningConfig | SwapTuningConfig
# The tunables of a table entry, in the generated dataclass's order (= the grid's order).
TUNABLE_FIELDS = tuple(f.name for f in fields(TuningConfig) if f.name not in SHAPE_FIELDS)
# TMA kernels: encoded argument sets kept per plan, one per (A, B, C) address triple seen.
ARGUMENT_CACHE_SIZE = 16

# The untuned default: a mid-sized tile that is valid for the kernel on every shape. It is what
# the benchmark compares the tuned table against, and what an empty table falls back to for
# large M (small M gets a narrow tile; see ``heuristic_tunables``).
DEFAULT_TUNABLES: Mapping[str, int] = {
    "block_m": 128, "block_n": 128, "block_k": 32, "warps_m": 2, "warps_n": 2, "warps_k": 1,
    "stages": 3, "split_k": 1, "group_m": 8,
}
SKINNY_TUNABLES: Mapping[str, int] = {
    "block_m": 16, "block_n": 64, "block_k": 64, "warps_m": 1, "warps_n": 4, "warps_k": 1,
    "stages": 4, "split_k": 1, "group_m": 1,
}
SKINNY_MAX_M = 32
# The same two roles for gemm_wgmma (both in its default grid).
WGMMA_DEFAULT_TUNABLES: Mapping[str, int] = {
    "block_m": 128, "block_n": 256, "block_k": 64, "stages": 4, "consumers": 2,
    "cluster_m": 1, "cluster_n": 1, "raster": 1, "group_m": 8, "split_k": 1,
}
WGMMA_SKINNY_TUNABLES: Mapping[str, int] = {
    "block_m": 64, "block_n": 128, "block_k": 128, "stages": 4, "consumers": 1,
    "cluster_m": 1, "cluster_n": 1, "raster": 0, "group_m": 1, "split_k": 2,
}
# gemm_wgmma_swap: the M tile is the wgmma n; 64 columns with 2 splits for skinny M, 128 without for the rest.
SWAP_SKINNY_TUNABLES: Mapping[str, int] = {
    "block_m": 64, "block_n": 128, "block_k": 128, "stages": 4, "consumers": 1, "split_k": 2,
}
SWAP_DEFAULT_TUNABLES: Mapping[str, int] = {
    "block_m": 128, "block_n": 128, "block_k": 64, "stages": 4, "consumers": 2, "split_k": 1,
}
HEURISTICS: Mapping[str, tuple[Mapping[str, int], Mapping[str, int]]] = {
    "gemm_mma": (SKINNY_TUNABLES, DEFAULT_TUNABLES),
    "gemm_wgmma": (WGMMA_SKINNY_TUNABLES, WGMMA_DEFAULT_TUNABLES),
    "gemm_wgmma_swap": (SWAP_SKINNY_TUNABLES, SWAP_DEFAULT_TUNABLES),
}


class FallbackWarning(UserWarning):
    """A shape is not covered by the tuning table: an untuned configuration runs instead."""


class NoGpuError(RuntimeError):
    """pycuda or a CUDA device is missing: GEMMs cannot run on this machine."""


@dataclass(frozen=True)
class Decision:
    """The configuration chosen for one shape, and whether the table supplied it."""

    entry: Entry
    index: int | None  # position in the table; None for a fallback
    fallback: bool
    choice: FamilyChoice | None = None  # the dispatch-list entry that picked the table, if any


# --- pure decision logic ---------------------------------------------------------------------

def lookup(entries: Sequence[Entry | FamilyChoice], *, m: int, n: int, k: int) -> int | None:
    """Index of the first entry with this N and K whose [m, m_end) holds M, or None."""
    for index, entry in enumerate(entries):
        if entry.n == n and entry.k == k and entry.m <= m < entry.m_end:
            return index
    return None


def most_common_entry(entries: Sequence[Entry]) -> Entry | None:
    """The configuration that wins most entries; ties go to the one listed first."""
    if not entries:
        return None
    counts = Counter(entry.config_id for entry in entries)
    first = {}
    for entry in entries:
        first.setdefault(entry.config_id, entry)
    best_id = max(first, key=lambda config_id: counts[config_id])  # max keeps the first of equals
    return first[best_id]


def entry_type(family: str) -> type:
    """The generated entry class of a family's table (ValueError names the known families)."""
    found = ENTRY_TYPES.get(family)
    if found is None:
        raise ValueError(f"unknown kernel family '{family}' (known: {', '.join(sorted(ENTRY_TYPES))})")
    return found


def tunable_fields(family: str) -> tuple[str, ...]:
    """The tunables of a family's entries, in the generated dataclass's order (= the grid's order)."""
    return tuple(f.name for f in fields(entry_type(family)) if f.name not in SHAPE_FIELDS)


def tunables_of(entry: Entry) -> dict[str, int]:
    """An entry's tunables as the kernel's -D names (UPPER_CASE), in grid order."""
    return {name.upper(): getattr(entry, name) for name in tunable_fields(entry.kernel)}


def config_id_of(*, family: str, tunables: Mapping[str, int]) -> str:
    """The stable configuration id (tunetable.config.KernelConfig.id) of UPPER_CASE tunables."""
    from tunetable.config import KernelConfig

    return KernelConfig.from_dict(family, dict(tunables)).id


def make_entry(*, tunables: Mapping[str, int], n: int, k: int, kernel: str = TABLE) -> Entry:
    """A table entry of family ``kernel`` covering every M of (N, K) for lower-case ``tunables``."""
    cls = entry_type(kernel)
    expected = tunable_fields(kernel)
    if sorted(tunables) != sorted(expected):
        missing = sorted(set(expected) - set(tunables))
        extra = sorted(set(tunables) - set(expected))
        raise ValueError(f"{kernel}: tunables must be {', '.join(expected)} (missing: {', '.join(missing) or '-'}; "
                         f"unknown: {', '.join(extra) or '-'})")
    ordered = {name: tunables[name] for name in expected}
    upper = {name.upper(): value for name, value in ordered.items()}
    return cls(
        m=1, m_end=INT32_MAX, n=n, k=k, kernel=kernel,
        config_id=config_id_of(family=kernel, tunables=upper), **ordered,
    )


def heuristic_tunables(*, m: int, family: str = TABLE) -> Mapping[str, int]:
    """Untuned tile choice by M alone: narrow tiles for memory-bound small M, else the family's default."""
    skinny, default = HEURISTICS[family]
    return skinny if m <= SKINNY_MAX_M else default


class Dispatcher:
    """Per-shape decisions over one table, memoised; warns once for each uncovered shape.

    ``family`` (default: the table's name, as in params.yaml where each table is named after its
    family) picks the size heuristic of an empty table.
    """

    def __init__(self, *, table: str, entries: Sequence[Entry], family: str | None = None):
        self.table = table
        self.family = family or table
        self.entries = tuple(entries)
        self.fallback_entry = most_common_entry(self.entries)
        self.decisions: dict[tuple[int, int, int], Decision] = {}
        self.lookups = 0  # table scans done (a memoised shape does none)

    def decide(self, *, m: int, n: int, k: int, stacklevel: int = 4) -> Decision:
        """The decision for (M, N, K), computed on first use.

        A fallback warns at ``stacklevel`` (counted from the warning inside ``_decide``): the default
        4 names the caller of a function that called ``decide``, i.e. the caller of ``gemm()``.
        """
        decision = self.decisions.get((m, n, k))
        if decision is None:
            decision = self._decide(m=m, n=n, k=k, stacklevel=stacklevel)
            self.decisions[(m, n, k)] = decision
        return decision

    def _decide(self, *, m: int, n: int, k: int, stacklevel: int = 4) -> Decision:
        """The entry covering (M, N, K), else a FallbackWarning and the same-M, most common or heuristic entry."""
        self.lookups += 1
        index = lookup(self.entries, m=m, n=n, k=k)
        if index is not None:
            return Decision(entry=self.entries[index], index=index, fallback=False)
        # Winners depend on M far more than on N and K (skinny split-K tiles at small M, big tiles
        # at large M), so the most common winner among entries whose range holds M comes first.
        same_m = most_common_entry([item for item in self.entries if item.m <= m < item.m_end])
        if same_m is not None:
            chosen = same_m
            why = f"the table's most common winner at this M, {chosen.config_id}"
        elif self.fallback_entry is not None:
            chosen = self.fallback_entry
            why = f"the table's most common winner {chosen.config_id}"
        else:
            chosen = make_entry(tunables=heuristic_tunables(m=m, family=self.family), n=n, k=k, kernel=self.family)
            why = f"the table is empty; heuristic configuration {chosen.config_id}"
        warnings.warn(
            f"{self.table}: no tuned entry for M={m}, N={n}, K={k}; running {why} "
            f"(add the shape to params.yaml and re-run the pipeline to tune it)",
            FallbackWarning,
            stacklevel=stacklevel,
        )
        return Decision(entry=chosen, index=None, fallback=True)


class FamilyDispatcher:
    """Cross-family decisions: the dispatch list picks the table, that table's Dispatcher the entry.

    Shapes the list does not cover (or a list naming an unknown table) go to ``default_table``,
    which is how tunetable.kernels.gemm chose before there was more than one family.
    """

    def __init__(self, *, choices: Sequence[FamilyChoice], tables: Mapping[str, Sequence[Entry]],
                 default_table: str = TABLE):
        self.choices = tuple(choices)
        self.tables = {name: Dispatcher(table=name, entries=entries) for name, entries in tables.items()}
        self.default_table = default_table
        unknown = sorted({choice.table for choice in self.choices} - set(self.tables))
        if unknown:
            raise ValueError(f"dispatch list names unknown tables {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(self.tables))}): regenerate kernels/tuning_configs.py")
        self.decisions: dict[tuple[int, int, int], Decision] = {}

    def table_for(self, *, m: int, n: int, k: int) -> tuple[str, FamilyChoice | None]:
        """The table serving (M, N, K) and the dispatch entry that says so (None: the default table)."""
        index = lookup(self.choices, m=m, n=n, k=k)
        if index is None:
            return self.default_table, None
        choice = self.choices[index]
        return choice.table, choice

    def decide(self, *, m: int, n: int, k: int) -> Decision:
        """The decision for (M, N, K), computed on first use (fallback warnings name gemm()'s caller)."""
        decision = self.decisions.get((m, n, k))
        if decision is None:
            table, choice = self.table_for(m=m, n=n, k=k)
            found = self.tables[table].decide(m=m, n=n, k=k, stacklevel=5)
            decision = Decision(entry=found.entry, index=found.index, fallback=found.fallback, choice=choice)
            self.decisions[(m, n, k)] = decision
        return decision


# --- operands: checks that need no GPU ---------------------------------------------------------

class Operand(NamedTuple):
    """A validated 2-D bf16 device matrix: its address, its shape and the library it came from."""

    ptr: int
    rows: int
    cols: int
    library: str  # "torch" | "cupy" | "pycuda" | "cai"


def _fail_type(name: str, obj: Any) -> TypeError:
    """The TypeError for an argument that is not a GPU matrix, naming its type (hinting at host arrays)."""
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    host = " (host memory: copy it to the GPU first)" if kind.startswith("numpy.") else ""
    return TypeError(
        f"{name}: expected a GPU matrix (pycuda GPUArray, torch or CuPy array, or any object with "
        f"__cuda_array_interface__), got {kind}{host}"
    )


def _check_2d(name: str, shape: Sequence[int]) -> tuple[int, int]:
    """(rows, cols) of a 2-D shape; ValueError otherwise."""
    if len(shape) != 2:
        raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _check_aligned(name: str, ptr: int) -> None:
    """Raise ValueError unless ``ptr`` is ALIGNMENT-byte aligned."""
    if ptr % ALIGNMENT:
        raise ValueError(
            f"{name}: data pointer 0x{ptr:x} is not {ALIGNMENT}-byte aligned (the kernel loads 16-byte "
            "chunks; a sliced view can cause this: pass a fresh contiguous copy)"
        )


def _check_row_major(name: str, *, rows: int, cols: int, strides: Sequence[int] | None, itemsize: int = 2) -> None:
    """C-contiguous row-major: unit column stride and rows packed back to back (byte strides)."""
    if strides is None:
        return
    row_ok = rows <= 1 or strides[0] == cols * itemsize
    col_ok = cols <= 1 or strides[1] == itemsize
    if not (row_ok and col_ok):
        raise ValueError(
            f"{name}: must be C-contiguous row-major, got byte strides {tuple(strides)} for shape "
            f"({rows}, {cols}) (a transposed or sliced view: make a contiguous copy first)"
        )


def _torch_operand(name: str, x: Any) -> Operand:
    """The Operand of a torch tensor: bfloat16, on CUDA, 2-D, contiguous, aligned."""
    torch = sys.modules["torch"]
    if x.dtype is not torch.bfloat16:
        raise TypeError(f"{name}: expected dtype bfloat16, got {x.dtype}")
    if not x.is_cuda:
        raise TypeError(f"{name}: torch tensor is on {x.device}, expected a CUDA tensor")
    rows, cols = _check_2d(name, x.shape)
    if not x.is_contiguous():
        raise ValueError(
            f"{name}: must be C-contiguous row-major, got strides {tuple(x.stride())} for shape "
            f"({rows}, {cols}) (call .contiguous() first)"
        )
    ptr = x.data_ptr()
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "torch")


def _is_bf16_numpy_dtype(dtype: Any) -> bool:
    """numpy-style dtypes: ml_dtypes' bfloat16 (or any 2-byte void, the CAI typestr '<V2')."""
    return getattr(dtype, "name", None) == "bfloat16" or (
        getattr(dtype, "kind", None) == "V" and getattr(dtype, "itemsize", None) == 2
    )


def _cupy_operand(name: str, x: Any) -> Operand:
    """The Operand of a CuPy array: bfloat16, 2-D, row-major, aligned."""
    if not _is_bf16_numpy_dtype(x.dtype):
        raise TypeError(f"{name}: expected dtype bfloat16 (ml_dtypes.bfloat16 in CuPy), got {x.dtype}")
    rows, cols = _check_2d(name, x.shape)
    _check_row_major(name, rows=rows, cols=cols, strides=x.strides)
    ptr = int(x.data.ptr)
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "cupy")


def _pycuda_operand(name: str, x: Any) -> Operand:
    """The Operand of a pycuda GPUArray: bfloat16 (or 2-byte void), 2-D, row-major, aligned."""
    if not _is_bf16_numpy_dtype(x.dtype):
        raise TypeError(
            f"{name}: expected dtype bfloat16 (ml_dtypes.bfloat16 or a 2-byte void 'V2'), got {x.dtype}"
        )
    rows, cols = _check_2d(name, x.shape)
    _check_row_major(name, rows=rows, cols=cols, strides=x.strides)
    ptr = int(x.gpudata)
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "pycuda")


def _cai_operand(name: str, x: Any) -> Operand:
    """The Operand of a __cuda_array_interface__ object: bfloat16 ('<V2'), 2-D, row-major, aligned."""
    interface = x.__cuda_array_interface__
    typestr = interface.get("typestr")
    if typestr != "<V2" and not _is_bf16_numpy_dtype(getattr(x, "dtype", None)):
        hint = " (float16 or a bfloat16 that its library reports as '<f2')" if typestr == "<f2" else ""
        raise TypeError(f"{name}: expected bfloat16 (CUDA array interface typestr '<V2'), got '{typestr}'{hint}")
    rows, cols = _check_2d(name, interface["shape"])
    _check_row_major(name, rows=rows, cols=cols, strides=interface.get("strides"))
    ptr = int(interface["data"][0])
    _check_aligned(name, ptr)
    return Operand(ptr, rows, cols, "cai")


def _adapter_for(x: Any) -> Callable[[str, Any], Operand] | None:
    """The reader of an array's library, chosen by its type's module."""
    root = type(x).__module__.partition(".")[0]
    if root == "torch" and hasattr(x, "data_ptr"):
        return _torch_operand
    if root == "cupy" and hasattr(x, "data"):
        return _cupy_operand
    if root == "pycuda" and hasattr(x, "gpudata"):
        return _pycuda_operand
    if hasattr(x, "__cuda_array_interface__"):
        return _cai_operand
    return None


_ADAPTERS: dict[type, Callable[[str, Any], Operand] | None] = {}


def operand(name: str, x: Any) -> Operand:
    """Validate one argument (GPU, bf16, 2-D, row-major, 16-byte aligned) and read its address."""
    kind = type(x)
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _adapter_for(x)
        if adapter is None:
            raise _fail_type(name, x)
        _ADAPTERS[kind] = adapter
    return adapter(name, x)


def check_problem(a: Operand, b: Operand, *, family: Any) -> tuple[int, int, int]:
    """(M, N, K) of C = A·Bᵀ, with K matching and the family's shape rules (N, K multiples of 8)."""
    m, k = a.rows, a.cols
    n, kb = b.rows, b.cols
    if kb != k:
        raise ValueError(f"mismatched K: a is {m}x{k} (M x K) but b is {n}x{kb} (N x K); C = a @ b.T needs equal K")
    family.check_shape(m, n, k)
    return m, n, k


def check_out(out: Operand, *, m: int, n: int) -> None:
    """``out`` must be the M x N result matrix."""
    if (out.rows, out.cols) != (m, n):
        raise ValueError(f"out: expected shape ({m}, {n}) for C = a @ b.T, got ({out.rows}, {out.cols})")


# --- configurations: table entry -> KernelConfig (params.yaml's derived values) -----------------

@lru_cache(maxsize=4)
def _table_setup(params_path: str, table: str) -> tuple[Any, Any, tuple[Any, ...]]:
    """(params, TableSpec, derived expressions) of a table, read once per process."""
    from tunetable.grid import compile_derived, normalise_groups
    from tunetable.params import load_params, table_spec

    try:
        params = load_params(params_path)
    except ImportError:  # jsonschema is a CI dependency; a GPU image may lack it (CI validates params.yaml)
        import yaml

        params = yaml.safe_load(Path(params_path).read_text())
    spec = table_spec(params, table, path=params_path)
    groups = normalise_groups(spec.grid, path=params_path, table=table)
    names = list(dict.fromkeys(name for _, values in groups for name in values))
    derived = compile_derived(spec.grid, param_names=names, path=params_path, table=table)
    return params, spec, tuple(derived)


def kernel_config(entry: Entry, *, params_path: Path = PARAMS_PATH) -> Any:
    """The tunetable.config.KernelConfig of a table entry: tunables plus the grid's derived values."""
    from tunetable.config import KernelConfig
    from tunetable.grid import derive

    _, spec, derived = _table_setup(str(params_path), entry.kernel)
    tunables = tunables_of(entry)
    config = KernelConfig(
        family=spec.family, params=tuple(tunables.items()), derived=tuple(derive(tunables, derived).items())
    )
    if config.id != entry.config_id:
        raise ValueError(
            f"{entry.kernel}: table entry for N={entry.n}, K={entry.k}, M=[{entry.m}, {entry.m_end}) says "
            f"config_id {entry.config_id} but its tunables hash to {config.id} (regenerate the table)"
        )
    return config


def _compile_settings(table: str, *, params_path: Path) -> dict[str, Any]:
    """The compile stage's settings for a table: kernel source, nvcc flags, arch, cache folder."""
    params, spec, _ = _table_setup(str(params_path), table)
    compile_settings = params.get("compile") or {}
    return {
        "kernel_path": ROOT / spec.kernel,
        "flags": list(compile_settings.get("nvcc_flags") or []),
        "arch": spec.arch,
        "cache_dir": ROOT / compile_settings.get("cache_dir", ".cache/cubins"),
    }


def cubin_for(entry: Entry, *, params_path: Path = PARAMS_PATH) -> str:
    """The entry's cubin from the content-addressed compile cache, compiled now when missing."""
    from tunetable.compile import compile_config

    config = kernel_config(entry, params_path=params_path)
    result = compile_config(defines=config.defines(), **_compile_settings(entry.kernel, params_path=params_path))
    if result.status != "ok" or result.cubin is None:
        raise RuntimeError(f"{entry.kernel}: configuration {config.id} failed to compile: {result.error}")
    return result.cubin


def warm_cache(*, table: str = TABLE, workers: int = 0, params_path: Path = PARAMS_PATH) -> dict[str, str]:
    """Compile every configuration the runtime may run (table entries, fallbacks) in parallel; id -> status."""
    import os

    from tunetable.compile import compile_configs

    entries = list(TABLES[table]) + [
        make_entry(tunables=tunables, n=8, k=8, kernel=table) for tunables in HEURISTICS[table]
    ]
    configs = {item.config_id: kernel_config(item, params_path=params_path) for item in entries}
    results = compile_configs(
        configs.values(), workers=workers or os.cpu_count() or 1, **_compile_settings(table, params_path=params_path)
    )
    return {config_id: result.status for config_id, result in results.items()}


# --- the GPU side (pycuda, imported lazily) ----------------------------------------------------

@dataclass
class Plan:
    """Everything one (configuration, shape) launch needs, resolved once (pointer-argument kernels)."""

    main: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    workspace: Any  # DeviceAllocation or None (zeroed once after allocation when the family says so)
    workspace_ptr: int

    def launch(self, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int) -> None:
        """Enqueue the GEMM on the default stream (split-K reduces inside the kernel)."""
        # What pycuda's prepared_async_call does, minus its per-call import, kwargs and legacy
        # block-shape bookkeeping: pack the arguments and launch (about half the host cost).
        self.main._launch_kernel(
            self.grid, self.block, _pack("PPPPiii", a_ptr, b_ptr, c_ptr, self.workspace_ptr, m, n, k),
            self.smem_bytes, None,
        )


@dataclass
class StructPlan:
    """A launch plan for kernels with by-value struct arguments (TMA tensor maps): one shape, one config.

    The arguments come from ``family.kernel_arguments`` laid out by ``family.arg_format`` and are
    launched through libcuda's kernelParams (kernels/driver.py says why). Tensor maps embed the
    A and B addresses, so the encoded arguments are kept per (A, B, C) address triple, the
    ``ARGUMENT_CACHE_SIZE`` most recent ones, and a repeated call encodes nothing.
    """

    kernel: Any  # tunetable.kernels.driver.DriverKernel
    family: Any
    defines: Mapping[str, Any]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    workspace: Any  # DeviceAllocation or None (zeroed once after allocation when the family says so)
    workspace_ptr: int
    arguments: OrderedDict = field(default_factory=OrderedDict)
    encodes: int = 0  # argument sets built (a cached address triple builds none)

    def arguments_for(self, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int) -> Any:
        """The kernelParams of one address triple, built on first use, least recently used dropped."""
        key = (a_ptr, b_ptr, c_ptr)
        found = self.arguments.get(key)
        if found is not None:
            self.arguments.move_to_end(key)
            return found
        from tunetable.kernels.driver import kernel_arguments

        values = self.family.kernel_arguments(self.defines, M=m, N=n, K=k, a=a_ptr, b=b_ptr, c=c_ptr,
                                              workspace=self.workspace_ptr)
        found = kernel_arguments(self.family.arg_format, values)
        self.encodes += 1
        self.arguments[key] = found
        if len(self.arguments) > ARGUMENT_CACHE_SIZE:
            self.arguments.popitem(last=False)
        return found

    def launch(self, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int) -> None:
        """Enqueue the GEMM on the default stream (split-K reduces inside the kernel)."""
        self.kernel.launch(self.grid, self.block, self.smem_bytes, 0, self.arguments_for(a_ptr, b_ptr, c_ptr, m, n, k))


class Runtime:
    """The pycuda context, loaded cubins and per-shape plans of one process."""

    def __init__(self, *, params_path: Path = PARAMS_PATH):
        try:
            import pycuda.driver as cuda
        except ImportError as exc:
            raise NoGpuError(
                f"tunetable.kernels.gemm needs pycuda and a CUDA GPU, and pycuda cannot be imported here ({exc}); "
                "install the 'cuda' extra on a machine with an NVIDIA GPU"
            ) from None
        try:
            cuda.init()
            count = cuda.Device.count()
        except cuda.Error as exc:
            raise NoGpuError(f"tunetable.kernels.gemm: no usable CUDA driver or device ({exc})") from None
        if count == 0:
            raise NoGpuError("tunetable.kernels.gemm: no CUDA device is visible")
        self.cuda = cuda
        self.params_path = params_path
        self.device = cuda.Device(0)
        # The primary context is the one torch and CuPy use, so pointers are shared with them.
        self.context = self.device.retain_primary_context()
        self.context.push()
        _thread.has_context = True
        atexit.register(self._close)
        self.modules: dict[str, Any] = {}
        self.driver_kernels: dict[tuple[str, str], Any] = {}
        self.plans: dict[tuple[str, int, int, int], Plan | StructPlan] = {}

    def enter_thread(self) -> None:
        """Make the context current in a thread other than the creator (pycuda's stack is per thread)."""
        self.context.push()
        _thread.has_context = True

    def _close(self) -> None:
        """Pop the context at interpreter exit (nothing when it is already gone)."""
        try:
            self.context.pop()
        except self.cuda.Error:
            pass  # already gone at interpreter exit

    def _module(self, cubin: str) -> Any:
        """The pycuda module of ``cubin``, loaded on first use."""
        module = self.modules.get(cubin)
        if module is None:
            module = self.cuda.module_from_file(cubin)
            self.modules[cubin] = module
        return module

    def plan(self, entry: Entry, *, m: int, n: int, k: int) -> Plan | StructPlan:
        """The launch plan of ``entry`` on (M, N, K), built on first use."""
        key = (entry.config_id, m, n, k)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._build_plan(entry, m=m, n=n, k=k)
            self.plans[key] = plan
        return plan

    def _build_plan(self, entry: Entry, *, m: int, n: int, k: int) -> Plan | StructPlan:
        """A new launch plan of ``entry`` on (M, N, K); a StructPlan for families with struct arguments."""
        from tunetable.kernels.driver import has_struct_arguments
        from tunetable.kernels.families import FAMILIES

        cuda = self.cuda
        family = FAMILIES[entry.kernel]
        defines = kernel_config(entry, params_path=self.params_path).defines()
        geometry = family.launch(defines, m, n, k)
        if has_struct_arguments(family.arg_format):
            return self._build_struct_plan(entry, family=family, defines=defines, geometry=geometry)
        module = self._module(cubin_for(entry, params_path=self.params_path))
        main = module.get_function(family.entry)
        main.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(geometry.smem_bytes))
        main.prepare("PPPPiii")
        workspace = self._workspace(family, geometry.workspace_bytes)
        return Plan(
            main=main,
            grid=tuple(geometry.grid),
            block=tuple(geometry.block),
            smem_bytes=int(geometry.smem_bytes),
            workspace=workspace,
            workspace_ptr=int(workspace) if workspace is not None else 0,
        )

    def _build_struct_plan(self, entry: Entry, *, family: Any, defines: Mapping[str, Any], geometry: Any) -> StructPlan:
        """A plan launched through libcuda (by-value tensor maps); the workspace zeroed when the family says so."""
        from tunetable.kernels.driver import DriverKernel
        from tunetable.kernels.families import cluster_blocks

        cubin = cubin_for(entry, params_path=self.params_path)
        kernel = self.driver_kernels.get((cubin, family.entry))
        if kernel is None:
            kernel = DriverKernel(cubin, family.entry, smem_bytes=int(geometry.smem_bytes))
            self.driver_kernels[(cubin, family.entry)] = kernel
        workspace = self._workspace(family, geometry.workspace_bytes)
        # The bench's cut of the persistent grid, so the runtime launches what was measured.
        grid, _ = kernel.resident_grid(grid=geometry.grid, block=geometry.block, smem_bytes=int(geometry.smem_bytes),
                                       cluster=cluster_blocks(defines))
        return StructPlan(
            kernel=kernel, family=family, defines=dict(defines), grid=grid,
            block=tuple(geometry.block), smem_bytes=int(geometry.smem_bytes), workspace=workspace,
            workspace_ptr=int(workspace) if workspace is not None else 0,
        )

    def _workspace(self, family: Any, nbytes: int) -> Any:
        """A new split-K workspace of ``nbytes`` (None for 0), zeroed when the family says so."""
        if not nbytes:
            return None
        workspace = self.cuda.mem_alloc(nbytes)
        if getattr(family, "zeroed_workspace", False):
            self.cuda.memset_d8(workspace, 0, nbytes)  # split-K tile counters start at zero
        return workspace

    def empty_like(self, like: Any, library: str, *, m: int, n: int) -> tuple[Any, int]:
        """A new M x N bf16 output from the same library as the input ``like``, and its address."""
        if library == "torch":
            out = like.new_empty((m, n))  # same dtype and device, cheaper than torch.empty
            return out, out.data_ptr()
        if library == "cupy":
            out = sys.modules["cupy"].empty((m, n), dtype=like.dtype)
            return out, int(out.data.ptr)
        import numpy as np
        from pycuda import gpuarray

        dtype = like.dtype if library == "pycuda" else _cai_numpy_dtype(like)
        out = gpuarray.empty((m, n), dtype=np.dtype(dtype))
        return out, int(out.gpudata)


def _cai_numpy_dtype(like: Any) -> Any:
    """bf16 as numpy knows it: ml_dtypes' bfloat16 where installed, else a 2-byte void."""
    dtype = getattr(like, "dtype", None)
    if _is_bf16_numpy_dtype(dtype):
        return dtype
    try:
        import ml_dtypes
    except ImportError:
        return "V2"
    return ml_dtypes.bfloat16


# --- the public entry points -------------------------------------------------------------------

# Kernel arguments in native layout ('P' a pointer, 'i' an int32), as pycuda's prepared calls pack them.
_pack = struct.pack
_state: dict[str, Any] = {}
_lock = threading.Lock()
_thread = threading.local()  # has_context: this thread has the runtime's context pushed


def dispatcher(table: str | None = None) -> FamilyDispatcher | Dispatcher:
    """The process-wide dispatcher tunetable.kernels.gemm uses (over the generated DISPATCH and TABLES).

    With ``table``: that table's own Dispatcher (the same instance the cross-family one consults).
    """
    found = _state.get("dispatcher")
    if found is None:
        with _lock:
            found = _state.get("dispatcher")
            if found is None:
                found = FamilyDispatcher(choices=DISPATCH[DISPATCH_LIST], tables=TABLES)
                _state["dispatcher"] = found
    return found if table is None else found.tables[table]


def set_dispatcher(found: FamilyDispatcher | None) -> None:
    """Make ``found`` the dispatcher of gemm() (None: back to the generated tables); forgets plans per shape."""
    with _lock:
        if found is None:
            _state.pop("dispatcher", None)
        else:
            _state["dispatcher"] = found
        _shape_plans.clear()


def runtime() -> Runtime:
    """The process-wide GPU runtime, created on the first GEMM."""
    found = _state.get("runtime")
    if found is None:
        with _lock:
            found = _state.get("runtime")
            if found is None:
                found = Runtime()
                _state["runtime"] = found
    if not getattr(_thread, "has_context", False):
        found.enter_thread()
    return found


def _family(table: str) -> Any:
    """The kernel family of ``table`` (tunetable.kernels.families, imported on first use)."""
    from tunetable.kernels.families import FAMILIES

    return FAMILIES[table]


@lru_cache(maxsize=256)
def _explicit_entry(family: str, tunables: tuple[tuple[str, int], ...], n: int, k: int) -> Entry:
    """The table entry of explicit tunables on (N, K), cached per arguments (gemm_with)."""
    return make_entry(tunables=dict(tunables), n=n, k=k, kernel=family)


# (M, N, K) -> Plan of the dispatch's choice: after the first call of a shape, gemm() goes straight
# from the operands to the launch (the shape was validated when the plan was made).
_shape_plans: dict[tuple[int, int, int], Plan | StructPlan] = {}


def _launch(plan: Plan | StructPlan, a: Any, a_op: Operand, b_op: Operand, out: Any, m: int, n: int, k: int) -> Any:
    """Check or allocate the output, then launch."""
    if not getattr(_thread, "has_context", False):
        runtime()  # a new thread: push the context first
    if out is None:
        out, c_ptr = _state["runtime"].empty_like(a, a_op.library, m=m, n=n)
    else:
        out_op = operand("out", out)
        check_out(out_op, m=m, n=n)
        c_ptr = out_op.ptr
    plan.launch(a_op.ptr, b_op.ptr, c_ptr, m, n, k)
    return out


def gemm(a: Any, b: Any, out: Any = None) -> Any:
    """C = a · bᵀ in bf16 (a: M x K, b: N x K, row-major on the GPU) with the tuned family and configuration.

    The dispatch list picks the kernel family for the shape, that family's table the configuration
    (module docstring). Accepts pycuda GPUArrays, torch tensors, CuPy arrays or any object with
    ``__cuda_array_interface__``; returns ``out`` (allocated like ``a`` when None). The kernel is
    enqueued on the legacy default stream (torch's and CuPy's default too) of device 0, the
    first visible GPU (choose it with CUDA_VISIBLE_DEVICES), and the call returns without waiting.
    """
    a_op = operand("a", a)
    b_op = operand("b", b)
    if a_op.cols != b_op.cols:
        check_problem(a_op, b_op, family=_family(TABLE))  # raises the mismatched-K error
    m, n, k = a_op.rows, b_op.rows, a_op.cols
    plan = _shape_plans.get((m, n, k))
    if plan is None:
        check_problem(a_op, b_op, family=_family(TABLE))
        entry = dispatcher().decide(m=m, n=n, k=k).entry
        plan = runtime().plan(entry, m=m, n=n, k=k)
        _shape_plans[(m, n, k)] = plan
    return _launch(plan, a, a_op, b_op, out, m, n, k)


def gemm_with(tunables: Mapping[str, int], a: Any, b: Any, out: Any = None, *, family: str = TABLE) -> Any:
    """C = a · bᵀ with an explicit configuration of ``family`` (lower-case tunables), bypassing the tables."""
    a_op = operand("a", a)
    b_op = operand("b", b)
    m, n, k = check_problem(a_op, b_op, family=_family(family))
    entry = _explicit_entry(family, tuple(tunables.items()), n, k)
    plan = runtime().plan(entry, m=m, n=n, k=k)
    return _launch(plan, a, a_op, b_op, out, m, n, k)
