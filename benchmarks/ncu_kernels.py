"""Hardware counters of our kernels beside cuBLAS's at one shape: where a k-loop waits (H200, Nsight Compute).

Two steps. On the GPU machine, under ``ncu --profile-from-start off``, ``launch`` runs each contender
(``cublas``, or ``FAMILY:NAME=V,...`` through ``tunetable.kernels.gemm_with``) at each shape: two warm-up
calls, then one call inside cudaProfilerStart / cudaProfilerStop, so ncu profiles that call's kernels only:

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... -o OUT/ncu \\
        python3 benchmarks/ncu_kernels.py launch --shape 512x4096x4096 --contender cublas \\
        --contender gemm_wgmma:BLOCK_M=128,BLOCK_N=128,...
    ncu --import OUT/ncu.ncu-rep --csv --page details > OUT/ncu.csv

Then ``report`` sets the profiled kernels side by side, one column each in launch order, one row per
(section, metric) that ncu reported, and writes <out>.md and <out>.json:

    python3 benchmarks/ncu_kernels.py report OUT/ncu.csv --labels OUT/ncu_labels.json --out benchmarks/results/ncu_mid

``launch`` writes the contenders' labels in launch order to --labels, so the report names its columns.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402

WARMUP_CALLS = 2


class NcuFileError(Exception):
    """An ncu CSV that cannot be read as a details page; the message names the file and the line."""


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxNxK' -> (M, N, K)."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"shape must be MxNxK, got {text!r}")
    m, n, k = (int(part) for part in parts)
    return m, n, k


def parse_contender(text: str) -> tuple[str, dict[str, int] | None]:
    """'cublas' -> ('cublas', None); 'FAMILY:NAME=V,...' -> (family, lower-case tunables)."""
    if text == "cublas":
        return "cublas", None
    family, _, params = text.partition(":")
    tunables: dict[str, int] = {}
    for item in params.split(","):
        name, _, value = item.partition("=")
        if not name or not value.isdigit():
            raise argparse.ArgumentTypeError(f"contender {text!r}: '{item}' is not NAME=INTEGER")
        tunables[name.strip().lower()] = int(value)
    return family, tunables


def launch(*, shapes: list[tuple[int, int, int]], contenders: list[str], labels_path: Path) -> None:
    """Each contender at each shape: warm-up calls, then one call inside the profiler range."""
    import torch  # the GPU machine's; imported here so that `report` runs anywhere

    import tunetable.kernels as runtime

    labels = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for text in contenders:
            family, tunables = parse_contender(text)
            if tunables is None:
                call = lambda: torch.mm(a, b.t())  # noqa: E731
            else:
                call = lambda: runtime.gemm_with(tunables, a, b, family=family)  # noqa: E731
            for _ in range(WARMUP_CALLS):
                call()
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            labels.append(f"{m}x{n}x{k} {text}")
            print(f"profiled {labels[-1]}", file=sys.stderr)
    atomic_write_text(labels_path, json.dumps(labels, indent=1) + "\n")


def read_details(*, path: Path) -> dict[str, dict[str, Any]]:
    """ncu's details page: per profiled kernel (its ID), its name and {'section / metric [unit]': value}."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NcuFileError(f"{path}: not readable: {exc}") from None
    lines = [line for line in text.splitlines() if line.startswith('"')]  # ncu's own log lines are not quoted
    rows = list(csv.DictReader(lines))
    needed = {"ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"}
    if not rows or not needed <= set(rows[0]):
        raise NcuFileError(f"{path}: no details page (columns {sorted(needed)} expected)")
    kernels: dict[str, dict[str, Any]] = {}
    for row in rows:
        kernel = kernels.setdefault(row["ID"], {"name": row["Kernel Name"], "metrics": {}})
        if not row["Metric Name"]:
            continue  # a rule's advice row (Rule Name, Rule Description), not a measurement
        unit = f" [{row['Metric Unit']}]" if row["Metric Unit"] else ""
        kernel["metrics"][f"{row['Section Name']} / {row['Metric Name']}{unit}"] = row["Metric Value"]
    return kernels


def side_by_side(*, kernels: dict[str, dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    """Columns in launch order, named by the labels where their count matches the kernels', else by kernel name."""
    ids = sorted(kernels, key=int)
    names = labels if len(labels) == len(ids) else [kernels[i]["name"][:40] for i in ids]
    metrics: list[str] = []
    for kernel_id in ids:
        metrics += [name for name in kernels[kernel_id]["metrics"] if name not in metrics]
    rows = [{"metric": name, "values": [kernels[i]["metrics"].get(name, "") for i in ids]} for name in metrics]
    return {"columns": names, "kernels": [kernels[i]["name"] for i in ids], "rows": rows}


def render_markdown(*, table: dict[str, Any], source: Path) -> str:
    """The side-by-side table as Markdown: columns numbered in launch order, their contenders listed below."""
    numbers = [str(index) for index in range(1, len(table["columns"]) + 1)]
    out = [f"# Nsight Compute counters, side by side ({source.name})", "",
           "| metric | " + " | ".join(numbers) + " |",
           "|---|" + "---:|" * len(numbers)]
    out += ["| " + row["metric"] + " | " + " | ".join(row["values"]) + " |" for row in table["rows"]]
    out += ["", "Columns:", ""]
    out += [f"{number}. {column} (kernel `{kernel}`)"
            for number, column, kernel in zip(numbers, table["columns"], table["kernels"])]
    return "\n".join(out) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The two steps' command line (a benchmarks/probes/ncu/*.txt line is `launch`'s arguments but --labels)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    run = steps.add_parser("launch", help="run the contenders (under ncu)")
    run.add_argument("--shape", type=parse_shape, action="append", required=True)
    run.add_argument("--contender", action="append", required=True, help="cublas or FAMILY:NAME=V,...")
    run.add_argument("--labels", type=Path, required=True, help="where to write the contenders' labels")
    report = steps.add_parser("report", help="the profiled kernels side by side")
    report.add_argument("csv", type=Path)
    report.add_argument("--labels", type=Path)
    report.add_argument("--out", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Launch contenders under ncu, or report an ncu CSV side by side."""
    args = build_parser().parse_args(argv)
    if args.step == "launch":
        for text in args.contender:
            parse_contender(text)  # a bad contender fails before any launch
        launch(shapes=args.shape, contenders=args.contender, labels_path=args.labels)
        return 0
    try:
        kernels = read_details(path=args.csv)
        labels = json.loads(args.labels.read_text(encoding="utf-8")) if args.labels else []
    except (NcuFileError, OSError, json.JSONDecodeError) as exc:
        print(f"ncu_kernels: {exc}", file=sys.stderr)
        return 2
    table = side_by_side(kernels=kernels, labels=labels)
    markdown = render_markdown(table=table, source=args.csv)
    atomic_write_text(args.out.with_suffix(".md"), markdown)
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(table, indent=1) + "\n")
    print(markdown)
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
