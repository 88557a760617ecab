"""Does the cuBLAS baseline's time follow where its buffers lie, or when it runs? (H200, the bench's own method)

The recorded cuBLAS rows of one shape differ between sessions by up to 10 % at some shapes (200 x 5120 x
5120: 21.7 us in one shard, 24.0 us in two others) while the kernels' rows agree within 1 %. Here the
bench's own CudaBackend measures the baseline of each shape at several placements (a pad allocation
before the input sets shifts every address) and in several passes over those placements, so that a
placement effect (the same placement agrees across passes) and a time effect (passes disagree) can be
told apart. Settings are params.yaml's bench: section.

Run on the GPU machine (pycuda, nvcc):
    python benchmarks/cublas_modes.py [--placements 6] [--passes 2] [--shape MxNxK ...] [--out DIR]
Prints one line per shape and placement; writes cublas_modes.json and cublas_modes.md to --out
(default benchmarks/results).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.keys import git_revision  # noqa: E402
from tunetable.params import load_params  # noqa: E402

# The shapes whose recorded cuBLAS rows disagreed most between sessions, and a large one as the control.
DEFAULT_SHAPES = ["200x5120x5120", "20x13824x5120", "256x4096x4096", "24x28672x8192", "200x28672x8192",
                  "3000x13824x5120"]
PAD_STEP_BYTES = 7 * (1 << 20) + 96 * 1024   # not a power of two: each placement moves every buffer


def parse_shape(text: str) -> tuple[int, int, int]:
    """M, N, K from 'MxNxK' (an argparse error otherwise)."""
    try:
        m, n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape '{text}': expected MxNxK integers") from None
    return m, n, k


def spread(values: list[float]) -> float:
    """(max - min) / min of a list of medians."""
    return (max(values) - min(values)) / min(values)


def measure_shape(backend: Any, *, shape: tuple[int, int, int], settings: dict[str, Any], placements: int,
                  passes: int) -> dict[str, Any]:
    """The baseline's samples per (pass, placement) of one shape, with the first input set's A address."""
    cuda = backend.cuda
    m, n, k = shape
    runs = []
    for pass_index in range(passes):
        for placement in range(placements):
            pad = cuda.mem_alloc(PAD_STEP_BYTES * placement + 256) if placement else None
            backend.prepare_shape(m=m, n=n, k=k, settings=settings)
            state = backend.prepare(config_id="cublas", payload={"kind": "baseline"})
            if state["status"] != "ok":
                raise RuntimeError(f"{m}x{n}x{k}: the cuBLAS baseline did not verify: {state}")
            samples = [backend.sample(config_id="cublas")["sample_ms"] for _ in range(int(settings["rounds"]))]
            runs.append({"pass": pass_index, "placement": placement, "a_address": backend.pointers[0][0],
                         "sets": len(backend.pointers), "batch": state["batch"],
                         "median_us": 1000 * statistics.median(samples), "samples_us": [1000 * s for s in samples]})
            if pad is not None:
                pad.free()
    return {"M": m, "N": n, "K": k, "runs": runs, **summarise(runs, placements=placements, passes=passes)}


def summarise(runs: list[dict[str, Any]], *, placements: int, passes: int) -> dict[str, Any]:
    """Spread of the medians across placements (within each pass) and across passes (within each placement)."""
    by = {(run["pass"], run["placement"]): run["median_us"] for run in runs}
    across_placements = max(spread([by[(p, q)] for q in range(placements)]) for p in range(passes))
    across_passes = max(spread([by[(p, q)] for p in range(passes)]) for q in range(placements)) if passes > 1 else 0.0
    within = max(spread(run["samples_us"]) for run in runs)
    medians = [run["median_us"] for run in runs]
    return {"min_median_us": min(medians), "max_median_us": max(medians), "spread_across_placements": across_placements,
            "spread_across_passes": across_passes, "spread_within_run": within}


def render_markdown(results: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    lines = [
        "# cuBLAS baseline: placement vs time (the bench's CudaBackend, H200)", "",
        f"git {results['git_rev']}, {results['date']}, {results['placements']} placements x {results['passes']} "
        f"passes, {results['rounds']} samples each (params.yaml bench: settings).", "",
        "| shape | min median us | max median us | spread across placements | across passes | within a run |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["shapes"]:
        lines.append(f"| {row['M']}x{row['N']}x{row['K']} | {row['min_median_us']:.2f} | {row['max_median_us']:.2f} | "
                     f"{100 * row['spread_across_placements']:.1f} % | {100 * row['spread_across_passes']:.1f} % | "
                     f"{100 * row['spread_within_run']:.1f} % |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measure every shape, print a line per run and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", type=parse_shape, help="MxNxK (repeatable)")
    parser.add_argument("--placements", type=int, default=6)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    if args.placements < 1 or args.passes < 1:
        parser.error("--placements and --passes must be at least 1")
    shapes = args.shape or [parse_shape(text) for text in DEFAULT_SHAPES]
    settings = dict(load_params(REPO / "params.yaml")["bench"])

    from tunetable.bench.cuda_backend import CudaBackend

    backend = CudaBackend()
    results: dict[str, Any] = {
        "git_rev": os.environ.get("TUNETABLE_GIT_REV") or git_revision(REPO),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": backend.describe(), "placements": args.placements, "passes": args.passes,
        "rounds": int(settings["rounds"]), "shapes": [],
    }
    try:
        for shape in shapes:
            row = measure_shape(backend, shape=shape, settings=settings, placements=args.placements,
                                passes=args.passes)
            results["shapes"].append(row)
            for run in row["runs"]:
                print(f"{shape[0]}x{shape[1]}x{shape[2]} pass {run['pass']} placement {run['placement']} "
                      f"(A at {run['a_address']:#x}): median {run['median_us']:.2f} us", flush=True)
            print(f"{shape[0]}x{shape[1]}x{shape[2]}: spread across placements "
                  f"{100 * row['spread_across_placements']:.1f} %, across passes "
                  f"{100 * row['spread_across_passes']:.1f} %, within a run "
                  f"{100 * row['spread_within_run']:.1f} %", flush=True)
    finally:
        backend.close()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "cublas_modes.json", json.dumps(results, indent=1) + "\n")
    atomic_write_text(args.out / "cublas_modes.md", render_markdown(results))
    print(f"wrote {args.out / 'cublas_modes.json'} and cublas_modes.md")


if __name__ == "__main__":
    main()
