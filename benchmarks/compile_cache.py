"""Compile cache: cold vs warm compile of N real gemm_mma configurations (real nvcc, fresh cache dir).

Target: the warm run (every configuration answered from the content-addressed cache) is at
least 20x faster than the cold run. Both runs go through ``tunetable.compile.compile_configs``,
the function behind ``tunetable compile``, with the same worker count.
Writes benchmarks/results/compile_cache.json.

    python benchmarks/compile_cache.py [--configs N] [--workers W]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tunetable.atomic import atomic_write_text
from tunetable.compile import compile_configs, resolve_workers
from tunetable.grid import load_table_grid
from tunetable.keys import nvcc_version

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("results") / "compile_cache.json"
TARGET_SPEEDUP = 20.0


def timed_compile(*, configs: list, grid, kernel: Path, cache_dir: Path, workers: int) -> tuple[float, dict]:
    """Seconds to compile ``configs`` into ``cache_dir``, and the results."""
    flags = [str(flag) for flag in (grid.params.get("compile") or {}).get("nvcc_flags") or []]
    start = time.perf_counter()
    results = compile_configs(
        configs, kernel_path=kernel, flags=flags, arch=grid.spec.arch, cache_dir=cache_dir, workers=workers
    )
    return time.perf_counter() - start, results


def main() -> None:
    """Cold then warm compile in a fresh cache; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="gemm_mma")
    parser.add_argument("--configs", type=int, default=16, help="how many configurations of the default grid")
    parser.add_argument("--workers", type=int, default=None, help="nvcc processes [default: CPU count]")
    args = parser.parse_args()

    grid = load_table_grid(params_path=ROOT / "params.yaml", table=args.table)
    configs = list(grid.result.kept)[: args.configs]
    workers = resolve_workers(requested=args.workers, configured=None)
    with tempfile.TemporaryDirectory(prefix="tunetable-cache-bench-") as scratch:
        # A snapshot of the kernel folder: an edit to the live source mid-run would (rightly) miss.
        kernel = Path(scratch) / "src" / grid.kernel_path.name
        shutil.copytree(grid.kernel_path.parent, kernel.parent, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        cache_dir = Path(scratch) / "cache"
        cold_s, cold = timed_compile(configs=configs, grid=grid, kernel=kernel, cache_dir=cache_dir, workers=workers)
        warm_s, warm = timed_compile(configs=configs, grid=grid, kernel=kernel, cache_dir=cache_dir, workers=workers)
    statuses = sorted({result.status for result in cold.values()})
    speedup = cold_s / warm_s
    result = {
        "table": args.table,
        "configs": len(configs),
        "workers": workers,
        "nvcc": nvcc_version(),
        "cold_s": round(cold_s, 3),
        "warm_s": round(warm_s, 5),
        "cold_per_config_s": round(cold_s / len(configs), 3),
        "nvcc_seconds_summed": round(sum(item.compile_s for item in cold.values()), 3),
        "statuses": statuses,
        "warm_all_cached": all(item.cached for item in warm.values()),
        "speedup": round(speedup, 1),
        "target_speedup": TARGET_SPEEDUP,
        "meets_target": speedup >= TARGET_SPEEDUP and all(item.cached for item in warm.values()),
    }
    table = Table(title=f"compile cache: {len(configs)} {args.table} configurations, {workers} workers")
    for column in ("run", "seconds", "per config (s)"):
        table.add_column(column, justify="right")
    table.add_row("cold (nvcc)", f"{cold_s:.2f}", f"{cold_s / len(configs):.3f}")
    table.add_row("warm (cache)", f"{warm_s:.4f}", f"{warm_s / len(configs):.5f}")
    Console().print(table)
    print(f"speedup {speedup:.0f}x (target >= {TARGET_SPEEDUP:.0f}x): {'met' if result['meets_target'] else 'NOT met'}")
    atomic_write_text(OUT, json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
