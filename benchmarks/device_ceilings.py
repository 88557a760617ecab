"""A GPU's measured ceilings: device-to-device copy bandwidth and cuBLAS's bf16 rate (DESIGN.md: "measure its
ceilings, do not assume them").

The roofline floor (tunetable.kernels.perfmodel.roofline_floor_s: max(bytes / copy bandwidth, flops / peak)) was
measured on the H200 alone (4.13 TB/s, 800 TFLOP/s). This measures both on the GPU it finds, the same way for every
device, so that params.yaml ``devices:`` can declare each device's own:
  * ``copy``  torch's device-to-device copy of COPY_BYTES (>> L2), bytes read + written per second: CUDA events
              around COPY_BATCH copies, median of ROUNDS rounds (the highest round too);
  * ``gemm``  torch.mm bf16 (cuBLAS) at GEMM_SHAPES, warm (the same operands: compute-bound, where L2 does not
              matter), events around a batch, 2MNK / time; median and highest round per shape.
The ceilings proposed are the highest round of each (a ceiling is what the device can reach, not its typical).
The SM clock and power are read before and after (nvidia-smi), never set.

Run on the GPU machine (torch):
    python benchmarks/device_ceilings.py [--out benchmarks/results]
Writes device_ceilings.<device>.json and .md (device: params.yaml's key of the GPU, else 'unrecognised').
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
sys.path.insert(0, str(REPO / "benchmarks"))  # llama_client: CUDA events around a batch, timed one way for both
from llama_client import events_ms  # noqa: E402

COPY_BYTES = 2 << 30            # 2 GiB a buffer: 40x the H200's L2
COPY_BATCH = 10
GEMM_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
GEMM_BATCH = 20
ROUNDS = 15


def rounds_of(torch: Any, launch: Callable[[], Any], *, batch: int) -> list[float]:
    """A warm-up batch, then ROUNDS timed batches (ms per launch)."""
    events_ms(torch, launch, count=batch)
    return [events_ms(torch, launch, count=batch) for _ in range(ROUNDS)]


def smi() -> str:
    """The SM clock, power draw and limit as nvidia-smi reports them now ('' where it cannot)."""
    try:
        found = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,power.limit,temperature.gpu",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi: {error}"
    return found.stdout.strip()


def copy_rounds(torch: Any) -> list[float]:
    """ms per device-to-device copy of COPY_BYTES, per round (the buffers freed on return)."""
    source = torch.empty(COPY_BYTES // 2, dtype=torch.bfloat16, device="cuda").normal_()
    target = torch.empty_like(source)
    return rounds_of(torch, lambda: target.copy_(source), batch=COPY_BATCH)


def gemm_rounds(torch: Any, *, m: int, n: int, k: int) -> list[float]:
    """ms per torch.mm(a, b.t(), out=c) of one bf16 shape, the same operands, per round."""
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    return rounds_of(torch, lambda: torch.mm(a, b.t(), out=c), batch=GEMM_BATCH)


def measure(torch: Any) -> dict[str, Any]:
    """Copy bandwidth and cuBLAS's bf16 rate on GPU 0: per-round values and their median and highest."""
    copy_ms = copy_rounds(torch)
    copy_tb_s = [2 * COPY_BYTES / (ms * 1e-3) / 1e12 for ms in copy_ms]   # read + written
    gemm = {}
    for m, n, k in GEMM_SHAPES:
        ms = gemm_rounds(torch, m=m, n=n, k=k)
        tflops = [2.0 * m * n * k / (value * 1e-3) / 1e12 for value in ms]
        gemm[f"{m}x{n}x{k}"] = {"ms": ms, "tflops": tflops, "median_tflops": statistics.median(tflops),
                                "max_tflops": max(tflops)}
    return {"copy": {"bytes": COPY_BYTES, "ms": copy_ms, "tb_s": copy_tb_s, "median_tb_s": statistics.median(copy_tb_s),
                     "max_tb_s": max(copy_tb_s)},
            "gemm": gemm}


def proposed(found: dict[str, Any]) -> dict[str, float]:
    """The ceilings to declare: the highest copy round and the highest cuBLAS round of any shape."""
    return {"copy_tb_s": round(found["copy"]["max_tb_s"], 2),
            "tflops": round(max(item["max_tflops"] for item in found["gemm"].values()), 1)}


def render_markdown(results: dict[str, Any]) -> str:
    """The measured ceilings as a short page."""
    copy, ceilings = results["copy"], results["proposed"]
    lines = [f"# Measured ceilings: {results['gpu']} ({results['device']})", "",
             f"torch {results['torch']}, git {results['git_rev']}, {results['date']}. {results['method']}", "",
             "| what | median | highest round |", "|---|---|---|",
             f"| device-to-device copy, {COPY_BYTES >> 30} GiB (read + written) | {copy['median_tb_s']:.2f} TB/s | "
             f"{copy['max_tb_s']:.2f} TB/s |"]
    for shape, item in results["gemm"].items():
        lines.append(f"| torch.mm bf16 {shape} (warm) | {item['median_tflops']:.1f} TFLOP/s | "
                     f"{item['max_tflops']:.1f} TFLOP/s |")
    lines += ["", f"Proposed for params.yaml `devices.{results['device']}.ceilings`: copy_tb_s "
              f"{ceilings['copy_tb_s']}, tflops {ceilings['tflops']}.",
              f"nvidia-smi (SM clock, power, limit, temperature) before: {results['smi_before']}; after: "
              f"{results['smi_after']}.", ""]
    return "\n".join(lines)


def main() -> None:
    """Measure, print and write the ceilings of GPU 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    import torch

    from tunetable.kernels.families.devices import recognise
    from tunetable.params import device_specs, load_params

    props = torch.cuda.get_device_properties(0)
    device = recognise(name=props.name, sm_count=props.multi_processor_count, memory_bytes=props.total_memory,
                       devices=device_specs(load_params(REPO / "params.yaml"))) or "unrecognised"
    before = smi()
    found = measure(torch)
    results = {"gpu": props.name, "device": device, "torch": torch.__version__,
               "git_rev": os.environ.get("TUNETABLE_GIT_REV", "unknown"),
               "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "method": f"CUDA events around a batch, {ROUNDS} rounds after a warm-up batch; copy: "
                         f"{COPY_BATCH} copies of {COPY_BYTES >> 30} GiB a batch; gemm: {GEMM_BATCH} torch.mm a batch, "
                         "the same operands (warm). Clocks and power only read.",
               **found, "proposed": proposed(found), "smi_before": before, "smi_after": smi()}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"device_ceilings.{device}.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    text = render_markdown(results)
    atomic_write_text(args.out / f"device_ceilings.{device}.md", text)
    print(text)


if __name__ == "__main__":
    main()
