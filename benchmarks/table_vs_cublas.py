"""The tuned tables against cuBLAS, from the committed H200 recordings (no GPU needed).

Every speedup is cuBLAS median / our median, both from the same shard of the same measurement
(the harness's cuBLAS baseline rows), so drift between sessions cancels. Per table (params.yaml's
tables and their recordings): the best configuration at the square shapes, and the configuration
the manifest selected for every shape (not the fastest in hindsight). For the dispatch list
(manifests/gemm_dispatch.yaml): the family it names per shape, at that family's selected
configuration. Then the kernels' reach, shape set by shape set: per shape the best configuration
of every family (each against its own shard's cuBLAS), on the default shapes and on the
validation shapes (data/validation_shapes.csv, recorded in data/recordings/h200_validation_<table>,
never tuned on), with the roofline efficiency floor / time, floor = max(bytes / 4.13 TB/s,
flops / 800 TFLOP/s). Reports geomeans, shares at >= 1.0x, the targets, and a per-shape plot. The reach is also
reported against the shared cuBLAS yardstick (tunetable.baseline: every recording's cuBLAS row of a
shape pooled, in each recording's session scale); the targets are judged on the issue's definition.

    python3 benchmarks/table_vs_cublas.py [--out benchmarks/results]
Writes table_vs_cublas.json, .md and .png under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402
from tunetable.baseline import pooled_baselines  # noqa: E402
from tunetable.manifest import ManifestEntry, load_ranges, lookup  # noqa: E402
from tunetable.params import load_params, primary_recording  # noqa: E402
from tunetable.stats import geomean  # noqa: E402

PARAMS = load_params(REPO / "params.yaml")
TABLES = {name: primary_recording(PARAMS, name) for name in PARAMS["tables"]}
VALIDATION = {name: str(Path(path).with_name("h200_validation_" + name + ".parquet")) for name, path in TABLES.items()}
DISPATCH = "manifests/gemm_dispatch.yaml"
DEFAULT_SHAPES_TABLE = "gemm_mma"   # its shapes are the default set the targets name
SQUARE = ((4096, 4096, 4096), (8192, 8192, 8192))
TARGETS = {"best_at_square": 0.9, "geomean": 0.95, "share_at_or_above_1": 0.30}
# The kernels' reach (issue 21): best configuration per shape over every family.
REACH_TARGETS = {"validation": {"geomean": 1.0, "min": 0.9},
                 "default": {"geomean": 1.03, "share_at_or_above_1": 0.5},
                 "default_m64_512_roofline": 0.80}
COPY_BYTES_PER_S = 4.13e12   # device-to-device copy on the H200 (read + write)
BF16_FLOPS = 800e12          # cuBLAS bf16 ceiling used for the floor


def manifest_entries(path: Path) -> list[ManifestEntry]:
    """A manifest's entries typed for the lookup (tunetable.manifest: the one loader)."""
    return load_ranges(path)[1]


def shard_times(path: Path) -> dict[tuple[int, int, int], dict[str, float]]:
    """(M, N, K) -> {config id: median ms} over the ok rows of a recording."""
    frame = pl.read_parquet(path).filter(pl.col("status") == "ok").select("M", "N", "K", "config_id", "median_ms")
    out: dict[tuple[int, int, int], dict[str, float]] = {}
    for m, n, k, config_id, median in frame.iter_rows():
        out.setdefault((m, n, k), {})[config_id] = median
    return out


def table_ratios(*, times: dict[tuple[int, int, int], dict[str, float]],
                 entries: list[ManifestEntry]) -> dict[tuple[int, int, int], float]:
    """Per shape: cuBLAS / the selected configuration, both from that shape's shard."""
    ratios = {}
    for shape, row in times.items():
        entry = lookup(entries, m=shape[0], n=shape[1], k=shape[2])
        if entry is not None and entry.config_id in row and "cublas" in row:
            ratios[shape] = row["cublas"] / row[entry.config_id]
    return ratios


def dispatch_ratios(*, series: dict[str, dict[tuple[int, int, int], float]],
                    entries: list[ManifestEntry]) -> dict[tuple[int, int, int], float]:
    """Per shape of any table: the ratio of the table the dispatch list names there (its selected configuration)."""
    dispatch = {}
    for shape in set().union(*series.values()):
        choice = lookup(entries, m=shape[0], n=shape[1], k=shape[2])
        if choice is not None and shape in series[choice.values["TABLE"]]:
            dispatch[shape] = series[choice.values["TABLE"]][shape]
    return dispatch


def shown(*, value: float, target: float) -> str:
    """The value to 3 decimals, or to 4 where 3 would round it onto the other side of its target."""
    text = f"{value:.3f}"
    return text if (float(text) >= target) == (value >= target) else f"{value:.4f}"


def against(*, value: float, target: float, target_text: str) -> str:
    """'value (target >= target_text: met)' (or NOT met), the value as ``shown``."""
    return f"{shown(value=value, target=target)} (target >= {target_text}: {'met' if value >= target else 'NOT met'})"


def summary(ratios: dict[tuple[int, int, int], float]) -> dict[str, Any]:
    """Geomean and the share of shapes at or above cuBLAS."""
    values = list(ratios.values())
    return {"shapes": len(values), "geomean": geomean(values),
            "at_or_above_1": sum(v >= 1.0 for v in values),
            "share_at_or_above_1": sum(v >= 1.0 for v in values) / len(values),
            "min": min(values), "max": max(values)}


def floor_ms(m: int, n: int, k: int) -> float:
    """The roofline floor of one bf16 GEMM: max(bytes / copy bandwidth, flops / bf16 rate), in ms."""
    moved = 2 * (m * k + n * k + m * n)
    return 1e3 * max(moved / COPY_BYTES_PER_S, 2 * m * n * k / BF16_FLOPS)


def reach(times: dict[str, dict[tuple[int, int, int], dict[str, float]]]) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Per shape: every family's best speedup over its own shard's cuBLAS, the best of them, its roofline efficiency."""
    shapes = sorted({shape for rows in times.values() for shape in rows})
    out = {}
    for shape in shapes:
        families = {}
        for name, rows in times.items():
            row = rows.get(shape, {})
            timed = [(t, c) for c, t in row.items() if c != "cublas"]
            if timed and "cublas" in row:
                best_ms, best_id = min(timed)
                families[name] = {"speedup": row["cublas"] / best_ms, "config_id": best_id, "ms": best_ms}
        if not families:
            continue
        winner = max(families, key=lambda name: families[name]["speedup"])
        out[shape] = {"families": families, "table": winner, "speedup": families[winner]["speedup"],
                      "roofline": floor_ms(*shape) / families[winner]["ms"]}
    return out


def with_yardstick(times: dict[str, dict[tuple[int, int, int], dict[str, float]]]
                   ) -> dict[str, dict[tuple[int, int, int], dict[str, float]]]:
    """The recordings' times with each shard's cuBLAS row replaced by the shared yardstick (tunetable.baseline)."""
    pooled = pooled_baselines(baselines={name: {s: row["cublas"] for s, row in rows.items() if "cublas" in row}
                                         for name, rows in times.items()})
    return {name: {s: {**row, **({"cublas": pooled[name][s]} if "cublas" in row else {})} for s, row in rows.items()}
            for name, rows in times.items()}


def reach_summary(per_shape: dict[tuple[int, int, int], dict[str, Any]]) -> dict[str, Any]:
    """Geomean speedup of the best per shape (and with every shape below 1.0x lifted to 1.0x: what parity alone would
    give), its share at >= 1.0x, its minimum, and the roofline geomean."""
    speedups = [item["speedup"] for item in per_shape.values()]
    mid = [item["roofline"] for shape, item in per_shape.items() if 64 <= shape[0] <= 512]
    return {"shapes": len(speedups), "geomean": geomean(speedups),
            "geomean_at_parity": geomean([max(v, 1.0) for v in speedups]),
            "at_or_above_1": sum(v >= 1.0 for v in speedups), "share_at_or_above_1": sum(v >= 1.0 for v in speedups)
            / len(speedups), "min": min(speedups), "below_0_9": sum(v < 0.9 for v in speedups),
            "roofline_geomean": geomean([item["roofline"] for item in per_shape.values()]),
            "roofline_geomean_m64_512": geomean(mid) if mid else None,
            "wins": {name: sum(item["table"] == name for item in per_shape.values())
                     for name in sorted({item["table"] for item in per_shape.values()})}}


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

    from tunetable.console_table import ConsoleTable, print_table

    times = {name: shard_times(REPO / path) for name, path in TABLES.items()}
    series = {name: table_ratios(times=times[name], entries=manifest_entries(REPO / f"manifests/{name}.yaml"))
              for name in TABLES}
    series["gemm_dispatch"] = dispatch_ratios(series=series, entries=manifest_entries(REPO / DISPATCH))

    best_square = {}
    for name in TABLES:
        for shape in (shape for shape in SQUARE if shape in times[name]):  # a table may cover skinny M only
            row = times[name][shape]
            best_id, best_ms = min(((c, t) for c, t in row.items() if c != "cublas"), key=lambda item: item[1])
            best_square[f"{name} {shape[0]}^3"] = {"config_id": best_id, "ms": best_ms, "cublas_ms": row["cublas"],
                                                     "ratio": row["cublas"] / best_ms,
                                                     "tflops": 2 * shape[0] ** 3 / best_ms / 1e9}
    summaries = {name: summary(ratios) for name, ratios in series.items()}
    validation_times = {name: shard_times(REPO / path) for name, path in VALIDATION.items() if (REPO / path).is_file()}
    # "default": the 55 shapes of the target (gemm_mma's, which every table's shapes include);
    # "every table's shapes" adds the Ms between the buckets that the TMA tables also record.
    default_shapes = set(times[DEFAULT_SHAPES_TABLE])
    default_times = {name: {s: t for s, t in per_table.items() if s in default_shapes}
                     for name, per_table in times.items()}
    # The definition (each family against its own shard's cuBLAS rows) first; then the same against the
    # yardstick the tables share (what the dispatch list and the selector compare by), for how much of a gap is
    # one shard's cuBLAS mode.
    reaches = {"default": reach(default_times), "every table's shapes": reach(times),
               "validation": reach(validation_times),
               "default, shared yardstick": reach(with_yardstick(default_times)),
               "validation, shared yardstick": reach(with_yardstick(validation_times))}
    reach_summaries = {label: reach_summary(per_shape) for label, per_shape in reaches.items()}
    result = {"recordings": TABLES, "validation_recordings": VALIDATION, "dispatch": DISPATCH, "targets": TARGETS,
              "reach_targets": REACH_TARGETS, "best_at_square": best_square, "tables": summaries,
              "reach": reach_summaries,
              "reach_per_shape": {label: {f"{m}x{n}x{k}": item for (m, n, k), item in sorted(per_shape.items())}
                                  for label, per_shape in reaches.items()},
              "per_shape": {name: {f"{m}x{n}x{k}": r for (m, n, k), r in sorted(ratios.items())}
                            for name, ratios in series.items()}}

    console = Console()
    square = ConsoleTable(title="Best configuration at the square shapes (x cuBLAS, same shard)")
    for column in ("table, shape", "config", "TFLOP/s", "x cuBLAS", f"target >= {TARGETS['best_at_square']}"):
        square.add_column(column)
    lines = ["# Tuned tables vs cuBLAS (H200 recordings, same-shard cuBLAS baselines)", "",
             "| table, shape | best config | TFLOP/s | x cuBLAS | target |", "|---|---|---|---|---|"]
    for label, item in best_square.items():
        met = "met" if item["ratio"] >= TARGETS["best_at_square"] else "NOT met"
        square.add_row(label, item["config_id"], f"{item['tflops']:.1f}", f"{item['ratio']:.3f}", met)
        lines.append(f"| {label} | {item['config_id']} | {item['tflops']:.1f} | {item['ratio']:.3f} | >= 0.9: {met} |")
    tables = ConsoleTable(title="Tuned tables over the default shape set (selected configurations)")
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
    lines += ["", f"- {verdict}"]
    reach_table = ConsoleTable(title="The kernels' reach: best configuration per shape over every family (x cuBLAS)")
    for column in ("shape set", "shapes", "geomean", ">= 1.0x", "min", "< 0.9x", "roofline", "roofline M 64-512",
                   "shapes won"):
        reach_table.add_column(column)
    lines += ["", "## The kernels' reach: best configuration per shape over every family", "",
              "| shape set | shapes | geomean x cuBLAS | >= 1.0x | min | < 0.9x | roofline eff. | roofline M 64-512 "
              "| shapes won |", "|---|---|---|---|---|---|---|---|---|"]
    for label, item in reach_summaries.items():
        mid = "-" if item["roofline_geomean_m64_512"] is None else f"{item['roofline_geomean_m64_512']:.3f}"
        wins = ", ".join(f"{name} {count}" for name, count in item["wins"].items())
        cells = [label, str(item["shapes"]), f"{item['geomean']:.3f}",
                 f"{item['at_or_above_1']} ({100 * item['share_at_or_above_1']:.0f} %)", f"{item['min']:.3f}",
                 str(item["below_0_9"]), f"{item['roofline_geomean']:.3f}", mid, wins]
        reach_table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    val, dflt = reach_summaries["validation"], reach_summaries["default"]
    default_geomean = shown(value=dflt["geomean"], target=1.03)
    reach_verdict = (
        f"reach: validation geomean {against(value=val['geomean'], target=1.0, target_text='1.0')}, "
        f"min {against(value=val['min'], target=0.9, target_text='0.9')}; default geomean {default_geomean} "
        f"(target >= 1.03: {'met' if dflt['geomean'] >= 1.03 else 'NOT met'}; {dflt['geomean_at_parity']:.3f} with "
        f"every shape below 1.0x lifted to 1.0x), {100 * dflt['share_at_or_above_1']:.0f} % >= 1.0x "
        f"(target >= 50 %: {'met' if dflt['share_at_or_above_1'] >= 0.5 else 'NOT met'}), roofline M 64-512 "
        f"{against(value=dflt['roofline_geomean_m64_512'], target=0.80, target_text='0.80')}")
    lines += ["", f"- {reach_verdict}", "", "![per shape](table_vs_cublas.png)"]
    print_table(console, square)
    print_table(console, tables)
    console.print(verdict, soft_wrap=True)
    print_table(console, reach_table)
    console.print(reach_verdict, soft_wrap=True)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "table_vs_cublas.json", json.dumps(result, indent=1, sort_keys=True) + "\n")
    atomic_write_text(args.out / "table_vs_cublas.md", "\n".join(lines) + "\n")
    plot(series=series, path=args.out / "table_vs_cublas.png")


if __name__ == "__main__":
    main()
