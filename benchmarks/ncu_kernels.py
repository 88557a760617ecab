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

A third step, ``source``, reads the source page of the same report, each kernel's SASS (``.csv`` or ``.csv.gz``),
and sums, per kernel in file order, the warp-level instructions executed: in all, per HGMMA, per opcode family
(the mnemonic before its first '.', predicate dropped), and the warp stall samples per opcode family:

    ncu --import OUT/ncu.ncu-rep --csv --page source --print-source sass > OUT/ncu_source.csv
    python3 benchmarks/ncu_kernels.py source OUT/ncu_source.csv --labels OUT/ncu_labels.json \
        --out benchmarks/results/ncu_sass_mid_source
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.sass import opcode  # noqa: E402

WARMUP_CALLS = 2
SOURCE_COLUMNS = ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)")
TOP_EXECUTED = 12
TOP_STALLED = 8
SASS_FIGURES = (("instructions executed (warp-level)", "instructions_executed"),
                ("static instructions", "static_instructions"),
                ("HGMMA executed", "hgmma_executed"),
                ("instructions executed per HGMMA", "instructions_per_hgmma"),
                ("R2UR executed", "r2ur_executed"),
                ("warp stall samples", "stall_samples"))


class NcuFileError(Exception):
    """An ncu CSV that cannot be read as a details or source page; the message names the file and the line."""


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


def read_text_lines(*, path: Path) -> list[str]:
    """A CSV's lines, gunzipped where the name ends in .gz."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                return handle.read().splitlines()
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except (OSError, EOFError) as exc:
        raise NcuFileError(f"{path}: not readable: {exc}") from None


def read_source(*, path: Path) -> list[dict[str, Any]]:
    """ncu's source page: per kernel in file order, its name and its SASS rows (text, executed, stall samples)."""
    kernels: list[dict[str, Any]] = []
    header: list[str] | None = None
    number = 0
    for number, line in enumerate(read_text_lines(path=path), start=1):
        if not line.startswith('"'):
            continue  # ncu's own log lines are not quoted
        fields = next(csv.reader([line]))
        if fields[0] == "Kernel Name":
            if kernels and header is None:
                raise NcuFileError(f"{path}: line {number}: kernel {kernels[-1]['name']!r} has no \"Address\" header")
            kernels.append({"name": fields[1] if len(fields) > 1 else "", "rows": []})
            header = None
        elif not kernels:
            raise NcuFileError(f'{path}: line {number}: no "Kernel Name" line before it; not a source page')
        elif header is None:
            missing = [name for name in ("Address", *SOURCE_COLUMNS) if name not in fields]
            if fields[0] != "Address" or missing:
                raise NcuFileError(f"{path}: line {number}: kernel {kernels[-1]['name']!r} has no \"Address\" "
                                   f"header with columns {list(SOURCE_COLUMNS)}")
            header = fields
        else:
            kernels[-1]["rows"].append(source_row(fields=fields, header=header, where=f"{path}: line {number}"))
    if not kernels:
        raise NcuFileError(f'{path}: line {number + 1}: no "Kernel Name" line; not a source page')
    if header is None:
        raise NcuFileError(f"{path}: line {number + 1}: kernel {kernels[-1]['name']!r} has no \"Address\" header")
    return kernels


def source_row(*, fields: list[str], header: list[str], where: str) -> dict[str, Any]:
    """One SASS row: its instruction text and its integer counts; `where` (file and line) names a bad one."""
    if len(fields) != len(header):
        raise NcuFileError(f"{where}: {len(fields)} fields where the header has {len(header)}")
    row = dict(zip(header, fields))
    counts = {}
    for column in SOURCE_COLUMNS[1:]:
        if not (row[column].isascii() and row[column].isdigit()):
            raise NcuFileError(f"{where}: {column} is {row[column]!r}, not an integer")
        counts[column] = int(row[column])
    return {"sass": row["Source"], "executed": counts["Instructions Executed"],
            "stalls": counts["Warp Stall Sampling (All Samples)"]}


def top_counts(*, counts: dict[str, int], top: int) -> list[list[Any]]:
    """The `top` largest non-zero counts as [name, count], largest first, ties by name."""
    ranked = sorted((item for item in counts.items() if item[1]), key=lambda item: (-item[1], item[0]))
    return [[name, count] for name, count in ranked[:top]]


def summarise_sass(*, kernel: dict[str, Any]) -> dict[str, Any]:
    """One kernel's SASS by what it executed: totals, instructions per HGMMA, opcode families, stalls by family."""
    executed: dict[str, int] = {}
    stalls: dict[str, int] = {}
    for row in kernel["rows"]:
        family = opcode(row["sass"])
        executed[family] = executed.get(family, 0) + row["executed"]
        stalls[family] = stalls.get(family, 0) + row["stalls"]
    total = sum(executed.values())
    hgmma = executed.get("HGMMA", 0)
    return {"name": kernel["name"], "instructions_executed": total, "static_instructions": len(kernel["rows"]),
            "hgmma_executed": hgmma, "instructions_per_hgmma": round(total / hgmma, 2) if hgmma else None,
            "r2ur_executed": executed.get("R2UR", 0), "stall_samples": sum(stalls.values()),
            "executed_by_opcode": top_counts(counts=executed, top=TOP_EXECUTED),
            "stalls_by_opcode": top_counts(counts=stalls, top=TOP_STALLED)}


def sass_summary(*, kernels: list[dict[str, Any]], labels: list[str], source: Path) -> dict[str, Any]:
    """Every kernel's summary in file order, named by the labels where their count matches, else by kernel name."""
    names = labels if len(labels) == len(kernels) else [kernel["name"][:40] for kernel in kernels]
    return {"source": source.name, "columns": names,
            "kernels": [summarise_sass(kernel=kernel) for kernel in kernels]}


def render_sass_markdown(*, summary: dict[str, Any]) -> str:
    """The SASS summary as Markdown: the figures one column per kernel, then each kernel's opcode families."""
    kernels = summary["kernels"]
    numbers = [str(index) for index in range(1, len(kernels) + 1)]
    out = [f"# SASS executed per kernel, by opcode family ({summary['source']})", "",
           "| figure | " + " | ".join(numbers) + " |",
           "|---|" + "---:|" * len(numbers)]
    for title, key in SASS_FIGURES:
        values = ["" if kernel[key] is None else str(kernel[key]) for kernel in kernels]
        out.append(f"| {title} | " + " | ".join(values) + " |")
    for title, key in ((f"Instructions executed by opcode family (top {TOP_EXECUTED})", "executed_by_opcode"),
                       (f"Warp stall samples by opcode family (top {TOP_STALLED})", "stalls_by_opcode")):
        out += ["", f"{title}:", ""]
        out += [f"{number}. " + ", ".join(f"{name} {count}" for name, count in kernel[key])
                for number, kernel in zip(numbers, kernels)]
    out += ["", "Columns:", ""]
    out += [f"{number}. {column} (kernel `{kernel['name']}`)"
            for number, column, kernel in zip(numbers, summary["columns"], kernels)]
    return "\n".join(out) + "\n"


def read_labels(*, path: Path | None) -> list[str]:
    """The labels `launch` wrote (a JSON list, one per profiled kernel in launch order); none without a path."""
    return json.loads(path.read_text(encoding="utf-8")) if path else []


def build_parser() -> argparse.ArgumentParser:
    """The three steps' command line (a benchmarks/probes/ncu/*.txt line is `launch`'s arguments but --labels)."""
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
    source = steps.add_parser("source", help="each profiled kernel's SASS by what it executed")
    source.add_argument("csv", type=Path, help="ncu's source page (--page source --print-source sass), .csv or .csv.gz")
    source.add_argument("--labels", type=Path)
    source.add_argument("--out", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Launch contenders under ncu, report an ncu CSV side by side, or summarise its kernels' SASS."""
    args = build_parser().parse_args(argv)
    if args.step == "launch":
        for text in args.contender:
            parse_contender(text)  # a bad contender fails before any launch
        launch(shapes=args.shape, contenders=args.contender, labels_path=args.labels)
        return 0
    try:
        if args.step == "source":
            table = sass_summary(kernels=read_source(path=args.csv), labels=read_labels(path=args.labels),
                                 source=args.csv)
        else:
            table = side_by_side(kernels=read_details(path=args.csv), labels=read_labels(path=args.labels))
    except (NcuFileError, OSError, json.JSONDecodeError) as exc:
        print(f"ncu_kernels: {exc}", file=sys.stderr)
        return 2
    if args.step == "source":
        markdown = render_sass_markdown(summary=table)
    else:
        markdown = render_markdown(table=table, source=args.csv)
    atomic_write_text(args.out.with_suffix(".md"), markdown)
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(table, indent=1) + "\n")
    print(markdown)
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
