"""The shape selector on shapes it was not built from, scored by one device's committed recordings.

Leave-one-(N, K)-out: for every (N, K) of the recordings, the selector is built (exactly as
`tunetable select --selector` builds it) from every table's recording minus that pair's rows,
then picks a table and configuration for each M of the pair. The device's coverage recordings
(params.yaml ``selector.<s>.coverage``: extra (N, K) pairs recorded for the fit only), when present,
train every fold and are never scored: the folds score the tables' shapes only, so --no-coverage
(the tables' recordings alone) against the default measures what coverage is worth. Each pick is scored by what the
recordings measured: the pick's median over the shape's cuBLAS yardstick (every table's cuBLAS row
of the shape pooled, in each recording's session scale: tunetable.baseline, the yardstick across
tables measured in different sessions), divided by the best such ratio of any configuration of any
table at that shape. Regret = that quotient - 1.

Also: leave-one-M-out (M between the anchors that remain: users' M fall between buckets), the
same model scored over every configuration instead of the runtime's shortlist, the host time of
a first decision per shape (pure Python, as gemm() pays it), and, when the validation recordings
exist (data/recordings/<device>_validation_gemm_*.parquet, shapes never in params.yaml), the picks of
the selector built from every table's recording on those shapes, a truly held-out figure.

--model-ceilings DEVICE (with --folds-only): the folds with the performance model's two device constants set to
that device's measured ceilings instead of the H200's, the experiment that keeps the H200's (docs/devices.md).

--device (a params.yaml ``devices:`` key; default the primary one): the selector that device's
`tunetable select --selector` builds (the primary's ``gemm_selector``, another device's ``gemm_selector.<d>``
over that device's recordings: tunetable.device_tables), scored on that device's recordings.

The validation recordings are a test set only: nothing in the selector (features, thresholds, settings) is
chosen by them; settings are chosen by the folds above, on both devices' default recordings.

    python3 benchmarks/unseen_shapes.py [--device D] [--out benchmarks/results] [--candidates N] [--folds-only]
                                        [--no-coverage | --coverage CSV] [--held-out coverage]
Writes unseen_shapes.json under --out for the fit `tunetable select` builds (another device:
unseen_shapes.<device>.json); a fit that reads other coverage than params.yaml names: --no-coverage
unseen_shapes.no_coverage[.<device>].json, --coverage CSV unseen_shapes.with_coverage[.<device>].json (so the folds
measure what coverage is worth whether or not params.yaml uses it); --held-out coverage, the coverage recordings
scored as held-out shapes of a fit that never read them: unseen_shapes.coverage_held_out[.<device>].json. Last line:
``unseen shapes: P% within 5%, geomean regret R%``. --folds-only: the two folds' figures only, printed, nothing
written and no validation recording read (what a setting of the selector is chosen by).
With --timing-only: only the host time of a first decision, in a process that has just built the selector
(as an application pays it), written to unseen_shapes_timing.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.device_tables import (  # noqa: E402
    device_data_path,
    device_table_name,
    primary_device,
    split_device_table,
)
from tunetable import perfmodel_grid  # noqa: E402
from tunetable.errors import TuneTableError  # noqa: E402
from tunetable.kernels import perfmodel  # noqa: E402
from tunetable.search import prior as search_prior  # noqa: E402
from tunetable.kernels.families.devices import recording_path  # noqa: E402
from tunetable.kernels.runtime.selector_serve import ShapeSelector  # noqa: E402
from tunetable.params import load_params, selector_spec, table_spec  # noqa: E402
from tunetable.selector_fit import build_selector, cublas_seconds  # noqa: E402
from tunetable.selector_measurements import (  # noqa: E402
    TableMeasurements,
    coverage_absent_line,
    selector_tables,
    shared_yardstick,
)

Shape = tuple[int, int, int]
SELECTOR = "gemm_selector"
# The held-out recordings per table of the selector (recording_path's table name): the validation set, or (from a
# fit that never read them) the coverage recordings, held out as shapes of far (N, K).
HELD_OUT = {"validation": "validation_{table}", "coverage": "coverage_{table}"}
OUT_NAME = "unseen_shapes.json"     # the primary device's; another's: device_data_path's (unseen_shapes.<d>.json)
NO_COVERAGE_OUT_NAME = "unseen_shapes.no_coverage.json"   # --no-coverage: the tables' recordings alone
WITH_COVERAGE_OUT_NAME = "unseen_shapes.with_coverage.json"   # --coverage CSV, where params.yaml names another or none
COVERAGE_HELD_OUT_NAME = "unseen_shapes.coverage_held_out.json"   # --held-out coverage (a fit without coverage)
SLOW = 0.9                          # a pick below this speedup vs cuBLAS counts as slow (issue 49)
WITHIN = 0.05
TARGETS = {"share_within_5pct": 0.90, "geomean_regret": 0.03}
TIMING_SHAPES = 400
# On a shared host the same code reads 41-75 µs CPU per new shape from one run to the next (2026-12-02): the
# fastest of 5 repeats is the figure, every repeat is printed.
TIMING_REPEATS = 5
WORKLOAD_NK = ((3072, 3072), (3072, 8192), (8192, 3072), (2560, 10240), (10240, 2560))   # a model's few (N, K)
TOP_K = (3, 8)   # the best measured among the selector's k best predictions (what online tuning measures)


def normalised(tables: list[TableMeasurements], *, own_only: bool = False) -> dict[Shape, dict[tuple[str, str], float]]:
    """Per shape any table measured: (table, config id) -> median / cuBLAS yardstick (the tables' rows pooled, in
    each recording's session scale: tunetable.baseline), over the tables that measured it (gemm_wgmma_swap's
    shapes stop at a lower M than the others': params.yaml). ``own_only``: the tables' own recordings' shapes (the
    folds score those; coverage shapes only train)."""
    tables = list(shared_yardstick(tables))
    shapes = set.union(*({s for s in (t.own_shapes() if own_only else t.times) if s in t.cublas} for t in tables))
    return {shape: {(t.table, cid): ms / t.cublas[shape] for t in tables if shape in t.times and shape in t.cublas
                    for cid, ms in t.times[shape].items()}
            for shape in sorted(shapes, key=lambda s: (s[1], s[2], s[0]))}


def score(*, measured: dict[tuple[str, str], float], table: str, config_id: str) -> dict[str, Any]:
    """A pick against the best measured configuration of any table at the shape."""
    best_key = min(measured, key=lambda key: (measured[key], key))
    ratio = measured.get((table, config_id), math.inf)
    return {"table": table, "config_id": config_id, "best_table": best_key[0], "best_config_id": best_key[1],
            "regret": ratio / measured[best_key] - 1.0, "measured": (table, config_id) in measured}


def fold(*, tables: list[TableMeasurements], measured: dict[Shape, dict[tuple[str, str], float]],
         held: list[Shape], candidates: int, label: str,
         left_out: Callable[[Shape], bool] | None = None) -> list[dict[str, Any]]:
    """Build without ``held`` (and every shape ``left_out`` says: a left-out M's coverage rows too), pick for each
    held shape (the runtime's shortlist, and every configuration)."""
    drop = set(held)
    training = [t.without(lambda s: s in drop or (left_out is not None and left_out(s))) for t in tables]
    build = build_selector(tables=training, candidates=candidates)
    runtime = ShapeSelector(build.candidates)
    rows = []
    for shape in held:
        m, n, k = shape
        pick = runtime.choose(m=m, n=n, k=k)
        online = {f"{name}{count}": {"regret": best_of(measured=measured[shape], ranking=ranking, count=count)}
                  for name, ranking in (("top", runtime.rank(m=m, n=n, k=k)),
                                        ("wide_top", runtime.rank(m=m, n=n, k=k, neighbours=True)))
                  for count in TOP_K}
        scores = build.model.scores(m=m, n=n, k=k)
        best_any = build.model.configs[int(np.argmin(scores))]
        cublas_ms = math.exp(statistics.fmean(math.log(t.cublas[shape]) for t in tables if shape in t.cublas))
        row = {"fold": label, "M": m, "N": n, "K": k,
               **score(measured=measured[shape], table=pick.candidate.table, config_id=pick.candidate.config_id),
               "predicted_speedup_vs_cublas": round(pick.speedup_vs_cublas, 4),
               "measured_speedup_vs_cublas": round(1.0 / measured[shape].get((pick.candidate.table,
                                                                              pick.candidate.config_id), math.inf), 4),
               "predicted_cublas_us": round(1e6 * cublas_seconds(tables=training, shape=shape), 3),
               "measured_cublas_us": round(1e3 * cublas_ms, 3),
               "all_configs": score(measured=measured[shape], table=best_any.table, config_id=best_any.config_id),
               **online}
        rows.append(row)
    return rows


def neighbour_rows(*, measured: dict[Shape, dict[tuple[str, str], float]],
                   m_rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The table's range entry at a left-out M (the best configuration of the next lower measured M of the
    same (N, K): what select's merged range serves there), scored like the selector's pick; with the
    selector's rows for the same shapes. Shapes whose neighbour's winner was not measured there are left
    out of both (gemm_wgmma_swap's shapes stop at a lower M than the others': params.yaml)."""
    picks, same = [], []
    for row in m_rows:
        m, n, k = row["M"], row["N"], row["K"]
        lower = [shape for shape in measured if shape[1:] == (n, k) and shape[0] < m]
        if not lower:
            continue
        below = measured[max(lower)]
        table, config_id = min(below, key=lambda key: (below[key], key))
        if (table, config_id) not in measured[(m, n, k)]:
            continue
        picks.append({"M": m, "N": n, "K": k, **score(measured=measured[(m, n, k)], table=table, config_id=config_id)})
        same.append(row)
    return picks, same


def best_of(*, measured: dict[tuple[str, str], float], ranking: Sequence[Any], count: int) -> float:
    """Regret of the best measured among the ``count`` best predicted (what online tuning would find)."""
    found = min(measured.get((p.candidate.table, p.candidate.config_id), math.inf) for p in ranking[:count])
    return found / min(measured.values()) - 1.0


def online_summaries(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """best_of_top<k> / best_of_wide_top<k>: online tuning's candidates from M's range, or with its neighbours."""
    return {f"best_of_{name}{count}": summarise(rows, key=f"{name}{count}")
            for name in ("top", "wide_top") for count in TOP_K}


def prediction_errors(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median and p90 relative error of the predicted cuBLAS time and of the pick's predicted speedup vs cuBLAS."""
    def quantiles(pairs: list[tuple[float, float]]) -> tuple[float, float]:
        errors = sorted(abs(math.log(p / m)) for p, m in pairs if m == m and m > 0)
        return math.expm1(errors[len(errors) // 2]), math.expm1(errors[int(0.9 * (len(errors) - 1))])

    cublas = quantiles([(r["predicted_cublas_us"], r["measured_cublas_us"]) for r in rows])
    speedup = quantiles([(r["predicted_speedup_vs_cublas"], r["measured_speedup_vs_cublas"]) for r in rows])
    return {"cublas_time_median": cublas[0], "cublas_time_p90": cublas[1],
            "pick_speedup_median": speedup[0], "pick_speedup_p90": speedup[1]}


def summarise(rows: list[dict[str, Any]], *, key: str | None = None) -> dict[str, Any]:
    """Share of picks within 5 % of the best, geomean and worst regret (``key``: a nested score)."""
    regrets = [(row[key] if key else row)["regret"] for row in rows]
    geomean = math.exp(sum(math.log1p(r) for r in regrets) / len(regrets)) - 1.0
    return {"shapes": len(regrets), "share_within_5pct": sum(r <= WITHIN for r in regrets) / len(regrets),
            "geomean_regret": geomean, "worst_regret": max(regrets)}


def first_decisions(*, selector: ShapeSelector, shapes: Sequence[Shape]) -> tuple[list[float], list[float]]:
    """Wall and thread CPU µs of each shape's first decision, in order."""
    wall, cpu = [], []
    for m, n, k in shapes:
        started, started_cpu = time.perf_counter(), time.thread_time()
        selector.choose(m=m, n=n, k=k)
        cpu.append((time.thread_time() - started_cpu) * 1e6)
        wall.append((time.perf_counter() - started) * 1e6)
    return wall, cpu


def timing_once(*, build_candidates: Any, seed: int = 0) -> dict[str, float]:
    """Host time of gemm()'s first decision on new shapes (pure Python), and of a memoised one, in µs; also on a
    workload's shapes (a few (N, K), many M: the (N, K)'s shares are computed once)."""
    rng = random.Random(seed)
    shapes = sorted({(rng.randint(1, 16384), 64 * rng.randint(8, 512), 64 * rng.randint(8, 512))
                     for _ in range(TIMING_SHAPES)})
    selector = ShapeSelector(build_candidates)
    wall, cpu = first_decisions(selector=selector, shapes=shapes)
    per_nk = TIMING_SHAPES // len(WORKLOAD_NK)
    workload = [(m, n, k) for n, k in WORKLOAD_NK for m in rng.sample(range(1, 8192), per_nk)]
    _, workload_cpu = first_decisions(selector=ShapeSelector(build_candidates), shapes=workload)
    started = time.perf_counter()
    for m, n, k in shapes:
        selector.choose(m=m, n=n, k=k)
    again = (time.perf_counter() - started) * 1e6 / len(shapes)
    wall.sort()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # Wall time includes waiting for a core on a shared host; the thread's CPU time does not.
    return {"shapes": len(shapes), "first_median_us": statistics.median(wall),
            "first_p99_us": wall[int(0.99 * (len(wall) - 1))], "first_cpu_median_us": statistics.median(cpu),
            "first_cpu_mean_us": statistics.fmean(cpu), "memoised_us": again, "host_load_1min": load,
            "workload_shapes": len(workload), "workload_first_cpu_median_us": statistics.median(workload_cpu),
            "host_cpus": os.cpu_count()}


def timing(*, build_candidates: Any, seed: int = 0) -> dict[str, Any]:
    """``timing_once`` TIMING_REPEATS times (fresh selectors, the same shapes): the repeat with the lowest CPU
    median, as timeit reports its fastest, with every repeat's CPU median beside it."""
    repeats = [timing_once(build_candidates=build_candidates, seed=seed) for _ in range(TIMING_REPEATS)]
    fastest = min(repeats, key=lambda r: r["first_cpu_median_us"])
    return {**fastest, "repeats": TIMING_REPEATS,
            "repeat_cpu_medians_us": [round(r["first_cpu_median_us"], 1) for r in repeats]}


def selector_name(*, params: dict[str, Any], device: str) -> str:
    """The selector `tunetable select --selector` builds for ``device``: the declared one on the primary device,
    its device selector elsewhere (tunetable.device_tables)."""
    return SELECTOR if device == primary_device(params) else device_table_name(base=SELECTOR, device=device)


def out_name(*, params: dict[str, Any], device: str, name: str = OUT_NAME) -> str:
    """A result file's name for ``device``: ``name`` on the primary device, <stem>.<d>.json elsewhere."""
    return name if device == primary_device(params) else device_data_path(name, device=device)


def fit_coverage(*, setting: str | None, no_coverage: bool, coverage: str | None) -> str | None:
    """The coverage CSV the fit reads: none with --no-coverage, else --coverage's, else params.yaml's ``setting``."""
    return None if no_coverage else coverage or setting


def result_name(*, setting: str | None, fitted: str | None, held_out: str) -> str:
    """The result file's name (before the device suffix): what the fit read, and what it held out."""
    if held_out == "coverage":
        return COVERAGE_HELD_OUT_NAME
    if fitted == setting:
        return OUT_NAME   # the fit as `tunetable select` builds it
    return NO_COVERAGE_OUT_NAME if fitted is None else WITH_COVERAGE_OUT_NAME


def held_out_paths(*, device: str, names: Sequence[str], held_out: str = "validation") -> dict[str, Path]:
    """Base table name -> ``device``'s held-out recording of it (recording_path of ``<held_out>_<table>``)."""
    bases = [split_device_table(name)[0] for name in names]
    return {base: REPO / recording_path(device=device, table=HELD_OUT[held_out].format(table=base)) for base in bases}


def speedups(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Geomean, min and the count below SLOW of the rows' ``speedup_vs_cublas``."""
    values = [row["speedup_vs_cublas"] for row in rows]
    # A pick no recording measured (it cannot run the shape) counts as speedup 0: the geomean is then 0.
    return {"speedup_vs_cublas": math.exp(statistics.fmean(math.log(v) if v > 0 else -math.inf for v in values)),
            "min_speedup_vs_cublas": min(values), f"below_{SLOW}x": sum(v < SLOW for v in values)}


def validation(*, tables: list[TableMeasurements], candidates: int, params: dict[str, Any],
               names: tuple[str, ...], device: str, held_out: str = "validation") -> dict[str, Any] | None:
    """Picks on ``device``'s held-out recordings (None: absent): the selector built from every table's recording,
    and what gemm() decides there (a table's entry at a measured M of its (N, K), else the selector)."""
    paths = held_out_paths(device=device, names=names, held_out=held_out)
    if not all(p.is_file() for p in paths.values()):
        return None
    import warnings

    from tunetable import rank, resultset
    from tunetable.kernels.runtime.decide import (
        DEVICE_TABLES,
        DISPATCH_LIST,
        FamilyDispatcher,
        selector_between,
        selector_chooser,
        serving_device,
    )
    from tunetable.search.replay import grid_parameter_names
    from tunetable.select_winners import provenance
    from tunetable.selector_fit import measurements_from_frames

    held = []
    for name, path in paths.items():
        spec = table_spec(params, name)
        frame = rank.read_checked_recording(path=path)   # whole, against its sidecar: one line naming it if not
        loaded = resultset.from_frame(frame=frame, path=str(path), name=name)
        ranked = rank.rank_rows(rows=loaded.frame, parameters=tuple(loaded.parameters)).ranked
        ranked = ranked.filter(pl.col("cublas_ms").is_not_null())
        names = [p for p in grid_parameter_names(spec.grid) if p in loaded.parameters]
        held.append(measurements_from_frames(table=name, family=spec.family, ranked=ranked, resources={},
                                             parameters=names, source=str(path),
                                             provenance=provenance(table=name, ranked=ranked)))
    measured = normalised(held)
    build = build_selector(tables=tables, candidates=candidates)
    runtime = ShapeSelector(build.candidates)
    generated = DEVICE_TABLES[serving_device(device)]   # the device's own tables (its fallback's if it has none)
    decide = FamilyDispatcher(choices=generated.dispatch[DISPATCH_LIST], tables=generated.tables,
                              untuned=selector_chooser(runtime, tables=generated.tables),
                              between=selector_between(runtime, tables=generated.tables))
    rows = []
    for (m, n, k), by_config in measured.items():
        pick = runtime.choose(m=m, n=n, k=k)
        ranking = runtime.rank(m=m, n=n, k=k)
        # What online tuning among the top k would find: the best measured of the k best predicted.
        wide = runtime.rank(m=m, n=n, k=k, neighbours=True)
        top_k = {f"{name}{count}": best_of(measured=by_config, ranking=found, count=count)
                 for name, found in (("top", ranking), ("wide_top", wide)) for count in TOP_K}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            decision = decide.decide(m=m, n=n, k=k)
        table = decision.prediction.candidate.table if decision.prediction else decision.choice.table
        gemm = score(measured=by_config, table=table, config_id=decision.entry.config_id)
        rows.append({"M": m, "N": n, "K": k, **score(measured=by_config, table=pick.candidate.table,
                                                     config_id=pick.candidate.config_id),
                     "gemm": {**gemm, "source": "selector" if decision.prediction else "table",
                              "speedup_vs_cublas": 1.0 / by_config.get((table, decision.entry.config_id), math.inf)},
                     "speedup_vs_cublas": 1.0 / by_config.get((pick.candidate.table, pick.candidate.config_id),
                                                              math.inf),
                     "best_speedup_vs_cublas": 1.0 / min(by_config.values()),
                     **{name: {"regret": value} for name, value in top_k.items()}})
    gemm_rows = [r["gemm"] for r in rows]
    return {"recordings": {t: str(p.relative_to(REPO)) for t, p in paths.items()},
            "rows": rows, "summary": {**summarise(rows), **speedups(rows)},
            **online_summaries(rows),
            "gemm": {**summarise(gemm_rows), **speedups(gemm_rows),
                     "of_exhaustive_best": math.exp(-statistics.fmean(math.log1p(r["regret"]) for r in gemm_rows)),
                     "exhaustive_best_speedup_vs_cublas": math.exp(statistics.fmean(
                         math.log(r["best_speedup_vs_cublas"]) for r in rows))},
            "exhaustive_best": speedups([{"speedup_vs_cublas": r["best_speedup_vs_cublas"]} for r in rows])}


def timing_line(t: dict[str, Any]) -> str:
    """The host-time figures as one printed line."""
    return (f"host time per new shape: median {t['first_median_us']:.1f} µs wall (p99 {t['first_p99_us']:.1f}), "
            f"{t['first_cpu_median_us']:.1f} µs CPU ({t['shapes']} shapes, load {t['host_load_1min']:.1f} on "
            f"{t['host_cpus']} CPUs); memoised {t['memoised_us']:.2f} µs; a workload's {t['workload_shapes']} shapes "
            f"({len(WORKLOAD_NK)} (N, K)): {t['workload_first_cpu_median_us']:.1f} µs CPU; fastest of {t['repeats']} "
            f"repeats, CPU medians {', '.join(f'{v:.1f}' for v in t['repeat_cpu_medians_us'])} µs")


def fold_line(*, name: str, summary: dict[str, Any]) -> str:
    """A fold's summary as one printed line."""
    return (f"{name:28s}: {summary['share_within_5pct']:6.1%} within 5%, geomean regret "
            f"{summary['geomean_regret']:6.2%}, worst {summary['worst_regret']:6.1%} ({summary['shapes']} shapes)")


def speedup_line(*, label: str, figures: dict[str, Any]) -> str:
    """Speedups vs cuBLAS (``speedups``) as one printed line."""
    return (f"{label:44s}: {figures['speedup_vs_cublas']:.3f}x cuBLAS geomean, min "
            f"{figures['min_speedup_vs_cublas']:.3f}x, {figures[f'below_{SLOW}x']} below {SLOW}x")


def use_model_ceilings(*, copy_tb_s: float, tflops: float) -> None:
    """The performance model's device constants, in every module that reads them, set to other ceilings (this
    process only: the experiment --model-ceilings; the shipped model keeps the H200's)."""
    for module in (perfmodel, perfmodel_grid, search_prior):
        module.HBM_BYTES_PER_S = copy_tb_s * 1e12
        module.DEVICE_FLOPS = tflops * 1e12


def main() -> None:
    """Run both leave-out evaluations, the timing and the validation figure; print and write them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--device", default=None,
                        help="a params.yaml devices: key (default: the primary device): its selector, its recordings")
    parser.add_argument("--folds-only", action="store_true",
                        help="only the two folds' figures, printed (no validation recording read, nothing written)")
    parser.add_argument("--candidates", type=int, default=None,
                        help="shortlist size per M range (default: params.yaml selector.<name>.candidates)")
    parser.add_argument("--timing-only", action="store_true",
                        help="only the host time per first decision, right after building the selector")
    parser.add_argument("--no-coverage", action="store_true",
                        help="fit on the tables' recordings alone, without the device's coverage recordings")
    parser.add_argument("--coverage", default=None, metavar="CSV",
                        help="fit with the device's coverage recordings of CSV's shapes, whether or not params.yaml's "
                             "selector names a coverage CSV (what coverage would be worth where it names none)")
    parser.add_argument("--held-out", choices=sorted(HELD_OUT), default="validation",
                        help="the recordings scored as held-out shapes: the validation set (default), or, from a "
                             "fit that never read them, the coverage recordings (shapes of far (N, K))")
    parser.add_argument("--model-ceilings", default=None, metavar="DEVICE",
                        help="with --folds-only: the performance model's two device constants (copy TB/s, TFLOP/s) "
                             "set to DEVICE's measured ceilings instead of the H200's (an experiment)")
    args = parser.parse_args()
    if args.coverage and args.no_coverage:
        parser.error("--coverage and --no-coverage: give one")
    params = load_params(REPO / "params.yaml")
    if args.model_ceilings is not None:
        ceilings = ((params.get("devices") or {}).get(args.model_ceilings) or {}).get("ceilings")
        if not args.folds_only or ceilings is None:
            parser.error(f"--model-ceilings {args.model_ceilings}: needs --folds-only and a device with ceilings")
        use_model_ceilings(copy_tb_s=float(ceilings["copy_tb_s"]), tflops=float(ceilings["tflops"]))
    device = args.device or primary_device(params)
    if device not in (params.get("devices") or {}):
        parser.error(f"--device {device}: not a device of params.yaml (devices: {', '.join(params['devices'])})")
    spec = selector_spec(params, selector_name(params=params, device=device))
    names = spec.tables
    fitted = fit_coverage(setting=spec.coverage, no_coverage=args.no_coverage, coverage=args.coverage)
    if args.held_out == "coverage" and fitted is not None:
        fix = ("(--coverage); drop --coverage" if args.coverage
               else "(params.yaml's selector coverage); add --no-coverage")
        parser.error(f"--held-out coverage needs a fit that never read them: this one reads {fitted} {fix}")
    extra = ("" if device == primary_device(params) else f" --device {device}") + (
        " --no-coverage" if args.no_coverage else "") + (f" --coverage {args.coverage}" if args.coverage else "") + (
        f" --held-out {args.held_out}" if args.held_out != "validation" else "")
    if args.candidates is None:
        args.candidates = spec.candidates
    found = selector_tables(root=REPO, specs=[table_spec(params, name) for name in names], coverage=fitted)
    if found.coverage_absent:
        print(coverage_absent_line(name=spec.name, paths=found.coverage_absent))
    tables = list(found.tables)
    coverage = {t.table: t.coverage.source for t in tables if t.coverage is not None}
    if args.timing_only:
        timed = timing(build_candidates=build_selector(tables=tables, candidates=args.candidates).candidates)
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / out_name(params=params, device=device, name="unseen_shapes_timing.json"),
                          json.dumps({"command": f"python3 benchmarks/unseen_shapes.py --timing-only --candidates "
                                                 f"{args.candidates}{extra}", "timing": timed}, indent=1) + "\n")
        print(timing_line(timed))
        return
    measured = normalised(tables, own_only=True)
    started = time.perf_counter()
    nk_rows: list[dict[str, Any]] = []
    for n, k in sorted({(s[1], s[2]) for s in measured}):
        held = [s for s in measured if (s[1], s[2]) == (n, k)]
        nk_rows += fold(tables=tables, measured=measured, held=held, candidates=args.candidates,
                        label=f"N={n},K={k}")
    m_rows: list[dict[str, Any]] = []
    for m in sorted({s[0] for s in measured}):
        held = [s for s in measured if s[0] == m]
        # An M no recording measured: the coverage recordings' rows at M leave too (their anchor would stay).
        m_rows += fold(tables=tables, measured=measured, held=held, candidates=args.candidates, label=f"M={m}",
                       left_out=lambda s, m=m: s[0] == m)
    elapsed = time.perf_counter() - started
    if args.folds_only:
        for name, rows in (("leave-one-(N, K)-out", nk_rows), ("leave-one-M-out", m_rows)):
            print(fold_line(name=f"{device} {name}{' (coverage)' if coverage else ''}", summary=summarise(rows)))
        return
    neighbour, selector_same = neighbour_rows(measured=measured, m_rows=m_rows)
    full = build_selector(tables=tables, candidates=args.candidates)
    result = {
        "command": f"python3 benchmarks/unseen_shapes.py --candidates {args.candidates}{extra}",
        "device": device,
        "selector": spec.name,
        "recordings": {t.table: t.source for t in tables},
        "coverage_recordings": coverage,   # trained on, never scored ({}: none, or --no-coverage)
        "data_hashes": {t.table: t.provenance.get("data_hash") for t in tables},
        "candidates": args.candidates,
        "targets": TARGETS,
        "leave_one_nk_out": {"summary": summarise(nk_rows), "all_configs": summarise(nk_rows, key="all_configs"),
                             **online_summaries(nk_rows),
                             "prediction_errors": prediction_errors(nk_rows), "rows": nk_rows},
        "leave_one_m_out": {"summary": summarise(m_rows), "all_configs": summarise(m_rows, key="all_configs"),
                            **online_summaries(m_rows),
                            "prediction_errors": prediction_errors(m_rows), "rows": m_rows,
                            # the runtime's choice at an unmeasured M of a held (N, K): range entry or selector
                            "neighbour_winner": summarise(neighbour), "selector_same_shapes": summarise(selector_same),
                            "neighbour_rows": neighbour},
        "timing": timing(build_candidates=full.candidates),
        "held_out": args.held_out,   # what "validation" below scored: the validation set or the coverage recordings
        "validation": validation(tables=tables, candidates=args.candidates, params=params, names=names,
                                 device=device, held_out=args.held_out),
        "evaluation_s": round(elapsed, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / out_name(params=params, device=device,
                                          name=result_name(setting=spec.coverage, fitted=fitted,
                                                           held_out=args.held_out)),
                      json.dumps(result, indent=1) + "\n")
    for name, key in (("leave-one-(N, K)-out", "leave_one_nk_out"), ("leave-one-M-out", "leave_one_m_out")):
        for variant, part in (("shortlist (runtime)", "summary"), ("every configuration", "all_configs")):
            s = result[key][part]
            print(f"{name:22s} {variant:20s}: {s['share_within_5pct']:6.1%} within 5%, geomean regret "
                  f"{s['geomean_regret']:6.2%}, worst {s['worst_regret']:6.1%} ({s['shapes']} shapes)")
        e = result[key]["prediction_errors"]
        print(f"{name:22s} predictions         : cuBLAS time off by {e['cublas_time_median']:.1%} median "
              f"({e['cublas_time_p90']:.1%} p90); the pick's speedup vs cuBLAS by "
              f"{e['pick_speedup_median']:.1%} ({e['pick_speedup_p90']:.1%} p90)")
    for name, key in (("leave-one-(N, K)-out", "leave_one_nk_out"), ("leave-one-M-out", "leave_one_m_out")):
        for count in TOP_K:
            for part, label in (("top", "M's range"), ("wide_top", "and its neighbours")):
                s = result[key][f"best_of_{part}{count}"]
                print(f"{name:22s} best of top {count} ({label:18s}): {s['share_within_5pct']:6.1%} within 5%, "
                      f"geomean regret {s['geomean_regret']:6.2%}, worst {s['worst_regret']:6.1%}")
    for variant, part in (("the range entry", "neighbour_winner"), ("the selector", "selector_same_shapes")):
        s = result["leave_one_m_out"][part]
        print(f"left-out M of a held (N, K), {variant:15s}: {s['share_within_5pct']:6.1%} within 5%, geomean regret "
              f"{s['geomean_regret']:6.2%}, worst {s['worst_regret']:6.1%} ({s['shapes']} shapes)")
    misses = [r for r in nk_rows if r["regret"] > WITHIN]
    for row in misses:
        print(f"  miss ({row['fold']}): M={row['M']} picked {row['table']} {row['config_id']}, best "
              f"{row['best_table']} {row['best_config_id']}: +{row['regret']:.1%}")
    print(timing_line(result["timing"]))
    if result["validation"] is None:
        absent = ", ".join(str(p.relative_to(REPO))
                           for p in held_out_paths(device=device, names=names, held_out=args.held_out).values())
        print(f"{args.held_out} recordings absent ({absent}): no held-out figure")
    else:
        s = result["validation"]["summary"]
        print(f"{args.held_out} (held-out shapes), selector: {s['share_within_5pct']:6.1%} within 5%, geomean regret "
              f"{s['geomean_regret']:6.2%}, worst {s['worst_regret']:6.1%} ({s['shapes']} shapes)")
        for count in TOP_K:
            for name, label in (("top", "M's range"), ("wide_top", "and its neighbours")):
                t = result["validation"][f"best_of_{name}{count}"]
                print(f"{args.held_out}, best of the top {count} ({label:18s}): {t['share_within_5pct']:6.1%} "
                      f"within 5%, geomean regret {t['geomean_regret']:6.2%}, worst {t['worst_regret']:6.1%}")
        g = result["validation"]["gemm"]
        print(f"{args.held_out}, what gemm() decides       : {g['share_within_5pct']:6.1%} within 5%, geomean regret "
              f"{g['geomean_regret']:6.2%}, worst {g['worst_regret']:6.1%}; {g['of_exhaustive_best']:.3f}x the "
              f"exhaustive best, speedup vs cuBLAS {g['speedup_vs_cublas']:.3f} (exhaustive best: "
              f"{g['exhaustive_best_speedup_vs_cublas']:.3f})")
        for label, part in (("the selector's choice", result["validation"]["summary"]), ("what gemm() decides", g),
                            ("the exhaustive best", result["validation"]["exhaustive_best"])):
            print(speedup_line(label=f"{device} {args.held_out}, {label}", figures=part))
    s = result["leave_one_nk_out"]["summary"]
    print(f"unseen shapes: {100 * s['share_within_5pct']:.1f}% within 5%, geomean regret "
          f"{100 * s['geomean_regret']:.2f}%")


if __name__ == "__main__":
    try:
        main()
    except TuneTableError as exc:   # an unreadable or unverifiable recording or CSV: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
