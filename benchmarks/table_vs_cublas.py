"""The tuned tables against cuBLAS, from the committed H200 recordings (no GPU needed).

Every ratio is cuBLAS median / our median, both from the same shard of the same measurement
(the harness's cuBLAS baseline rows), so drift between sessions cancels. Per table: the best
configuration at the square shapes, and the configuration the manifest selected for every shape
(not the fastest in hindsight). For a dispatch list (manifests/gemm_dispatch.yaml): the family it
names per shape, at that family's selected configuration. Reports the geomean, the share of
shapes at >= 1.0x, the issue's targets, and a per-shape plot.

    python3 benchmarks/table_vs_cublas.py [--out benchmarks/results]
Writes table_vs_cublas.json, .md and .png under --out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import polars as pl
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402

TABLES = {"gemm_mma": "data/recordings/h200_gemm_mma.parquet",
          "gemm_wgmma": "data/recordings/h200_gemm_wgmma.parquet"}
DISPATCH = "manifests/gemm_dispatch.yaml"
SQUARE = ((4096, 4096, 4096), (8192, 8192, 8192))
TARGETS = {"best_at_square": 0.9, "geomean": 0.95, "share_at_or_above_1": 0.30}


def manifest_entries(path: Path) -> list[dict[str, Any]]:
    """The ``params`` entries of a manifest (YAML through safe_load; merge keys resolved)."""
    return list(yaml.safe_load(path.read_text())["params"])


def entry_for(entries: list[dict[str, Any]], *, m: int, n: int, k: int) -> dict[str, Any] | None:
    """The first entry whose N, K match and whose [M, M_END) holds m (the lookup contract)."""
    return next((e for e in entries if e["N"] == n and e["K"] == k and e["M"] <= m < e["M_END"]), None)


def shard_times(path: Path) -> dict[tuple[int, int, int], dict[str, float]]:
    """(M, N, K) -> {config id: median ms} over the ok rows of a recording."""
    frame = pl.read_parquet(path).filter(pl.col("status") == "ok").select("M", "N", "K", "config_id", "median_ms")
    out: dict[tuple[int, int, int], dict[str, float]] = {}
    for m, n, k, config_id, median in frame.iter_rows():
        out.setdefault((m, n, k), {})[config_id] = median
    return out


def geomean(values: list[float]) -> float:
    """Geometric mean."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def table_ratios(*, times: dict[tuple[int, int, int], dict[str, float]],
                 entries: list[dict[str, Any]]) -> dict[tuple[int, int, int], float]:
    """Per shape: cuBLAS / the selected configuration, both from that shape's shard."""
    ratios = {}
    for shape, row in times.items():
        entry = entry_for(entries, m=shape[0], n=shape[1], k=shape[2])
        if entry is not None and entry["CONFIG_ID"] in row and "cublas" in row:
            ratios[shape] = row["cublas"] / row[entry["CONFIG_ID"]]
    return ratios


def summary(ratios: dict[tuple[int, int, int], float]) -> dict[str, Any]:
    """Geomean and the share of shapes at or above cuBLAS."""
    values = list(ratios.values())
    return {"shapes": len(values), "geomean": geomean(values),
            "at_or_above_1": sum(v >= 1.0 for v in values),
            "share_at_or_above_1": sum(v >= 1.0 for v in values) / len(values),
            "min": min(values), "max": max(values)}


def plot(*, series: dict[str, dict[tuple[int, int, int], float]], path: Path) -> None:
    """Per-shape ratio to cuBLAS of every table and the dispatch list, as a PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted(next(iter(series.values())), key=lambda s: (s[1], s[2], s[0]))
    fig, ax = plt.subplots(figsize=(14, 4.5))
    for label, ratios in series.items():
        ax.plot(range(len(shapes)), [ratios.get(s, float("nan")) for s in shapes], marker="o", ms=3, label=label)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(shapes)), [f"{m}x{n}x{k}" for m, n, k in shapes], rotation=90, fontsize=6)
    ax.set_ylabel("cuBLAS time / our time")
    ax.set_title("Tuned tables vs cuBLAS on the H200 (same-shard baselines)")
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    atomic_write_bytes(path, buffer.getvalue())


def main() -> None:
    """Compute, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    times = {name: shard_times(REPO / path) for name, path in TABLES.items()}
    series = {name: table_ratios(times=times[name], entries=manifest_entries(REPO / f"manifests/{name}.yaml"))
              for name in TABLES}
    dispatch_entries = manifest_entries(REPO / DISPATCH)
    dispatch = {}
    for shape in series["gemm_wgmma"]:
        choice = entry_for(dispatch_entries, m=shape[0], n=shape[1], k=shape[2])
        if choice is not None and shape in series[choice["TABLE"]]:
            dispatch[shape] = series[choice["TABLE"]][shape]
    series["gemm_dispatch"] = dispatch

    best_square = {}
    for name in TABLES:
        for shape in SQUARE:
            row = times[name][shape]
            best_id, best_ms = min(((c, t) for c, t in row.items() if c != "cublas"), key=lambda item: item[1])
            best_square[f"{name} {shape[0]}^3"] = {"config_id": best_id, "ms": best_ms, "cublas_ms": row["cublas"],
                                                     "ratio": row["cublas"] / best_ms,
                                                     "tflops": 2 * shape[0] ** 3 / best_ms / 1e9}
    summaries = {name: summary(ratios) for name, ratios in series.items()}
    result = {"recordings": TABLES, "dispatch": DISPATCH, "targets": TARGETS, "best_at_square": best_square,
              "tables": summaries,
              "per_shape": {name: {f"{m}x{n}x{k}": r for (m, n, k), r in sorted(ratios.items())}
                            for name, ratios in series.items()}}

    console = Console()
    square = Table(title="Best configuration at the square shapes (x cuBLAS, same shard)")
    for column in ("table, shape", "config", "TFLOP/s", "x cuBLAS", f"target >= {TARGETS['best_at_square']}"):
        square.add_column(column)
    lines = ["# Tuned tables vs cuBLAS (H200 recordings, same-shard cuBLAS baselines)", "",
             "| table, shape | best config | TFLOP/s | x cuBLAS | target |", "|---|---|---|---|---|"]
    for label, item in best_square.items():
        met = "met" if item["ratio"] >= TARGETS["best_at_square"] else "NOT met"
        square.add_row(label, item["config_id"], f"{item['tflops']:.1f}", f"{item['ratio']:.3f}", met)
        lines.append(f"| {label} | {item['config_id']} | {item['tflops']:.1f} | {item['ratio']:.3f} | >= 0.9: {met} |")
    tables = Table(title="Tuned tables over the default shape set (selected configurations)")
    for column in ("table", "shapes", "geomean x cuBLAS", ">= 1.0x", "min", "max"):
        tables.add_column(column)
    lines += ["", "| table | shapes | geomean x cuBLAS | shapes >= 1.0x | min | max |", "|---|---|---|---|---|---|"]
    for name, item in summaries.items():
        tables.add_row(name, str(item["shapes"]), f"{item['geomean']:.3f}",
                       f"{item['at_or_above_1']} ({100 * item['share_at_or_above_1']:.0f} %)",
                       f"{item['min']:.3f}", f"{item['max']:.3f}")
        lines.append(f"| {name} | {item['shapes']} | {item['geomean']:.3f} | {item['at_or_above_1']} "
                     f"({100 * item['share_at_or_above_1']:.0f} %) | {item['min']:.3f} | {item['max']:.3f} |")
    combined = summaries["gemm_dispatch"]
    verdict = (f"dispatch list: geomean {combined['geomean']:.3f} (target >= {TARGETS['geomean']}: "
               f"{'met' if combined['geomean'] >= TARGETS['geomean'] else 'NOT met'}), "
               f"{100 * combined['share_at_or_above_1']:.0f} % of shapes >= 1.0x (target >= 30 %: "
               f"{'met' if combined['share_at_or_above_1'] >= TARGETS['share_at_or_above_1'] else 'NOT met'})")
    lines += ["", f"- {verdict}", "", "![per shape](table_vs_cublas.png)"]
    console.print(square)
    console.print(tables)
    console.print(verdict)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "table_vs_cublas.json", json.dumps(result, indent=1, sort_keys=True) + "\n")
    atomic_write_text(args.out / "table_vs_cublas.md", "\n".join(lines) + "\n")
    plot(series=series, path=args.out / "table_vs_cublas.png")


if __name__ == "__main__":
    main()
