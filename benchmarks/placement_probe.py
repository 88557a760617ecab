"""Does where the operands live move a kernel's time? One shape, several operand placements, one process.

On an H100 (2026-12-07, benchmarks/probes/gemm_wgmma_v20_split_rows.txt), the same gemm_wgmma configuration at
512 x 4096 x 14336 ran 79 us in two processes and 95-99 us in two others, steady within each (IQR about 1 us),
the SM clock at 1980 MHz throughout, while cuBLAS read 77.0 us in all four. Something a process holds moves our
kernel and not cuBLAS. This probe asks whether it is the operands' memory: per shape it allocates GROUPS sets of
operands (each group its own rotating (A, B, C) sets > 3x L2, as the bench uses), plus groups carved from one slab
at byte offsets, and times gemm() (the serving tables' choice), any ``--config`` and cuBLAS on every group in the
same interleaved rounds (the bench's cold-L2 timer). If the ratio to cuBLAS moves between groups of one process,
placement decides it; if every group of a process agrees and processes differ, something else does.
What it found (2026-12-07, benchmarks/notes_gemm_wgmma.md): in torch processes every placement agreed, all in the
slow state, and byte offsets within a 2 MiB page moved nothing; gemm_vs_cublas.py, which allocates each listed
shape afresh, then showed both states within one process.

Run on the GPU machine (torch, pycuda), twice to see two processes:
    python benchmarks/placement_probe.py --out $OUT --tag p1 [--shapes 512x4096x14336 ...] [--config FAMILY:K=V,...]
Writes placement_probe_<tag>.json and .md under --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import tunetable.kernels  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.kernels.runtime import decide  # noqa: E402
from tunetable.kernels.runtime.launch import runtime  # noqa: E402
from tunetable.bench.live import sample_stats  # noqa: E402
from tunetable.kernels.runtime.timing import ColdL2Timer  # noqa: E402
from runtime_gemm import operand_sets, relative_error, timed  # noqa: E402

DEFAULT_SHAPES = ((512, 4096, 14336), (256, 4096, 14336), (512, 4096, 4096), (1024, 14336, 4096),
                  (256, 6144, 4096), (4096, 8192, 8192))
FRESH_GROUPS = 6
SLAB_OFFSETS = (0, 64 << 10, 1 << 20, (2 << 20) + (192 << 10))   # bytes: within a page, one MiB, past a 2 MiB page
PAGE = 2 << 20


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxNxK' as three positive ints."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected MxNxK with positive integers")
    return int(parts[0]), int(parts[1]), int(parts[2])


def parse_config(text: str) -> tuple[str, dict[str, int]]:
    """'family:K=V,K=V' as (family, tunables)."""
    family, _, body = text.partition(":")
    try:
        tunables = {key: int(value) for key, value in (item.split("=") for item in body.split(",") if item)}
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"config {text!r}: expected FAMILY:KEY=INT,...") from error
    if not family or not tunables:
        raise argparse.ArgumentTypeError(f"config {text!r}: expected FAMILY:KEY=INT,...")
    return family, tunables


def slab_group(torch: Any, *, m: int, n: int, k: int, n_sets: int, offset: int,
               gen: Any) -> list[tuple[Any, Any, Any]]:
    """``n_sets`` (A, B) pairs carved from one slab (their views hold it), each starting ``offset`` bytes past a
    2 MiB boundary; C apart."""
    a_bytes, b_bytes = m * k * 2, n * k * 2
    stride = -(-(a_bytes + b_bytes + offset) // PAGE) * PAGE + PAGE
    slab = torch.empty(stride * n_sets + PAGE, device="cuda", dtype=torch.uint8)
    base = (-slab.data_ptr()) % PAGE          # the slab's first 2 MiB boundary
    sets = []
    for index in range(n_sets):
        start = base + index * stride + offset
        a = slab[start:start + a_bytes].view(torch.bfloat16).view(m, k)
        b = slab[start + a_bytes:start + a_bytes + b_bytes].view(torch.bfloat16).view(n, k)
        a.copy_(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen))
        b.copy_(torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen))
        sets.append((a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)))
    return sets


def contenders_of(torch: Any, sets: list[tuple[Any, Any, Any]],
                  configs: list[tuple[str, dict[str, int]]]) -> dict[str, Callable[[int], Any]]:
    """gemm(), each extra configuration and cuBLAS on one group's sets."""
    found: dict[str, Callable[[int], Any]] = {
        "gemm": lambda i: tunetable.kernels.gemm(sets[i][0], sets[i][1], out=sets[i][2])}
    for index, (family, tunables) in enumerate(configs):
        found[f"config{index}"] = (lambda i, family=family, tunables=tunables: tunetable.kernels.gemm_with(
            tunables, sets[i][0], sets[i][1], out=sets[i][2], family=family))
    found["cublas"] = lambda i: torch.mm(sets[i][0], sets[i][1].t(), out=sets[i][2])
    return found


def placements(torch: Any, *, m: int, n: int, k: int, l2_bytes: int) -> dict[str, list[tuple[Any, Any, Any]]]:
    """Every group's rotating sets by name: fresh allocations (runtime_gemm's), then carved from a slab per offset."""
    groups = {f"fresh{index}": operand_sets(torch, m=m, n=n, k=k, l2_bytes=l2_bytes) for index in range(FRESH_GROUPS)}
    n_sets = len(groups["fresh0"])
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    for offset in SLAB_OFFSETS:
        groups[f"slab+{offset}"] = slab_group(torch, m=m, n=n, k=k, n_sets=n_sets, offset=offset, gen=gen)
    return groups


def probe_shape(torch: Any, *, timer: ColdL2Timer, m: int, n: int, k: int, rounds: int, l2_bytes: int, device: str,
                configs: list[tuple[str, dict[str, int]]]) -> dict[str, Any]:
    """Every group timed in the same interleaved rounds: per group, each contender's median and x cuBLAS."""
    groups = placements(torch, m=m, n=n, k=k, l2_bytes=l2_bytes)
    n_sets = len(groups["fresh0"])
    contenders, errors = {}, {}
    for group, sets in groups.items():
        a0, b0, c0 = sets[0]
        reference = a0.float() @ b0.float().t()
        for name, run in contenders_of(torch, sets, configs).items():
            contenders[f"{group}/{name}"] = run
            if name != "cublas":
                c0.fill_(float("nan"))
                run(0)
                errors[f"{group}/{name}"] = relative_error(c0, reference)
        del reference
    medians, samples, _ = timed(timer, contenders=contenders, rounds=rounds, n_sets=n_sets)
    rows = []
    for group, sets in groups.items():
        names = [name for name in contenders if name.startswith(f"{group}/")]
        row = {"group": group, "a_ptr_mod_2mib": sets[0][0].data_ptr() % PAGE,
               "b_ptr_mod_2mib": sets[0][1].data_ptr() % PAGE}
        for full in names:
            name = full.split("/", 1)[1]
            row[f"{name}_us"] = medians[full] * 1e3
            row[f"{name}_iqr_us"] = sample_stats(samples[full])["iqr_ms"] * 1e3
        for full in names:
            name = full.split("/", 1)[1]
            if name != "cublas":
                row[f"{name}_vs_cublas"] = row["cublas_us"] / row[f"{name}_us"]
        rows.append(row)
    groups.clear()
    decision = decide.dispatcher(device=device).decide(m=m, n=n, k=k)
    return {"M": m, "N": n, "K": k, "n_sets": n_sets, "kernel": decision.entry.kernel,
            "config_id": decision.entry.config_id, "max_rel_err": max(errors.values()), "groups": rows}


def spread(rows: list[dict[str, Any]], key: str) -> float:
    """Slowest over fastest of one column across groups."""
    values = [row[key] for row in rows]
    return max(values) / min(values)


def render(result: dict[str, Any]) -> str:
    """The probe's markdown: per shape, one line per group."""
    lines = [f"# Placement probe ({result['tag']})", "",
             f"Device: {result['device']}, git {result['git_rev']}, {result['date']}. {result['method']}", ""]
    for shape in result["shapes"]:
        rows = shape["groups"]
        names = [key[:-3] for key in rows[0] if key.endswith("_us") and not key.endswith("_iqr_us")]
        lines += [f"## {shape['M']} x {shape['N']} x {shape['K']} (gemm: {shape['kernel']} {shape['config_id']}, "
                  f"{shape['n_sets']} sets a group, max rel err {shape['max_rel_err']:.1e})", "",
                  "slowest / fastest group: " + ", ".join(f"{name} {spread(rows, name + '_us'):.3f}"
                                                           for name in names), "",
                  "| group | A mod 2 MiB | B mod 2 MiB | " + " | ".join(f"{name} us" for name in names)
                  + " | " + " | ".join(f"{name} x cuBLAS" for name in names if name != "cublas") + " |",
                  "|---" * (3 + len(names) + len(names) - 1) + "|"]
        for row in rows:
            lines.append(f"| {row['group']} | {row['a_ptr_mod_2mib']} | {row['b_ptr_mod_2mib']} | "
                         + " | ".join(f"{row[name + '_us']:.1f}" for name in names) + " | "
                         + " | ".join(f"{row[name + '_vs_cublas']:.3f}" for name in names if name != "cublas")
                         + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    """Probe each shape; print and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_shape, nargs="+", default=list(DEFAULT_SHAPES))
    parser.add_argument("--config", type=parse_config, action="append", default=[],
                        help="an extra contender FAMILY:KEY=INT,... run through gemm_with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tag", default="run")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch

    warnings.simplefilter("ignore", decide.FallbackWarning)
    props = torch.cuda.get_device_properties(0)
    serving = runtime().table.device  # the primary context (torch's too); its tables' device
    import pycuda.driver as cuda  # with the runtime: the timer records pycuda events on the default stream

    timer = ColdL2Timer(cuda=cuda, stream=None)
    result: dict[str, Any] = {
        "tag": args.tag, "device": props.name, "tables_of": serving,
        "git_rev": os.environ.get("TUNETABLE_GIT_REV", "unknown"),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "rounds": args.rounds,
        "method": (f"per shape {FRESH_GROUPS} groups of fresh allocations and {len(SLAB_OFFSETS)} carved from one "
                   f"slab at offsets {list(SLAB_OFFSETS)} B past a 2 MiB boundary; each group rotating (A, B, C) "
                   "sets > 3x L2; every group's contenders in the same interleaved rounds (the bench's cold-L2 "
                   "timer), median of rounds"),
        "configs": [{"family": family, "tunables": tunables} for family, tunables in args.config], "shapes": []}
    args.out.mkdir(parents=True, exist_ok=True)
    for m, n, k in args.shapes:
        shape = probe_shape(torch, timer=timer, m=m, n=n, k=k, rounds=args.rounds, l2_bytes=props.L2_cache_size,
                            device=serving, configs=args.config)
        result["shapes"].append(shape)
        rows = shape["groups"]
        print(f"{m}x{n}x{k} {shape['kernel']} {shape['config_id']}: gemm x cuBLAS by group "
              + " ".join(f"{row['gemm_vs_cublas']:.3f}" for row in rows)
              + f" | gemm us {min(r['gemm_us'] for r in rows):.1f}-{max(r['gemm_us'] for r in rows):.1f}"
              + f" cuBLAS us {min(r['cublas_us'] for r in rows):.1f}-{max(r['cublas_us'] for r in rows):.1f}",
              flush=True)
        atomic_write_text(args.out / f"placement_probe_{args.tag}.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(args.out / f"placement_probe_{args.tag}.md", render(result))


if __name__ == "__main__":
    main()
