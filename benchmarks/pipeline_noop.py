"""No-op pipeline runs: `dvc repro` and `snakemake` on an up-to-date project, each under 3 s.

A fresh copy of the project (git + DVC, default params, replay backend) is reproduced once, then
each no-op command is timed ROUNDS times (wall clock, median reported). The overhead measured is
the tools' own: process start, DAG building, hashing of the DVC-tracked outs.
Writes benchmarks/results/pipeline_noop.json.

    python benchmarks/pipeline_noop.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tunetable.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("results") / "pipeline_noop.json"
RECORDING = ROOT / "data" / "recordings" / "h200_gemm_mma.parquet"
TARGET_S = 3.0
BIN = Path(sys.executable).parent
COMMANDS = {
    "dvc repro (no-op)": [str(BIN / "dvc"), "repro"],
    "snakemake --cores 2 (no-op)": [str(BIN / "snakemake"), "--cores", "2"],
    "dvc status": [str(BIN / "dvc"), "status"],
}


def tool_env() -> dict[str, str]:
    """This interpreter's tools first on PATH; a fixed git identity."""
    env = dict(os.environ, DVC_NO_ANALYTICS="1", GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@invalid",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@invalid")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def sh(args: list[str], *, cwd: Path) -> str:
    """Run a command, fail loudly with its output."""
    done = subprocess.run(args, cwd=cwd, env=tool_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def copy_project(dest: Path) -> None:
    """The project's files (tracked + untracked not ignored) into a new git repo with a private remote."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        if (ROOT / name).is_file() and not name.startswith((".dvc/cache", ".dvc/tmp")) and name != "dvc.lock":
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    sh(["git", "init", "-q", "-b", "main"], cwd=dest)
    sh([str(BIN / "dvc"), "remote", "add", "-f", "-d", "local", str(dest.parent / "remote")], cwd=dest)
    sh(["git", "add", "-A"], cwd=dest)
    sh(["git", "commit", "-q", "-m", "project"], cwd=dest)


def timed(args: list[str], *, cwd: Path) -> float:
    """Wall seconds of one run."""
    start = time.perf_counter()
    sh(args, cwd=cwd)
    return time.perf_counter() - start


def main() -> None:
    """Time each no-op command on a freshly reproduced copy of the project; print and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    console = Console()
    if not RECORDING.is_file():
        raise SystemExit(f"error: {RECORDING.relative_to(ROOT)}: no such recording (the benchmark replays it)")
    with tempfile.TemporaryDirectory(prefix="tunetable-noop-") as tmp:
        project = Path(tmp) / "repo"
        project.mkdir()
        copy_project(project)
        with console.status("reproducing the project once (replay)"):
            setup_s = timed([str(BIN / "dvc"), "repro"], cwd=project)
            sh(["git", "add", "-A"], cwd=project)
            sh(["git", "commit", "-q", "-m", "reproduced"], cwd=project)
        figures = {}
        for name, command in COMMANDS.items():
            with console.status(f"timing {name}"):
                samples = [timed(command, cwd=project) for _ in range(args.rounds)]
            figures[name] = {"median_s": round(statistics.median(samples), 3),
                             "samples_s": [round(s, 3) for s in samples]}
    report = {
        "target_s": TARGET_S,
        "setup_repro_s": round(setup_s, 2),
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "commands": figures,
        "pass": all(f["median_s"] < TARGET_S for n, f in figures.items() if "no-op" in n),
    }
    atomic_write_text(OUT, json.dumps(report, indent=2) + "\n")
    table = Table(title=f"no-op pipeline runs (median of {args.rounds}; target < {TARGET_S:g} s)")
    for column in ("command", "median s", "samples s"):
        table.add_column(column)
    for name, figure in figures.items():
        table.add_row(name, f"{figure['median_s']:.2f}", ", ".join(f"{s:.2f}" for s in figure["samples_s"]))
    console.print(table)
    console.print(f"first full reproduction (replay, {os.cpu_count()} CPUs): {setup_s:.1f} s; "
                  f"{'PASS' if report['pass'] else 'FAIL'}; wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
