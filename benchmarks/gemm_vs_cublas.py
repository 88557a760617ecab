"""gemm_mma vs cuBLAS (torch.mm) on the H200 at 4096^3 and 8192^3, with one timing method for both.

Timing: random bf16 inputs; input/output sets rotated so that the bytes touched between two
uses of a set exceed 3x L2 (cold L2); CUDA events around batches of launches; every config and
cuBLAS interleaved round by round (clock drift hits all alike); median and IQR of the rounds.
Every config is verified against a float32 torch reference before its time counts.

Run on the GPU machine (needs torch, pycuda, nvcc; cuobjdump optional for SASS evidence):
    python benchmarks/gemm_vs_cublas.py [--shapes 4096 8192] [--rounds 15]
Writes benchmarks/results/gemm_vs_cublas.json and .md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels.families import FAMILIES  # noqa: E402
from pipeline.atomic import atomic_write_text  # noqa: E402
from pipeline.config import KernelConfig  # noqa: E402
from pipeline.grid import expand  # noqa: E402
from pipeline.params import table_spec  # noqa: E402

FAMILY = FAMILIES["gemm_mma"]
NVCC_FLAGS = ["-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v"]
L2_FACTOR = 3
MIN_BATCH = 8
VERIFY_RTOL = 2e-2


@dataclass(frozen=True)
class Compiled:
    """One compiled configuration with its ptxas resource report."""

    config: KernelConfig
    cubin: Path
    registers: int
    spill_bytes: int
    stack_bytes: int


def large_tile_configs(*, min_block_m: int) -> list[KernelConfig]:
    """Default-grid configurations meant for large shapes (BLOCK_M >= min_block_m, no split-K)."""
    # yaml.safe_load without the schema check: the GPU image has no jsonschema, and CI validates params.yaml.
    spec = table_spec(yaml.safe_load((REPO / "params.yaml").read_text()), "gemm_mma")
    kept = expand(spec).kept
    return [c for c in kept if c.as_dict()["BLOCK_M"] >= min_block_m and c.as_dict()["SPLIT_K"] == 1]


def compile_config(*, config: KernelConfig, source: Path, out_dir: Path) -> Compiled:
    """nvcc one configuration to cubin; parse the main kernel's ptxas line."""
    cubin = out_dir / f"{config.id}.cubin"
    defines = [f"-D{k}={v}" for k, v in config.defines().items()]
    proc = subprocess.run(
        ["nvcc", *NVCC_FLAGS, *defines, "-o", str(cubin), str(source)],
        check=True, capture_output=True, text=True,
    )
    report = proc.stdout + proc.stderr
    section = report[report.index("for gemm_mma\n"):] if "for gemm_mma\n" in report else report
    regs = int(re.search(r"Used (\d+) registers", section).group(1))
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", section)
    return Compiled(config, cubin, regs, int(frame.group(2)) + int(frame.group(3)), int(frame.group(1)))


def sass_counts(*, cubin: Path) -> dict[str, int] | None:
    """Instruction counts in the main kernel's SASS (HMMA, LDSM, LDGSTS, local LDL/STL)."""
    if shutil.which("cuobjdump") is None:
        return None
    sass = subprocess.run(["cuobjdump", "--dump-sass", "--function", FAMILY.entry, str(cubin)],
                          check=True, capture_output=True, text=True).stdout
    return {op: len(re.findall(rf"\b{op}\b", sass)) for op in ("HMMA", "HGMMA", "LDSM", "LDGSTS", "LDL", "STL")}


def open_nvml() -> tuple[object | None, str | None]:
    """NVML handle of device 0 and the driver version, or (None, None) without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlSystemGetDriverVersion()
    except (ImportError, OSError) as exc:
        print(f"NVML unavailable: {exc}", file=sys.stderr)
        return None, None
    except Exception as exc:  # pynvml.NVMLError has no importable base before the import succeeds
        print(f"NVML failed: {exc}", file=sys.stderr)
        return None, None


def median_iqr(samples: list[float]) -> tuple[float, float]:
    """Median and inter-quartile range."""
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    return float(med), float(q3 - q1)


def tflops(*, M: int, N: int, K: int, ms: float) -> float:
    """2MNK over the time, in TFLOP/s."""
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def main() -> None:
    """Compile, verify, time interleaved, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup-s", type=float, default=3.0, help="seconds of interleaved warm-up per shape")
    parser.add_argument("--min-block-m", type=int, default=64)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--source", type=Path, default=REPO / FAMILY.source,
                        help="kernel source (an earlier version from benchmarks/versions/ for comparisons)")
    args = parser.parse_args()

    import torch
    import pycuda.driver as cuda
    from rich.console import Console
    from rich.table import Table

    console = Console()
    torch.cuda.init()
    cuda.init()
    context = cuda.Device(0).retain_primary_context()
    context.push()
    props = torch.cuda.get_device_properties(0)
    l2_bytes = props.L2_cache_size
    nvml, driver = open_nvml()
    if nvml is None:
        console.print("[yellow]no NVML telemetry (pynvml missing or failing): clocks and power not logged")

    def telemetry() -> tuple[int | None, float | None]:
        if nvml is None:
            return None, None
        import pynvml

        return (pynvml.nvmlDeviceGetClockInfo(nvml, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetPowerUsage(nvml) / 1000.0)

    configs = large_tile_configs(min_block_m=args.min_block_m)
    build_dir = Path(tempfile.mkdtemp(prefix="gemm_bench_"))
    with ThreadPoolExecutor(max_workers=16) as pool:
        compiled = list(pool.map(lambda c: compile_config(config=c, source=args.source, out_dir=build_dir), configs))
    functions = {}
    for item in compiled:
        module = cuda.module_from_file(str(item.cubin))
        fn = module.get_function(FAMILY.entry)
        fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         FAMILY.smem_bytes(item.config.defines()))
        functions[item.config.id] = (module, fn)

    results = {"source": str(args.source.resolve().relative_to(REPO)) if args.source.resolve().is_relative_to(REPO)
               else str(args.source), "device": props.name, "driver": driver, "sms": props.multi_processor_count,
               "l2_bytes": l2_bytes, "torch": torch.__version__, "rounds": args.rounds, "warmup_s": args.warmup_s,
               "method": "random bf16 inputs, rotating sets > 3x L2, CUDA events around batches, "
                         "configs and cuBLAS interleaved per round, median of rounds",
               "shapes": []}
    for size in args.shapes:
        M = N = K = size
        set_bytes = (M * K + N * K + M * N) * 2
        n_sets = max(2, -(-L2_FACTOR * l2_bytes // set_bytes) + 1)
        batch = n_sets * max(1, -(-MIN_BATCH // n_sets))
        gen = torch.Generator(device="cuda").manual_seed(size)
        sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen),
                 torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen),
                 torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(n_sets)]
        workspace = torch.empty(1, device="cuda", dtype=torch.float32)
        reference = sets[0][0].float() @ sets[0][1].float().t()

        def ours(fn, geometry):
            def launch(i: int) -> None:
                a, b, c = sets[i]
                fn(np.uintp(a.data_ptr()), np.uintp(b.data_ptr()), np.uintp(c.data_ptr()),
                   np.uintp(workspace.data_ptr()), np.int32(M), np.int32(N), np.int32(K),
                   block=geometry.block, grid=geometry.grid, shared=geometry.smem_bytes)
            return launch

        def cublas(i: int) -> None:
            a, b, c = sets[i]
            torch.mm(a, b.t(), out=c)

        candidates = {"cublas": cublas}
        verify = {}
        for item in compiled:
            launch = ours(functions[item.config.id][1], FAMILY.launch(item.config.defines(), M, N, K))
            sets[0][2].fill_(float("nan"))
            launch(0)
            torch.cuda.synchronize()
            out = sets[0][2].float()
            rel = float((out - reference).norm() / reference.norm()) if not out.isnan().any() else float("nan")
            verify[item.config.id] = rel
            if rel <= VERIFY_RTOL:
                candidates[item.config.id] = launch
            else:
                console.print(f"[red]{item.config.id} {item.config.label()} fails verification: rel={rel}")

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = {name: [] for name in candidates}
        clocks, powers = [], []
        # Warm-up until the card sits at its steady power/clock state (it starts cool and fast).
        warm_start = time.perf_counter()
        while time.perf_counter() - warm_start < args.warmup_s:
            for name, launch in candidates.items():
                for i in range(batch):
                    launch(i % n_sets)
            torch.cuda.synchronize()
        for _ in range(args.rounds):
            for name, launch in candidates.items():
                start.record()
                for i in range(batch):
                    launch(i % n_sets)
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end) / batch)
            clock, power = telemetry()
            clocks.append(clock)
            powers.append(power)

        rows = []
        for name, values in samples.items():
            med, iqr = median_iqr(values)
            item = next((c for c in compiled if c.config.id == name), None)
            rows.append({
                "name": name,
                "params": item.config.as_dict() if item else None,
                "median_ms": med, "iqr_ms": iqr, "tflops": tflops(M=M, N=N, K=K, ms=med),
                "samples_ms": values,
                "rel_err": verify.get(name),
                "registers": item.registers if item else None,
                "spill_bytes": item.spill_bytes if item else None,
            })
        rows.sort(key=lambda r: (r["median_ms"], r["name"]))
        cublas_row = next(r for r in rows if r["name"] == "cublas")
        best = next(r for r in rows if r["name"] != "cublas")
        best_item = next(c for c in compiled if c.config.id == best["name"])
        results["shapes"].append({
            "M": M, "N": N, "K": K, "n_sets": n_sets, "batch": batch,
            "cublas_ms": cublas_row["median_ms"], "cublas_tflops": cublas_row["tflops"],
            "best": best["name"], "best_params": best["params"], "best_ms": best["median_ms"],
            "best_tflops": best["tflops"], "ratio_to_cublas": cublas_row["median_ms"] / best["median_ms"],
            "best_sass": sass_counts(cubin=best_item.cubin),
            "sm_clock_mhz": clocks, "power_w": powers, "rows": rows,
        })
        del sets, reference
        torch.cuda.empty_cache()

    context.pop()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "gemm_vs_cublas.json", json.dumps(results, indent=2, sort_keys=True) + "\n")

    lines = ["# gemm_mma vs cuBLAS (bf16, C = A·Bᵀ)", "",
             f"Device: {results['device']}, driver {driver}, torch {results['torch']}. {results['method']}.", "",
             "| shape | cuBLAS ms | cuBLAS TFLOP/s | best gemm_mma | ms | TFLOP/s | % of cuBLAS | SM MHz (min-max) | W (max) |",
             "|---|---|---|---|---|---|---|---|---|"]
    table = Table(title="gemm_mma vs cuBLAS")
    for col in ("shape", "cuBLAS TFLOP/s", "best config", "TFLOP/s", "% of cuBLAS"):
        table.add_column(col)
    for shape in results["shapes"]:
        label = f"{shape['M']}x{shape['N']}x{shape['K']}"
        best_label = next(c.config.label() for c in compiled if c.config.id == shape["best"])
        clocks = [c for c in shape["sm_clock_mhz"] if c is not None]
        powers = [p for p in shape["power_w"] if p is not None]
        clock_txt = f"{min(clocks)}-{max(clocks)}" if clocks else "n/a"
        power_txt = f"{max(powers):.0f}" if powers else "n/a"
        lines.append(f"| {label} | {shape['cublas_ms']:.4f} | {shape['cublas_tflops']:.1f} | {shape['best']} "
                     f"({best_label}) | {shape['best_ms']:.4f} | {shape['best_tflops']:.1f} | "
                     f"{100 * shape['ratio_to_cublas']:.1f} | {clock_txt} | {power_txt} |")
        table.add_row(label, f"{shape['cublas_tflops']:.1f}", best_label, f"{shape['best_tflops']:.1f}",
                      f"{100 * shape['ratio_to_cublas']:.1f} %")
    lines += ["", "Every configuration, per shape (median ms, TFLOP/s):", ""]
    for shape in results["shapes"]:
        lines.append(f"## {shape['M']}x{shape['N']}x{shape['K']}")
        lines.append("")
        lines.append("| config | params | median ms | IQR ms | TFLOP/s | regs | spills |")
        lines.append("|---|---|---|---|---|---|---|")
        for row in shape["rows"]:
            params = "/".join(f"{k}={v}" for k, v in (row["params"] or {}).items()) or "torch.mm"
            lines.append(f"| {row['name']} | {params} | {row['median_ms']:.4f} | {row['iqr_ms']:.4f} | "
                         f"{row['tflops']:.1f} | {row['registers'] or ''} | {row['spill_bytes'] if row['spill_bytes'] is not None else ''} |")
        lines.append("")
    atomic_write_text(args.out / "gemm_vs_cublas.md", "\n".join(lines) + "\n")
    console.print(table)


if __name__ == "__main__":
    main()
