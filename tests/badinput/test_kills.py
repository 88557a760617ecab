"""Killed mid-way (SIGKILL at a seeded random moment): every target is the old file or the new one, never a mix.

For codegen, select, rank and metrics: a twin project runs the command to its end (the new outputs; one
twin per command, shared by its seeds); the project under test, a copy of the twin's starting state, runs it
and is killed after a random delay within the command's measured duration. Each output is then
byte-identical to before or to the twin's, the only other files are the atomic writer's temp files
(``.<name>.<random>.tmp``, git-ignored), nothing else was touched, and running the command again gives
the twin's outputs. The main job's kills are in test_main_job.py.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from badinput_support import Project, make_project, sha256, snapshot
from result_rows import row, shard

from tunetable.kernels.families import FAMILIES

TEMP = re.compile(r"(.*/)?\.[^/]+\.[^/]+\.tmp")


def start(project: Project, *argv: str) -> subprocess.Popen:
    """``python -m tunetable ARGV`` in the project (a real process, so that it can be killed)."""
    return subprocess.Popen([sys.executable, "-m", "tunetable", *argv], cwd=project.root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})


def finish(project: Project, *argv: str) -> float:
    """Run to the end; the seconds it took."""
    started = time.monotonic()
    process = start(project, *argv)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err.decode()[-2000:]
    return time.monotonic() - started


def kill_after(project: Project, argv: tuple[str, ...], delay: float) -> None:
    """Start the command and SIGKILL it after ``delay`` seconds (or let it end first)."""
    process = start(project, *argv)
    time.sleep(delay)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)


def check_old_or_new(*, project: Project, before: dict[str, str], after_twin: dict[str, str],
                     outputs: tuple[str, ...]) -> None:
    """Each output old or new, nothing else changed, only temp files appeared."""
    now = snapshot(project.root)
    for name, digest in now.items():
        if name in outputs:
            assert digest in {before.get(name), after_twin.get(name)}, f"{name} is neither the old nor the new file"
        elif name in before:
            assert digest == before[name], f"{name} changed"
        else:
            assert TEMP.fullmatch(name), f"unexpected file {name}"
    for name in before:
        assert name in now, f"{name} disappeared"


def copy_of(project: Project, folder: Path) -> Project:
    """A copy of ``project`` in ``folder`` (the same layout as make_project's)."""
    return Project(root=shutil.copytree(project.root, folder / "project"), marker=folder / "PAYLOAD_RAN")


@dataclass(frozen=True)
class Twin:
    """A command's starting project (``build``'s), and its twin that ran the command to its end."""

    built: Project
    seconds: float                  # how long the twin's run took (the kills' time scale)
    after: dict[str, str]           # the twin's files after it (the new outputs)


@pytest.fixture(scope="module")
def twin_of(tmp_path_factory: pytest.TempPathFactory):
    """Each command's Twin, made once for all of its seeds (a seed only changes when the copy is killed)."""
    made: dict[str, Twin] = {}

    def twin(command: str) -> Twin:
        if command not in made:
            build, argv, _ = COMMANDS[command]
            folder = tmp_path_factory.mktemp(command)
            built = make_project(folder / "built")
            build(built)
            finished = copy_of(built, folder / "twin")
            seconds = finish(finished, *argv)
            made[command] = Twin(built=built, seconds=seconds, after=snapshot(finished.root))
        return made[command]

    return twin


def with_shards(project: Project) -> None:
    """Two real shards (M=1, M=8 at N=K=4096) whose winners differ from the checked-in table's."""
    for m in (1, 8):
        rows = [row(m=m, config="ca", median=1.0 + m), row(m=m, config="cb", median=0.5 + m),
                row(m=m, config="cublas", median=2.0 + m)]
        path = project.path(f"shards/M{m}.pkl")
        path.parent.mkdir(parents=True, exist_ok=True)
        shard(path, rows)


def with_ranked(project: Project) -> None:
    with_shards(project)
    finish(project, "rank", "--table", "gemm_mma", "--out", "results/ranked/gemm_mma.parquet", "shards/M1.pkl",
           "shards/M8.pkl")


def with_new_date(project: Project) -> None:
    """A manifest change codegen renders (the provenance line's date)."""
    text = project.text("manifests/gemm_mma.yaml")
    date = next(line for line in text.splitlines() if line.startswith("  date: "))
    project.edit("manifests/gemm_mma.yaml", date, '  date: "1999-01-01"')


RANKED = ("results/ranked/gemm_mma.parquet", "results/ranked/gemm_mma.csv", "results/ranked/gemm_mma.md",
          "results/ranked/gemm_mma.failures.csv")
COMMANDS = {
    "codegen": (with_new_date, ("codegen", "--all"), ("kernels/tuning_configs.py",)),
    "select": (with_ranked, ("select", "--table", "gemm_mma", "--ranked", "results/ranked/gemm_mma.parquet", "--out",
                             "manifests/gemm_mma.yaml"), ("manifests/gemm_mma.yaml",)),
    "rank": (with_shards, ("rank", "--table", "gemm_mma", "--out", "results/ranked/gemm_mma.parquet", "shards/M1.pkl",
                           "shards/M8.pkl"), RANKED),
    "metrics": (with_ranked, ("metrics", "--table", "gemm_mma", "--ranked", "results/ranked/gemm_mma.parquet",
                              "--json", "out/m.json", "--csv", "out/m.csv", "--png", "out/m.png", "shards/M1.pkl"),
                ("out/m.json", "out/m.csv", "out/m.png")),
}
SEEDS = [pytest.param(name, seed, marks=[pytest.mark.slow] if seed else [], id=f"{name}-{seed}")
         for name in COMMANDS for seed in range(3)]


@pytest.mark.parametrize(("command", "seed"), SEEDS)
def test_killed_at_a_random_point(tmp_path, command, seed, twin_of):
    _, argv, outputs = COMMANDS[command]
    twin = twin_of(command)
    killed = copy_of(twin.built, tmp_path / "killed")
    before = snapshot(killed.root)
    duration, after_twin = twin.seconds, twin.after
    assert any(after_twin.get(name) != before.get(name) for name in outputs)  # the command changes its outputs
    delay = random.Random(f"{command}-{seed}").uniform(0.3, 1.05) * duration
    kill_after(killed, argv, delay)
    check_old_or_new(project=killed, before=before, after_twin=after_twin, outputs=outputs)
    finish(killed, *argv)  # a rerun needs no manual step
    for name in outputs:
        assert sha256(killed.path(name)) == after_twin[name]


def test_the_family_snippets_stay_outside_the_project():
    """The kill cases edit copies only: the family snippets codegen reads come from the installed package."""
    for family in FAMILIES.values():
        assert family.snippet.is_file() and shutil.disk_usage(family.snippet.parent)
