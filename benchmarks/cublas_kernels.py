"""Which kernels cuBLAS runs for each shape (torch.matmul, bf16, C = A·Bᵀ), by name, with their device time.

cuBLAS's kernel names carry its tiling (e.g. ``nvjet_sm90_tst_128x72_64x8_4x1_v_bz_TNT``: a 128 x 72 tile
of its own M x N, which is our N x M since it runs column-major, 64-wide k-tiles, 8 stages, a 4 x 1
cluster), so this is what the notes compare our grids against. Run on the GPU machine (torch):

    python benchmarks/cublas_kernels.py data/validation_shapes.csv [more CSVs] [--out FILE]

Each CSV has M,N,K rows ('#' comments and an M,N,K header are skipped). Prints one line per shape and
writes them, and a JSON twin, to --out (default benchmarks/results/cublas_kernels.txt).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402


def read_shapes(paths: list[Path]) -> list[tuple[int, int, int]]:
    """The M,N,K rows of the CSV files, in order (comments and the header skipped)."""
    shapes = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            text = line.strip()
            if not text or text.startswith("#") or text.lower().startswith("m,"):
                continue
            try:
                m, n, k = (int(x) for x in text.split(",")[:3])
            except ValueError:
                raise SystemExit(f"{path}:{number}: expected M,N,K integers, got '{text}'") from None
            shapes.append((m, n, k))
    return shapes


def kernels_of(*, m: int, n: int, k: int, repeats: int) -> dict[str, float]:
    """Mean device time in µs of each kernel ``a @ b.T`` launches, by kernel name (torch's profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b.T
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(repeats):
            a @ b.T
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times.setdefault(event.name, []).append(event.device_time)
    return {name: sum(values) / len(values) for name, values in times.items()}


def main() -> None:
    """Profile each shape, print and write one line per shape."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", type=Path, nargs="+", help="CSV files of M,N,K rows")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cublas_kernels.txt")
    args = parser.parse_args()
    rows, lines = [], []
    for m, n, k in read_shapes(args.shapes):
        found = kernels_of(m=m, n=n, k=k, repeats=args.repeats)
        line = f"{m}x{n}x{k}: " + "; ".join(f"{name[:150]} {us:.1f} us" for name, us in found.items())
        print(line, flush=True)
        lines.append(line)
        rows.append({"M": m, "N": n, "K": k, "kernels_us": found})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
