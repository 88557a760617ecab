"""Tuning speed of tunetable against Kernel Tuner: same kernel, same configurations, same shapes.

Issue 5 trust figure. Both tools tune kernels/families/gemm_mma/gemm_mma.cu from a cold start to the winners of
each shape, one after the other on the same GPU (GPU 0):

- tunetable: the real CLI, as subprocesses, into an empty results root and an empty pycuda
  cache (XDG_CACHE_HOME): ``grid --filter ...``, ``compile --no-cache --filter ...`` (parallel
  nvcc, one process per CPU, as shipped), ``bench --backend cuda --gpus 0 --shape ...`` (every
  configuration verified against cuBLAS, cold L2, time-based warm-up, params.yaml's rounds
  interleaved), then the winners read from the shards.
- Kernel Tuner 1.5.0, as its users run it: ``tune_kernel(lang="pycuda", strategy="brute_force")``
  once per shape, so its pycuda backend compiles every configuration (nvcc to PTX, linked by
  the driver; no compile cache) for every shape, one after another; its default 7 iterations
  (one launch between CUDA events each, no L2 flush); every result verified against a float32
  numpy reference of the same bf16 inputs (``verify``, params.yaml's bench.verify_rtol).

Same configurations: the whole params.yaml grid for both tools, split-K included. The kernel
reduces split-K itself, in one launch, so KT times all of it; it needs a workspace of SPLIT_K*M*N
fp32 partials followed by one int counter per tile, the counters zero before the first launch
(the kernel resets them after each). KT gets a zeroed workspace per SPLIT_K value, as large as
that value's largest launch needs on the shape (``kt_workspace``), as tunetable gives every
configuration its own zeroed one. On an H200 KT spent ~1 s per configuration and shape, mostly
compiling, and tunetable ~7 s fixed plus a little per configuration (measured on the 42
SPLIT_K=1 configurations of an earlier grid). ``--subset`` narrows both to STAGES=4 and
BLOCK_K=64 (big tiles and skinny split-K ones), ``--filter`` to any other subset, ``--quick`` to
STAGES=4, BLOCK_K=64, WARPS_M=1 on one shape (a smoke test: shared memory below and above 48 KB,
split-K among them).
KT gets exactly the grid's configurations (a ``restrictions`` callable), the grid's -D defines
including the derived THREADS and SMEM_BYTES (``defines`` callables reading tunetable.grid's
KernelConfig), the launch geometry of kernels/families/ (``problem_size`` callable giving the
grid, ``grid_div_*`` of 1, ``block_size_names=["THREADS"]``, ``smem_args`` size), params.yaml's
nvcc flags plus ``-I`` the kernel's folder (KT compiles a copy of the source, its defines
prepended, in a temporary folder, where the kernel's ``#include "common/..."`` does not resolve
on its own), and inputs of the same sizes with random bf16 data (uint16 bit patterns). KT's pycuda
backend never sets a kernel's MAX_DYNAMIC_SHARED_SIZE_BYTES attribute, so launches above 48 KB
of dynamic shared memory fail there; this script patches that one method (see
``patch_dynamic_smem``) and says so in its output. KT compiles for the device's compute
capability (sm_90); tunetable for params.yaml's arch (sm_90a); the kernel uses sm_80
instructions only (mma.sync, ldmatrix, cp.async).

Winners agree when they are the same configuration, or when KT's winner is within 1 % of ours by
our own medians. Target: tunetable >= 5x faster (KT's wall time counts its import and its
``tune_kernel`` calls; building the host inputs and the numpy reference is reported apart).

    python3 benchmarks/kt_vs_tunetable.py [--quick | --subset | --filter NAME=V ...]
        [--shape M,N,K ...] [--kt-iterations 7] [--out DIR]

Writes benchmarks/results/kt_vs_tunetable.json and .md (``--quick``: only under ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from tunetable.kernels.families import FAMILIES, Launch  # noqa: E402
from tunetable.kernels.jit import include_flags  # noqa: E402
from tunetable import paths  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.kernels.jit import render_define  # noqa: E402
from tunetable.config import KernelConfig, Value  # noqa: E402
from tunetable.errors import TuneTableError  # noqa: E402

RESULT_JSON = REPO / "benchmarks" / "results" / "kt_vs_tunetable.json"
TABLE = "gemm_mma"
Shape = tuple[int, int, int]
SHAPES: tuple[Shape, ...] = ((1, 4096, 4096), (512, 4096, 4096), (4096, 4096, 4096))
QUICK_SHAPES: tuple[Shape, ...] = ((512, 4096, 4096),)
SMALL_SUBSET = ("STAGES=4", "BLOCK_K=64")            # --subset: big tiles and skinny split-K ones
QUICK_SUBSET = ("STAGES=4", "BLOCK_K=64", "WARPS_M=1")  # smem below and above 48 KB, split-K among them
BLOCK_PARAM = "THREADS"                             # KT reads the block size from a tune parameter
SPLIT_PARAM = "SPLIT_K"                             # KT picks the point's workspace by this tune parameter
KT_ITERATIONS = 7                                   # Kernel Tuner's default
KT_VERSION = "1.5.0"
TARGET_SPEEDUP = 5.0
TIE = 0.01
BF16_NAN = 0x7FC0
SEED = 1234
ARG_C = 2                                           # gemm_mma(A, B, C, workspace, M, N, K)


# -- the plan -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What one comparison runs: table, shapes, grid filters (both tools) and KT's iterations."""

    table: str
    shapes: tuple[Shape, ...]
    filters: tuple[str, ...]
    kt_iterations: int
    params_path: Path
    quick: bool = False


def parse_shape(text: str, *, index: int) -> Shape:
    """``M,N,K`` -> (M, N, K); anything else names the option and its index."""
    parts = text.split(",")
    if len(parts) != 3 or not all(part.strip().isdigit() and int(part) > 0 for part in parts):
        raise TuneTableError(f"expected M,N,K with positive integers, got '{text}'", where=f"--shape[{index}]")
    m, n, k = (int(part) for part in parts)
    return (m, n, k)


def make_plan(
    *, quick: bool, subset: bool, filters: Sequence[str], shapes: Sequence[str], kt_iterations: int,
    params_path: Path, table: str = TABLE,
) -> Plan:
    """The comparison's plan: the user's filters, or the quick or smaller subset, or the whole grid."""
    narrowed = tuple(filters) or (QUICK_SUBSET if quick else SMALL_SUBSET if subset else ())
    chosen = tuple(parse_shape(text, index=i) for i, text in enumerate(shapes)) or (QUICK_SHAPES if quick else SHAPES)
    if kt_iterations < 1:
        raise TuneTableError(f"expected a positive integer, got {kt_iterations}", where="--kt-iterations")
    return Plan(table=table, shapes=chosen, filters=narrowed, kt_iterations=kt_iterations, params_path=params_path,
                quick=quick)


# -- Kernel Tuner's view of the grid (pure: no pycuda) --------------------------------------------
@dataclass(frozen=True)
class KtSpace:
    """The grid's configurations as KT sees them: tune parameters (grid order, then THREADS) and points."""

    family: str
    names: tuple[str, ...]
    by_key: Mapping[tuple[Value, ...], KernelConfig] = field(hash=False)

    def config(self, params: Mapping[str, Any]) -> KernelConfig:
        """The grid configuration of one KT point (KeyError when the grid does not have it)."""
        return self.by_key[tuple(params[name] for name in self.names)]


def kt_space(*, configs: Sequence[KernelConfig]) -> KtSpace:
    """Index the grid's configurations by their KT tune-parameter values."""
    if not configs:
        raise TuneTableError("no configuration left after the filters", where="--filter")
    tunables = tuple(name for name, _ in configs[0].params)
    if SPLIT_PARAM not in tunables:
        raise TuneTableError(f"the grid has no {SPLIT_PARAM} (it picks KT's workspace)", where="configs[0]")
    for index, config in enumerate(configs):
        if tuple(name for name, _ in config.params) != tunables:
            raise TuneTableError("Kernel Tuner needs one parameter set for all configurations",
                                 where=f"configs[{index}] ({config.id})")
        if BLOCK_PARAM not in dict(config.derived):
            raise TuneTableError(f"the grid derives no {BLOCK_PARAM} (KT's block size)", where=f"configs[{index}]")
    names = (*tunables, BLOCK_PARAM)
    by_key = {tuple(config.defines()[name] for name in names): config for config in configs}
    return KtSpace(family=configs[0].family, names=names, by_key=by_key)


def kt_tune_params(*, space: KtSpace) -> dict[str, list[Value]]:
    """Every value each tune parameter takes in the grid, first-seen order (KT crosses them)."""
    values: dict[str, list[Value]] = {name: [] for name in space.names}
    for key in space.by_key:
        for name, value in zip(space.names, key):
            if value not in values[name]:
                values[name].append(value)
    return values


def kt_restriction(*, space: KtSpace) -> Callable[[Mapping[str, Any]], bool]:
    """KT's restriction: a point of its cross product is valid iff the grid kept it (rules stay in tunetable.grid)."""
    allowed = frozenset(space.by_key)
    names = space.names

    # A plain function, not a lambda: KT rewrites lambdas from their source text.
    def in_grid(params: Mapping[str, Any]) -> bool:
        return tuple(params[name] for name in names) in allowed

    return in_grid


@dataclass(frozen=True)
class DefineOf:
    """KT ``defines`` callback: one -D value of a point, as the grid computed it (derived ones too)."""

    space: KtSpace
    name: str

    def __call__(self, params: Mapping[str, Any]) -> str:
        return render_define(self.space.config(params).defines()[self.name])


def kt_defines(*, space: KtSpace) -> dict[str, DefineOf]:
    """Every define tunetable's nvcc gets (tunables, then THREADS, SMEM_BYTES ...), as KT callbacks."""
    first = next(iter(space.by_key.values()))
    return {name: DefineOf(space=space, name=name) for name in first.defines()}


@dataclass(frozen=True)
class LaunchOf:
    """KT ``problem_size`` / ``smem_args`` callbacks from the family's geometry for one shape."""

    space: KtSpace
    shape: Shape

    def launch(self, params: Mapping[str, Any]) -> Launch:
        """The family's launch of one point on this shape."""
        m, n, k = self.shape
        return FAMILIES[self.space.family].launch(self.space.config(params).defines(), m, n, k)

    def grid(self, params: Mapping[str, Any]) -> tuple[int, int, int]:
        """KT's problem size: the launch grid itself (every grid divisor is 1)."""
        return self.launch(params).grid

    def smem_bytes(self, params: Mapping[str, Any]) -> int:
        """Dynamic shared memory per block."""
        return self.launch(params).smem_bytes


# -- bf16 data and verification -------------------------------------------------------------------
def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def rel_err_bf16(*, bits: np.ndarray, reference: np.ndarray) -> float:
    """||C - Cref|| / ||Cref|| of a bf16 result (NaN when any element is not finite)."""
    result = from_bf16_bits(bits).astype(np.float64).ravel()
    ref = np.asarray(reference, dtype=np.float64).ravel()
    if not np.all(np.isfinite(result)):
        return float("nan")
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(result - ref) / norm) if norm > 0 else float("nan")


@dataclass(frozen=True)
class Bf16Verify:
    """KT ``verify`` callback: C within ``rtol`` of the reference (an unwritten, NaN-poisoned C fails)."""

    rtol: float

    def __call__(self, answer: Sequence[Any], result_host: Sequence[Any], atol: float | None = None) -> bool:
        return rel_err_bf16(bits=result_host[ARG_C], reference=answer[ARG_C]) <= self.rtol


@dataclass(frozen=True)
class KtInputs:
    """KT's kernel arguments for one shape and the expected C (answer)."""

    arguments: list[Any]
    answer: list[Any]


def kt_workspace_bytes(*, space: KtSpace, shape: Shape) -> dict[Value, int]:
    """SPLIT_K value -> the largest workspace (partials, then tile counters) its configurations need on ``shape``."""
    needs: dict[Value, int] = {}
    for config in space.by_key.values():
        defines = config.defines()
        nbytes = FAMILIES[space.family].launch(defines, *shape).workspace_bytes
        needs[defines[SPLIT_PARAM]] = max(needs.get(defines[SPLIT_PARAM], 0), nbytes)
    return needs


def kt_workspace(*, space: KtSpace, shape: Shape) -> Any:
    """A KT ``Tunable``: one zeroed fp32 workspace per SPLIT_K value, chosen by each point's SPLIT_K.

    Sharing one per SPLIT_K value is safe: those configurations place the partials and the tile counters at the
    same offsets, so no partials land on another's counters, and every finished launch leaves its counters zero.
    One array per configuration would hold every split-K configuration's partials on the GPU at once.
    """
    from kernel_tuner.accuracy import Tunable

    # SPLIT_K=1 touches no workspace; KT still needs a real allocation to pass.
    arrays = {split: np.zeros(max(1, -(-nbytes // 4)), dtype=np.float32)
              for split, nbytes in kt_workspace_bytes(space=space, shape=shape).items()}
    return Tunable(SPLIT_PARAM, arrays)


def kt_inputs(*, space: KtSpace, shape: Shape, seed: int) -> KtInputs:
    """Random bf16 A, B (never zeros), a NaN-poisoned C, zeroed workspaces, the sizes, and C's reference."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    a = to_bf16_bits(rng.standard_normal((m, k), dtype=np.float32))
    b = to_bf16_bits(rng.standard_normal((n, k), dtype=np.float32))
    c = np.full(m * n, BF16_NAN, dtype=np.uint16)
    reference = from_bf16_bits(a) @ from_bf16_bits(b).T
    workspace = kt_workspace(space=space, shape=shape)
    arguments = [a.ravel(), b.ravel(), c, workspace, np.int32(m), np.int32(n), np.int32(k)]
    answer: list[Any] = [None] * len(arguments)
    answer[ARG_C] = reference.ravel()
    return KtInputs(arguments=arguments, answer=answer)


def kt_compiler_options(*, kernel_path: Path, flags: Sequence[str]) -> list[str]:
    """params.yaml's nvcc flags, the kernel's folder and tunetable's include path (KT compiles a copy elsewhere)."""
    return [*flags, f"-I{Path(kernel_path).resolve().parent}", *include_flags()]


def kt_options(
    *, space: KtSpace, shape: Shape, kernel_path: Path, flags: Sequence[str], iterations: int, inputs: KtInputs,
    rtol: float, observers: Sequence[Any] = (),
) -> dict[str, Any]:
    """``tune_kernel`` keyword arguments for one shape (brute force, pycuda backend, GPU 0)."""
    launch = LaunchOf(space=space, shape=shape)
    return {
        "kernel_name": FAMILIES[space.family].entry,
        "kernel_source": Path(kernel_path),
        "problem_size": launch.grid,
        "arguments": inputs.arguments,
        "tune_params": kt_tune_params(space=space),
        "grid_div_x": [], "grid_div_y": [], "grid_div_z": [],  # an empty divisor list divides by 1
        "restrictions": kt_restriction(space=space),
        "answer": inputs.answer,
        "verify": Bf16Verify(rtol=rtol),
        "lang": "pycuda",
        "device": 0,
        "smem_args": {"size": launch.smem_bytes},
        "compiler_options": kt_compiler_options(kernel_path=kernel_path, flags=flags),
        "defines": kt_defines(space=space),
        "iterations": iterations,
        "block_size_names": [BLOCK_PARAM],
        "quiet": True,
        "strategy": "brute_force",
        "observers": list(observers),
    }


# -- running Kernel Tuner (pycuda) ----------------------------------------------------------------
PATCH_NOTE = ("kernel_tuner 1.5.0's pycuda backend never sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; "
              "patched here: copy_shared_memory_args also sets it to the launch's dynamic shared memory")


def patch_dynamic_smem() -> None:
    """Let KT's pycuda backend launch with > 48 KB of dynamic shared memory (sets the function attribute)."""
    from kernel_tuner.backends import pycuda as kt_pycuda

    if getattr(kt_pycuda.PyCudaFunctions, "sets_max_dynamic_smem", False):
        return

    class DynamicSmemPyCudaFunctions(kt_pycuda.PyCudaFunctions):
        """PyCudaFunctions plus the one attribute any > 48 KB dynamic shared memory launch needs."""

        sets_max_dynamic_smem = True

        def copy_shared_memory_args(self, smem_args: dict[str, Any]) -> None:
            """Copy the shared memory arguments and allow the function this launch's dynamic shared memory size."""
            super().copy_shared_memory_args(smem_args)
            if self.smem_size > 0:
                self.func.set_attribute(kt_pycuda.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        int(self.smem_size))

    # DeviceInterface imports the class from this module when it starts a tuning run.
    kt_pycuda.PyCudaFunctions = DynamicSmemPyCudaFunctions


def progress_observer(advance: Callable[[], None]) -> Any:
    """A KT benchmark observer that advances a progress bar once per configuration benchmarked."""
    from kernel_tuner.observers.observer import BenchmarkObserver

    class ProgressObserver(BenchmarkObserver):
        def register_configuration(self, params: dict[str, Any]) -> None:
            advance()

        def get_results(self) -> dict[str, Any]:
            return {}

    return ProgressObserver()


@dataclass(frozen=True)
class KtShape:
    """KT's tuning of one shape: wall times, its own totals, and every configuration's mean time."""

    shape: Shape
    prep_s: float
    tune_s: float
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    times_ms: Mapping[str, float] = field(default_factory=dict, hash=False)  # config_id -> KT's mean
    failed: int = 0
    error: str | None = None


@dataclass(frozen=True)
class KtRun:
    """The whole KT side: import, every shape, device."""

    import_s: float
    shapes: tuple[KtShape, ...]
    device: str | None

    @property
    def wall_s(self) -> float:
        """Import plus every ``tune_kernel`` call (host input preparation excluded)."""
        return self.import_s + sum(item.tune_s for item in self.shapes)


def kt_shape_summary(
    *, space: KtSpace, shape: Shape, results: Sequence[Mapping[str, Any]], prep_s: float, tune_s: float
) -> KtShape:
    """Per-configuration mean times (ok ones), failures and KT's own compile / verify / benchmark totals."""
    times: dict[str, float] = {}
    failed = 0
    for result in results:
        value = result.get("time")
        if "__error__" in result or not isinstance(value, (int, float)) or not np.isfinite(value):
            failed += 1
            continue
        times[space.config(result).id] = float(value)
    total = {name: sum(float(r.get(name) or 0.0) for r in results) / 1e3
             for name in ("compile_time", "verification_time", "benchmark_time")}
    return KtShape(shape=shape, prep_s=prep_s, tune_s=tune_s, compile_s=total["compile_time"],
                   verify_s=total["verification_time"], benchmark_s=total["benchmark_time"], times_ms=times,
                   failed=failed)


def run_kernel_tuner(
    *, plan: Plan, space: KtSpace, kernel_path: Path, flags: Sequence[str], rtol: float,
    advance: Callable[[], None],
) -> KtRun:
    """Tune every shape with KT's brute force, one ``tune_kernel`` per shape, timed from the import on."""
    started = time.perf_counter()
    try:
        from kernel_tuner import tune_kernel
    except ImportError:
        raise TuneTableError(f"kernel_tuner is not installed (pip install kernel_tuner=={KT_VERSION})",
                             where="kernel_tuner") from None
    patch_dynamic_smem()
    import_s = time.perf_counter() - started
    shapes, device = [], None
    for index, shape in enumerate(plan.shapes):
        prep_start = time.perf_counter()
        inputs = kt_inputs(space=space, shape=shape, seed=SEED + index)
        tune_start = time.perf_counter()
        options = kt_options(space=space, shape=shape, kernel_path=kernel_path, flags=flags,
                             iterations=plan.kt_iterations, inputs=inputs, rtol=rtol,
                             observers=[progress_observer(advance)])
        try:
            with warnings.catch_warnings():
                # KT compares numpy dtypes with the C signature: uint16 bit patterns vs __nv_bfloat16 warn.
                warnings.simplefilter("ignore", UserWarning)
                results, env = tune_kernel(**options)
        except Exception as exc:  # noqa: BLE001 - any KT failure is that shape's result; the comparison goes on
            message = (str(exc).strip().splitlines() or [""])[0]
            shapes.append(KtShape(shape=shape, prep_s=tune_start - prep_start,
                                  tune_s=time.perf_counter() - tune_start, error=f"{type(exc).__name__}: {message}"))
            continue
        tune_s = time.perf_counter() - tune_start
        device = device or env.get("device_name")
        shapes.append(kt_shape_summary(space=space, shape=shape, results=results, prep_s=tune_start - prep_start,
                                       tune_s=tune_s))
    return KtRun(import_s=import_s, shapes=tuple(shapes), device=device)


# -- running tunetable (its CLI) ------------------------------------------------------------------
def ours_commands(*, plan: Plan, root: Path, python: str = sys.executable) -> list[tuple[str, list[str]]]:
    """The three CLI steps (grid, compile from scratch, bench on GPU 0) into ``root``."""
    base = [python, "-m", "tunetable"]
    common = ["--table", plan.table, "--params", str(plan.params_path)]
    filters = [item for text in plan.filters for item in ("--filter", text)]
    shapes = [item for (m, n, k) in plan.shapes for item in ("--shape", f"{m},{n},{k}")]
    return [
        ("grid", [*base, "grid", *common, *filters, "--out", str(paths.grid_file(plan.table, root=root))]),
        ("compile", [*base, "compile", *common, *filters, "--no-cache",
                     "--out", str(paths.compile_report(plan.table, root=root))]),
        ("bench", [*base, "bench", *common, "--backend", "cuda", "--gpus", "0", *shapes, "--results-root", str(root)]),
    ]


@dataclass(frozen=True)
class OursRun:
    """The whole tunetable side: wall time, each step's, and every shape's ok medians."""

    wall_s: float
    steps: Mapping[str, float] = field(hash=False)
    medians: Mapping[Shape, Mapping[str, float]] = field(hash=False)
    failed: Mapping[Shape, int] = field(hash=False)


def shard_medians(*, root: Path, table: str, shape: Shape) -> tuple[dict[str, float], int]:
    """(config_id -> median ms of the ok kernel rows, failed kernel rows) of one shape's shard."""
    from tunetable.results import read_shard

    found = sorted(root.glob(f"raw/{table}/*/{paths.shape_name(*shape)}.pkl"))
    if len(found) != 1:
        raise TuneTableError(f"expected one shard for shape {shape}, found {len(found)}", path=root / "raw" / table)
    frame = read_shard(found[0])["merged_df"]
    kernels = frame[frame["kind"] == "kernel"]
    ok = kernels[kernels["status"] == "ok"]
    return {str(row.config_id): float(row.median_ms) for row in ok.itertuples()}, int(len(kernels) - len(ok))


def run_ours(*, plan: Plan, root: Path) -> OursRun:
    """Run the three steps from a cold start and read the winners; a failed step is a TuneTableError."""
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "xdg-cache"), "PYTHONUNBUFFERED": "1"}
    steps: dict[str, float] = {}
    started = time.perf_counter()
    for name, command in ours_commands(plan=plan, root=root):
        step_start = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, env=env, check=False)
        steps[name] = time.perf_counter() - step_start
        if done.returncode != 0:
            raise TuneTableError(f"exited with status {done.returncode} (its error is printed above)",
                                 where=f"tunetable {name}")
    medians, failed = {}, {}
    for shape in plan.shapes:
        medians[shape], failed[shape] = shard_medians(root=root, table=plan.table, shape=shape)
    return OursRun(wall_s=time.perf_counter() - started, steps=steps, medians=medians, failed=failed)


# -- comparison ------------------------------------------------------------------------------------
def best(times: Mapping[str, float]) -> str | None:
    """The fastest configuration (ties: smallest id), or None when nothing ran."""
    return min(times, key=lambda config_id: (times[config_id], config_id)) if times else None


def compare_winners(*, ours: Mapping[str, float], kt_times: Mapping[str, float]) -> dict[str, Any]:
    """Both winners, and whether they agree: the same, or KT's within TIE of ours by our medians."""
    our_winner, kt_winner = best(ours), best(kt_times)
    slower = None
    if our_winner is not None and kt_winner in ours:
        slower = ours[kt_winner] / ours[our_winner] - 1.0
    agree = our_winner is not None and (kt_winner == our_winner or (slower is not None and slower <= TIE))
    return {"ours": our_winner, "kt": kt_winner, "kt_winner_slower_by_our_medians": slower, "agree": agree}


def describe_filters(filters: Sequence[str]) -> str:
    """The grid filters for a report line ('whole grid' when there are none)."""
    return ", ".join(filters) or "whole grid"


def figures(
    *, plan: Plan, space: KtSpace, ours: OursRun, kt: KtRun, compiler_options: Sequence[str], workers: int
) -> dict[str, Any]:
    """Everything the run found, as the JSON document."""
    labels = {config.id: config.label() for config in space.by_key.values()}
    per_shape = []
    for item in kt.shapes:
        medians = ours.medians.get(item.shape, {})
        winners = compare_winners(ours=medians, kt_times=item.times_ms)
        m, n, k = item.shape
        per_shape.append({
            "M": m, "N": n, "K": k, **winners,
            "ours_label": labels.get(winners["ours"] or ""), "kt_label": labels.get(winners["kt"] or ""),
            "ours_median_ms": medians.get(winners["ours"] or ""),
            "kt_winner_our_median_ms": medians.get(winners["kt"] or ""),
            "kt_winner_kt_mean_ms": item.times_ms.get(winners["kt"] or ""),
            "ours_winner_kt_mean_ms": item.times_ms.get(winners["ours"] or ""),
            "ours_ok": len(medians), "ours_failed": ours.failed.get(item.shape, 0),
            "kt_ok": len(item.times_ms), "kt_failed": item.failed, "kt_error": item.error,
            "kt_tune_s": round(item.tune_s, 3), "kt_prep_s": round(item.prep_s, 3),
            "kt_compile_s": round(item.compile_s, 3), "kt_verify_s": round(item.verify_s, 3),
            "kt_benchmark_s": round(item.benchmark_s, 3),
        })
    speedup = kt.wall_s / ours.wall_s if ours.wall_s > 0 else None
    return {
        "table": plan.table, "quick": plan.quick, "device": kt.device,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shapes": [list(shape) for shape in plan.shapes], "filters": list(plan.filters),
        "configs": len(space.by_key), "config_ids": sorted(labels),
        "ours": {"wall_s": round(ours.wall_s, 3), "steps_s": {k: round(v, 3) for k, v in ours.steps.items()},
                 "compile_workers": workers, "gpus": 1},
        "kernel_tuner": {"version": KT_VERSION, "lang": "pycuda", "strategy": "brute_force",
                         "iterations": plan.kt_iterations, "compiler_options": list(compiler_options),
                         "wall_s": round(kt.wall_s, 3), "import_s": round(kt.import_s, 3),
                         "prep_s": round(sum(s.prep_s for s in kt.shapes), 3), "patch": PATCH_NOTE},
        "speedup": round(speedup, 2) if speedup is not None else None, "target_speedup": TARGET_SPEEDUP,
        "meets_target": speedup is not None and speedup >= TARGET_SPEEDUP,
        "winners_agree": sum(bool(s["agree"]) for s in per_shape), "per_shape": per_shape,
        "method": [
            "same GPU (GPU 0) for both, one after the other: tunetable first, then Kernel Tuner",
            f"configurations: params.yaml grid ({describe_filters(plan.filters)}) for BOTH tools, split-K included "
            "(one launch; KT gets a zeroed workspace per SPLIT_K value, tunetable one per configuration)",
            "tunetable: grid, compile --no-cache (empty pycuda cache too), bench --backend cuda --gpus 0 "
            "(params.yaml bench settings), winners read from the shards",
            f"Kernel Tuner: tune_kernel per shape, lang=pycuda, brute_force, iterations={plan.kt_iterations} "
            "(its default), verify against a float32 numpy reference, compiles every configuration per shape",
            "KT wall time = import + tune_kernel calls; building host inputs and the reference is reported as prep_s",
            "as shipped: KT's default sequential runner compiles one configuration at a time; tunetable compiles "
            f"in parallel ({workers} nvcc processes) and measures on one GPU here",
            "timing differs by design: KT takes the mean of its iterations, single launches on the same buffers "
            "(warm L2, first launch included); tunetable the median of interleaved cold-L2 batches",
            PATCH_NOTE,
            "KT compiles for sm_90 (device capability), tunetable for sm_90a; the kernel uses sm_80 instructions",
            "agreement: same winner, or KT's winner within 1 % of ours by tunetable's medians",
        ],
    }


def markdown(document: Mapping[str, Any]) -> str:
    """The figures as a short Markdown report."""
    ours, kt = document["ours"], document["kernel_tuner"]
    lines = [
        f"# Tuning speed: tunetable vs Kernel Tuner {kt['version']} ({document['device']}, {document['date']})",
        "",
        f"{document['configs']} configurations ({describe_filters(document['filters'])}) x {len(document['shapes'])} "
        "shapes, "
        "cold start to winners, one GPU.",
        "",
        "| tool | wall s | detail |",
        "| --- | ---: | --- |",
        f"| tunetable | {ours['wall_s']:.1f} | " + ", ".join(f"{k} {v:.1f} s" for k, v in ours["steps_s"].items())
        + f" ({ours['compile_workers']} nvcc workers) |",
        f"| Kernel Tuner | {kt['wall_s']:.1f} | import {kt['import_s']:.1f} s + tune_kernel per shape "
        f"(pycuda, brute_force, {kt['iterations']} iterations); host prep {kt['prep_s']:.1f} s apart |",
        "",
        f"**Speed-up: {document['speedup']}x** (target >= {document['target_speedup']:g}x: "
        f"{'met' if document['meets_target'] else 'NOT met'}). Winners agree on "
        f"{document['winners_agree']}/{len(document['per_shape'])} shapes.",
        "",
        "| M | N | K | tunetable winner | Kernel Tuner winner | KT winner vs ours (our medians) | agree | KT s |",
        "| ---: | ---: | ---: | --- | --- | ---: | --- | ---: |",
    ]
    for row in document["per_shape"]:
        slower = row["kt_winner_slower_by_our_medians"]
        lines.append(
            f"| {row['M']} | {row['N']} | {row['K']} | {row['ours']} {row['ours_label'] or ''} | "
            f"{row['kt'] or row['kt_error']} {row['kt_label'] or ''} | "
            f"{'-' if slower is None else f'{100 * slower:+.2f} %'} | {'yes' if row['agree'] else 'no'} | "
            f"{row['kt_tune_s']:.1f} |"
        )
    lines += ["", "Method:", *[f"- {item}" for item in document["method"]], ""]
    return "\n".join(lines)


# -- the thin CLI ------------------------------------------------------------------------------------
def print_report(document: Mapping[str, Any]) -> None:
    """Rich tables: the two wall times, then the winners per shape."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a log file: wide enough for whole config ids
        console = Console(width=140)
    ours, kt = document["ours"], document["kernel_tuner"]
    timing = Table(title=f"tuning wall time, cold start to winners ({document['configs']} configs x "
                         f"{len(document['shapes'])} shapes, one GPU)")
    for column in ("tool", "wall s", "detail"):
        timing.add_column(column, justify="right" if column == "wall s" else "left")
    timing.add_row("tunetable", f"{ours['wall_s']:.1f}",
                   ", ".join(f"{k} {v:.1f} s" for k, v in ours["steps_s"].items()))
    timing.add_row(f"Kernel Tuner {kt['version']}", f"{kt['wall_s']:.1f}",
                   f"import {kt['import_s']:.1f} s + tune_kernel (host prep {kt['prep_s']:.1f} s apart)")
    console.print(timing)
    winners = Table(title="winners per shape (agree: same, or within 1 % by tunetable's medians)")
    for column in ("M", "N", "K", "tunetable", "ours ms", "Kernel Tuner", "its ms (ours)", "Δ", "agree", "KT s"):
        winners.add_column(column, justify="right" if column not in ("tunetable", "Kernel Tuner") else "left",
                           no_wrap=True)
    for row in document["per_shape"]:
        slower = row["kt_winner_slower_by_our_medians"]
        ms = row["kt_winner_our_median_ms"]
        winners.add_row(
            str(row["M"]), str(row["N"]), str(row["K"]), str(row["ours"]),
            f"{row['ours_median_ms']:.4f}" if row["ours_median_ms"] else "-",
            str(row["kt"] or row["kt_error"]), f"{ms:.4f}" if ms else "-",
            "-" if slower is None else f"{100 * slower:+.2f} %", "yes" if row["agree"] else "no",
            f"{row['kt_tune_s']:.1f}",
        )
    console.print(winners)
    verdict = "[green]met[/green]" if document["meets_target"] else "[red]NOT met[/red]"
    console.print(f"speed-up {document['speedup']}x (target >= {document['target_speedup']:g}x: {verdict}); "
                  f"winners agree on {document['winners_agree']}/{len(document['per_shape'])} shapes")
    console.print(f"note: {PATCH_NOTE}")


def write_outputs(*, document: Mapping[str, Any], out: Path | None, quick: bool) -> list[Path]:
    """The JSON and Markdown figures: in benchmarks/results (full runs) and under ``out``."""
    text, report = json.dumps(document, indent=2) + "\n", markdown(document)
    folders = ([] if quick else [RESULT_JSON.parent]) + ([out] if out is not None else [])
    written = []
    for folder in folders:
        target = folder / RESULT_JSON.name
        atomic_write_text(target, text)
        atomic_write_text(target.with_suffix(".md"), report)
        written += [target, target.with_suffix(".md")]
    return written


def main(argv: Sequence[str] | None = None) -> None:
    """Run both tools, compare, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"only {', '.join(QUICK_SUBSET)} x 1 shape (M=512); writes only under --out")
    parser.add_argument("--subset", action="store_true", help=f"only {', '.join(SMALL_SUBSET)}")
    parser.add_argument("--filter", action="append", default=[], metavar="NAME=V", help="grid filter for both tools")
    parser.add_argument("--shape", action="append", default=[], metavar="M,N,K")
    parser.add_argument("--kt-iterations", type=int, default=KT_ITERATIONS)
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here (e.g. $OUT)")
    options = parser.parse_args(argv)
    try:
        from tunetable.grid import load_table_grid
        from tunetable.params import load_params

        plan = make_plan(quick=options.quick, subset=options.subset, filters=options.filter,
                         shapes=options.shape, kt_iterations=options.kt_iterations,
                         params_path=options.params.resolve())
        grid = load_table_grid(params_path=plan.params_path, table=plan.table, filter_options=plan.filters)
        space = kt_space(configs=grid.result.kept)
        params = load_params(plan.params_path)
        flags = [str(flag) for flag in (params.get("compile") or {}).get("nvcc_flags") or []]
        rtol = float((params.get("bench") or {}).get("verify_rtol", 0.02))
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        print(f"{len(space.by_key)} configurations ({describe_filters(plan.filters)}) x {len(plan.shapes)} shapes; "
              "tunetable first, then Kernel Tuner", flush=True)
        with tempfile.TemporaryDirectory(prefix="kt-vs-tunetable-") as scratch:
            ours = run_ours(plan=plan, root=Path(scratch))
        kt = run_kt_with_progress(plan=plan, space=space, kernel_path=grid.kernel_path, flags=flags, rtol=rtol)
        document = figures(plan=plan, space=space, ours=ours, kt=kt, workers=workers,
                           compiler_options=kt_compiler_options(kernel_path=grid.kernel_path, flags=flags))
        print_report(document)
        for path in write_outputs(document=document, out=options.out, quick=plan.quick):
            print(f"wrote {path}")
    except TuneTableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def run_kt_with_progress(*, plan: Plan, space: KtSpace, kernel_path: Path, flags: Sequence[str], rtol: float) -> KtRun:
    """Kernel Tuner's side under a rich progress bar (one tick per configuration benchmarked)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # KT benchmarks its first configuration twice (a warm-up), once per tune_kernel call.
    total = len(plan.shapes) * (len(space.by_key) + 1)
    with Progress(TextColumn("[bold]Kernel Tuner brute force"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn()) as progress:
        task = progress.add_task("kt", total=total)
        return run_kernel_tuner(plan=plan, space=space, kernel_path=kernel_path, flags=flags, rtol=rtol,
                                advance=lambda: progress.advance(task))


if __name__ == "__main__":
    main()
