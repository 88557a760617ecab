"""A kernel change, read off two recordings of one table: before (BEFORE) and after (AFTER).

- per configuration present in both: the geomean over the shapes both measured of its speedup
  (median time before / after), and the same for the cuBLAS rows (the session's drift: a control);
- per shape: the best ok configuration's time against the same shard's cuBLAS row, before and after.

Both recordings must hold the same table. With ``--other`` (other families' recordings of the same device), per
shape also the best of any family, before and after: what the change does to the dispatch's reach. Prints the
tables and writes a JSON (--out).

    python3 benchmarks/compare_recordings.py BEFORE AFTER [--other RECORDING ...] --out FILE.json
      (each a recording's path, or REV:PATH for the recording as committed at a git revision, e.g.
       159cd03:data/recordings/h200_gemm_wgmma.parquet)
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.stats import geomean  # noqa: E402

SHAPE = ["M", "N", "K"]


class RecordingError(Exception):
    """A recording that cannot be compared; the message names the file."""


def recording_bytes(source: str) -> bytes:
    """A recording's bytes: a file, or REV:PATH as committed at a git revision."""
    if Path(source).exists() or ":" not in source:
        try:
            return Path(source).read_bytes()
        except OSError as err:
            raise RecordingError(f"{source}: cannot be read ({err.strerror})") from err
    shown = subprocess.run(["git", "show", source], cwd=REPO, capture_output=True, check=False, timeout=60)
    if shown.returncode != 0:
        raise RecordingError(f"{source}: not in git ({shown.stderr.decode(errors='replace').strip()})")
    return shown.stdout


def load_recording(source: str) -> pd.DataFrame:
    """The ok rows of a recording (kernels and the cuBLAS baseline)."""
    try:
        frame = pd.read_parquet(io.BytesIO(recording_bytes(source)))
    except (OSError, ValueError) as err:
        raise RecordingError(f"{source}: not a readable recording ({err})") from err
    missing = {"kind", "status", "config_id", "median_ms", "table", *SHAPE} - set(frame.columns)
    if missing:
        raise RecordingError(f"{source}: not a recording (no column {', '.join(sorted(missing))})")
    return frame[frame["status"] == "ok"]


def speedups(*, before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per (configuration, shape) in both: median time before / after."""
    keys = ["config_id", *SHAPE]
    joined = before[keys + ["median_ms"]].merge(after[keys + ["median_ms"]], on=keys, suffixes=("_before", "_after"))
    joined["speedup"] = joined["median_ms_before"] / joined["median_ms_after"]
    return joined


def best_vs_cublas(frame: pd.DataFrame) -> pd.Series:
    """Per shape: cuBLAS's time over the best ok kernel's (> 1: the kernel is faster)."""
    kernels = frame[frame["kind"] == "kernel"].groupby(SHAPE)["median_ms"].min()
    cublas = frame[frame["kind"] == "baseline"].groupby(SHAPE)["median_ms"].min()
    return (cublas / kernels).dropna()


def best_of_families(frames: list[pd.DataFrame]) -> pd.Series:
    """Per shape: the best of each recording's best_vs_cublas (each family against its own shard's cuBLAS)."""
    return pd.concat([best_vs_cublas(frame) for frame in frames], axis=1).max(axis=1)


def reach_with_others(*, before: pd.DataFrame, after: pd.DataFrame, others: list[pd.DataFrame]) -> dict:
    """Per shape of both: the best of any family with the table's configurations before and after the change."""
    reach_before = best_of_families([before, *others])
    reach_after = best_of_families([after, *others])
    shapes = sorted(set(best_vs_cublas(before).index) & set(best_vs_cublas(after).index))
    pairs = [(float(reach_before[s]), float(reach_after[s])) for s in shapes]
    return {
        "any_family_per_shape": [{"M": int(m), "N": int(n), "K": int(k), "before": round(b, 4), "after": round(a, 4)}
                                 for (m, n, k), (b, a) in zip(shapes, pairs)],
        "any_family_geomean_before": round(geomean([b for b, _ in pairs]), 4),
        "any_family_geomean_after": round(geomean([a for _, a in pairs]), 4),
        "any_family_min_before": round(min(b for b, _ in pairs), 4),
        "any_family_min_after": round(min(a for _, a in pairs), 4),
    }


def compare(*, before: pd.DataFrame, after: pd.DataFrame) -> dict:
    """The figures: per configuration, the cuBLAS control, per shape."""
    joined = speedups(before=before, after=after)
    kernels = joined[joined["config_id"] != "cublas"]
    per_config = {cid: round(geomean(rows["speedup"].tolist()), 4) for cid, rows in kernels.groupby("config_id")}
    control = joined[joined["config_id"] == "cublas"]["speedup"].tolist()
    reach_before, reach_after = best_vs_cublas(before), best_vs_cublas(after)
    shapes = sorted(set(reach_before.index) & set(reach_after.index))
    return {
        "configurations": len(per_config),
        "kernel_speedup_geomean": round(geomean(kernels["speedup"].tolist()), 4),
        "per_configuration": dict(sorted(per_config.items(), key=lambda item: item[1])),
        "cublas_control_geomean": round(geomean(control), 4) if control else None,
        "per_shape": [{"M": int(m), "N": int(n), "K": int(k),
                       "best_vs_cublas_before": round(float(reach_before[(m, n, k)]), 4),
                       "best_vs_cublas_after": round(float(reach_after[(m, n, k)]), 4)} for m, n, k in shapes],
        "best_vs_cublas_geomean_before": round(geomean([float(reach_before[s]) for s in shapes]), 4),
        "best_vs_cublas_geomean_after": round(geomean([float(reach_after[s]) for s in shapes]), 4),
    }


def render(figures: dict, *, console: Console) -> None:
    """The per-configuration spread and the per-shape table."""
    per_config = list(figures["per_configuration"].values())
    console.print(f"{figures['configurations']} configurations: kernel time before / after, geomean "
                  f"{figures['kernel_speedup_geomean']:.4f}x (per configuration "
                  f"{min(per_config):.3f}-{max(per_config):.3f}x); "
                  f"cuBLAS rows (control) {figures['cublas_control_geomean']}x")
    table = Table(title="Best configuration per shape (x cuBLAS of the same shard)")
    for column in ("M", "N", "K", "before", "after", "change"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in figures["per_shape"]:
        before, after = row["best_vs_cublas_before"], row["best_vs_cublas_after"]
        table.add_row(str(row["M"]), str(row["N"]), str(row["K"]), f"{before:.3f}", f"{after:.3f}",
                      f"{100 * (after / before - 1):+.1f} %")
    console.print(table)
    console.print(f"geomean best x cuBLAS: {figures['best_vs_cublas_geomean_before']:.3f} -> "
                  f"{figures['best_vs_cublas_geomean_after']:.3f}")
    if "any_family_geomean_before" in figures:
        console.print(f"best of any family x cuBLAS over the same shapes: geomean "
                      f"{figures['any_family_geomean_before']:.4f} -> {figures['any_family_geomean_after']:.4f}, "
                      f"min {figures['any_family_min_before']:.3f} -> {figures['any_family_min_after']:.3f}")


def main() -> int:
    """Compare two recordings of one table and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="a recording, or REV:PATH as committed at a git revision")
    parser.add_argument("after", help="a recording, or REV:PATH")
    parser.add_argument("--other", action="append", default=[],
                        help="another family's recording of the same device (repeatable): best of any family per shape")
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    try:
        before, after = load_recording(options.before), load_recording(options.after)
        others = [load_recording(source) for source in options.other]
        tables = sorted(set(before["table"]) | set(after["table"]))
        if len(tables) != 1:
            raise RecordingError(f"{options.before}, {options.after}: more than one table ({', '.join(tables)})")
    except RecordingError as err:
        print(f"compare_recordings: {err}", file=sys.stderr)
        return 2
    figures = {"table": tables[0], "before": options.before, "after": options.after,
               **compare(before=before, after=after)}
    if others:
        figures |= {"others": options.other, **reach_with_others(before=before, after=after, others=others)}
    render(figures, console=Console(width=120))
    atomic_write_text(options.out, json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
