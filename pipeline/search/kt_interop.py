"""Kernel Tuner interop: our rows <-> Kernel Tuner 1.x JSON cache files, and KT's simulation mode.

Kernel Tuner keeps one cache per (device, kernel, problem size)::

    {"device_name", "kernel_name", "problem_size", "tune_params_keys", "tune_params",
     "objective", "cache": {"v1,v2,...": {<params>, "time", "times", "compile_time", ...}}}

Keys are the parameter values joined by commas in ``tune_params_keys`` order; ``time`` is in
ms; failed configurations carry ``"__error__": "CompilationFailedConfig"`` or
``"RuntimeFailedConfig"`` (kernel_tuner.util.read_cache turns those strings back into error
objects). We export one cache per shape with ``time`` = our median (Kernel Tuner's own is a
mean), every sample in ``times``, and our ids and statuses under ``tunetable_*`` keys so a
round trip loses nothing. ``compile_time`` + ``benchmark_time`` let KT charge a ``time_limit``.

Our grids are unions of groups pruned by the family's rules, so the product of ``tune_params``
is far larger than what was measured (gemm_mma: 38,880 combinations, 104 configurations). Each
exported cache therefore carries a ``restrictions`` list (one Kernel Tuner restriction string:
the tuple of parameters is one of the measured ones) that a Kernel Tuner user passes as
``restrictions=`` with the exported ``tune_params``: every strategy then searches exactly the
measured configurations, and ``brute_force`` returns our measured best. Kernel Tuner ignores keys
it does not know, so the cache reads as any other.

Importing ranks by the median of an entry's ``times`` (Kernel Tuner's ``time`` is their mean, which
one slow sample drags: [0.82, 0.79, 13.40] is 5.0 ms by mean, 0.82 ms by median).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tunetable.atomic import atomic_write_text
from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.inputs import (
    INT32_MAX,
    MAX_NAME_CHARS,
    SHAPE_KEYS,
    check_int,
    check_shape,
    finite_number,
    is_int,
    load_checked_recording,
    parse_json,
    read_input_text,
    safe_name,
)
from tunetable.results import KBENCH_FIELDS, ROW_FIELDS, SEARCH_FIELDS, read_result_file, spec_string
from tunetable.search.space import value_list

COMPILE_FAILED = "CompilationFailedConfig"
RUNTIME_FAILED = "RuntimeFailedConfig"
INVALID = "InvalidConfig"
KT_ERRORS = (COMPILE_FAILED, RUNTIME_FAILED, INVALID, "ErrorConfig")
NON_PARAMETER_COLUMNS = (frozenset(ROW_FIELDS) | frozenset(KBENCH_FIELDS) | frozenset(SEARCH_FIELDS)
                         | {"table", "strategy"})
IMPORTED_BACKEND = "kernel_tuner"


def parameter_names(columns: Sequence[str]) -> list[str]:
    """The parameter columns of a row table (every column that is not a known result field), in order."""
    return [c for c in columns if c not in NON_PARAMETER_COLUMNS]


def _plain(value: Any) -> Any:
    """numpy scalars/arrays and NaN as JSON-safe Python values."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def parameter_value(value: Any) -> Any:
    """A parameter value as the grid wrote it: parquet stores int columns with gaps (baseline rows) as float."""
    value = _plain(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def cache_key(params: Mapping[str, Any], names: Sequence[str]) -> str:
    """Kernel Tuner's cache key: the values in ``names`` order joined by commas."""
    return ",".join(str(parameter_value(params[name])) for name in names)


def _entry(row: Mapping[str, Any], names: Sequence[str], *, timings: bool = True) -> dict[str, Any]:
    """One cache record from one of our rows (``timings=False``: compile/benchmark times zeroed)."""
    entry: dict[str, Any] = {name: parameter_value(row[name]) for name in names}
    samples = [float(s) for s in (_plain(row.get("samples_ms")) or []) if s is not None]
    compile_ms = 1000.0 * float(_plain(row.get("compile_s")) or 0.0)
    status = row.get("status")
    if status == "ok":
        entry["time"] = float(row["median_ms"])
        entry["times"] = samples
    else:
        error = COMPILE_FAILED if status == "build" else RUNTIME_FAILED
        entry["time"] = error
        entry["__error__"] = error
    entry.update(
        compile_time=compile_ms if timings else 0.0,
        verification_time=0.0,
        benchmark_time=float(sum(samples)) if timings else 0.0,
        strategy_time=0.0,
        framework_time=0.0,
        timestamp=str(_plain(row.get("time")) or ""),
        num_regs=_plain(row.get("registers")),
        core_freq=_plain(row.get("sm_clock_mhz")),
        nvml_power=_plain(row.get("power_w")),
        tunetable_config_id=str(row["config_id"]),
        tunetable_status=str(status),
        tunetable_iqr_ms=_plain(row.get("iqr_ms")),
        tunetable_error=_plain(row.get("error")),
    )
    return entry


def kt_cache_documents(
    rows: Sequence[Mapping[str, Any]],
    *,
    names: Sequence[str],
    kernel_name: str,
    device_name: str | None = None,
    timings: bool = True,
) -> dict[tuple[int, int, int], dict[str, Any]]:
    """One Kernel Tuner cache document per (M, N, K) from our kernel rows (baseline rows are skipped)."""
    kernel_rows = [r for r in rows if r.get("kind", "kernel") == "kernel"]
    tune_params = {name: list(value_list(parameter_value(r[name]) for r in kernel_rows)) for name in names}
    shapes: dict[tuple[int, int, int], list[Mapping[str, Any]]] = {}
    for row in kernel_rows:
        shapes.setdefault((int(row["M"]), int(row["N"]), int(row["K"])), []).append(row)
    documents = {}
    for shape in sorted(shapes):
        cache: dict[str, Any] = {}
        for row in sorted(shapes[shape], key=lambda r: cache_key(r, names)):
            cache[cache_key(row, names)] = _entry(row, names, timings=timings)
        device = device_name or str(_plain(shapes[shape][0].get("device")) or "unknown")
        documents[shape] = {
            "device_name": device,
            "kernel_name": kernel_name,
            "problem_size": list(shape),
            "tune_params_keys": list(names),
            "tune_params": tune_params,
            "objective": "time",
            "restrictions": [membership_restriction(configs=shapes[shape], names=names)],
            "cache": cache,     # last: Kernel Tuner's reader expects the file to end with the cache's "}\n}"
        }
    return documents


def membership_restriction(*, configs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    """A Kernel Tuner restriction string true exactly for these configurations' parameter tuples."""
    tuples = sorted({tuple(parameter_value(c[name]) for name in names) for c in configs}, key=repr)
    if len(names) == 1:
        return f"{names[0]} in {[t[0] for t in tuples]!r}"
    return f"({', '.join(names)}) in {tuples!r}"


def cache_file_name(*, table: str, shape: tuple[int, int, int]) -> str:
    """File name of a shape's exported cache: ``<table>_M<m>_N<n>_K<k>.json``."""
    m, n, k = shape
    return f"{table}_M{m}_N{n}_K{k}.json"


def export_kt_caches(
    rows: Sequence[Mapping[str, Any]],
    *,
    table: str,
    kernel_name: str,
    out_dir: str | Path,
    device_name: str | None = None,
    names: Sequence[str] | None = None,
    timings: bool = True,
) -> list[Path]:
    """Write one Kernel Tuner cache per shape under ``out_dir``; returns the files written.

    ``names``: the tunable parameters in grid order (default: every column that is not a result field).
    ``timings=False`` zeroes compile and benchmark times, so a ``time_limit`` in simulation is wall time only.
    """
    if not rows:
        raise TuneTableError("no rows to export", path=out_dir)
    names = list(names) if names is not None else parameter_names(list(rows[0].keys()))
    written = []
    documents = kt_cache_documents(rows, names=names, kernel_name=kernel_name, device_name=device_name, timings=timings)
    for shape, document in documents.items():
        path = Path(out_dir) / cache_file_name(table=table, shape=shape)
        # indent="" is Kernel Tuner's own layout; "cache" last keeps the closing "}\n}" it checks for.
        atomic_write_text(path, json.dumps(document, indent="") + "\n")
        written.append(path)
    return written


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a recording (.parquet) or of a shard (.pkl) as plain dicts."""
    source = Path(path)
    if not source.is_file():
        raise TuneTableError("no such file", path=source)
    if source.suffix == ".parquet":
        frame = load_checked_recording(source, served=False)   # rows to export or search, checked whole
    else:
        frame = read_result_file(source)["merged_df"]
    return [{k: _plain(v) for k, v in record.items()} for record in frame.to_dict(orient="records")]


def read_kt_cache(path: str | Path) -> dict[str, Any]:
    """Parse a Kernel Tuner cache file, also one left open by an interrupted run (no closing braces).

    Read through ``tunetable.inputs`` (size, UTF-8, nesting depth, integer digits); the document must be
    a mapping with ``kernel_name``, ``problem_size``, a list of names ``tune_params_keys`` and a mapping
    ``cache`` of mappings.
    """
    source = Path(path)
    text = read_input_text(source).strip()
    try:
        document = parse_json(text, path=source, invalid="not a Kernel Tuner cache")
    except TuneTableError as exc:
        if not str(exc).startswith(f"{source}: line "):
            raise
        try:
            # Kernel Tuner appends entries to an open file and closes it only at the end of a run.
            document = parse_json(text.rstrip(",") + "}\n}", path=source, invalid="not a Kernel Tuner cache")
        except TuneTableError:
            raise exc from None
    for key in ("kernel_name", "problem_size", "tune_params_keys", "cache"):
        if not isinstance(document, dict) or key not in document:
            raise TuneTableError(f"not a Kernel Tuner cache: missing '{key}'", path=source)
    keys = document["tune_params_keys"]
    if not isinstance(keys, list) or not all(isinstance(name, str) for name in keys):
        raise TuneTableError(f"must be a list of names, got a {type(keys).__name__}", path=source,
                             where="tune_params_keys")
    if not isinstance(document["cache"], dict):
        raise TuneTableError(f"must be a mapping of cache keys to entries, got a {type(document['cache']).__name__}",
                             path=source, where="cache")
    for key, entry in document["cache"].items():
        if not isinstance(entry, dict):
            raise TuneTableError(f"an entry must be a mapping, got a {type(entry).__name__}", path=source,
                                 where=f"cache[{key}]")
    return document


def _tunable_names(names: Sequence[str], *, family: str, path: str | Path) -> list[str]:
    """``tune_params_keys`` checked: a known family's tunables, or plain names; never a shape or result field."""
    from tunetable.kernels.families import FAMILIES  # lazy: the families load only when a cache is imported

    known = FAMILIES[family].tunable_names() if family in FAMILIES else None
    for index, name in enumerate(names):
        where = f"tune_params_keys[{index}]"
        if known is not None and name not in known:
            raise TuneTableError(f"{name!r:.60} is not a tunable of family {family} (its tunables: "
                                 f"{', '.join(known)})", path=path, where=where)
        safe_name(name, what="parameter", path=path, where=where)
        if name in SHAPE_KEYS or name in NON_PARAMETER_COLUMNS:
            raise TuneTableError(f"{name!r} is a shape or result field, not a tunable", path=path, where=where)
    if len(set(names)) != len(names):
        raise TuneTableError("names a parameter twice", path=path, where="tune_params_keys")
    return list(names)


def _tunable_value(value: Any, *, name: str, integer: bool, path: str | Path, where: str) -> Any:
    """One entry's tunable: an int32 >= 0 for a known (integer) family; else a plain scalar (no list, no null)."""
    if integer or is_int(value):
        return check_int(value, name=name, low=0, high=INT32_MAX, path=path, where=where)
    if isinstance(value, str) and len(value) <= MAX_NAME_CHARS and value.isprintable():
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise TuneTableError(f"{name} must be an integer, a finite number or a short text, got {value!r:.60}",
                         path=path, where=where)


def rows_from_kt_cache(path: str | Path, *, family: str) -> list[dict[str, Any]]:
    """Our rows (ROW_FIELDS + parameter columns) from a Kernel Tuner cache; InvalidConfig entries are skipped.

    The problem size is three int32 dimensions >= 1; each tunable an int32 >= 0 when ``family`` is one of
    ours (every tunable of ours is an integer), a plain scalar otherwise.
    """
    from tunetable.kernels.families import FAMILIES  # lazy: the families load only when a cache is imported

    document = read_kt_cache(path)
    size = document["problem_size"]
    if not (isinstance(size, list) and len(size) == 3):
        raise TuneTableError(f"problem_size must be [M, N, K], got {size!r:.80}", path=path, where="problem_size")
    m, n, k = check_shape(size, path=path, where="problem_size")
    names = _tunable_names(document["tune_params_keys"], family=family, path=path)
    integer = family in FAMILIES
    rows = []
    for key, entry in document["cache"].items():
        missing = [name for name in names if name not in entry]
        if missing:
            raise TuneTableError(f"entry lacks parameter(s) {', '.join(missing)}", path=path, where=f"cache[{key}]")
        error = entry_error(entry)
        if error == INVALID:
            continue
        if error is None:
            _check_timing(entry, path=path, key=key)
        _check_fields(entry, path=path, key=key)
        params = {name: _tunable_value(entry[name], name=name, integer=integer, path=path, where=f"cache[{key}]")
                  for name in names}
        rows.append(_row_from_entry(entry, params=params, family=family, shape=(m, n, k), error=error,
                                    device=str(document.get("device_name", "unknown")), mesh_idx=len(rows)))
    return rows


def _check_timing(entry: Mapping[str, Any], *, path: str | Path, key: str) -> None:
    """A measured entry's ``time`` and ``times`` are finite non-negative numbers (ms); else one error naming it."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0

    times = entry.get("times")
    if times is not None and not (isinstance(times, list) and times and all(number(t) for t in times)):
        raise TuneTableError(f"times must be a list of finite times in ms, got {times!r:.80}", path=path,
                             where=f"cache[{key}]")
    if not times and not number(entry.get("time")):
        raise TuneTableError(f"time must be a finite time in ms, got {entry.get('time')!r:.80}", path=path,
                             where=f"cache[{key}]")


# The optional fields of an entry that become columns of our rows, with the types they must have (or null).
KT_NUMBER_FIELDS = ("compile_time", "core_freq", "nvml_power", "tunetable_iqr_ms")
KT_TEXT_FIELDS = ("timestamp", "tunetable_error", "tunetable_status", "tunetable_config_id")


def _check_fields(entry: Mapping[str, Any], *, path: str | Path, key: str) -> None:
    """The optional fields we keep are of their declared type: finite numbers, int32 registers, short texts."""
    from tunetable.results import STATUSES  # the statuses a row may carry

    where = f"cache[{key}]"
    for name in KT_NUMBER_FIELDS:
        value = entry.get(name)
        if value is not None and not (finite_number(value) and value >= 0):
            raise TuneTableError(f"{name} must be a finite number >= 0, got {value!r:.60}", path=path, where=where)
    if entry.get("num_regs") is not None:
        check_int(entry["num_regs"], name="num_regs", low=0, high=INT32_MAX, path=path, where=where)
    for name in KT_TEXT_FIELDS:
        value = entry.get(name)
        if value is not None and not (isinstance(value, str) and len(value) <= 4096):
            raise TuneTableError(f"{name} must be text, got {value!r:.60}", path=path, where=where)
    status = entry.get("tunetable_status")
    if status is not None and status not in STATUSES:
        raise TuneTableError(f"tunetable_status {status!r:.60} is not one of {', '.join(STATUSES)}", path=path,
                             where=where)


def entry_error(entry: Mapping[str, Any]) -> str | None:
    """The Kernel Tuner error class name of an entry, or None for a measured one."""
    for value in entry.values():
        if isinstance(value, str) and value in KT_ERRORS:
            return value
    return None


def _row_from_entry(
    entry: Mapping[str, Any], *, params: dict[str, Any], family: str, shape: tuple[int, int, int], error: str | None,
    device: str, mesh_idx: int = 0
) -> dict[str, Any]:
    """Our row (ROW_FIELDS + parameters) of one Kernel Tuner cache entry, measured or failed."""
    m, n, k = shape
    samples = [float(t) for t in entry.get("times") or []] if error is None else []
    # Kernel Tuner's `time` is the mean of `times`: the median ranks (one slow sample cannot pick a loser).
    median = (statistics.median(samples) if samples else float(entry["time"])) if error is None else None
    if error is None and not samples:
        samples = [median]
    status = ("ok" if error is None
              else entry.get("tunetable_status") or ("build" if error == COMPILE_FAILED else "launch"))
    row: dict[str, Any] = {name: None for name in (*KBENCH_FIELDS, *ROW_FIELDS)}
    row.update({"mesh_idx": mesh_idx, "name": family, "met (ms)": median, "iters": len(samples),
                "spec": spec_string(family, params, m, n, k)})
    row.update(
        M=m, N=n, K=k,
        config_id=KernelConfig.from_dict(family, params).id,
        kind="kernel",
        status=status,
        error=entry.get("tunetable_error") or (None if error is None else error),
        samples_ms=samples,
        median_ms=median,
        iqr_ms=entry.get("tunetable_iqr_ms", _iqr(samples)) if error is None else None,
        mean_ms=statistics.fmean(samples) if samples else None,
        min_ms=min(samples) if samples else None,
        tflops=2.0 * m * n * k / (median * 1e-3) / 1e12 if median else None,
        registers=entry.get("num_regs"),
        compile_s=float(entry.get("compile_time") or 0.0) / 1000.0,
        sm_clock_mhz=entry.get("core_freq"),
        power_w=entry.get("nvml_power"),
        backend=IMPORTED_BACKEND,
        device=device,
        time=entry.get("timestamp"),
    )
    row.update(params)
    return row


def _iqr(samples: Sequence[float]) -> float | None:
    """The interquartile range of ``samples``, or None for fewer than two."""
    if len(samples) < 2:
        return None
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return q3 - q1


def _simulated_seconds(document: Mapping[str, Any]) -> float:
    """Compile + verification + benchmark time of every entry: what simulating the whole cache charges."""
    fields = ("compile_time", "verification_time", "benchmark_time")
    return sum(float(entry.get(f) or 0.0) for entry in document["cache"].values() for f in fields) / 1000.0


def replay_with_kernel_tuner(
    cache_path: str | Path,
    *,
    strategy: str,
    max_fevals: int,
    seed: int,
    strategy_options: Mapping[str, Any] | None = None,
    wall_limit_s: float | None = None,
) -> list[tuple[str, float]]:
    """Run a Kernel Tuner strategy in simulation mode on a cache: (cache key, time or inf) per unique evaluation.

    The search space is every configuration in the cache, failed ones included (they count as
    evaluations, as in our search); Kernel Tuner's own ``tune_cache`` would drop failures.
    ``wall_limit_s`` stops a run that keeps revisiting cached configurations (free in
    simulation, so ``max_fevals`` never ends it): Kernel Tuner's ``time_limit`` is set to the
    simulated time of the whole cache plus this many seconds, which no ordinary run reaches.
    """
    # Lazy and optional: Kernel Tuner is a dev dependency, needed only to run it.
    from constraint import FunctionConstraint
    from kernel_tuner import tune_kernel

    document = read_kt_cache(cache_path)
    names = list(document["tune_params_keys"])
    valid = {tuple(entry[name] for name in names) for entry in document["cache"].values()
             if entry_error(entry) != INVALID}

    def in_cache(*values: Any) -> bool:
        return values in valid

    # brute_force takes no budget (it measures everything); every other strategy does.
    options: dict[str, Any] = {} if strategy == "brute_force" else {"max_fevals": max_fevals}
    if wall_limit_s is not None and strategy != "brute_force":
        options["time_limit"] = _simulated_seconds(document) + wall_limit_s
    options.update(strategy_options or {})
    # Kernel Tuner's strategies draw from the global `random` and `numpy.random` generators.
    random.seed(seed)
    np.random.seed(seed)
    with warnings.catch_warnings():
        # No block_size_x in a GEMM tile grid: the warning is about launch geometry, unused in simulation.
        warnings.simplefilter("ignore", UserWarning)
        # bayes_opt scores failures as sys.float_info.max and overflows on them; its choices stand.
        warnings.simplefilter("ignore", RuntimeWarning)
        results, _ = tune_kernel(
            document["kernel_name"], "", tuple(document["problem_size"]), [], document["tune_params"],
            restrictions=[FunctionConstraint(in_cache)], cache=str(cache_path), simulation_mode=True,
            strategy=strategy, strategy_options=options, quiet=True, verbose=False,
        )
    order: dict[str, float] = {}
    for result in results:
        key = cache_key(result, names)
        if key not in order:
            order[key] = math.inf if "__error__" in result else float(result["time"])
    return list(order.items())
