"""Do back-to-back calls overlap? The device-side gap between one GEMM kernel's end and the next one's start (H200).

A kernel launched with programmatic dependent launch (PDL) may start while the kernel before it is still
running (its prologue under the other's tail), so in a stream of calls the gap turns negative. The bench
times exactly such streams (batches of back-to-back calls), so a contender that overlaps its calls pays
less per call there than its kernel's own duration. torch's profiler (CUPTI) records each kernel's start
and end on the device; for each contender at each shape this runs CALLS back-to-back calls on fresh
buffers (rotating sets > 3x L2, as the bench), queued behind a sleeping kernel (the bench's spin-hold) so that
the host's launch time does not set the gaps, and reports the median kernel duration and the median gap.

    python3 benchmarks/launch_gaps.py --shape 512x4096x4096 --contender cublas \\
        --contender gemm_wgmma:BLOCK_M=128,... [--calls 40] [--out benchmarks/results/launch_gaps]

Run on the GPU machine (torch, pycuda); prints one line per (shape, contender), writes <out>.md / .json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # ncu_kernels: one reading of --shape and --contender

from ncu_kernels import parse_contender, parse_shape  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402

L2_BYTES = 60 * 1024 * 1024  # H200: the rotating sets together exceed 3x this, as the bench's do
WARMUP_CALLS = 3
HOLD_CYCLES_PER_CALL = 400_000  # ~200 us at 1.98 GHz: the host enqueues every call while the GPU sleeps


def gaps_of(*, spans: list[tuple[float, float]]) -> list[float]:
    """Next start minus previous end (us) of consecutive kernel spans, in start order; < 0: they overlapped."""
    ordered = sorted(spans)
    return [later[0] - earlier[1] for earlier, later in zip(ordered, ordered[1:])]


def measure(*, shape: tuple[int, int, int], contender: str, calls: int) -> dict[str, Any]:
    """CALLS back-to-back calls of one contender, profiled: kernel spans, their durations and gaps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import tunetable.kernels as runtime

    m, n, k = shape
    per_set = 2 * (m * k + n * k + m * n)
    sets = max(2, -(-3 * L2_BYTES // per_set))
    buffers = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                torch.randn(n, k, device="cuda", dtype=torch.bfloat16),
                torch.empty(m, n, device="cuda", dtype=torch.bfloat16)) for _ in range(sets)]
    family, tunables = parse_contender(contender)

    def call(index: int) -> None:
        a, b, c = buffers[index % sets]
        if tunables is None:
            torch.mm(a, b.t(), out=c)
        else:
            runtime.gemm_with(tunables, a, b, out=c, family=family)

    for index in range(WARMUP_CALLS):
        call(index)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(HOLD_CYCLES_PER_CALL * calls)
        for index in range(calls):
            call(index)
        torch.cuda.synchronize()
    kernels = [event for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA
               and not any(word in event.name.lower() for word in ("memset", "memcpy", "sleep", "spin"))]
    spans = [(event.time_range.start, event.time_range.end) for event in kernels]
    names = sorted({event.name for event in kernels})
    gaps = gaps_of(spans=spans)
    durations = [end - start for start, end in spans]
    return {"shape": f"{m}x{n}x{k}", "contender": contender, "kernels": len(spans), "names": names,
            "median_us": statistics.median(durations), "median_gap_us": statistics.median(gaps),
            "min_gap_us": min(gaps), "per_call_us": (max(e for _, e in spans) - min(s for s, _ in spans)) / calls}


def render_markdown(*, rows: list[dict[str, Any]]) -> str:
    """One table row per (shape, contender)."""
    out = ["# Back-to-back calls: kernel duration and the gap to the next kernel (torch profiler, H200)", "",
           "| shape | contender | kernels | median kernel (us) | median gap (us) | min gap (us) | span / call (us) |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {r['shape']} | {r['contender']} | {r['kernels']} | {r['median_us']:.2f} | {r['median_gap_us']:.2f} | "
            f"{r['min_gap_us']:.2f} | {r['per_call_us']:.2f} |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Profile each contender at each shape, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=parse_shape, action="append", required=True)
    parser.add_argument("--contender", action="append", required=True, help="cublas or FAMILY:NAME=V,...")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "launch_gaps")
    args = parser.parse_args(argv)
    for text in args.contender:
        parse_contender(text)  # a bad contender fails before any launch
    rows = []
    for shape in args.shape:
        for contender in args.contender:
            rows.append(measure(shape=shape, contender=contender, calls=args.calls))
            r = rows[-1]
            print(f"{r['shape']} {contender[:60]}: kernel {r['median_us']:.2f} us, gap {r['median_gap_us']:.2f} us "
                  f"(min {r['min_gap_us']:.2f}), {r['per_call_us']:.2f} us per call, {r['names']}")
    atomic_write_text(args.out.with_suffix(".md"), render_markdown(rows=rows))
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
