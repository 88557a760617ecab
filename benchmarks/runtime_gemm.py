"""tunetable.kernels.gemm() through the tuning table vs cuBLAS and vs the untuned configuration (H200).

Two shape sets: the default table shapes (params.yaml tables.gemm_mma.shapes) and a second set
the table does not hold (odd M, non-square N and K). Per shape, three contenders run on the same
buffers and are timed the same way:
  * ``gemm``    tunetable.gemm(a, b, out=c): the dispatch list's family and that table's choice (or the fallback),
  * ``untuned`` tunetable.kernels.gemm_with(heuristic_tunables(M), ...): gemm_mma's untuned default (no table),
  * ``cublas``  torch.mm(a, b.t(), out=c).
Timing: the bench's own cold-L2 method (tunetable.kernels.runtime.timing, also autotune's): random
bf16 inputs; (A, B, C) sets rotated so that the bytes touched between two uses of a set exceed 3x
L2 (cold L2); a spin kernel holds the stream while the host queues a batch of at least 0.3 ms
(sized per contender by a time-based warm-up), CUDA events bracket the batch (GPU time, no launch
gaps); contenders interleaved round by round; median of the rounds. gemm's output is verified
(float32 reference).
Host overhead per call is measured apart: wall time of queuing 200 calls behind a sleeping GPU.

Run on the GPU machine (torch, pycuda, nvcc):
    python benchmarks/runtime_gemm.py [--rounds 5] [--out benchmarks/results]
Writes runtime_gemm.json and runtime_gemm.md there.
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
from pathlib import Path
from typing import Any, Callable


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tunetable.kernels  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.kernels.runtime import decide  # noqa: E402
from tunetable.kernels.runtime.launch import runtime  # noqa: E402
from tunetable.kernels.runtime.timing import ColdL2Timer, input_sets  # noqa: E402
from tunetable.keys import git_revision  # noqa: E402
from tunetable.yamlio import load_yaml_file  # noqa: E402

L2_FACTOR = 3
WARMUP_MS = 25.0                  # the bench's defaults (params.yaml bench:)
MIN_BATCH_MS = 0.3
CYCLES_PER_NS = 2.0               # torch.cuda._sleep counts SM cycles (<= 1.98 GHz on the H200)
VERIFY_RTOL = 1e-2
HOST_CALLS = 200
HOST_REPEATS = 15
HOST_TARGET_US = 20.0
OTHER_SHAPES = [
    (1, 11008, 4096), (7, 4096, 11008), (77, 2048, 5120), (333, 5120, 2048),
    (1000, 11008, 4096), (77, 4096, 4096), (333, 14336, 4096), (7, 8192, 8192),
    (3000, 5120, 2048), (4095, 1032, 776), (16, 28672, 4096), (2048, 4096, 28672),
]


def default_shapes() -> list[tuple[int, int, int]]:
    """params.yaml tables.gemm_mma.shapes (NK pairs outer, M inner)."""
    shapes = load_yaml_file(REPO / "params.yaml")["tables"]["gemm_mma"]["shapes"]
    return [(m, n, k) for n, k in shapes["NK"] for m in shapes["M"]]


def tflops(*, m: int, n: int, k: int, ms: float) -> float:
    """2MNK over the time, in TFLOP/s."""
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def time_shape(torch: Any, *, timer: ColdL2Timer, m: int, n: int, k: int, rounds: int,
               l2_bytes: int) -> dict[str, Any]:
    """Verify gemm() on one shape, then time the three contenders interleaved; one result row."""
    set_bytes = (m * k + n * k + m * n) * 2
    n_sets = input_sets(set_bytes=set_bytes, l2_bytes=l2_bytes, l2_factor=L2_FACTOR)
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    sets = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.empty(m, n, device="cuda", dtype=torch.bfloat16)) for _ in range(n_sets)]
    decision = decide.dispatcher().decide(m=m, n=n, k=k)
    untuned = dict(decide.heuristic_tunables(m=m))

    a0, b0, c0 = sets[0]
    c0.fill_(float("nan"))
    tunetable.kernels.gemm(a0, b0, out=c0)
    reference = a0.float() @ b0.float().t()
    rel_err = float((c0.float() - reference).norm() / reference.norm())
    del reference

    contenders: dict[str, Callable[[int], Any]] = {
        "gemm": lambda i: tunetable.kernels.gemm(sets[i][0], sets[i][1], out=sets[i][2]),
        "untuned": lambda i: tunetable.kernels.gemm_with(untuned, sets[i][0], sets[i][1], out=sets[i][2]),
        "cublas": lambda i: torch.mm(sets[i][0], sets[i][1].t(), out=sets[i][2]),
    }
    batch = {}  # warm-up (plans, module loads, clocks) sizes each contender's batch, as the bench does
    for name, contender in contenders.items():
        _, per_launch = timer.warm_up(contender, sets=n_sets, warmup_ms=WARMUP_MS)
        batch[name] = timer.batch_size(per_launch, min_batch_ms=MIN_BATCH_MS)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for round_index in range(rounds):
        names = list(contenders)
        names = names[round_index % len(names):] + names[:round_index % len(names)]  # rotate the order
        for name in names:
            samples[name].append(timer.sample(contenders[name], sets=n_sets, batch=batch[name]))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    sets.clear()  # release the buffers before the next shape allocates its own
    return {
        "M": m, "N": n, "K": k, "n_sets": n_sets, "batch": batch,
        "source": "fallback" if decision.fallback else f"table[{decision.index}]",
        "kernel": decision.entry.kernel,
        "config_id": decision.entry.config_id,
        "untuned_config_id": decide.make_entry(tunables=untuned, n=n, k=k).config_id,
        "rel_err": rel_err, "verified": rel_err < VERIFY_RTOL,
        **{f"{name}_ms": medians[name] for name in contenders},
        **{f"{name}_tflops": tflops(m=m, n=n, k=k, ms=medians[name]) for name in contenders},
        "gemm_vs_cublas": medians["cublas"] / medians["gemm"],
        "gemm_vs_untuned": medians["untuned"] / medians["gemm"],
        "samples_ms": samples,
    }


def host_overhead(torch: Any, *, m: int, n: int, k: int) -> dict[str, float]:
    """Median µs per call of queuing HOST_CALLS calls while the GPU sleeps (host cost alone)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plan = runtime().plan(decide.dispatcher().decide(m=m, n=n, k=k).entry, m=m, n=n, k=k)
    a_ptr, b_ptr, c_ptr = a.data_ptr(), b.data_ptr(), c.data_ptr()
    calls: dict[str, Callable[[], Any]] = {
        "gemm_out": lambda: tunetable.kernels.gemm(a, b, out=c),
        "gemm_alloc": lambda: tunetable.kernels.gemm(a, b),
        "raw_launch": lambda: plan.launch(a_ptr, b_ptr, c_ptr),
        "torch_mm_out": lambda: torch.mm(a, b.t(), out=c),
    }
    first_started = time.perf_counter()
    tunetable.kernels.gemm(a, b, out=c)
    torch.cuda.synchronize()
    result: dict[str, float] = {"first_call_us": (time.perf_counter() - first_started) * 1e6}
    for name, call in calls.items():
        per_call = []
        for _ in range(HOST_REPEATS):
            torch.cuda.synchronize()
            torch.cuda._sleep(int(CYCLES_PER_NS * 20_000_000))  # 20 ms: the queue never drains or fills
            started = time.perf_counter()
            for _ in range(HOST_CALLS):
                call()
            per_call.append((time.perf_counter() - started) / HOST_CALLS * 1e6)
        torch.cuda.synchronize()
        result[f"{name}_us"] = statistics.median(per_call)
    return result


def render_markdown(results: dict[str, Any]) -> str:
    """The human summary: per set, per shape TFLOP/s and ratios; host overhead."""
    lines = ["# tunetable.kernels.gemm() vs cuBLAS and vs the untuned configuration", "",
             f"Device: {results['device']}, torch {results['torch']}, git {results['git_rev']}, "
             f"{results['date']}. {results['method']}", ""]
    for set_name, rows in results["sets"].items():
        summary = results["summary"][set_name]
        lines += [f"## {set_name} shapes ({len(rows)})", "",
                  f"Geomean gemm/cuBLAS speed: {summary['geomean_vs_cublas']:.3f}; gemm/untuned: "
                  f"{summary['geomean_vs_untuned']:.3f}; verified: {summary['verified']}/{len(rows)}.", "",
                  "| M | N | K | family | source | config | gemm TFLOP/s | cuBLAS TFLOP/s | untuned TFLOP/s | "
                  "vs cuBLAS | vs untuned | rel err |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in rows:
            lines.append(
                f"| {row['M']} | {row['N']} | {row['K']} | {row.get('kernel', '')} | {row['source']} | "
                f"{row['config_id']} | "
                f"{row['gemm_tflops']:.1f} | {row['cublas_tflops']:.1f} | {row['untuned_tflops']:.1f} | "
                f"{row['gemm_vs_cublas']:.2f} | {row['gemm_vs_untuned']:.2f} | {row['rel_err']:.1e} |")
        lines.append("")
    host = results["host_overhead"]
    lines += ["## Host overhead per call (µs, median of "
              f"{HOST_REPEATS} x {HOST_CALLS} calls queued behind a sleeping GPU)", "",
              "| shape | gemm(out=) | gemm (allocates) | raw pycuda launch | torch.mm(out=) | first call |",
              "|---|---|---|---|---|---|"]
    for label, item in host.items():
        lines.append(f"| {label} | {item['gemm_out_us']:.1f} | {item['gemm_alloc_us']:.1f} | "
                     f"{item['raw_launch_us']:.1f} | {item['torch_mm_out_us']:.1f} | {item['first_call_us']:.0f} |")
    lines += ["", f"Target: gemm(out=) under {HOST_TARGET_US:g} µs per call after the first: "
              f"{'met' if results['host_target_met'] else 'NOT met'}.", ""]
    return "\n".join(lines)


def print_summary(results: dict[str, Any]) -> None:
    """A rich table per set (plain text where rich is absent)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(render_markdown(results))
        return
    console = Console()
    for set_name, rows in results["sets"].items():
        table = Table(title=f"tunetable.kernels.gemm, {set_name} shapes")
        for column in ("shape", "source", "gemm TFLOP/s", "cuBLAS", "untuned", "vs cuBLAS", "vs untuned"):
            table.add_column(column, justify="right")
        for row in rows:
            table.add_row(f"{row['M']}x{row['N']}x{row['K']}", row["source"], f"{row['gemm_tflops']:.1f}",
                          f"{row['cublas_tflops']:.1f}", f"{row['untuned_tflops']:.1f}",
                          f"{row['gemm_vs_cublas']:.2f}", f"{row['gemm_vs_untuned']:.2f}")
        console.print(table)
        console.print(results["summary"][set_name])
    console.print({"host_overhead_us": results["host_overhead"], "host_target_met": results["host_target_met"]})


def main() -> None:
    """Measure both shape sets and the host overhead; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--limit", type=int, default=0, help="only the first N shapes of each set (smoke runs)")
    args = parser.parse_args()

    import torch

    warnings.simplefilter("ignore", decide.FallbackWarning)  # the 'source' column says it instead
    props = torch.cuda.get_device_properties(0)
    runtime()  # the primary context (torch's too), current in this thread
    import pycuda.driver as cuda  # with the runtime: the timer records pycuda events on the default stream

    timer = ColdL2Timer(cuda=cuda, stream=None)   # gemm() and torch.mm launch on the legacy default stream
    shape_sets = {"default": default_shapes(), "other": OTHER_SHAPES}
    if args.limit:
        shape_sets = {name: shapes[: args.limit] for name, shapes in shape_sets.items()}
    results: dict[str, Any] = {
        "device": props.name, "torch": torch.__version__,
        "git_rev": os.environ.get("TUNETABLE_GIT_REV") or git_revision(REPO),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "rounds": args.rounds,
        "method": "random bf16; rotating (A,B,C) sets > 3x L2; sleep kernel then CUDA events around a batch; "
                  "contenders interleaved per round (order rotated); median of rounds. untuned = "
                  "tunetable.kernels.decide.heuristic_tunables(M).",
        "sets": {}, "summary": {},
    }
    started = time.perf_counter()
    for set_name, shapes in shape_sets.items():
        rows = []
        for m, n, k in shapes:
            rows.append(time_shape(torch, timer=timer, m=m, n=n, k=k, rounds=args.rounds,
                                   l2_bytes=props.L2_cache_size))
            torch.cuda.empty_cache()
            print(f"{set_name} {m}x{n}x{k}: gemm {rows[-1]['gemm_tflops']:.1f} TFLOP/s, cuBLAS "
                  f"{rows[-1]['cublas_tflops']:.1f}, untuned {rows[-1]['untuned_tflops']:.1f} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
        results["sets"][set_name] = rows
        results["summary"][set_name] = {
            "geomean_vs_cublas": geomean([r["gemm_vs_cublas"] for r in rows]),
            "geomean_vs_untuned": geomean([r["gemm_vs_untuned"] for r in rows]),
            "geomean_gemm_tflops": geomean([r["gemm_tflops"] for r in rows]),
            "geomean_cublas_tflops": geomean([r["cublas_tflops"] for r in rows]),
            "verified": sum(r["verified"] for r in rows),
            "from_table": sum(r["source"] != "fallback" for r in rows),
        }
        write_json(results, out=args.out)  # partial figures survive a run cut short
    results["host_overhead"] = {
        f"{m}x{n}x{k}": host_overhead(torch, m=m, n=n, k=k) for m, n, k in ((1, 4096, 4096), (4096, 4096, 4096))
    }
    results["host_target_met"] = all(item["gemm_out_us"] < HOST_TARGET_US for item in results["host_overhead"].values())
    write_json(results, out=args.out)
    atomic_write_text(args.out / "runtime_gemm.md", render_markdown(results))
    print_summary(results)


def write_json(results: dict[str, Any], *, out: Path) -> None:
    """runtime_gemm.json (atomic)."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "runtime_gemm.json", json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
