"""Profile speed on the real H200 recordings grown to 1 M and 10 M rows: every `tunetable profile` view, end to end.

Inputs: the rows of data/recordings/h200_gemm_mma.parquet and h200_gemm_wgmma.parquet (real H200
measurements, cuBLAS rows included), copied until the size is reached; each copy gets its own shape
key (M + 16384 * copy), so the views see that many distinct shapes. No timing is invented: every
value is one the project's cuda backend recorded. Two formats of the same rows:

- a kbench-style pickle (merged_df: mesh_idx, name, met (ms), iters, spec; a `file:`), what kprofile reads;
- a recording-style parquet (every recording column, samples included), what `profile` reads from
  data/recordings/ and results/ranked/.

Each view runs as its own `python -m tunetable profile ...` process; the figures are its wall time,
its peak resident memory (wait4) and the bytes it printed. Targets (issue #22): every view <= 10 s at
1 M rows and <= 100 s at 10 M, peak memory <= 4 GB at 10 M, printed output bounded.

Also: the engine comparison kept from before (profile + rank + select in-process, polars vs the
pandas way kprofile does it) on the 1 M-row input.

    python benchmarks/profile_speed.py                 # 1 M and 10 M (about half an hour on 2 cores)
    python benchmarks/profile_speed.py --sizes 1000000 # 1 M only
    python benchmarks/profile_speed.py --engine-only   # only the engine comparison, the views' figures kept

Writes benchmarks/results/profile_speed.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable import profile as views  # noqa: E402
from tunetable import rank, resultset  # noqa: E402
from tunetable import select_winners as select  # noqa: E402

RECORDINGS = [REPO / "data" / "recordings" / "h200_gemm_mma.parquet",
              REPO / "data" / "recordings" / "h200_gemm_wgmma.parquet"]
OUT = Path(__file__).with_name("results")
M_STRIDE = 16384
SIZES = (1_000_000, 10_000_000)
TARGET_S = {1_000_000: 10.0, 10_000_000: 100.0}
TARGET_PEAK_GB = 4.0
# view name -> extra arguments (the diff view reads its input twice: baseline and current)
VIEWS = {
    "default": [],
    "-t 0.05": ["-t", "0.05"],
    "--top-fraction 0.1": ["--top-fraction", "0.1"],
    "-r": ["-r"],
    "--head 3 --tail 3": ["--head", "3", "--tail", "3"],
    "-v": ["-v"],
    "-c": ["-c"],
    "-d": ["-d"],
    "-o": ["-o", "{out}/selected.yaml"],
}


def recording_rows() -> pl.DataFrame:
    """Both recordings' rows with one common column set (each family's parameters, null in the other)."""
    frames = [pl.read_parquet(path) for path in RECORDINGS]
    return pl.concat(frames, how="diagonal_relaxed")


def grown(*, rows: pl.DataFrame, size: int, start: int = 0) -> pl.DataFrame:
    """Rows ``start`` to ``size`` of ``rows`` copied over and over; copy c shifts M by M_STRIDE * c."""
    first, last = start // rows.height, -(-size // rows.height)
    copies = [rows.with_columns(pl.lit(c, dtype=pl.Int64).alias("copy")) for c in range(first, last)]
    frame = pl.concat(copies, rechunk=True).slice(start - first * rows.height, size - start)
    m = pl.col("M") + pl.col("copy") * M_STRIDE
    spec = pl.col("spec").str.replace(r"/\$M=\d+", "") + pl.lit("/$M=") + m.cast(pl.Utf8)
    return frame.with_columns(m.alias("M"), spec.alias("spec")).drop("copy")


def write_inputs(*, rows: pl.DataFrame, size: int, folder: Path, batch: int = 1_000_000) -> dict[str, Path]:
    """The kbench-style pickle and the recording-style parquet of the grown rows, built a batch at a time."""
    import pyarrow.parquet as pq

    parquet = folder / "recording.parquet"
    kbench_parts = []
    writer = None
    for start in range(0, size, batch):
        part = grown(rows=rows, size=min(size, start + batch), start=start)
        table = part.to_arrow()
        writer = writer or pq.ParquetWriter(parquet, table.schema)
        writer.write_table(table)
        kbench_parts.append(part.select("mesh_idx", "name", "met (ms)", "iters", "spec"))
    writer.close()
    kbench = pl.concat(kbench_parts, rechunk=True).to_pandas()
    del kbench_parts
    pickled = folder / "kbench.pkl"
    with open(pickled, "wb") as handle:
        pickle.dump({"name": "gemm", "file": "$KERNEL_BENCHMARKS_ROOT/gpu/bench_gemm.mojo", "merged_df": kbench,
                     "build_df": pd.DataFrame()}, handle, protocol=4)
    return {"kbench pickle": pickled, "recording parquet": parquet}


# A small process that starts each view and reports its rusage: a child forked from this (large) process
# would inherit its peak resident size, so the children come from a process that never grows.
LAUNCHER = """
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    with open(job["stdout"], "wb") as out:
        start = time.perf_counter()
        child = subprocess.Popen(job["argv"], stdout=out, stderr=subprocess.STDOUT, cwd=job["cwd"], env=job["env"])
        _, status, usage = os.wait4(child.pid, 0)
    print(json.dumps({"wall_s": time.perf_counter() - start, "maxrss_kb": usage.ru_maxrss,
                      "code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Launcher:
    """The small launcher process, started before any input is built."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def run(self, *, argv: list[str], cwd: Path, stdout: Path) -> dict:
        """One command's wall seconds, peak resident KB and exit status."""
        job = {"argv": argv, "cwd": str(cwd), "stdout": str(stdout), "env": {**os.environ, "COLUMNS": "160"}}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        """Stop the launcher."""
        self.process.stdin.close()
        self.process.wait()


def run_view(*, launcher: Launcher, path: Path, args: list[str], folder: Path) -> dict[str, float | int]:
    """One `tunetable profile` process: wall seconds, peak RSS (GB), printed bytes."""
    out = folder / "out"
    out.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "tunetable", "profile", str(path)]
    if args == ["-d"]:
        argv.append(str(path))
    argv += [a.replace("{out}", str(out)) for a in args] + ["--out-dir", str(out)]
    result = launcher.run(argv=argv, cwd=folder, stdout=folder / "stdout.txt")
    printed = (folder / "stdout.txt").stat().st_size
    if result["code"] != 0:
        tail = (folder / "stdout.txt").read_text(errors="replace")[-600:]
        raise SystemExit(f"profile {' '.join(args)} on {path.name} failed ({result['code']}):\n{tail}")
    return {"wall_s": round(result["wall_s"], 2), "peak_gb": round(result["maxrss_kb"] / 2**20, 3),
            "printed_bytes": printed}


def engine_polars(raw: pl.DataFrame) -> dict[str, float]:
    """In-process: parse specs, default view, --top-fraction 0.1 common spec, rank and select."""
    timings = {}
    start = time.perf_counter()
    loaded = resultset.from_frame(frame=raw.select("mesh_idx", "name", "met (ms)", "iters", "spec", "config_id",
                                                   "kind", "status", "median_ms"), path="grown", name="gemm")
    timings["parse_specs"] = time.perf_counter() - start
    metric = views.Metric("met (ms)", False)
    t = time.perf_counter()
    ordering = views.order_rows(frame=loaded.frame, metric=metric, shape=loaded.shape)
    views.summary(result=loaded, metric=metric, shape=loaded.shape, ordering=ordering)
    subset = views.top_fraction(frame=loaded.frame, metric=metric, fraction=0.1, shape=loaded.shape,
                                columns=[*loaded.shape, *loaded.parameters], ordering=ordering)
    views.common_spec(subset=subset, parameters=loaded.parameters, shape=loaded.shape)
    timings["profile_views"] = time.perf_counter() - t
    t = time.perf_counter()
    ranked = rank.rank_rows(rows=loaded.frame, parameters=loaded.parameters).ranked
    select.build_manifest(table="gemm", kernel="gemm_mma", ranked=ranked)
    timings["rank_select"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    return timings


def _parse_spec_kprofile(spec: str) -> dict:
    """kprofile's spec parse per row (values typed by literal parsing here, where kprofile calls eval)."""
    import ast

    out = {"name": spec.split("/")[0]}
    for token in spec.split("/")[1:]:
        if "=" not in token:   # the cuBLAS rows' "cublas" marker
            continue
        key, value = token.split("=", 1)
        try:
            out[key.replace("$", "")] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key.replace("$", "")] = value
    return out


def engine_pandas(raw: pl.DataFrame) -> dict[str, float]:
    """The same work the way kprofile does it: a per-row spec parse, per-shape sort / ratio / value_counts loops."""
    frame = raw.select("mesh_idx", "spec", "met (ms)", "config_id", "kind").to_pandas()
    timings = {}
    start = time.perf_counter()
    parsed = pd.DataFrame([_parse_spec_kprofile(s) for s in frame["spec"]])
    df = pd.concat([frame, parsed.drop(columns=[c for c in parsed.columns if c in frame.columns])], axis=1)
    df = df[df["kind"] == "kernel"]
    parameters = [c for c in parsed.columns if c not in ("name", "M", "N", "K")]
    timings["parse_specs"] = time.perf_counter() - start
    t = time.perf_counter()
    for _, group in df.groupby(["M", "N", "K"], sort=False):
        tune = group.sort_values("met (ms)").reset_index(drop=True)
        tune["ratio"] = tune["met (ms)"] / tune["met (ms)"].iloc[0]
        top = tune.head(max(1, int(np.ceil(0.1 * len(tune)))))
        {p: top[p].value_counts().idxmax() for p in parameters if top[p].notna().any()}
    timings["profile_views"] = time.perf_counter() - t
    t = time.perf_counter()
    ranked = df.sort_values(["M", "N", "K", "met (ms)", "config_id"])
    ranked["rank"] = ranked.groupby(["M", "N", "K"]).cumcount() + 1
    winners = ranked[ranked["rank"] == 1]
    for _, group in winners.groupby(["N", "K"]):
        group.sort_values("M")["config_id"].tolist()
    timings["rank_select"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    return timings


def engine_figures(source: pl.DataFrame) -> dict:
    """The in-process engine comparison on 1 M grown rows (polars best of 3, pandas once)."""
    frame = grown(rows=source, size=1_000_000)
    load_before = os.getloadavg()[0]
    polars_times = min((engine_polars(frame) for _ in range(3)), key=lambda t: t["total"])
    pandas_times = engine_pandas(frame)
    return {"rows": frame.height, "polars_s": polars_times, "pandas_s": pandas_times,
            "speedup": pandas_times["total"] / polars_times["total"], "load_average_1min_before": round(load_before, 2)}


def main() -> None:
    """Build each size from the recordings, time every view on both formats, print and write the figures."""
    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--engine-only", action="store_true",
                        help="Only the in-process engine comparison; the views' figures on file are kept.")
    args = parser.parse_args()
    console = Console()
    source = recording_rows()
    if args.engine_only:
        previous = json.loads((OUT / "profile_speed.json").read_text())
        engine = engine_figures(source)
        write_results(console=console, result={**previous, "engine": engine})
        return
    launcher = Launcher()
    load_before = os.getloadavg()[0]
    figures: list[dict] = []
    engine: dict = {}
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="profile_speed_") as tmp:
            folder = Path(tmp)
            if size == 1_000_000:
                engine = engine_figures(source)
            inputs = write_inputs(rows=source, size=size, folder=folder)
            for fmt, path in inputs.items():
                for view, extra in VIEWS.items():
                    result = run_view(launcher=launcher, path=path, args=extra, folder=folder)
                    figures.append({"rows": size, "input": fmt, "view": view, **result})
                    console.print(f"{size:>10,} {fmt:<18} {view:<22} {result['wall_s']:7.2f} s "
                                  f"{result['peak_gb']:6.2f} GB {result['printed_bytes']:>8,} B", markup=False,
                                  soft_wrap=True)
    launcher.close()
    write_results(console=console, result={
        "source": [str(p.relative_to(REPO)) for p in RECORDINGS], "m_stride": M_STRIDE, "views": figures,
        "engine": engine, "targets": {"wall_s": TARGET_S, "peak_gb_at_10M": TARGET_PEAK_GB},
        "cpus": os.cpu_count(), "load_average_1min_before": round(load_before, 2),
        "note": "wall-clock seconds on a shared machine; other processes inflate them (see load average)"})


def write_results(*, console, result: dict) -> None:
    """Print the figures and write benchmarks/results/profile_speed.json and .md."""
    from tunetable.console_table import ConsoleTable, print_table

    figures, engine, load_before = result["views"], result["engine"], result["load_average_1min_before"]
    met = all(f["wall_s"] <= TARGET_S.get(f["rows"], float("inf")) for f in figures) and all(
        f["peak_gb"] <= TARGET_PEAK_GB for f in figures if f["rows"] >= 10_000_000)
    result["met"] = met
    table = ConsoleTable(title="tunetable profile, one process per view (wall s / peak GB / printed KB)")
    for column in ("rows", "input", "view", "wall s", "peak GB", "printed KB"):
        table.add_column(column, justify="left" if column in ("input", "view") else "right")
    for f in figures:
        table.add_row(f"{f['rows']:,}", f["input"], f["view"], f"{f['wall_s']:.2f}", f"{f['peak_gb']:.2f}",
                      f"{f['printed_bytes'] / 1024:.1f}")
    print_table(console, table)
    engine_line = ""
    if engine:
        engine_line = (f"Engine, {engine['rows']:,} rows in-process (profile views + rank + select): polars "
                       f"{engine['polars_s']['total']:.2f} s, pandas the way kprofile does it "
                       f"{engine['pandas_s']['total']:.2f} s ({engine['speedup']:.1f}x; 1-min load average before: "
                       f"{engine.get('load_average_1min_before', load_before):.2f}).")
        console.print(engine_line, markup=False, soft_wrap=True)
    targets = (f"Targets (<= 10 s at 1 M, <= 100 s and <= {TARGET_PEAK_GB:g} GB peak at 10 M): "
               f"{'met' if met else 'NOT met'} ({result['cpus']} CPUs, 1-min load average before the views: "
               f"{load_before:.2f}).")
    console.print(targets, markup=False, soft_wrap=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "profile_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# profile_speed: every `tunetable profile` view on the H200 recordings grown to 1 M / 10 M rows", "",
             f"Rows copied from {', '.join(result['source'])} (copy c: M + {M_STRIDE} * c); one process per view.",
             "", "| rows | input | view | wall s | peak GB | printed KB |", "|---:|---|---|---:|---:|---:|"]
    lines += [f"| {f['rows']:,} | {f['input']} | `{f['view']}` | {f['wall_s']:.2f} | {f['peak_gb']:.2f} | "
              f"{f['printed_bytes'] / 1024:.1f} |" for f in figures]
    lines += ["", engine_line] if engine_line else []
    lines += ["", targets]
    (OUT / "profile_speed.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
