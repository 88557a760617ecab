"""What a tile row that reaches past M costs, read off the recordings (no GPU): each configuration at M against itself
at the next whole multiple of its BLOCK_M (the same tile count), where both were recorded at one (N, K).

A ratio above 1 is time that only the rows past M explain: the same tiles, loads and MMAs, fewer rows of A in
range. The TMA families (gemm_wgmma, gemm_wgmma_swap: the rows of A past M are TMA's zero fill) are set beside
gemm_mma, whose cp.async loads skip those rows (benchmarks/notes_gemm_wgmma.md, "Partial M tiles").

    python3 benchmarks/partial_tiles.py [--recording data/recordings/h200_gemm_wgmma.parquet ...]
        [--out benchmarks/results/partial_tiles]

Prints the tables and writes <out>.md and <out>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402

RECORDINGS = tuple(REPO / "data" / "recordings" / f"h200_{table}.parquet"
                   for table in ("gemm_wgmma", "gemm_wgmma_swap", "gemm_mma"))
# Each family's tile rows along the problem's M (gemm_wgmma_swap's M is its wgmma n, still BLOCK_M).
ROWS_TUNABLE = "BLOCK_M"
GROUPED_BY = ("BLOCK_N", "STAGES")


class RecordingError(Exception):
    """A recording that cannot be read; the message names the file."""


def load_times(*, path: Path) -> pl.DataFrame:
    """The ok kernel rows of a recording file."""
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise RecordingError(f"{path}: cannot read the recording ({exc})") from None
    needed = {"kind", "status", "config_id", "M", "N", "K", "median_ms", ROWS_TUNABLE, *GROUPED_BY}
    missing = needed - set(frame.columns)
    if missing:
        raise RecordingError(f"{path}: no column {', '.join(sorted(missing))}")
    return load_times_from(frame=frame)


def load_times_from(*, frame: pl.DataFrame) -> pl.DataFrame:
    """The ok kernel rows of a recording's frame (its cuBLAS rows and failures left out)."""
    return frame.filter((pl.col("kind") == "kernel") & (pl.col("status") == "ok"))


def partial_ratios(*, frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Per configuration, (N, K) and M that is not a whole number of its tile rows: time(M) / time(M rounded up)."""
    times = {(row["config_id"], row["N"], row["K"], row["M"]): row["median_ms"]
             for row in frame.select("config_id", "N", "K", "M", "median_ms").iter_rows(named=True)}
    tiles = {row["config_id"]: row for row in frame.unique("config_id").iter_rows(named=True)}
    out = []
    for (config_id, n, k, m), ms in sorted(times.items()):
        rows = tiles[config_id][ROWS_TUNABLE]
        whole = -(-m // rows) * rows
        if whole != m and (config_id, n, k, whole) in times:
            out.append({"config_id": config_id, "M": m, "M_whole": whole, "N": n, "K": k,
                        "ratio": ms / times[(config_id, n, k, whole)],
                        **{name: tiles[config_id][name] for name in (ROWS_TUNABLE, *GROUPED_BY)}})
    return out


def summarise(*, ratios: list[dict[str, Any]], key: str | None) -> list[dict[str, Any]]:
    """Median, 90th percentile and maximum of the ratios, over all or per value of ``key``."""
    groups: dict[Any, list[float]] = {}
    for row in ratios:
        groups.setdefault(row[key] if key else "all", []).append(row["ratio"])
    out = []
    for value, values in sorted(groups.items(), key=lambda item: str(item[0]).zfill(8)):
        values = sorted(values)
        out.append({"group": value, "pairs": len(values), "median": round(statistics.median(values), 3),
                    "p90": round(values[int(0.9 * (len(values) - 1))], 3), "max": round(values[-1], 3)})
    return out


def render_markdown(*, report: dict[str, Any]) -> str:
    """The report as Markdown: per recording, all pairs, then per BLOCK_N and per STAGES; then the worst pairs."""
    out = ["# Partial M tiles in the recordings: time at M / time at M rounded up to whole tile rows", ""]
    for name, entry in report["recordings"].items():
        out += [f"## {name}", "", "| group | pairs | median | p90 | max |", "|---|---:|---:|---:|---:|"]
        for key, rows in entry["summaries"].items():
            for row in rows:
                label = "all" if key == "all" else f"{key} = {row['group']}"
                out.append(f"| {label} | {row['pairs']} | {row['median']} | {row['p90']} | {row['max']} |")
        out += ["", "Worst pairs:", "", "| config | tile | M | whole M | N x K | ratio |",
                "|---|---|---:|---:|---|---:|"]
        for row in entry["worst"]:
            out.append(f"| {row['config_id']} | {row[ROWS_TUNABLE]} x {row['BLOCK_N']}, {row['STAGES']} stages | "
                       f"{row['M']} | {row['M_whole']} | {row['N']} x {row['K']} | {row['ratio']:.2f} |")
        out.append("")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, action="append", default=None,
                        help="a recording (repeatable) [default: the three tables' H200 recordings]")
    parser.add_argument("--worst", type=int, default=8, help="how many of the worst pairs to list per recording")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "partial_tiles")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Read the recordings, print and write the report."""
    args = build_parser().parse_args(argv)
    console = Console(width=140)
    report: dict[str, Any] = {"recordings": {}}
    try:
        for path in args.recording or RECORDINGS:
            ratios = partial_ratios(frame=load_times(path=path))
            name = path.resolve().relative_to(REPO).as_posix() if path.resolve().is_relative_to(REPO) else str(path)
            report["recordings"][name] = {
                "summaries": {key or "all": summarise(ratios=ratios, key=key) for key in (None, *GROUPED_BY)},
                "worst": sorted(ratios, key=lambda row: -row["ratio"])[:args.worst],
            }
    except RecordingError as exc:
        print(f"partial_tiles: {exc}", file=sys.stderr)
        return 2
    for name, entry in report["recordings"].items():
        table = Table(title=f"{name}: time at M / at M rounded up to whole tile rows")
        for column in ("group", "pairs", "median", "p90", "max"):
            table.add_column(column, no_wrap=True, justify="left" if column == "group" else "right")
        for key, rows in entry["summaries"].items():
            for row in rows:
                label = "all" if key == "all" else f"{key} = {row['group']}"
                table.add_row(label, str(row["pairs"]), f"{row['median']:.3f}", f"{row['p90']:.3f}",
                              f"{row['max']:.3f}")
        console.print(table)
    atomic_write_text(args.out.with_suffix(".md"), render_markdown(report=report))
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    console.print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
