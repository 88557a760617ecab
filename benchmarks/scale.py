"""Scale: each size grown 10x, the time of each command and the fitted growth exponent, on this machine.

Measured (CPU seconds of the command and its children, user + sys, and wall seconds):
  - `snakemake -n` with every shard missing, replay and live (`--config 'bench={backend: cuda}'`);
    the floor beside them: a Snakefile of N trivial jobs (what Snakemake itself costs per job);
  - a no-op `snakemake --cores 2` with every shard on disk and every output up to date, replay (`noop`) and
    live (`noop_live`: `--config 'bench={backend: cuda}'`, every shard under the cuda backend's content key);
  - `tunetable grid` of about 1 k / 10 k / 100 k configurations (`--param` overrides of gemm_mma);
  - `tunetable codegen` of a manifest of 100 / 1 k / 10 k entries;
  - `tunetable rank` and `tunetable metrics` of one table at 55 / 550 / 5,500 shapes (output sizes too);
  - `tunetable profile` views (owned by #23's work; measured here as the CLI stands) on 10 k / 100 k /
    1 M rows.

SCALE FIXTURES, NOT MEASUREMENTS. The large inputs are built from the committed H200 recordings: the
55 real shards of each table are replayed, then copied for the extra (N, K) pairs with their M, N, K
relabelled and their provenance marked `scale_fixture` (the timings inside are the real shard's).
They exist to time the tools on many shards; no figure about a kernel comes from them.

    python benchmarks/scale.py                    # every size (the 20 k-shard no-op builds ~20 k shards)
    python benchmarks/scale.py --quick            # the two smaller sizes of each
    python benchmarks/scale.py --only dag,grid    # some measurements

Writes benchmarks/results/scale.json and scale.md.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tunetable.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results")
BIN = Path(sys.executable).parent
TIMEOUT_S = 900
SETUP_TIMEOUT_S = 3 * 3600   # the first main job over 20 k fixture shards (rank of ~7 k shards per table, ...)
TARGETS = {"dag_replay": 10.0, "dag_live": 10.0, "noop": 5.0, "noop_live": 5.0, "grid": 10.0, "codegen": 2.0,
           "profile": 10.0}
# --param overrides of gemm_mma (one group after the override, duplicates dropped): ~1 k, 10 k, 100 k.
GRIDS = {
    1_000: {"BLOCK_M": "16,32,64,128,256", "BLOCK_N": "32,64,128,256", "BLOCK_K": "32,64,128", "STAGES": "2,3,4,6",
            "SPLIT_K": "1,2", "WARPS_M": "1,2", "WARPS_N": "2", "WARPS_K": "1", "GROUP_M": "8"},
    10_000: {"BLOCK_M": "16,32,64,128,256", "BLOCK_N": "32,64,128,256", "BLOCK_K": "32,64,128",
             "STAGES": "2,3,4,5,6,7,8", "SPLIT_K": "1,2,4,8", "WARPS_M": "1,2,4", "WARPS_N": "2", "WARPS_K": "1,2",
             "GROUP_M": "8"},
    100_000: {"BLOCK_M": "16,32,64,128,256", "BLOCK_N": "32,64,128,256", "BLOCK_K": "32,64,128",
              "STAGES": "2,3,4,5,6,7,8", "SPLIT_K": "1,2,3,4,6,8", "WARPS_M": "1,2,4", "WARPS_N": "1,2,4,8",
              "WARPS_K": "1,2,4", "GROUP_M": "8"},
}
NOTE_KEYS = ("md_bytes", "csv_bytes", "png_width_px", "output_bytes", "first_run_cpu_s")
MEASUREMENTS = ("dag", "noop", "noop_live", "grid", "codegen", "tables")   # --only names, in the order they run
PROFILE_VIEWS = {"default": [], "-r": ["-r"], "-c": ["-c"], "-t 0.1": ["-t", "0.1"], "--head 3": ["--head", "3"]}


@dataclass(frozen=True)
class Timed:
    """One command's cost: CPU seconds (itself and its children), wall seconds, exit status."""

    cpu_s: float
    wall_s: float
    returncode: int
    output: str


def tool_env() -> dict[str, str]:
    """This interpreter's tools first on PATH, no analytics, a fixed width for rich."""
    env = dict(os.environ, DVC_NO_ANALYTICS="1", COLUMNS="160")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def timed(args: list[str], *, cwd: Path, timeout: float = TIMEOUT_S) -> Timed:
    """Run a command (wall seconds only; run_cpu adds the CPU seconds)."""
    start = time.perf_counter()
    process = subprocess.Popen(args, cwd=cwd, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        return Timed(cpu_s=math.nan, wall_s=timeout, returncode=124, output=output)
    return Timed(cpu_s=math.nan, wall_s=time.perf_counter() - start, returncode=process.returncode, output=output)


def run_cpu(args: list[str], *, cwd: Path, timeout: float = TIMEOUT_S) -> Timed:
    """``timed`` with CPU seconds: the growth of this process's RUSAGE_CHILDREN across the command."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = timed(args, cwd=cwd, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(cpu_s=cpu if result.returncode != 124 else math.nan, wall_s=result.wall_s,
                 returncode=result.returncode, output=result.output)


def must(result: Timed, what: str) -> Timed:
    """Stop loudly when a command that builds a fixture failed."""
    if result.returncode != 0:
        raise SystemExit(f"error: {what} failed (exit {result.returncode}):\n{result.output[-3000:]}")
    return result


def fitted_exponent(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(time) on log(size): 1 is linear, 2 quadratic."""
    usable = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y and y > 0 and not math.isnan(y)]
    if len(usable) < 2:
        return None
    mean_x = sum(x for x, _ in usable) / len(usable)
    mean_y = sum(y for _, y in usable) / len(usable)
    spread = sum((x - mean_x) ** 2 for x, _ in usable)
    return sum((x - mean_x) * (y - mean_y) for x, y in usable) / spread if spread else None


def last_step_exponent(points: list[tuple[float, float]]) -> float | None:
    """Growth between the two largest sizes, log(t2 / t1) / log(s2 / s1): the start-up cost of a command
    (~1 s of imports) flattens the all-point fit at small sizes, this is the growth where it matters."""
    usable = [(x, y) for x, y in points if x > 0 and y and y > 0 and not math.isnan(y)]
    if len(usable) < 2:
        return None
    (x1, y1), (x2, y2) = usable[-2], usable[-1]
    return math.log(y2 / y1) / math.log(x2 / x1) if x2 != x1 else None


def copy_project(dest: Path) -> Path:
    """The project's files (tracked + untracked not ignored), without DVC state: Snakemake needs no git."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file() and not name.startswith((".dvc/", "dvc.lock")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def nk_pairs(count: int) -> list[list[int]]:
    """The five committed (N, K) pairs first, then (4096 + 64 i, 4096) pairs: scale-fixture shapes."""
    committed = [[4096, 4096], [14336, 4096], [4096, 14336], [6144, 4096], [8192, 8192]]
    extra = [[4096 + 64 * i, 4096] for i in range(1, count)]
    return (committed + [p for p in extra if p not in committed])[:count]


def set_pairs(project: Path, pairs: list[list[int]]) -> None:
    """Every table of the copy's params.yaml gets these (N, K) pairs (M values unchanged)."""
    params = project / "params.yaml"
    line = "      NK: [" + ", ".join(f"[{n}, {k}]" for n, k in pairs) + "]"
    text, count = re.subn(r"(?m)^      NK: .*$", line, params.read_text())
    if count != len(m_counts(project)):
        raise SystemExit(f"error: params.yaml: {count} 'NK:' lines for {len(m_counts(project))} tables")
    params.write_text(text)


def m_counts(project: Path, *, backend: str = "replay") -> dict[str, int]:
    """M values per table of the plan (replay: the tables whose recording is present)."""
    from tunetable.workflow import run_plan
    from tunetable.params import load_params

    here = Path.cwd()
    os.chdir(project)  # the plan reads params.yaml's relative paths, as the Snakefile does
    try:
        params = load_params("params.yaml")
        plan = run_plan.make_plan({**params, "bench": {**params["bench"], "backend": backend}})
        return {spec.name: len(spec.m_values) for spec in plan.tables}
    finally:
        os.chdir(here)


def pairs_for(project: Path, shards: int) -> int:
    """(N, K) pairs giving about ``shards`` shards over the replayed tables."""
    return max(1, round(shards / sum(m_counts(project).values())))


def fill_shards(project: Path, *, progress: Progress, tables: tuple[str, ...] | None = None,
                backend: str = "replay") -> int:
    """Replay the committed shapes' real shards, then write a relabelled copy of one for every other
    shard of the plan (scale fixture: same M, the N and K of the new pair, provenance `scale_fixture`).

    With ``backend="cuda"`` the copies fill the live plan (the cuda backend's content key: its shard
    folders) and the replayed shards leave results/raw, so that it holds the live plan's shards only."""
    from tunetable import paths
    from tunetable.workflow import run_plan
    from tunetable.params import load_params
    from tunetable.results import read_shard, write_shard

    here = Path.cwd()
    os.chdir(project)  # the plan reads params.yaml's relative paths, as the Snakefile does
    try:
        params = load_params("params.yaml")
        params = {**params, "bench": {**params["bench"], "backend": "replay"}}
        plan = run_plan.make_plan(params)
        specs = [spec for spec in plan.tables if tables is None or spec.name in tables]
        real: dict[tuple[str, int], Path] = {}
        for spec in specs:
            committed = spec.shapes()[: 5 * len(spec.m_values)]
            shape_flags = [flag for m, n, k in committed for flag in ("--shape", f"{m},{n},{k}")]
            must(timed([sys.executable, "-m", "tunetable", "bench", "--table", spec.name, "--backend", "replay",
                        "--results-root", "results", *shape_flags], cwd=project), f"replaying {spec.name}")
            for m, n, k in committed:
                real.setdefault((spec.name, m), paths.raw_shard(spec.name, plan.keys[spec.name], m, n, k))
        target = run_plan.make_plan({**params, "bench": {**params["bench"], "backend": backend}})
        missing = [s for s in run_plan.missing_shards(target) if s.table in {spec.name for spec in specs}]
        task = progress.add_task("scale-fixture shards (relabelled copies of real ones)", total=len(missing))
        cache: dict[tuple[str, int], Any] = {}
        for shard in missing:
            source = real[(shard.table, shard.m)]
            if (shard.table, shard.m) not in cache:
                cache[(shard.table, shard.m)] = read_shard(source)
            payload = cache[(shard.table, shard.m)]
            frame = payload["merged_df"].copy()
            frame["N"] = shard.n
            frame["K"] = shard.k
            frame["spec"] = frame["spec"].str.replace(r"\$N=\d+/\$K=\d+$", f"$N={shard.n}/$K={shard.k}", regex=True)
            provenance = {**payload["provenance"], "scale_fixture": f"copy of {source} relabelled (not a measurement)"}
            write_shard(shard.path, table=shard.table, rows=frame.to_dict("records"),
                        build_rows=payload["build_df"].to_dict("records"), provenance=provenance)
            progress.advance(task)
        if target.keys != plan.keys:   # live: the replayed sources are not the live plan's shards
            for spec in specs:
                shutil.rmtree(paths.raw_dir(spec.name, plan.keys[spec.name]))
        return len(missing)
    finally:
        os.chdir(here)


def measure_dag(sizes: list[int], *, console: Console) -> dict[str, Any]:
    """`snakemake -n` with every shard missing (replay and live), and Snakemake's own floor per job."""
    rows: dict[str, list[dict[str, Any]]] = {"dag_replay": [], "dag_live": [], "snakemake_floor": []}
    with tempfile.TemporaryDirectory(prefix="tunetable-scale-") as tmp:
        project = copy_project(Path(tmp) / "repo")
        floor = Path(tmp) / "floor"
        floor.mkdir()
        for size in sizes:
            pairs = pairs_for(project, size)
            set_pairs(project, nk_pairs(pairs))
            shards = pairs * sum(m_counts(project).values())
            for name, backend in (("dag_replay", "replay"), ("dag_live", "cuda")):
                count = pairs * sum(m_counts(project, backend=backend).values())
                with console.status(f"{name}: snakemake -n at {count} shards"):
                    result = run_cpu([str(BIN / "snakemake"), "-n", "--quiet", "--config",
                                      f"bench={{backend: {backend}}}"], cwd=project)
                rows[name].append({"size": count, "cpu_s": result.cpu_s, "wall_s": result.wall_s,
                                   "ok": result.returncode == 0})
            (floor / "Snakefile").write_text(
                f'rule all:\n    input: [f"out/{{i}}.txt" for i in range({shards})]\n'
                'rule make:\n    output: "out/{i}.txt"\n    log: "logs/{i}.log"\n    shell: "touch {output}"\n')
            with console.status(f"floor: a Snakefile of {shards} trivial jobs"):
                result = run_cpu([str(BIN / "snakemake"), "-n", "--quiet", "--cores", "1"], cwd=floor)
            rows["snakemake_floor"].append({"size": shards, "cpu_s": result.cpu_s, "wall_s": result.wall_s,
                                            "ok": result.returncode == 0})
    return rows


NOOP_BACKENDS = {"noop": "replay", "noop_live": "cuda"}   # row name -> the backend of the main job


def measure_noop(sizes: list[int], *, console: Console, rounds: int, name: str = "noop") -> dict[str, Any]:
    """A no-op main job with every shard on disk (scale fixture) and every output up to date.

    ``noop`` is the replay main job (`snakemake --cores 2`); ``noop_live`` the live one (`--config
    'bench={backend: cuda}'`: every shard present under the cuda backend's content key). There is no
    GPU here, so a live run that is not a no-op would try to measure: it stops with an error instead.
    """
    backend = NOOP_BACKENDS[name]
    config = [] if backend == "replay" else ["--config", f"bench={{backend: {backend}}}"]
    main_job = [str(BIN / "snakemake"), "--cores", "2", *config]
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="tunetable-scale-") as tmp:
            project = copy_project(Path(tmp) / "repo")
            pairs = pairs_for(project, size)
            set_pairs(project, nk_pairs(pairs))
            shards = pairs * sum(m_counts(project, backend=backend).values())
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console) as progress:
                fill_shards(project, progress=progress, backend=backend)
            dry = must(timed([str(BIN / "snakemake"), "-n", *main_job[1:]], cwd=project), f"{name}: the dry run")
            if re.search(r"(?m)^(bench|replay|compile)\w*\s", dry.output):
                raise SystemExit(f"error: {name} at {shards} shards: the fixture leaves shards to measure or replay "
                                 f"(the {backend} plan's shards are not all on disk):\n{dry.output[-3000:]}")
            with console.status(f"{name}: the first main job over {shards} shards (rank, select, metrics, codegen)"):
                first = must(run_cpu(main_job, cwd=project, timeout=SETUP_TIMEOUT_S), f"{name}: the first main job")
            samples = []
            for _ in range(rounds):
                with console.status(f"{name}: {' '.join(main_job[1:])} at {shards} shards"):
                    result = must(run_cpu(main_job, cwd=project), f"{name}: the no-op run")
                if "Nothing to be done" not in result.output:
                    raise SystemExit(f"error: {name}: the run at {shards} shards was not a no-op:\n"
                                     f"{result.output[-3000:]}")
                samples.append(result)
            best = min(samples, key=lambda r: r.cpu_s)
            rows.append({"size": shards, "cpu_s": best.cpu_s, "wall_s": best.wall_s, "ok": True,
                         "first_run_cpu_s": round(first.cpu_s, 1), "first_run_wall_s": round(first.wall_s, 1)})
    return {name: rows}


def measure_grid(sizes: list[int], *, console: Console) -> dict[str, Any]:
    """`tunetable grid` of about 1 k / 10 k / 100 k configurations; its output in bytes."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="tunetable-scale-") as tmp:
        project = copy_project(Path(tmp) / "repo")
        for size in sizes:
            overrides = [a for name, values in GRIDS[size].items() for a in ("--param", f"{name}={values}")]
            with console.status(f"grid: ~{size} configurations"):
                result = run_cpu([sys.executable, "-m", "tunetable", "grid", "--table", "gemm_mma", *overrides,
                                  "--out", str(Path(tmp) / "grid.json")], cwd=project)
            expanded = re.search(r"expanded \(groups, duplicates removed\)\D+(\d+)", result.output)
            rows.append({"size": int(expanded.group(1)) if expanded else size, "cpu_s": result.cpu_s,
                         "wall_s": result.wall_s, "ok": result.returncode == 0, "output_bytes": len(result.output)})
    return {"grid": rows}


def manifest_of(entries: int) -> str:
    """gemm_mma's committed manifest with its entries repeated for other N (scale fixture)."""
    text = (ROOT / "manifests" / "gemm_mma.yaml").read_text()
    head, body = text.split("params:\n", 1)
    items = [e for e in re.split(r"(?m)^(?=  - <<: \*defaults)", body) if e.strip()]
    out: list[str] = []
    round_ = 0
    while len(out) < entries:
        shift = 100_000 * round_
        out.extend(re.sub(r"(?m)^    N: (\d+)$", lambda m: f"    N: {int(m.group(1)) + shift}", e) for e in items)
        round_ += 1
    return head + "params:\n" + "".join(out[:entries])


def measure_codegen(sizes: list[int], *, console: Console) -> dict[str, Any]:
    """`tunetable codegen` of a manifest of 100 / 1 k / 10 k entries into a marker region."""
    rows = []
    snippet = ROOT / "kernels" / "families" / "gemm_mma" / "gemm_mma.snippet"
    with tempfile.TemporaryDirectory(prefix="tunetable-scale-") as tmp:
        folder = Path(tmp)
        for size in sizes:
            (folder / "m.yaml").write_text(manifest_of(size))
            (folder / "t.py").write_text("X = [\n    # BEGIN-TUNING-LIST-GEMM_MMA\n    # END-TUNING-LIST-GEMM_MMA\n]\n")
            with console.status(f"codegen: {size} entries"):
                result = run_cpu([sys.executable, "-m", "tunetable", "codegen", "--manifest", "m.yaml", "--snippet",
                                  str(snippet), "--target", "t.py", "--begin-marker", "BEGIN-TUNING-LIST-GEMM_MMA",
                                  "--end-marker", "END-TUNING-LIST-GEMM_MMA", "--source-label", "m.yaml"],
                                 cwd=folder)
            rows.append({"size": size, "cpu_s": result.cpu_s, "wall_s": result.wall_s, "ok": result.returncode == 0})
    return {"codegen": rows}


def measure_tables(sizes: list[int], *, console: Console) -> dict[str, Any]:
    """`tunetable rank` and `metrics` of gemm_mma at 55 / 550 / 5,500 shapes; output sizes; profile views."""
    rank_rows, metrics_rows, profile_rows = [], [], {view: [] for view in PROFILE_VIEWS}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="tunetable-scale-") as tmp:
            project = copy_project(Path(tmp) / "repo")
            pairs = max(1, size // m_counts(project)["gemm_mma"])
            set_pairs(project, nk_pairs(pairs))
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console) as progress:
                fill_shards(project, progress=progress, tables=("gemm_mma",))
            raw = project / "results" / "raw" / "gemm_mma"
            shards = sorted(str(path.relative_to(project)) for path in raw.rglob("*.pkl"))
            shapes = len(shards)
            ranked = project / "results" / "ranked" / "gemm_mma.parquet"
            with console.status(f"rank: {shapes} shapes"):
                result = must(run_cpu([sys.executable, "-m", "tunetable", "rank", "--table", "gemm_mma", "--out",
                                       str(ranked), *shards], cwd=project), "rank")
            rank_rows.append({"size": shapes, "cpu_s": result.cpu_s, "wall_s": result.wall_s, "ok": True,
                              "md_bytes": ranked.with_suffix(".md").stat().st_size,
                              "csv_bytes": ranked.with_suffix(".csv").stat().st_size})
            must(run_cpu([sys.executable, "-m", "tunetable", "select", "--table", "gemm_mma", "--ranked", str(ranked),
                          "--out", "manifests/gemm_mma.yaml"], cwd=project), "select")
            png = project / "results" / "plots" / "gemm_mma.png"
            with console.status(f"metrics: {shapes} shapes"):
                result = must(run_cpu([sys.executable, "-m", "tunetable", "metrics", "--table", "gemm_mma",
                                       "--ranked", str(ranked), "--png", str(png), *shards], cwd=project), "metrics")
            width = int.from_bytes(png.read_bytes()[16:20], "big")
            metrics_rows.append({"size": shapes, "cpu_s": result.cpu_s, "wall_s": result.wall_s, "ok": True,
                                 "png_width_px": width, "png_bytes": png.stat().st_size})
            import polars as pl

            total_rows = pl.scan_parquet(ranked).select(pl.len()).collect().item()
            for view, flags in PROFILE_VIEWS.items():
                with console.status(f"profile {view}: {shapes} shards"):
                    result = run_cpu([sys.executable, "-m", "tunetable", "profile", *flags, *shards], cwd=project,
                                     timeout=300)
                profile_rows[view].append({"size": total_rows, "cpu_s": result.cpu_s, "wall_s": result.wall_s,
                                           "ok": result.returncode == 0, "output_bytes": len(result.output),
                                           "timed_out": result.returncode == 124})
    return {"rank": rank_rows, "metrics": metrics_rows,
            **{f"profile {view}": rows for view, rows in profile_rows.items()}}


def joined(rows: list[dict[str, Any]], key: str, form: str) -> str:
    """One value per size, ``a / b / c``."""
    return " / ".join(form.format(row[key]) for row in rows)


def report_markdown(report: dict[str, Any]) -> str:
    """The figures as Markdown (benchmarks/results/scale.md)."""
    lines = ["# Scale on this machine (2 CPU cores; CPU seconds = user + sys of the command and its children)", "",
             "Inputs beyond the committed shapes are SCALE FIXTURES (relabelled copies of real H200 shards), "
             "not measurements.", "",
             "The profile rows read one table's shard files (55 / 550 / 5,500 files of ~104 rows): profile reports "
             "each file on its own, as kprofile does, so they time many small files. `benchmarks/profile_speed.py` "
             "times the views on one input of 1 M and 10 M rows (the issue's profile target).", "",
             "| what | sizes | CPU s | wall s | exponent (all sizes / last step) | target | notes |",
             "|---|---|---|---|---|---|---|"]
    for name, entry in report["measurements"].items():
        rows = entry["rows"]
        notes = "; ".join(f"{key} {joined(rows, key, '{:,}')}" for key in NOTE_KEYS if key in rows[0])
        if not all(r["ok"] for r in rows):
            notes = (notes + "; " if notes else "") + "FAILED or timed out at " + ", ".join(
                str(r["size"]) for r in rows if not r["ok"])
        exponent = " / ".join("" if entry.get(key) is None else f"{entry[key]:.2f}"
                              for key in ("exponent", "last_step_exponent"))
        lines.append(f"| {name} | {joined(rows, 'size', '{:,}')} | {joined(rows, 'cpu_s', '{:.2f}')} | "
                     f"{joined(rows, 'wall_s', '{:.1f}')} | {exponent} | {entry.get('target', '')} | {notes} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measure what --only names at the sizes chosen; print and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the two smaller sizes of each")
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help="comma-separated: dag, noop, noop_live, grid, codegen, tables (rank, metrics, profile)")
    parser.add_argument("--rounds", type=int, default=3, help="no-op runs per size (the best is reported)")
    args = parser.parse_args()
    console = Console()
    keep = 2 if args.quick else 3
    wanted = set(args.only.split(","))
    if unknown := wanted - set(MEASUREMENTS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))} (choose from {', '.join(MEASUREMENTS)})")
    measured: dict[str, Any] = {}
    if "dag" in wanted:
        measured.update(measure_dag([200, 2_000, 20_000][:keep], console=console))
    if "noop" in wanted:
        measured.update(measure_noop([200, 2_000, 20_000][:keep], console=console, rounds=args.rounds))
    if "noop_live" in wanted:
        measured.update(measure_noop([200, 2_000, 20_000][:keep], console=console, rounds=args.rounds,
                                     name="noop_live"))
    if "grid" in wanted:
        measured.update(measure_grid(list(GRIDS)[:keep], console=console))
    if "codegen" in wanted:
        measured.update(measure_codegen([100, 1_000, 10_000][:keep], console=console))
    if "tables" in wanted:
        measured.update(measure_tables([55, 550, 5_500][:keep], console=console))
    out = RESULTS / "scale.json"
    previous = json.loads(out.read_text())["measurements"] if out.is_file() else {}
    report = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "measurements": dict(previous)}
    for name, rows in measured.items():
        target = TARGETS.get(name.split(" ")[0].replace("snakemake_floor", ""), None)
        points = [(r["size"], r["cpu_s"]) for r in rows]
        report["measurements"][name] = {"rows": rows, "exponent": fitted_exponent(points),
                                        "last_step_exponent": last_step_exponent(points),
                                        "target": f"<= {target:g} s at the largest size" if target else ""}
    atomic_write_text(out, json.dumps(report, indent=1) + "\n")
    atomic_write_text(RESULTS / "scale.md", report_markdown(report))
    table = Table(title="scale (CPU s; scale fixtures, not measurements)")
    for column in ("what", "sizes", "CPU s", "wall s", "exponent (all / last step)"):
        table.add_column(column)
    for name, entry in report["measurements"].items():
        rows = entry["rows"]
        table.add_row(name, joined(rows, "size", "{:,}"), joined(rows, "cpu_s", "{:.2f}"),
                      joined(rows, "wall_s", "{:.1f}"),
                      " / ".join("" if entry.get(key) is None else f"{entry[key]:.2f}"
                                 for key in ("exponent", "last_step_exponent")))
    console.print(table)
    console.print(f"wrote {out.relative_to(ROOT)} and {(RESULTS / 'scale.md').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
