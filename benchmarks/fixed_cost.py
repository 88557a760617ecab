"""The cost every GEMM call pays beyond its roofline floor, read off a probe that sweeps K at one M and N.

Each run is one `gemm_vs_cublas.py` report (a line of `benchmarks/probes/fixed_overhead.txt`): one
configuration and cuBLAS timed at K = 512 ... 14336. Per contender, a least-squares line

    time = fixed + slope x floor          (floor: tunetable.kernels.perfmodel.roofline_floor_s)

over the shapes with K >= --min-k: ``fixed`` is what a call costs that the floor does not count (the gap
between launches, the first bytes' latency, the pipeline's fill, the last store), 1 / slope the fraction of
the floor's rate the k-loop sustains. Then, with --reach (table_vs_cublas.json), the ceiling that ``fixed``
puts on the roofline efficiency of the default shapes at M = 64-512: floor / (floor + fixed) per shape.

    python3 benchmarks/fixed_cost.py RUN.json [RUN.json ...] [--reach benchmarks/results/table_vs_cublas.json]
        [--fixed-us 3.7] [--min-k 2048] [--out benchmarks/results/fixed_cost]

Prints the tables and writes <out>.md and <out>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # compare_probes: the one reader of a gemm_vs_cublas.py report

from compare_probes import ProbeFileError, load_run  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.kernels.perfmodel import roofline_floor_s  # noqa: E402
from tunetable.stats import geomean  # noqa: E402

CUBLAS = "cublas"
REACH_SET = "default"
M_RANGE = (64, 512)


class RunFileError(Exception):
    """A run or reach file that cannot be read; the message names the file and the place."""


def load_points(*, path: Path) -> dict[str, list[tuple[int, int, int, float]]]:
    """Per contender of one gemm_vs_cublas.py report (its config id, or 'cublas'): (M, N, K, median ms)."""
    try:
        medians = load_run(path=path)["medians"]
    except ProbeFileError as exc:
        raise RunFileError(str(exc)) from None
    points: dict[str, list[tuple[int, int, int, float]]] = {}
    for shape, rows in medians.items():
        m, n, k = (int(part) for part in shape.split("x"))
        for name, ms in rows.items():
            points.setdefault(name, []).append((m, n, k, ms))
    return points


def fit_fixed_cost(*, points: list[tuple[int, int, int, float]], min_k: int) -> dict[str, Any]:
    """time = fixed + slope x floor over the points with K >= min_k (fixed in us; rate: 1 / slope)."""
    used = [(m, n, k, ms) for m, n, k, ms in points if k >= min_k]
    if len(used) < 2:
        raise ValueError(f"{len(used)} points with K >= {min_k}: a line needs two")
    floors = np.array([roofline_floor_s(m=m, n=n, k=k) * 1e6 for m, n, k, _ in used])
    times = np.array([ms * 1e3 for *_, ms in used])
    slope, fixed = np.linalg.lstsq(np.vstack([floors, np.ones(len(used))]).T, times, rcond=None)[0]
    return {"fixed_us": float(fixed), "floor_rate": float(1.0 / slope), "shapes": len(used),
            "times_us": [round(ms * 1e3, 2) for *_, ms in sorted(points, key=lambda p: p[2])],
            "ks": [k for _, _, k, _ in sorted(points, key=lambda p: p[2])]}


def roofline_ceiling(*, reach: dict[str, Any], fixed_us: float) -> dict[str, Any]:
    """Per default shape at M = 64-512: its roofline efficiency and floor / (floor + fixed); their geomeans."""
    shapes = []
    for name, entry in reach.items():
        m, n, k = (int(part) for part in name.split("x"))
        if not M_RANGE[0] <= m <= M_RANGE[1]:
            continue
        floor_us = roofline_floor_s(m=m, n=n, k=k) * 1e6
        ceiling = floor_us / (floor_us + fixed_us)
        shapes.append({"shape": name, "floor_us": floor_us, "roofline": float(entry["roofline"]),
                       "ceiling": ceiling, "of_ceiling": float(entry["roofline"]) / ceiling})
    shapes.sort(key=lambda row: row["of_ceiling"])
    return {"fixed_us": fixed_us, "shapes": shapes,
            "geomean_roofline": geomean(row["roofline"] for row in shapes),
            "geomean_ceiling": geomean(row["ceiling"] for row in shapes),
            "geomean_of_ceiling": geomean(row["of_ceiling"] for row in shapes)}


def load_reach(*, path: Path) -> dict[str, Any]:
    """table_vs_cublas.json's per-shape reach of the default set."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))["reach_per_shape"][REACH_SET]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RunFileError(f"{path}: no reach_per_shape.{REACH_SET}: {exc!r}") from None


def markdown(*, fits: list[dict[str, Any]], ceiling: dict[str, Any] | None) -> str:
    """Both tables as markdown."""
    lines = ["# Fixed cost per call (K sweeps at one M and N; time = fixed + slope x roofline floor)", "",
             "| run | contender | shape | times at K = ... (us) | floor rate sustained | fixed us |",
             "|---|---|---|---|---|---|"]
    for fit in fits:
        ks = " ".join(str(k) for k in fit["ks"])
        lines.append(f"| {fit['run']} | {fit['contender']} | {fit['shape']} | K = {ks}: "
                     f"{' '.join(f'{t:.1f}' for t in fit['times_us'])} | {fit['floor_rate']:.3f} | "
                     f"{fit['fixed_us']:.2f} |")
    if ceiling:
        lines += ["", f"## Default shapes at M = {M_RANGE[0]}-{M_RANGE[1]}: roofline efficiency against "
                      f"floor / (floor + {ceiling['fixed_us']} us)", "",
                  "| shape | floor us | roofline | ceiling | of ceiling |", "|---|---|---|---|---|"]
        lines += [f"| {row['shape']} | {row['floor_us']:.1f} | {row['roofline']:.3f} | {row['ceiling']:.3f} | "
                  f"{row['of_ceiling']:.3f} |" for row in ceiling["shapes"]]
        lines += ["", f"geomean: roofline {ceiling['geomean_roofline']:.3f}, ceiling {ceiling['geomean_ceiling']:.3f}, "
                      f"of the ceiling {ceiling['geomean_of_ceiling']:.3f}"]
    return "\n".join(lines) + "\n"


def fits_of(*, runs: list[Path], min_k: int) -> list[dict[str, Any]]:
    """Every run's contenders fitted (RunFileError names the run and contender a line cannot be fitted for)."""
    fits = []
    for path in runs:
        for contender, points in sorted(load_points(path=path).items()):
            m, n, _, _ = points[0]
            try:
                fit = fit_fixed_cost(points=points, min_k=min_k)
            except ValueError as exc:
                raise RunFileError(f"{path}: {contender}: {exc}") from None
            fits.append({"run": path.stem, "contender": contender, "shape": f"{m}x{n}xK", **fit})
    return fits


def print_report(*, fits: list[dict[str, Any]], ceiling: dict[str, Any] | None) -> None:
    """The fits as a table, then the ceiling's line."""
    console = Console(width=140)
    table = Table(title="time = fixed + slope x roofline floor")
    for column in ("run", "contender", "shape", "floor rate sustained", "fixed us"):
        table.add_column(column, no_wrap=True)
    for fit in fits:
        table.add_row(fit["run"], fit["contender"], fit["shape"], f"{fit['floor_rate']:.3f}", f"{fit['fixed_us']:.2f}")
    console.print(table)
    if ceiling:
        console.print(f"default M = {M_RANGE[0]}-{M_RANGE[1]}, {len(ceiling['shapes'])} shapes, fixed "
                      f"{ceiling['fixed_us']} us: roofline {ceiling['geomean_roofline']:.3f}, ceiling "
                      f"{ceiling['geomean_ceiling']:.3f}, of the ceiling {ceiling['geomean_of_ceiling']:.3f}")


def main(argv: list[str] | None = None) -> int:
    """Fit every run's contenders, then the ceiling; print and write both."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="gemm_vs_cublas.py JSON reports of K sweeps")
    parser.add_argument("--reach", type=Path, help="table_vs_cublas.json: the ceiling on the default M = 64-512 set")
    parser.add_argument("--fixed-us", type=float, help="the fixed cost for the ceiling (default: the kernels' median)")
    parser.add_argument("--min-k", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "fixed_cost")
    args = parser.parse_args(argv)
    try:
        fits = fits_of(runs=args.runs, min_k=args.min_k)
        reach = load_reach(path=args.reach) if args.reach else None
    except RunFileError as exc:
        print(f"fixed_cost: {exc}", file=sys.stderr)
        return 2
    kernels = sorted(fit["fixed_us"] for fit in fits if fit["contender"] != CUBLAS)
    fixed_us = args.fixed_us if args.fixed_us is not None else round(kernels[len(kernels) // 2], 2)
    ceiling = roofline_ceiling(reach=reach, fixed_us=fixed_us) if reach else None
    print_report(fits=fits, ceiling=ceiling)
    atomic_write_text(args.out.with_suffix(".md"), markdown(fits=fits, ceiling=ceiling))
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(
        {"runs": [str(path) for path in args.runs], "min_k": args.min_k, "fits": fits, "ceiling": ceiling},
        indent=1) + "\n")
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
