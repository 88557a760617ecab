"""Probe runs side by side: every configuration's time as a ratio to the same run's cuBLAS.

Each run is one `gemm_vs_cublas.py` JSON (one line of a probe file, `scripts/device_probe.sh`).
Runs made minutes apart drift with clocks and power, so they are compared by the ratio to the
cuBLAS rows timed in the same run (interleaved round by round there). Four views: the best
configuration per shape and run; each configuration that two or more runs share (an A/B of a `-D`
switch or another source), as the geomean over their common shapes of its ratio, relative to the
first run that has it; the same by kernel time, beside cuBLAS's own row as the drift between the
runs (one bimodal cuBLAS row moves every ratio of its shape); and every (shape, configuration) cell.

    python benchmarks/compare_probes.py RUN.json [RUN.json ...] [--out DIR/compare]

Prints the tables and writes <out>.md and <out>.json (default: beside the first run).
`scripts/device_probe.sh` runs it over the probe lines it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.stats import geomean  # noqa: E402

CUBLAS = "cublas"


class ProbeFileError(Exception):
    """A run file that is not a gemm_vs_cublas.py report; the message names the file and the place."""


def _shape_name(entry: dict[str, Any]) -> str:
    """'MxNxK' of one timed entry."""
    return f"{entry['M']}x{entry['N']}x{entry['K']}"


def load_run(*, path: Path) -> dict[str, Any]:
    """One gemm_vs_cublas.py report: its name (the file stem), labels, per-shape medians (ms), ratios to cuBLAS."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ProbeFileError(f"{path}: not readable as JSON: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("timed"), list):
        raise ProbeFileError(f"{path}: no 'timed' list (not a gemm_vs_cublas.py report)")
    labels = dict(report.get("configs") or {})
    ratios: dict[str, dict[str, float]] = {}
    medians: dict[str, dict[str, float]] = {}
    for index, entry in enumerate(report["timed"]):
        try:
            shape = _shape_name(entry)
            rows = {row["name"]: float(row["median_ms"]) for row in entry["rows"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeFileError(f"{path}: timed[{index}]: missing or bad {exc}") from None
        if CUBLAS not in rows:
            raise ProbeFileError(f"{path}: timed[{index}] ({shape}): no cuBLAS row to take ratios against")
        medians[shape] = rows
        # cuBLAS time over the configuration's: > 1 is faster than cuBLAS.
        ratios[shape] = {name: rows[CUBLAS] / ms for name, ms in rows.items() if name != CUBLAS and ms > 0}
        summary = entry.get("summary") or {}
        if summary.get("best") and summary.get("best_label"):
            labels.setdefault(summary["best"], summary["best_label"])
    return {"name": path.stem, "path": str(path), "family": report.get("family"), "source": report.get("source"),
            "nvcc_flags": list(report.get("nvcc_flags") or []), "labels": labels, "medians": medians,
            "ratios": ratios}


def _shape_order(shape: str) -> list[int]:
    """Sort key of 'MxNxK': numerically by M, N, K."""
    return [int(part) for part in shape.split("x")]


def best_per_shape(*, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per shape (any run's), each run's best configuration and its ratio (None where the run lacks the shape)."""
    by_run = [run["ratios"] for run in runs]
    shapes = sorted({shape for table in by_run for shape in table}, key=_shape_order)
    rows = []
    for shape in shapes:
        cells = []
        for table in by_run:
            found = table.get(shape) or {}
            best = max(found, key=lambda name: (found[name], name), default=None)
            cells.append(None if best is None else {"config": best, "ratio": found[best]})
        rows.append({"shape": shape, "runs": cells})
    return rows


def shared_configs(*, runs: list[dict[str, Any]], key: str = "ratios") -> list[dict[str, Any]]:
    """Each configuration timed by two or more runs: per run, the geomean of `key` (ratios, or medians in ms, where
    cuBLAS is a row too) over the shapes they all timed it on."""
    by_run = [run[key] for run in runs]
    names = sorted({name for table in by_run for found in table.values() for name in found})
    rows = []
    for name in names:
        having = [i for i, table in enumerate(by_run) if any(name in found for found in table.values())]
        if len(having) < 2:
            continue
        common = sorted(set.intersection(*({s for s, found in by_run[i].items() if name in found} for i in having)),
                        key=_shape_order)
        if not common:
            continue
        geomeans = [geomean(by_run[i][s][name] for s in common) if i in having else None for i in range(len(runs))]
        label = next((run["labels"][name] for run in runs if name in run["labels"]), "")
        rows.append({"config": name, "label": label, "shapes": common, "geomean": geomeans})
    return rows


def _ratio_text(value: float | None) -> str:
    """A ratio to three places, or a dash."""
    return "—" if value is None else f"{value:.3f}"


def _changes_text(values: list[float | None], *, places: int = 3) -> list[str]:
    """Each value, after the first present one with its change against that one: '0.957 (+1.2 %)'."""
    first = next(i for i, value in enumerate(values) if value is not None)
    return ["—" if value is None else f"{value:.{places}f}" if i == first
            else f"{value:.{places}f} ({100.0 * (value / values[first] - 1.0):+.1f} %)"
            for i, value in enumerate(values)]


def render_tables(*, runs: list[dict[str, Any]], best: list[dict[str, Any]], shared: list[dict[str, Any]],
                  shared_ms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The four views as {title, header, rows} of strings (rendered as markdown or on the terminal)."""
    names = [run["name"] for run in runs]
    best_view = {"title": "Best configuration per shape (x cuBLAS of the same run)", "header": ["shape", *names],
                 "rows": [[row["shape"], *("—" if cell is None else f"{cell['ratio']:.3f} {cell['config']}"
                                           for cell in row["runs"])] for row in best]}
    shared_rows = [[row["config"], row["label"], str(len(row["shapes"])), *_changes_text(row["geomean"])]
                   for row in shared]
    shared_view = {"title": "Configurations in two or more runs: geomean x cuBLAS over their common shapes "
                            "(change against the first run that has it)",
                   "header": ["config", "params", "shapes", *names], "rows": shared_rows}
    # Kernel time itself: runs a minute apart share a clock state more often than a cuBLAS row is steady on every
    # shape (one bimodal cuBLAS row moves every ratio of its shape); cuBLAS's own row shows the drift between runs.
    shared_ms_view = {"title": "Configurations in two or more runs: geomean kernel time (us) over their common shapes "
                               "(change against the first run that has it; cublas: the baseline's drift)",
                      "header": ["config", "params", "shapes", *names],
                      "rows": [[row["config"], row["label"], str(len(row["shapes"])),
                                *_changes_text([None if v is None else 1000.0 * v for v in row["geomean"]], places=2)]
                               for row in shared_ms]}
    by_run = [run["ratios"] for run in runs]
    cells = []
    for shape in sorted({s for table in by_run for s in table}, key=_shape_order):
        for name in sorted({n for table in by_run for n in table.get(shape, {})}):
            cells.append([shape, name, *(_ratio_text(table.get(shape, {}).get(name)) for table in by_run)])
    detail = {"title": "Every shape and configuration (x cuBLAS of the same run)",
              "header": ["shape", "config", *names], "rows": cells}
    return [view for view in (best_view, shared_view, shared_ms_view, detail) if view["rows"]]  # one run: no A/B


def render_markdown(*, runs: list[dict[str, Any]], tables: list[dict[str, Any]]) -> str:
    """The report: the runs compared, then each view as a markdown table."""
    lines = ["# Probe runs compared", "", "| run | family | source | nvcc flags |", "|---|---|---|---|"]
    for run in runs:
        lines.append(f"| {run['name']} | {run['family']} | {run['source']} | {' '.join(run['nvcc_flags'])} |")
    for table in tables:
        lines += ["", f"## {table['title']}", "", "| " + " | ".join(table["header"]) + " |",
                  "|" + "---|" * len(table["header"])]
        lines += ["| " + " | ".join(row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


def print_tables(*, tables: list[dict[str, Any]]) -> None:
    """The views on the terminal as rich tables."""
    console = Console()
    for table in tables:
        view = Table(title=table["title"])
        for column in table["header"]:
            view.add_column(column)
        for row in table["rows"]:
            view.add_row(*row)
        console.print(view)


def main(argv: list[str] | None = None) -> int:
    """Load the runs, print the views, write <out>.md and <out>.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="gemm_vs_cublas.py JSON reports")
    parser.add_argument("--out", type=Path, help="output stem (default: <first run's folder>/compare)")
    args = parser.parse_args(argv)
    try:
        runs = [load_run(path=path) for path in args.runs]
    except ProbeFileError as exc:
        print(f"compare_probes: {exc}", file=sys.stderr)
        return 2
    best, shared = best_per_shape(runs=runs), shared_configs(runs=runs)
    shared_ms = shared_configs(runs=runs, key="medians")
    tables = render_tables(runs=runs, best=best, shared=shared, shared_ms=shared_ms)
    print_tables(tables=tables)
    out = args.out or args.runs[0].parent / "compare"
    atomic_write_text(out.with_suffix(".md"), render_markdown(runs=runs, tables=tables))
    atomic_write_text(out.with_suffix(".json"), json.dumps(
        {"runs": [{key: run[key] for key in ("name", "path", "family", "source", "nvcc_flags")} for run in runs],
         "best_per_shape": best, "shared_configs": shared, "shared_kernel_ms": shared_ms}, indent=1) + "\n")
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
