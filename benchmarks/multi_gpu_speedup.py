"""Multi-GPU speed-up of `tunetable bench`: the same shards on one GPU, then spread over all visible GPUs.

Run on a machine with >= 2 GPUs after `tunetable grid` and `tunetable compile` (cuda backend, real
measurements). Prints the figure and writes benchmarks/results/multi_gpu_speedup.json (and a copy
to --out). Target (issue 5): >= 1.9x on two H200s.

    python3 benchmarks/multi_gpu_speedup.py --table gemm_mma --nk 4096,4096 --nk 14336,4096 [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.bench.devices import device_name, visible_gpu_ids  # noqa: E402
from tunetable.params import load_params, table_spec  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "multi_gpu_speedup.json"


def bench_wall_s(*, table: str, shapes: list[tuple[int, int, int]], gpus: list[str], root: Path) -> float:
    """Wall seconds of one `tunetable bench` run (fresh results root: everything is measured)."""
    for stage in ("grid", "compile"):  # the compiled table, shared; only the shards start empty
        shutil.copytree(REPO / "results" / stage, root / stage)
    args = [sys.executable, "-m", "tunetable", "bench", "--table", table, "--backend", "cuda",
            "--gpus", ",".join(gpus), "--results-root", str(root)]
    for m, n, k in shapes:
        args += ["--shape", f"{m},{n},{k}"]
    start = time.perf_counter()
    subprocess.run(args, cwd=REPO, check=True)
    return time.perf_counter() - start


def main() -> None:
    """Measure one GPU against all visible GPUs on the chosen (N, K) pairs x every M of the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="gemm_mma")
    parser.add_argument("--nk", action="append", default=[], help="N,K pair (repeatable; default: all)")
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    gpus = visible_gpu_ids()
    if len(gpus) < 2:
        sys.exit(f"needs >= 2 visible GPUs, found {gpus}")
    spec = table_spec(load_params(REPO / "params.yaml"), options.table)
    wanted = {tuple(int(x) for x in text.split(",")) for text in options.nk}
    shapes = [shape for shape in spec.shapes() if not wanted or shape[1:] in wanted]
    with tempfile.TemporaryDirectory() as scratch:
        one = bench_wall_s(table=options.table, shapes=shapes, gpus=gpus[:1], root=Path(scratch) / "one")
        many = bench_wall_s(table=options.table, shapes=shapes, gpus=gpus, root=Path(scratch) / "many")
    figure = {
        "table": options.table, "device": device_name(), "gpus": len(gpus), "shards": len(shapes),
        "one_gpu_s": round(one, 2), "all_gpus_s": round(many, 2), "speedup": round(one / many, 3),
        "target": 1.9, "meets_target": one / many >= 1.9, "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    text = json.dumps(figure, indent=2) + "\n"
    print(text)
    atomic_write_text(RESULT, text)
    if options.out is not None:
        atomic_write_text(options.out / RESULT.name, text)


if __name__ == "__main__":
    main()
