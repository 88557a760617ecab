"""Tuning a new workload fast (H200): 24 shapes no table holds, budgeted search vs exhaustive tuning.

The 24 shapes are (N, K) pairs of model sizes in neither params.yaml nor data/validation_shapes.csv
(Llama-2-7B's MLP 11008/4096 both ways, Phi-2's 2560/2560 and 10240/2560, Qwen2-1.5B's MLP
8960/1536 both ways) at M between the tables' buckets (16, 80, 320, 1800). For every table of
the dispatch list (every family) the script measures, on one GPU, through `tunetable bench
--backend cuda` (the project's own harness: cold L2, verified outputs, cuBLAS in the same shard):

* exhaustive: every configuration of the grid on every shape (the reference);
* budgeted: the table's search as a new workload would be tuned, ``{strategy: model,
  max_fevals: 8, learn_from: <the table's recording>, seed_from_selector: true}``: the shape
  selector's candidates first, then the model strategy learning from the recorded shapes.

Reported: each mode's wall time (the bench commands, process start included) and the estimate
the bench printed before starting; per shape the best configuration found over every family,
as cuBLAS median / median of its own shard, and the budgeted best over the exhaustive best
(1.0: the budget found the optimum of the same grid).

    python3 benchmarks/tune_new_shapes.py [--out benchmarks/results] [--max-fevals 8]
Needs a GPU, pycuda and nvcc (the grids compiled: `tunetable compile --table T`). Writes
tune_new_shapes.json under --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.params import primary_recording  # noqa: E402
from tunetable.yamlio import load_yaml_file  # noqa: E402

NK = [(11008, 4096), (4096, 11008), (2560, 2560), (10240, 2560), (8960, 1536), (1536, 8960)]
MS = [16, 80, 320, 1800]
NEW_SHAPES = [(m, n, k) for n, k in NK for m in MS]
# The dispatch list's tables: every family gemm() chooses from.
TABLES = tuple(load_yaml_file(REPO / "params.yaml")["dispatch"]["gemm_dispatch"]["tables"])
ESTIMATE = re.compile(r"estimated [0-9.]+ min \((\d+) s\)")


def budgeted_params(*, source: Path, out: Path, max_fevals: int) -> Path:
    """params.yaml with every table's search set to the new-workload budget (written to ``out``)."""
    data = load_yaml_file(source)
    for name, table in data["tables"].items():
        table["search"] = {"strategy": "model", "max_fevals": max_fevals, "seed": 0,
                           "learn_from": str(REPO / primary_recording(data, name)), "seed_from_selector": True}
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def bench(*, table: str, params: Path, root: Path) -> tuple[float, int | None, str]:
    """One `tunetable bench --backend cuda` over the new shapes: (wall s, printed estimate s, its output)."""
    shapes = [arg for m, n, k in NEW_SHAPES for arg in ("--shape", f"{m},{n},{k}")]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tunetable", "bench", "--table", table, "--backend", "cuda",
                           *shapes, "--params", str(params), "--results-root", str(root)], cwd=REPO,
                          capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench {table} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found = ESTIMATE.search(done.stderr)
    return wall, int(found.group(1)) if found else None, done.stderr


def shard_ratios(*, root: Path, table: str) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Per shape: every measured configuration's median / same-shard cuBLAS median, and how many were measured."""
    from tunetable.results import read_shard

    found = {}
    for path in sorted((root / "raw" / table).glob("*/*.pkl")):
        frame = read_shard(path)["merged_df"]
        ok = frame[frame["status"] == "ok"]
        cublas = ok[ok["kind"] == "baseline"]["median_ms"]
        kernels = ok[ok["kind"] == "kernel"]
        if cublas.empty or kernels.empty:
            continue
        shape = (int(frame["M"].iloc[0]), int(frame["N"].iloc[0]), int(frame["K"].iloc[0]))
        found[shape] = {"measured": int((frame["kind"] == "kernel").sum()),
                        "ratios": {str(r.config_id): float(r.median_ms) / float(cublas.iloc[0])
                                   for r in kernels.itertuples()}}
    return found


def best_over_tables(per_table: dict[str, dict[tuple[int, int, int], dict[str, Any]]],
                     shape: tuple[int, int, int]) -> tuple[str, str, float]:
    """(table, config id, time / cuBLAS) of the fastest configuration any table measured at a shape."""
    candidates = [(ratio, table, cid) for table, shapes in per_table.items() if shape in shapes
                  for cid, ratio in shapes[shape]["ratios"].items()]
    ratio, table, cid = min(candidates)
    return table, cid, ratio


def main() -> None:
    """Measure both modes, compare them and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--max-fevals", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tune_new_shapes."))
    roots = {"exhaustive": work / "exhaustive", "budgeted": work / "budgeted"}
    for root in roots.values():   # each mode's own results root, with the compiled grid
        root.mkdir(parents=True)
        for part in ("grid", "compile"):
            shutil.copytree(REPO / "results" / part, root / part)
    params = {"exhaustive": REPO / "params.yaml",
              "budgeted": budgeted_params(source=REPO / "params.yaml", out=work / "params.yaml",
                                          max_fevals=args.max_fevals)}
    timing: dict[str, dict[str, Any]] = {}
    measured: dict[str, dict[str, dict]] = {}
    for mode in ("budgeted", "exhaustive"):
        timing[mode] = {"wall_s": 0.0, "estimate_s": 0}
        measured[mode] = {}
        for table in TABLES:
            wall, estimate, _ = bench(table=table, params=params[mode], root=roots[mode])
            timing[mode]["wall_s"] += wall
            timing[mode]["estimate_s"] += estimate or 0
            timing[mode][table] = {"wall_s": round(wall, 1), "estimate_s": estimate}
            measured[mode][table] = shard_ratios(root=roots[mode], table=table)
            print(f"{mode} {table}: {wall:.0f} s (estimated {estimate} s)", flush=True)
    rows = []
    for shape in NEW_SHAPES:
        ex_table, ex_cid, ex_ratio = best_over_tables(measured["exhaustive"], shape)
        bu_table, bu_cid, bu_ratio = best_over_tables(measured["budgeted"], shape)
        rows.append({"M": shape[0], "N": shape[1], "K": shape[2],
                     "exhaustive": {"table": ex_table, "config_id": ex_cid, "speedup_vs_cublas": 1.0 / ex_ratio,
                                    "measured": sum(measured["exhaustive"][t][shape]["measured"] for t in TABLES)},
                     "budgeted": {"table": bu_table, "config_id": bu_cid, "speedup_vs_cublas": 1.0 / bu_ratio,
                                  "measured": sum(measured["budgeted"][t][shape]["measured"] for t in TABLES)},
                     "budgeted_of_exhaustive": ex_ratio / bu_ratio})
    geomean = math.exp(sum(math.log(r["budgeted_of_exhaustive"]) for r in rows) / len(rows))
    result = {
        "command": f"python3 benchmarks/tune_new_shapes.py --max-fevals {args.max_fevals}",
        "git_rev": os.environ.get("TUNETABLE_GIT_REV", "unknown"),
        "shapes": [list(s) for s in NEW_SHAPES], "tables": list(TABLES),
        "search": load_yaml_file(params["budgeted"])["tables"]["gemm_mma"]["search"],
        "timing": timing, "rows": rows,
        "summary": {"budgeted_wall_s": round(timing["budgeted"]["wall_s"], 1),
                    "exhaustive_wall_s": round(timing["exhaustive"]["wall_s"], 1),
                    "speedup": timing["exhaustive"]["wall_s"] / timing["budgeted"]["wall_s"],
                    "budgeted_of_exhaustive_geomean": geomean,
                    "within_2pct": sum(r["budgeted_of_exhaustive"] >= 0.98 for r in rows),
                    "worst": min(r["budgeted_of_exhaustive"] for r in rows)},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "tune_new_shapes.json", json.dumps(result, indent=1) + "\n")
    s = result["summary"]
    print(f"24 new shapes, {len(TABLES)} tables, one GPU: budgeted {s['budgeted_wall_s']:.0f} s (estimated "
          f"{timing['budgeted']['estimate_s']} s) vs exhaustive {s['exhaustive_wall_s']:.0f} s (estimated "
          f"{timing['exhaustive']['estimate_s']} s): {s['speedup']:.1f}x faster")
    print(f"tuned table: {s['budgeted_of_exhaustive_geomean']:.3f}x the exhaustive best (geomean), "
          f"{s['within_2pct']}/24 shapes within 2 %, worst {s['worst']:.3f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
