"""What every kernel family shares: launch records, GEMM shape checks, rules, device limits, table entries.

Pure Python (no pycuda, no build module): the grid, the pruner, the perf model, the runtime and the
tests all read a family through these types. A family lives in ``kernels/families/<name>/``
(docs/families.md): its ``.cu``, its snippet and one ``family.py`` whose ``FAMILY`` is a
``KernelFamily``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from tunetable.kernels.jit import canonical_json, sha256_text

Dim3 = tuple[int, int, int]

INT32_MAX = 2**31 - 1
FAMILIES_DIR = Path(__file__).resolve().parent

# The H200 (compute capability 9.0): what the grid prunes against before any GPU time and what the
# persistent grids and the perf model size themselves to. The kernels' static_asserts hold the same
# shared-memory literal (changing their bytes changes their hash: the recordings would not replay).
H200_SM_COUNT = 132
MAX_SHARED_BYTES_PER_BLOCK = 232448        # 227 KiB: the per-block opt-in limit of dynamic shared memory
MAX_REGISTERS_PER_BLOCK = 65536
MAX_THREADS_PER_BLOCK = 1024


@dataclass(frozen=True)
class Launch:
    """How to launch one configuration on one shape: one kernel (split-K reduces inside it)."""

    grid: Dim3
    block: Dim3
    smem_bytes: int
    workspace_bytes: int


@dataclass(frozen=True)
class Rule:
    """A validity rule: an expression over the tunables and derived values (tunetable.expr syntax).

    The grid and the pruner evaluate ``text``; a configuration that breaks it is pruned with
    ``rules[i] '<text>' is false``. ``why`` says what in the kernel the rule mirrors.
    """

    text: str
    why: str


@dataclass(frozen=True, kw_only=True)
class TableEntry:
    """The shape part of a generated table entry: the M range [m, m_end) of one (N, K), and the config."""

    m: int
    m_end: int
    n: int
    k: int
    kernel: str
    config_id: str

    def matches(self, *, m: int, n: int, k: int) -> bool:
        """True when this entry covers the problem shape (N and K equal, M in [m, m_end))."""
        return covering_index((self,), m=m, n=n, k=k) == 0


ENTRY_FIELDS = tuple(item.name for item in dataclasses.fields(TableEntry))


@dataclass(frozen=True)
class TableBuild:
    """How a table's kernels are compiled (its family, arch and nvcc flags): codegen writes one per table
    into the generated file (``BUILDS``), so the runtime builds what the bench measured without params.yaml."""

    family: str
    arch: str
    nvcc_flags: tuple[str, ...]


@dataclass(frozen=True)
class SelectorFile:
    """A shape selector's data file as codegen checked it: its path from the generated file's folder, sha256,
    candidate count and provenance (``SELECTOR_FILES``); the runtime refuses a file whose sha256 differs."""

    path: str
    sha256: str
    candidates: int
    provenance: tuple[tuple[str, str | int], ...]


def config_id(*, family: str, params: Mapping[str, object]) -> str:
    """The stable id of a configuration: a hash of the family and the tunables only (order-insensitive)."""
    return "c" + sha256_text(canonical_json({"family": family, **dict(params)}))[:10]


def covering_index(entries: Sequence[Any], *, m: int, n: int, k: int) -> int | None:
    """The lookup contract of every table: the index of the first entry with this N and K whose half-open
    range [m, m_end) holds M, or None (entries have ``m``, ``m_end``, ``n``, ``k``)."""
    for index, entry in enumerate(entries):
        if entry.n == n and entry.k == k and entry.m <= m < entry.m_end:
            return index
    return None


# A dispatch entry's speedup over cuBLAS (cuBLAS median / ours, as its recording measured it) below this means cuBLAS
# ran faster there: the dispatch list never merges such an M with a faster one, and the PyTorch operator routes it
# to torch's matmul.
CUBLAS_PARITY = 1.0


def cublas_measured_faster(*, speedup: float) -> bool:
    """True where a measured speedup over cuBLAS (cuBLAS median / ours) says cuBLAS ran faster."""
    return speedup < CUBLAS_PARITY


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up."""
    return -(-a // b)


def fragment_workspace_bytes(defines: Mapping[str, object], *, tiles: int, splits: int | None = None) -> int:
    """Split-K workspace of the TMA kernels (common/splitk.cuh's fragment-native slots): a whole fp32
    BLOCK_M x BLOCK_N tile per split and tile, then one int counter per tile and consumer; 0 without splits.

    ``splits``: slots per tile (default SPLIT_K; gemm_wgmma's TAIL_SPLIT gives its own).
    """
    splits = int_define(defines, "SPLIT_K") if splits is None else splits
    if splits == 1 or tiles == 0:
        return 0
    tile_bytes = int_define(defines, "BLOCK_M") * int_define(defines, "BLOCK_N") * 4
    return splits * tiles * tile_bytes + tiles * int_define(defines, "CONSUMERS") * 4


MAX_TAIL_SPLITS = 8  # gemm_wgmma.cu's kMaxTailSplits: a tile's last split reads the others' partials


class TailSplitPlan(NamedTuple):
    """How gemm_wgmma's TAIL_SPLIT shares out a launch (the kernel's Schedule computes the same).

    A NamedTuple: the runtime's shape selector builds one per candidate and new shape (cheap to make).
    """

    whole_tiles: int   # cluster tiles of the full waves, done whole, round-robin over the clusters
    shared_tiles: int  # the last partial wave's cluster tiles, each split along K over the idle clusters
    per_split: int     # k-tiles per split of a shared tile (the stream-K tail: its longest run)
    max_splits: int    # splits of a shared tile at most (its workspace slots)
    runs: int = 0      # clusters that take a run of the last wave (0: no last wave to split)


class TailPiece(NamedTuple):
    """One cluster's share of a last-wave tile: k-tiles [kt_begin, kt_end) of shared tile ``tile``."""

    tile: int          # which shared tile, in the whole-tile order after the full waves
    kt_begin: int
    kt_end: int
    split: int         # its place among the tile's splits (the split-order sum's index)
    splits: int        # how many clusters share the tile (1: stored whole, no partials)


def tail_split_plan(*, tiles: int, units: int, k_tiles: int, streamk: bool = False) -> TailSplitPlan:
    """The full waves go whole; the R tiles of the last partial wave are split along K over the U clusters.

    Equal runs (TAIL_SPLIT = 1): each tile into min(U // R, k-tiles, MAX_TAIL_SPLITS) equal runs of k-tiles,
    all in the same last round, split s of every shared tile on neighbouring clusters, so the clusters that
    share a panel of A or B read the same k-tiles at the same time (L2 reuse). A stream-K split into equal
    runs over the whole tile order lost that reuse: 1.5-2x slower at M >= 512 (benchmarks/notes_gemm_wgmma.md,
    v8). Where U < 2R this leaves the last wave whole (one split per tile) and U - R clusters idle.

    Stream-K tail (``streamk``, the probe variant's TAIL_SPLIT = 2): the last wave's R x k-tiles are cut into
    min(U, R x k-tiles, MAX_TAIL_SPLITS x R) runs of whole k-tiles in tile order, run u from
    floor(u x work / runs), so every cluster ends the last round at the same time even where U < 2R; a run
    may cross into the next tile, so a tile is shared by up to ``max_splits`` runs. Only the last wave's
    tiles are cut: the full waves keep their raster's L2 reuse.
    """
    shared = tiles % units
    if shared == 0:
        return TailSplitPlan(whole_tiles=tiles, shared_tiles=0, per_split=k_tiles, max_splits=1)
    if streamk:
        work = shared * k_tiles
        runs = min(units, work, MAX_TAIL_SPLITS * shared)
        shortest = work // runs
        # A tile of k_tiles meets the run holding its first k-tile and at most one more per `shortest` after it.
        return TailSplitPlan(whole_tiles=tiles - shared, shared_tiles=shared, per_split=ceil_div(work, runs),
                             max_splits=min(runs, 1 + ceil_div(k_tiles - 1, shortest)), runs=runs)
    per_split = ceil_div(k_tiles, min(units // shared, k_tiles, MAX_TAIL_SPLITS))
    max_splits = ceil_div(k_tiles, per_split)
    return TailSplitPlan(whole_tiles=tiles - shared, shared_tiles=shared, per_split=per_split,
                         max_splits=max_splits, runs=shared * max_splits)


def tail_split_workspace_bytes(defines: Mapping[str, object], *, tiles: int, clusters: int, k_tiles: int,
                               streamk: bool, cluster: int = 1) -> int:
    """The workspace of a last-wave split on any grid of up to ``clusters`` clusters of ``cluster`` blocks (a
    launch may be cut to the clusters that fit at once, and the kernel splits over the clusters it has)."""
    plans = (tail_split_plan(tiles=tiles, units=units, k_tiles=k_tiles, streamk=streamk)
             for units in range(1, clusters + 1))
    return max(fragment_workspace_bytes(defines, tiles=plan.shared_tiles * cluster, splits=plan.max_splits)
               for plan in plans)


def streamk_run_begin(plan: TailSplitPlan, *, k_tiles: int, run: int) -> int:
    """The first k-tile (over the shared tiles laid end to end) of a stream-K run; ``run = runs`` gives the end."""
    return run * plan.shared_tiles * k_tiles // plan.runs


def streamk_owner(plan: TailSplitPlan, *, k_tiles: int, position: int) -> int:
    """The stream-K run holding k-tile ``position`` of the shared tiles laid end to end."""
    work = plan.shared_tiles * k_tiles
    return ceil_div((position + 1) * plan.runs, work) - 1


def tail_pieces(plan: TailSplitPlan, *, k_tiles: int, unit: int, streamk: bool) -> list[TailPiece]:
    """Cluster ``unit``'s pieces of the last wave, in the order it runs them (the kernel's Schedule::at)."""
    if unit >= plan.runs:
        return []
    if not streamk:
        split = unit // plan.shared_tiles
        begin = split * plan.per_split
        return [TailPiece(tile=unit % plan.shared_tiles, kt_begin=begin, kt_end=min(k_tiles, begin + plan.per_split),
                          split=split, splits=plan.max_splits)]
    begin = streamk_run_begin(plan, k_tiles=k_tiles, run=unit)
    end = streamk_run_begin(plan, k_tiles=k_tiles, run=unit + 1)
    pieces = []
    for tile in range(begin // k_tiles, (end - 1) // k_tiles + 1):
        first = streamk_owner(plan, k_tiles=k_tiles, position=tile * k_tiles)
        last = streamk_owner(plan, k_tiles=k_tiles, position=tile * k_tiles + k_tiles - 1)
        pieces.append(TailPiece(tile=tile, kt_begin=max(begin, tile * k_tiles) - tile * k_tiles,
                                kt_end=min(end, tile * k_tiles + k_tiles) - tile * k_tiles,
                                split=unit - first, splits=last - first + 1))
    return pieces


def check_gemm_shape(family: str, M: int, N: int, K: int, *, why: str) -> None:
    """Raise ValueError unless M >= 1, N and K are positive multiples of 8 and all fit int32."""
    for label, value in (("M", M), ("N", N), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{family}: {label} must be an integer, got {value!r}")
    if M < 1:
        raise ValueError(f"{family}: M must be >= 1, got M={M}")
    if N < 8 or K < 8 or N % 8 or K % 8:
        raise ValueError(f"{family}: N and K must be multiples of 8 ({why}), got N={N}, K={K}")
    for label, value in (("M*K", M * K), ("N*K", N * K), ("M*N", M * N)):
        if value > INT32_MAX:
            raise ValueError(f"{family}: {label}={value} exceeds the int32 range of the kernel's arguments")


def int_define(defines: Mapping[str, object], name: str) -> int:
    """One integer tunable from a defines mapping (KeyError/ValueError name it)."""
    if name not in defines:
        raise KeyError(f"missing define {name}")
    value = defines[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"define {name} must be an integer, got {value!r}")
    return value


def cluster_blocks(defines: Mapping[str, object]) -> int:
    """Blocks per thread-block cluster: CLUSTER_M x CLUSTER_N (1 for families without clusters)."""
    return int(defines.get("CLUSTER_M", 1)) * int(defines.get("CLUSTER_N", 1))


class KernelFamily:
    """One kernel family: its files, typed tunables, derived values, rules, geometry and heuristics.

    Subclasses set the class attributes and define ``tunables`` (a frozen dataclass whose fields are
    the lower-case tunables in grid order, with the derived values as properties), ``entry_type``
    (the generated table's entry class: ``TableEntry`` fields, then the tunables), ``rules``,
    ``threads``/``smem_bytes`` (through the tunables), ``kernel_arguments`` and ``launch``.
    """

    name: ClassVar[str]
    entry: ClassVar[str]                   # extern "C" name of the one kernel a GEMM launches
    folder: ClassVar[Path]
    arg_format: ClassVar[str]              # kernel arguments: P pointer, i int32, <n>s n-byte struct by value
    zeroed_workspace: ClassVar[bool]       # the workspace must be zeroed once after allocation
    tunables: ClassVar[type]
    entry_type: ClassVar[type]
    derived_names: ClassVar[tuple[str, ...]] = ("THREADS", "SMEM_BYTES")
    rules: ClassVar[tuple[Rule, ...]]
    perf_model: ClassVar[str]              # which model of tunetable.search.prior ranks it
    default_tunables: ClassVar[Any]        # the untuned default: valid on every shape
    skinny_tunables: ClassVar[Any]         # the untuned choice for memory-bound small M
    skinny_max_m: ClassVar[int] = 32

    @property
    def source(self) -> Path:
        """The kernel's CUDA C source."""
        return self.folder / f"{self.name}.cu"

    @property
    def snippet(self) -> Path:
        """The codegen snippet that renders one entry of the family's table."""
        return self.folder / f"{self.name}.snippet"

    def tunable_fields(self) -> tuple[str, ...]:
        """The tunables' field names (lower case), in grid order."""
        return tuple(item.name for item in dataclasses.fields(self.tunables))

    def tunable_names(self) -> tuple[str, ...]:
        """The tunables as the kernel's -D names (UPPER_CASE), in grid order."""
        return tuple(name.upper() for name in self.tunable_fields())

    def tunables_of(self, defines: Mapping[str, object]) -> Any:
        """The typed tunables of a defines mapping (KeyError/ValueError name a missing or bad one)."""
        return self.tunables(**{name.lower(): int_define(defines, name) for name in self.tunable_names()})

    def defines_of(self, tunables: Any) -> dict[str, int]:
        """Every -D define of typed tunables: the tunables (grid order), then the derived values."""
        values = {name.upper(): getattr(tunables, name) for name in self.tunable_fields()}
        return {**values, **self.derived(values)}

    def derived(self, defines: Mapping[str, object]) -> dict[str, int]:
        """The derived values (THREADS, SMEM_BYTES) of a configuration, in ``derived_names`` order."""
        tunables = self.tunables_of(defines)
        return {name: getattr(tunables, name.lower()) for name in self.derived_names}

    def threads(self, defines: Mapping[str, object]) -> int:
        """Threads per block."""
        return self.tunables_of(defines).threads

    def smem_bytes(self, defines: Mapping[str, object]) -> int:
        """Dynamic shared memory per block (the kernel's own formula, which it static_asserts)."""
        return self.tunables_of(defines).smem_bytes

    def heuristic(self, *, m: int) -> Any:
        """Untuned tile choice by M alone: narrow tiles for memory-bound small M, else the default."""
        return self.skinny_tunables if m <= self.skinny_max_m else self.default_tunables

    def __repr__(self) -> str:
        return f"<kernel family {self.name} ({self.folder})>"


@dataclass(frozen=True, kw_only=True)
class ShapeCandidate:
    """A configuration the shape selector weighs for shapes no table holds, with M in [m, m_end).

    The selector (tunetable.kernels.runtime.selector_serve) predicts log(time / cuBLAS time) of a candidate
    on (M, N, K) as the perf model's log(time / roofline floor) plus a bias: what the recordings
    measured against what the model predicted. ``bias_terms`` holds it per recorded (N', K'):
    ``(N', K', value at M = m, its weight, value at M = m_end, its weight)``; at a shape the bias is
    the mean of the values weighted by weight x e^(-d / BIAS_NK_SCALE), d the distance from (N, K) to
    (N', K') in octaves, linear in log M between m and m_end. ``cublas_terms``: log(cuBLAS time /
    floor) the same way (with CUBLAS_NK_SCALE). ``rank`` orders the range's candidates. ``cells``: the points
    of the selector's (N, K) lattice whose shortlist holds the candidate, as runs (N', first K', last K') of
    neighbouring lattice K' (a shape is scored on the shortlist of the point nearest its (N, K)); empty: every
    shape of the range scores it.
    """

    m: int
    m_end: int
    rank: int
    table: str
    kernel: str
    config_id: str
    registers: int
    smem_bytes: int
    bias_terms: tuple[tuple[int, int, float, float, float, float], ...]
    cublas_terms: tuple[tuple[int, int, float, float, float, float], ...]
    tunables: tuple[tuple[str, int], ...]
    cells: tuple[tuple[int, int, int], ...] = ()
