"""tunetable.kernels.gemm() through the tuning table vs cuBLAS and vs the untuned configuration, on the GPU it finds.

gemm() serves the tables of the recorded device that serves this GPU (its own, or the nearest recorded device of
its architecture: kernels/runtime/devices.py); every decision reported and every recording read here is that
device's, and the files written carry its key where it is not the primary device (runtime_gemm_tables.h100.json).

Three sets of shapes tunetable's tables speak for: ``default``, gemm_mma's table shapes (params.yaml
tables.gemm_mma.shapes, 55); ``tables``, every table's shapes (the dispatch list's 70: issue 49's figure); and
``other``, shapes no table holds (odd M, non-square N and K). Per shape these contenders run on the same buffers
and are timed the same way:
  * ``gemm``    tunetable.gemm(a, b, out=c): the dispatch list's family and that table's choice (or, for a
                shape no table holds, the shape selector's choice),
  * ``untuned`` tunetable.kernels.gemm_with(heuristic_tunables(M), ...): gemm_mma's untuned default (no table),
  * ``tables_<d>`` for each other recorded device d: the configuration d's tables choose for the shape, run
                through gemm_with (what this GPU gets from another GPU's tables, measured beside its own),
  * ``operator`` torch.ops.tunetable.gemm(a, b), the PyTorch operator (tunetable.torch): tunetable's kernel, or
                torch's matmul where its route says cuBLAS is measured or predicted faster (layers.torch_serves);
                each row names the path and why (what a PyTorch user gets, measured, not counted at 1.0x),
  * ``cublas``  torch.mm(a, b.t(), out=c).
Timing: the bench's own cold-L2 method (tunetable.kernels.runtime.timing, also autotune's): random
bf16 inputs; (A, B, C) sets rotated so that the bytes touched between two uses of a set exceed 3x
L2 (cold L2); a spin kernel holds the stream while the host queues a batch of at least 0.3 ms
(sized per contender by a time-based warm-up), CUDA events bracket the batch (GPU time, no launch
gaps); contenders interleaved round by round; median of the rounds. gemm's output is verified
(float32 reference).
Host overhead per call is measured apart (benchmarks/runtime_gemm_host.py): wall time of queuing 200 calls
behind a sleeping GPU, for gemm(out=), gemm() allocating, the prepared launch, the torch operator
torch.ops.tunetable.gemm (target < 10 µs) and tunetable.torch.Linear, beside torch.mm and F.linear in the same
run. ``--host-only`` measures that alone (runtime_gemm_host.json / .md, as runtime_gemm_host.py writes them).

A third set, the validation shapes (data/validation_shapes.csv: (N, K) of other model sizes, M
between the buckets; never tuned on), compares four contenders the same way:
  * ``gemm``    tunetable.gemm() untuned: the shape selector's choice (or a table's range entry),
  * ``best``    the exhaustive best of every family on that shape, from the serving device's validation
                recordings (data/recordings/<device>_validation_<table>.parquet), run through gemm_with,
  * ``online``  the configuration online tuning chooses (TUNETABLE_AUTOTUNE: the selector's top 8,
                measured here on the GPU, from an empty cache), run through gemm_with,
  * ``operator`` the PyTorch operator, as above (the selector's choice, or torch's matmul where it is not confident),
  * ``cublas``  torch.mm.
Targets: gemm >= 0.95x the exhaustive best and >= 0.9x cuBLAS (geomean); online >= 0.98x the best. Issue 49's:
the selector's choice >= 1.0x cuBLAS (geomean), none below 0.9x (stated for gemm and for the operator).

Run on the GPU machine (torch, pycuda, nvcc):
    python benchmarks/runtime_gemm.py [--rounds 5] [--sets default,other,validation] [--out benchmarks/results]
    python benchmarks/runtime_gemm.py --sets tables      # issue 49's figure: every table's shapes, own and other tables
Writes runtime_gemm.json and runtime_gemm.md there (with --sets other than the default three:
runtime_gemm_<sets>.json and .md, so that a partial run never overwrites the whole figure; on a GPU served by
another device than the primary, <stem>.<device>.json and .md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tunetable.kernels  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.bench.live import round_order  # noqa: E402
from tunetable.kernels.runtime import decide  # noqa: E402
from tunetable.kernels.runtime.launch import runtime  # noqa: E402
sys.path.insert(0, str(REPO / "benchmarks"))  # runtime_gemm_host: the host overhead, measured one way for both
from runtime_gemm_host import HOST_CALLS, HOST_REPEATS, TORCH_OP_TARGET_US, gpu_shape, run_host  # noqa: E402
from tunetable.kernels.families.devices import recording_path  # noqa: E402
from tunetable.kernels.runtime.decide import RECORDED_DEVICES, shape_selector  # noqa: E402
from tunetable.kernels.runtime.timing import ColdL2Timer, input_sets  # noqa: E402
from tunetable.keys import git_revision  # noqa: E402
from tunetable.yamlio import load_yaml_file  # noqa: E402

L2_FACTOR = 3
WARMUP_MS = 25.0                  # the bench's defaults (params.yaml bench:)
MIN_BATCH_MS = 0.3
CYCLES_PER_NS = 2.0               # torch.cuda._sleep counts SM cycles (<= 1.98 GHz on the H200)
VERIFY_RTOL = 1e-2
HOST_TARGET_US = 20.0
SETS = ("default", "tables", "other", "validation")
DEFAULT_SETS = ("default", "other", "validation")
VALIDATION_TARGETS = {"gemm_of_best": 0.95, "gemm_vs_cublas": 0.9, "online_of_best": 0.98}
OTHER_SHAPES = [
    (1, 11008, 4096), (7, 4096, 11008), (77, 2048, 5120), (333, 5120, 2048),
    (1000, 11008, 4096), (77, 4096, 4096), (333, 14336, 4096), (7, 8192, 8192),
    (3000, 5120, 2048), (4095, 1032, 776), (16, 28672, 4096), (2048, 4096, 28672),
]

SLOW_VS_CUBLAS = 0.9              # issue 49: none of the validation shapes below this many times cuBLAS's speed


@dataclass(frozen=True)
class Operator:
    """The PyTorch operator as a contender: ``run(a, b)`` returns a · bᵀ; ``route(m, n, k)`` its path for a shape."""

    run: Callable[[Any, Any], Any]
    route: Callable[[int, int, int], Any]   # a tunetable.torch.Route: .torch (bool), .why


def torch_operator() -> Operator:
    """torch.ops.tunetable.gemm on GPU 0 (importing tunetable.torch builds or loads its C++ kernel)."""
    import tunetable.torch as tunetable_torch

    return Operator(run=tunetable_torch.gemm, route=lambda m, n, k: tunetable_torch.route(m, n, k, 0))


def operator_fields(operator: Operator, *, m: int, n: int, k: int) -> dict[str, str]:
    """The operator's path for a shape (tunetable or torch) and why, as row fields."""
    found = operator.route(m, n, k)
    return {"operator_path": "torch" if found.torch else "tunetable", "operator_why": found.why}


def slow_summary(values: list[float], *, prefix: str) -> dict[str, Any]:
    """The minimum of a column of speedups and how many lie below SLOW_VS_CUBLAS."""
    return {f"{prefix}min_vs_cublas": min(values, default=float("nan")),
            f"{prefix}below_{SLOW_VS_CUBLAS}x": sum(value < SLOW_VS_CUBLAS for value in values)}


def operator_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """gemm()'s minimum and slow shapes, and the operator's geomean, minimum, slow shapes and shapes sent to torch."""
    return {**slow_summary([r["gemm_vs_cublas"] for r in rows], prefix=""),
            "operator_geomean_vs_cublas": geomean([r["operator_vs_cublas"] for r in rows]),
            **slow_summary([r["operator_vs_cublas"] for r in rows], prefix="operator_"),
            "operator_to_torch": sum(r["operator_path"] == "torch" for r in rows)}


def relative_error(found: Any, reference: Any) -> float:
    """||found - reference|| / ||reference||, ``found`` widened to float32 (``reference`` is already)."""
    return float((found.float() - reference).norm() / reference.norm())


def default_shapes() -> list[tuple[int, int, int]]:
    """params.yaml tables.gemm_mma.shapes (NK pairs outer, M inner)."""
    shapes = load_yaml_file(REPO / "params.yaml")["tables"]["gemm_mma"]["shapes"]
    return [(m, n, k) for n, k in shapes["NK"] for m in shapes["M"]]


def table_shapes(tables: dict[str, Any]) -> list[tuple[int, int, int]]:
    """Every table's shapes once (params.yaml ``tables``): (N, K) pairs in first-seen order, M ascending within."""
    by_pair: dict[tuple[int, int], set[int]] = {}
    for spec in tables.values():
        for n, k in spec["shapes"]["NK"]:
            by_pair.setdefault((int(n), int(k)), set()).update(int(m) for m in spec["shapes"]["M"])
    return [(m, n, k) for (n, k), ms in by_pair.items() for m in sorted(ms)]


def validation_recordings(device: str) -> dict[str, Path]:
    """Each table of params.yaml -> ``device``'s recording of the validation shapes."""
    tables = load_yaml_file(REPO / "params.yaml")["tables"]
    return {table: REPO / recording_path(device=device, table=f"validation_{table}") for table in tables}


def output_stem(*, wanted: list[str], serving: str, primary: str) -> str:
    """runtime_gemm for the default three sets, runtime_gemm_<sets> otherwise; .<device> where not the primary's."""
    stem = "runtime_gemm" if sorted(wanted) == sorted(DEFAULT_SETS) else "runtime_gemm_" + "_".join(wanted)
    return stem if serving == primary else f"{stem}.{serving}"


def tflops(*, m: int, n: int, k: int, ms: float) -> float:
    """2MNK over the time, in TFLOP/s."""
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def timed(timer: ColdL2Timer, *, contenders: dict[str, Callable[[int], Any]], rounds: int,
          n_sets: int) -> tuple[dict[str, float], dict[str, list[float]], dict[str, int]]:
    """Warm every contender up (its batch sized as the bench does), then time it round by round, the order
    rotated so that each contender's place in a round is spread over the rounds: medians and samples in ms, and the
    batch sizes."""
    batch = {}  # warm-up (plans, module loads, clocks) sizes each contender's batch, as the bench does
    for name, contender in contenders.items():
        _, per_launch = timer.warm_up(contender, sets=n_sets, warmup_ms=WARMUP_MS)
        batch[name] = timer.batch_size(per_launch, min_batch_ms=MIN_BATCH_MS)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for round_index in range(rounds):   # a place early in every round biased placement_probe's first contenders
        for name in round_order(list(contenders), round_index, rounds=rounds):
            samples[name].append(timer.sample(contenders[name], sets=n_sets, batch=batch[name]))
    return {name: statistics.median(values) for name, values in samples.items()}, samples, batch


def operand_sets(torch: Any, *, m: int, n: int, k: int, l2_bytes: int) -> list[tuple[Any, Any, Any]]:
    """Enough random bf16 (A, B, C) sets of one shape to rotate through more than the L2 (seeded by the shape)."""
    set_bytes = (m * k + n * k + m * n) * 2
    n_sets = input_sets(set_bytes=set_bytes, l2_bytes=l2_bytes, l2_factor=L2_FACTOR)
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    return [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.empty(m, n, device="cuda", dtype=torch.bfloat16)) for _ in range(n_sets)]


def time_shape(torch: Any, *, timer: ColdL2Timer, m: int, n: int, k: int, rounds: int, l2_bytes: int,
               device: str, others: tuple[str, ...], operator: Operator) -> dict[str, Any]:
    """Verify gemm() on one shape, then time the contenders interleaved (gemm() serving ``device``'s tables, each of
    ``others``' tables' choice, the untuned default, the PyTorch operator, cuBLAS); one result row."""
    sets = operand_sets(torch, m=m, n=n, k=k, l2_bytes=l2_bytes)
    n_sets = len(sets)
    decision = decide.dispatcher(device=device).decide(m=m, n=n, k=k)
    untuned = dict(decide.heuristic_tunables(m=m))
    other_entries = {other: decide.dispatcher(device=other).decide(m=m, n=n, k=k).entry for other in others}

    contenders: dict[str, Callable[[int], Any]] = {
        "gemm": lambda i: tunetable.kernels.gemm(sets[i][0], sets[i][1], out=sets[i][2]),
        "untuned": lambda i: tunetable.kernels.gemm_with(untuned, sets[i][0], sets[i][1], out=sets[i][2]),
        **{f"tables_{other}": other_contender(entry, sets) for other, entry in other_entries.items()},
        "operator": lambda i: operator.run(sets[i][0], sets[i][1]),
        "cublas": lambda i: torch.mm(sets[i][0], sets[i][1].t(), out=sets[i][2]),
    }
    a0, b0, c0 = sets[0]
    reference = a0.float() @ b0.float().t()
    errors = {}   # gemm(), each other device's choice and the operator, against float32 on the first set
    for name in ("gemm", *(f"tables_{other}" for other in other_entries)):
        c0.fill_(float("nan"))
        contenders[name](0)
        errors[name] = relative_error(c0, reference)
    errors["operator"] = relative_error(operator.run(a0, b0), reference)
    del reference
    rel_err = errors["gemm"]
    medians, samples, batch = timed(timer, contenders=contenders, rounds=rounds, n_sets=n_sets)
    sets.clear()  # release the buffers before the next shape allocates its own
    return {
        "M": m, "N": n, "K": k, "n_sets": n_sets, "batch": batch,
        "source": ("selector" if decision.prediction is not None else "fallback" if decision.fallback
                   else f"table[{decision.index}]"),
        "kernel": decision.entry.kernel,
        "config_id": decision.entry.config_id,
        "untuned_config_id": decide.make_entry(tunables=untuned, n=n, k=k).config_id,
        "rel_err": rel_err, "verified": all(error < VERIFY_RTOL for error in errors.values()),
        **{f"{name}_ms": medians[name] for name in contenders},
        **{f"{name}_tflops": tflops(m=m, n=n, k=k, ms=medians[name]) for name in contenders},
        "gemm_vs_cublas": medians["cublas"] / medians["gemm"],
        "gemm_vs_untuned": medians["untuned"] / medians["gemm"],
        **{f"tables_{other}_kernel": entry.kernel for other, entry in other_entries.items()},
        **{f"tables_{other}_config_id": entry.config_id for other, entry in other_entries.items()},
        **{f"tables_{other}_vs_cublas": medians["cublas"] / medians[f"tables_{other}"] for other in other_entries},
        **{f"tables_{other}_rel_err": errors[f"tables_{other}"] for other in other_entries},
        **operator_fields(operator, m=m, n=n, k=k),
        "operator_vs_cublas": medians["cublas"] / medians["operator"], "operator_rel_err": errors["operator"],
        "samples_ms": samples,
    }


def other_contender(entry: Any, sets: list[tuple[Any, Any, Any]]) -> Callable[[int], Any]:
    """Another device's table entry run through gemm_with on this GPU (its family and tunables, no table)."""
    tunables = {name: getattr(entry, name) for name in decide.tunable_fields(entry.kernel)}
    return lambda i: tunetable.kernels.gemm_with(tunables, sets[i][0], sets[i][1], out=sets[i][2], family=entry.kernel)


def validation_shapes() -> list[tuple[int, int, int]]:
    """data/validation_shapes.csv (comment lines skipped), in file order."""
    import csv

    lines = [line for line in (REPO / "data" / "validation_shapes.csv").read_text().splitlines()
             if line and not line.startswith("#")]
    return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(lines)]


def exhaustive_best(device: str) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Per validation shape, ``device``'s recordings' fastest configuration of any family (median / own cuBLAS)."""
    import pandas as pd  # the GPU host has pandas, not polars

    from tunetable.kernels.families import FAMILIES

    best: dict[tuple[int, int, int], dict[str, Any]] = {}
    for table, path in validation_recordings(device).items():
        frame = pd.read_parquet(path)
        frame = frame[frame["status"] == "ok"]
        cublas = {(int(r["M"]), int(r["N"]), int(r["K"])): float(r["median_ms"])
                  for r in frame[frame["kind"] == "baseline"].to_dict(orient="records")}
        names = FAMILIES[table].tunable_names()
        for row in frame[frame["kind"] == "kernel"].to_dict(orient="records"):
            shape = (int(row["M"]), int(row["N"]), int(row["K"]))
            ratio = float(row["median_ms"]) / cublas[shape]
            if shape not in best or ratio < best[shape]["recorded_time_vs_cublas"]:
                best[shape] = {"family": table, "config_id": row["config_id"], "recorded_time_vs_cublas": ratio,
                               "tunables": {name.lower(): int(row[name]) for name in names}}
    return best


def time_validation_shape(torch: Any, *, timer: ColdL2Timer, m: int, n: int, k: int, rounds: int, l2_bytes: int,
                          best: dict[str, Any], tuner: Any, device: str, operator: Operator) -> dict[str, Any]:
    """gemm() untuned, the exhaustive best, the online-tuned choice, the PyTorch operator and cuBLAS on one
    validation shape."""
    from tunetable.kernels.runtime import online

    sets = operand_sets(torch, m=m, n=n, k=k, l2_bytes=l2_bytes)
    n_sets = len(sets)
    decision = decide.dispatcher(device=device).decide(m=m, n=n, k=k)
    a0, b0, c0 = sets[0]
    tuning_s = 0.0
    if decision.prediction is not None:
        started = time.perf_counter()
        chosen = tuner.choose(m=m, n=n, k=k, a=a0, b=b0, out=c0,
                              ranking=online.ranking(shape_selector(device=device), m=m, n=n, k=k))
        torch.cuda.synchronize()
        tuning_s = time.perf_counter() - started
        tuned = {"family": chosen["family"], "config_id": chosen["config_id"], "tunables": chosen["tunables"]}
    else:   # a table holds the shape's (N, K): online tuning leaves it alone
        tuned = {"family": decision.entry.kernel, "config_id": decision.entry.config_id,
                 "tunables": {name: getattr(decision.entry, name) for name in decide.tunable_fields(
                     decision.entry.kernel)}}
    c0.fill_(float("nan"))
    tunetable.kernels.gemm(a0, b0, out=c0)
    reference = a0.float() @ b0.float().t()
    rel_err = relative_error(c0, reference)
    operator_rel_err = relative_error(operator.run(a0, b0), reference)
    del reference
    contenders: dict[str, Callable[[int], Any]] = {
        "gemm": lambda i: tunetable.kernels.gemm(sets[i][0], sets[i][1], out=sets[i][2]),
        "best": lambda i: tunetable.kernels.gemm_with(best["tunables"], sets[i][0], sets[i][1], out=sets[i][2],
                                                      family=best["family"]),
        "online": lambda i: tunetable.kernels.gemm_with(tuned["tunables"], sets[i][0], sets[i][1], out=sets[i][2],
                                                        family=tuned["family"]),
        "operator": lambda i: operator.run(sets[i][0], sets[i][1]),
        "cublas": lambda i: torch.mm(sets[i][0], sets[i][1].t(), out=sets[i][2]),
    }
    medians, samples, batch = timed(timer, contenders=contenders, rounds=rounds, n_sets=n_sets)
    sets.clear()
    return {
        "M": m, "N": n, "K": k, "n_sets": n_sets, "batch": batch,
        "source": "selector" if decision.prediction is not None else f"table[{decision.index}]",
        "kernel": decision.entry.kernel, "config_id": decision.entry.config_id,
        "best_family": best["family"], "best_config_id": best["config_id"],
        "best_recorded_time_vs_cublas": best["recorded_time_vs_cublas"],
        "online_family": tuned["family"], "online_config_id": tuned["config_id"], "online_tuning_s": tuning_s,
        "online_top_k": online.top_k() if decision.prediction is not None else 0,
        "rel_err": rel_err, "verified": max(rel_err, operator_rel_err) < VERIFY_RTOL,
        **operator_fields(operator, m=m, n=n, k=k), "operator_rel_err": operator_rel_err,
        **{f"{name}_ms": medians[name] for name in contenders},
        **{f"{name}_tflops": tflops(m=m, n=n, k=k, ms=medians[name]) for name in contenders},
        "gemm_of_best": medians["best"] / medians["gemm"],
        "gemm_vs_cublas": medians["cublas"] / medians["gemm"],
        "online_of_best": medians["best"] / medians["online"],
        "online_vs_cublas": medians["cublas"] / medians["online"],
        "best_vs_cublas": medians["cublas"] / medians["best"],
        "operator_vs_cublas": medians["cublas"] / medians["operator"],
        "samples_ms": samples,
    }


def validation_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geomeans of the validation set against the targets."""
    summary = {name: geomean([r[name] for r in rows])
               for name in ("gemm_of_best", "gemm_vs_cublas", "online_of_best", "online_vs_cublas", "best_vs_cublas")}
    summary["met"] = {name: summary[name] >= target for name, target in VALIDATION_TARGETS.items()}
    summary.update(operator_summary(rows))
    summary["verified"] = sum(r["verified"] for r in rows)
    summary["from_selector"] = sum(r["source"] == "selector" for r in rows)
    summary["online_tuning_s"] = sum(r["online_tuning_s"] for r in rows)
    # Where the loss is: shapes no table holds (selector, online-tuned) and M between a table's buckets.
    for part, chosen in (("selector_shapes", [r for r in rows if r["source"] == "selector"]),
                         ("table_range_shapes", [r for r in rows if r["source"] != "selector"])):
        summary[part] = {name: geomean([r[name] for r in chosen]) for name in ("gemm_of_best", "online_of_best")}
        summary[part]["shapes"] = len(chosen)
    return summary


def render_markdown(results: dict[str, Any]) -> str:
    """The human summary: per set, per shape TFLOP/s and ratios; host overhead."""
    lines = ["# tunetable.kernels.gemm() vs cuBLAS and vs the untuned configuration", "",
             f"Device: {results['device']}, served by the {results.get('tables_of', '?')} tables, torch "
             f"{results['torch']}, git {results['git_rev']}, {results['date']}. {results['method']}", ""]
    for set_name, rows in results["sets"].items():
        summary = results["summary"][set_name]
        if set_name == "validation":
            lines += validation_markdown(rows, summary)
            continue
        others = other_devices(summary)
        beside = "".join(f"; {other}'s tables on this GPU: {summary[f'tables_{other}_geomean_vs_cublas']:.3f}x "
                         "cuBLAS" for other in others)
        lines += [f"## {set_name} shapes ({len(rows)})", "",
                  f"Geomean gemm/cuBLAS speed: {summary['geomean_vs_cublas']:.3f}{beside}; gemm/untuned: "
                  f"{summary['geomean_vs_untuned']:.3f}; verified: {summary['verified']}/{len(rows)}. "
                  + operator_sentence(summary), "",
                  "| M | N | K | family | source | config | gemm TFLOP/s | cuBLAS TFLOP/s | untuned TFLOP/s | "
                  "vs cuBLAS | " + "".join(f"{other}'s tables | vs cuBLAS | " for other in others)
                  + "operator path | operator vs cuBLAS | vs untuned | rel err |",
                  "|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(others) + "---|---|---|---|"]
        for row in rows:
            lines.append(
                f"| {row['M']} | {row['N']} | {row['K']} | {row.get('kernel', '')} | {row['source']} | "
                f"{row['config_id']} | "
                f"{row['gemm_tflops']:.1f} | {row['cublas_tflops']:.1f} | {row['untuned_tflops']:.1f} | "
                f"{row['gemm_vs_cublas']:.3f} | "
                + "".join(f"{row[f'tables_{other}_kernel']} {row[f'tables_{other}_config_id']} | "
                          f"{row[f'tables_{other}_vs_cublas']:.3f} | " for other in others)
                + f"{row['operator_path']} | {row['operator_vs_cublas']:.3f} | "
                + f"{row['gemm_vs_untuned']:.2f} | {row['rel_err']:.1e} |")
        lines.append("")
    host = results["host_overhead"]
    lines += ["## Host overhead per call (µs, median of "
              f"{HOST_REPEATS} x {HOST_CALLS} calls queued behind a sleeping GPU)", "",
              "| shape | gemm(out=) | gemm (allocates) | prepared launch | torch.ops.tunetable.gemm | "
              "tunetable.torch.Linear | torch.mm(out=) | torch.mm | first call |",
              "|---|---|---|---|---|---|---|---|---|"]
    for label, item in host.items():
        lines.append(f"| {label} | {item['gemm_out_us']:.1f} | {item['gemm_alloc_us']:.1f} | "
                     f"{item['prepared_launch_us']:.1f} | {item['torch_op_us']:.1f} | {item['torch_linear_us']:.1f} | "
                     f"{item['torch_mm_out_us']:.1f} | {item['torch_mm_us']:.1f} | {item['first_call_us']:.0f} |")
    lines += ["", f"Target: gemm(out=) under {HOST_TARGET_US:g} µs per call after the first: "
              f"{'met' if results['host_target_met'] else 'NOT met'}; the torch operator under "
              f"{TORCH_OP_TARGET_US:g} µs: {'met' if results['torch_op_target_met'] else 'NOT met'}.", ""]
    return "\n".join(lines)


def operator_sentence(summary: dict[str, Any]) -> str:
    """The PyTorch operator's figure in one sentence (its geomean, minimum, shapes below 0.9x, shapes to torch)."""
    return (f"The PyTorch operator (torch.ops.tunetable.gemm, torch's matmul on {summary['operator_to_torch']} "
            f"shapes): {summary['operator_geomean_vs_cublas']:.3f}x cuBLAS, min "
            f"{summary['operator_min_vs_cublas']:.3f}, {summary[f'operator_below_{SLOW_VS_CUBLAS}x']} below "
            f"{SLOW_VS_CUBLAS}x (gemm: min {summary['min_vs_cublas']:.3f}, {summary[f'below_{SLOW_VS_CUBLAS}x']} "
            f"below).")


def other_devices(summary: dict[str, Any]) -> list[str]:
    """The other devices whose tables a set's summary measured beside the serving device's (none for validation)."""
    return list(summary.get("other_devices", ()))


def validation_markdown(rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    """The validation set's section: per shape the four contenders; the geomeans against the targets."""
    met = summary["met"]
    lines = [f"## validation shapes ({len(rows)}, data/validation_shapes.csv: never tuned on)", "",
             f"gemm() untuned: {summary['gemm_of_best']:.3f}x the exhaustive best (target >= "
             f"{VALIDATION_TARGETS['gemm_of_best']}: {'met' if met['gemm_of_best'] else 'NOT met'}), "
             f"{summary['gemm_vs_cublas']:.3f}x cuBLAS (target >= {VALIDATION_TARGETS['gemm_vs_cublas']}: "
             f"{'met' if met['gemm_vs_cublas'] else 'NOT met'}; the exhaustive best itself: "
             f"{summary['best_vs_cublas']:.3f}x). After online tuning: {summary['online_of_best']:.3f}x the best "
             f"(target >= {VALIDATION_TARGETS['online_of_best']}: {'met' if met['online_of_best'] else 'NOT met'}), "
             f"{summary['online_vs_cublas']:.3f}x cuBLAS, {summary['online_tuning_s']:.1f} s of tuning in all. "
             f"Verified: {summary['verified']}/{len(rows)}; {summary['from_selector']} shapes from the selector. "
             + operator_sentence(summary), "",
             "| M | N | K | source | gemm config | best config | online config | gemm TFLOP/s | best | online | "
             "cuBLAS | gemm/best | online/best | gemm/cuBLAS | operator path | operator/cuBLAS |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['source']} | {r['kernel']} {r['config_id']} | "
                     f"{r['best_family']} {r['best_config_id']} | {r['online_family']} {r['online_config_id']} | "
                     f"{r['gemm_tflops']:.1f} | {r['best_tflops']:.1f} | {r['online_tflops']:.1f} | "
                     f"{r['cublas_tflops']:.1f} | {r['gemm_of_best']:.3f} | {r['online_of_best']:.3f} | "
                     f"{r['gemm_vs_cublas']:.3f} | {r['operator_path']} | {r['operator_vs_cublas']:.3f} |")
    return [*lines, ""]


def print_summary(results: dict[str, Any]) -> None:
    """A table per set, values never split (tunetable.console_table; the markdown where rich is absent)."""
    try:
        from rich.console import Console

        from tunetable.console_table import ConsoleTable, print_table
    except ImportError:
        print(render_markdown(results))
        return
    console = Console()
    for set_name, rows in results["sets"].items():
        if set_name == "validation":
            table = ConsoleTable(title="validation shapes: gemm() untuned, exhaustive best, online-tuned, cuBLAS")
            for column in ("shape", "source", "gemm/best", "online/best", "gemm/cuBLAS", "online/cuBLAS",
                           "operator path", "operator/cuBLAS"):
                table.add_column(column, justify="right")
            for row in rows:
                table.add_row(f"{row['M']}x{row['N']}x{row['K']}", row["source"], f"{row['gemm_of_best']:.3f}",
                              f"{row['online_of_best']:.3f}", f"{row['gemm_vs_cublas']:.3f}",
                              f"{row['online_vs_cublas']:.3f}", row["operator_path"],
                              f"{row['operator_vs_cublas']:.3f}")
        else:
            others = other_devices(results["summary"][set_name])
            table = ConsoleTable(title=f"tunetable.kernels.gemm, {set_name} shapes "
                                      f"({results.get('tables_of', '?')} tables)")
            for column in ("shape", "source", "gemm TFLOP/s", "cuBLAS", "untuned", "vs cuBLAS",
                           *(f"{other}'s tables vs cuBLAS" for other in others), "operator path",
                           "operator vs cuBLAS", "vs untuned"):
                table.add_column(column, justify="right")
            for row in rows:
                table.add_row(f"{row['M']}x{row['N']}x{row['K']}", row["source"], f"{row['gemm_tflops']:.1f}",
                              f"{row['cublas_tflops']:.1f}", f"{row['untuned_tflops']:.1f}",
                              f"{row['gemm_vs_cublas']:.3f}",
                              *(f"{row[f'tables_{other}_vs_cublas']:.3f}" for other in others),
                              row["operator_path"], f"{row['operator_vs_cublas']:.3f}", f"{row['gemm_vs_untuned']:.2f}")
        print_table(console, table)
        console.print(results["summary"][set_name])
    console.print({"host_overhead_us": results["host_overhead"], "host_target_met": results["host_target_met"],
                   "torch_op_target_met": results["torch_op_target_met"]})


def main() -> None:
    """Measure both shape sets and the host overhead; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--limit", type=int, default=0, help="only the first N shapes of each set (smoke runs)")
    parser.add_argument("--sets", default=",".join(DEFAULT_SETS),
                        help=f"comma-separated shape sets: {', '.join(SETS)}")
    parser.add_argument("--host-only", action="store_true", help="measure the host overhead alone")
    args = parser.parse_args()
    if args.host_only:
        run_host(stub=False, out=args.out)
        return
    wanted = [name.strip() for name in args.sets.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(SETS))
    if unknown:
        parser.error(f"unknown shape set(s) {', '.join(unknown)} (known: {', '.join(SETS)})")

    import torch

    warnings.simplefilter("ignore", decide.FallbackWarning)  # the 'source' column says it instead
    props = torch.cuda.get_device_properties(0)
    serving = runtime().table.device  # the primary context (torch's too), current in this thread; its tables' device
    others = tuple(device for device in RECORDED_DEVICES if device != serving)
    stem = output_stem(wanted=wanted, serving=serving, primary=RECORDED_DEVICES[0])
    import pycuda.driver as cuda  # with the runtime: the timer records pycuda events on the default stream

    timer = ColdL2Timer(cuda=cuda, stream=None)   # gemm(), the operator and torch.mm launch on the default stream
    operator = torch_operator()
    all_sets = {"default": default_shapes, "other": lambda: OTHER_SHAPES, "validation": validation_shapes,
                "tables": lambda: table_shapes(load_yaml_file(REPO / "params.yaml")["tables"])}
    shape_sets = {name: all_sets[name]() for name in wanted}
    if args.limit:
        shape_sets = {name: shapes[: args.limit] for name, shapes in shape_sets.items()}
    results: dict[str, Any] = {
        "device": props.name, "tables_of": serving, "torch": torch.__version__,
        "git_rev": os.environ.get("TUNETABLE_GIT_REV") or git_revision(REPO),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "rounds": args.rounds,
        "method": "random bf16; rotating (A,B,C) sets > 3x L2; sleep kernel then CUDA events around a batch; "
                  "contenders interleaved per round (order rotated); median of rounds. untuned = "
                  "tunetable.kernels.decide.heuristic_tunables(M).",
        "sets": {}, "summary": {},
    }
    started = time.perf_counter()
    for set_name, shapes in shape_sets.items():
        run = run_validation if set_name == "validation" else lambda torch, **kw: run_set(
            torch, name=set_name, others=others, **kw)

        def checkpoint(rows: list[dict[str, Any]], set_name: str = set_name) -> None:
            """The rows so far written after each shape: a run cut short keeps what it measured."""
            results["sets"][set_name] = rows
            write_json(results, out=args.out, stem=stem)

        results["sets"][set_name], results["summary"][set_name] = run(
            torch, timer=timer, shapes=shapes, rounds=args.rounds, l2_bytes=props.L2_cache_size, started=started,
            device=serving, operator=operator, checkpoint=checkpoint)
        write_json(results, out=args.out, stem=stem)
    results["host_overhead"] = {
        f"{m}x{n}x{k}": gpu_shape(torch, m=m, n=n, k=k) for m, n, k in ((1, 4096, 4096), (4096, 4096, 4096))
    }
    results["host_target_met"] = all(item["gemm_out_us"] < HOST_TARGET_US for item in results["host_overhead"].values())
    results["torch_op_target_met"] = all(item["torch_op_us"] < TORCH_OP_TARGET_US
                                         for item in results["host_overhead"].values())
    write_json(results, out=args.out, stem=stem)
    atomic_write_text(args.out / f"{stem}.md", render_markdown(results))
    print_summary(results)


def run_set(torch: Any, *, timer: ColdL2Timer, name: str, shapes: list[tuple[int, int, int]], rounds: int,
            l2_bytes: int, started: float, device: str, others: tuple[str, ...], operator: Operator,
            checkpoint: Callable[[list[dict[str, Any]]], None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A table-shape set: gemm (``device``'s tables), each of ``others``' tables' choice, untuned, the PyTorch
    operator and cuBLAS per shape; its rows and geomeans."""
    rows = []
    for m, n, k in shapes:
        rows.append(time_shape(torch, timer=timer, m=m, n=n, k=k, rounds=rounds, l2_bytes=l2_bytes, device=device,
                               others=others, operator=operator))
        checkpoint(rows)
        torch.cuda.empty_cache()
        beside = "".join(f", {other}'s tables {rows[-1][f'tables_{other}_tflops']:.1f}" for other in others)
        print(f"{name} {m}x{n}x{k}: gemm {rows[-1]['gemm_tflops']:.1f} TFLOP/s{beside}, cuBLAS "
              f"{rows[-1]['cublas_tflops']:.1f}, untuned {rows[-1]['untuned_tflops']:.1f}, operator "
              f"{rows[-1]['operator_tflops']:.1f} ({rows[-1]['operator_path']}) "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    return rows, {
        "device": device,
        "other_devices": list(others),
        **{f"tables_{other}_geomean_vs_cublas": geomean([r[f"tables_{other}_vs_cublas"] for r in rows])
           for other in others},
        "geomean_vs_cublas": geomean([r["gemm_vs_cublas"] for r in rows]),
        **operator_summary(rows),
        "geomean_vs_untuned": geomean([r["gemm_vs_untuned"] for r in rows]),
        "geomean_gemm_tflops": geomean([r["gemm_tflops"] for r in rows]),
        "geomean_cublas_tflops": geomean([r["cublas_tflops"] for r in rows]),
        "verified": sum(r["verified"] for r in rows),
        "from_table": sum(r["source"].startswith("table") for r in rows),
        "from_selector": sum(r["source"] == "selector" for r in rows),
    }


def run_validation(torch: Any, *, timer: ColdL2Timer, shapes: list[tuple[int, int, int]], rounds: int,
                   l2_bytes: int, started: float, device: str, operator: Operator,
                   checkpoint: Callable[[list[dict[str, Any]]], None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The validation set: gemm untuned, exhaustive best, online-tuned, the PyTorch operator, cuBLAS (online tuning
    from an empty cache)."""
    import tempfile

    from tunetable.kernels.runtime import online

    best = exhaustive_best(device)
    os.environ["TUNETABLE_CACHE_DIR"] = tempfile.mkdtemp(prefix="runtime_gemm_autotune.")
    tuner = online.OnlineTuner(gemm_with=tunetable.kernels.gemm_with)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the source column says which shapes are untuned
        for m, n, k in shapes:
            rows.append(time_validation_shape(torch, timer=timer, m=m, n=n, k=k, rounds=rounds, l2_bytes=l2_bytes,
                                              best=best[(m, n, k)], tuner=tuner, device=device, operator=operator))
            checkpoint(rows)
            torch.cuda.empty_cache()
            row = rows[-1]
            print(f"validation {m}x{n}x{k} ({row['source']}): gemm {row['gemm_of_best']:.3f}x best, "
                  f"{row['gemm_vs_cublas']:.3f}x cuBLAS; online {row['online_of_best']:.3f}x best; operator "
                  f"{row['operator_vs_cublas']:.3f}x cuBLAS ({row['operator_path']}) "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    return rows, validation_summary(rows)


def write_json(results: dict[str, Any], *, out: Path, stem: str = "runtime_gemm") -> None:
    """<stem>.json (atomic)."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{stem}.json", json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
