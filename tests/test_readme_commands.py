"""Every command in README.md and in the docs pages it moved to, extracted and run in a temporary clone, so
neither can go stale.

The commands are the indented code blocks of PAGES (in that order, continuation lines joined, trailing
`# comments` dropped) and the first column of docs/commands.md's command tour. Blocks that are not commands
(the diagram, example output, Python for the GPU, the layout) must be classified below, and the
example output the README quotes is compared with what the commands print. Commands that need a
GPU, a cluster, the network or the test suite itself are listed in EXCLUDED with the reason, and
the few placeholders (SHARDS..., a /tmp folder of this machine) in SUBSTITUTE. At the end the clone's
`git status` shows no leftovers: only `.dvc/config`, which the README says the team remote is committed in.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from pipeline_repo import NO_RECORDING, RECORDING, REPO, MainJobClone, edit_params, git, snakemake, tool_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not RECORDING.is_file(), reason=NO_RECORDING)]

COMMAND_WORDS = {"snakemake", "dvc", "tunetable", "git", "python3", ".", "bash", "pytest", "pip", "sed", "mkdocs"}
# README.md and the docs pages its sections moved to, in the order their commands run: the main job
# (docs/workflow.md) first, the README's tour (which changes a setting and puts it back) last.
PAGES = ("docs/workflow.md", "docs/codegen.md", "docs/runtime.md", "docs/shapes.md", "docs/measurements.md",
         "docs/setup.md", "README.md")
TOUR = "docs/commands.md"
# Blocks that are not commands: the first line's start, and what the block is.
NOT_COMMANDS = {
    "params.yaml ─► grid": "the data-flow diagram",
    "tunetable: REPLAYING": "the main job's banner (compared with the run below)",
    "tunetable: shards:": "the main job's closing summary (compared with the run below)",
    "tunetable: gemm_dispatch:": "the main job's figures line of the dispatch list (compared with the run below)",
    "tunetable: 10 shards need a GPU": "the GPU-need line (compared with a dry run below)",
    "not compared:": "an audit line, shortened with '...' (its wording: tests/test_audit_git.py)",
    "No remote provided": "DVC's lines without a remote (compared with dvc pull / dvc push below)",
    "Snakefile ": "the layout",
    "tables:": "a params.yaml excerpt: a table's shapes.list (tests/test_shapes.py tunes such a table)",
}
# (section, command, occurrence in that section) -> why it is not run here. A section is matched by substring.
EXCLUDED = {
    ("Set-up", "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements/lock-py311.txt && "
               "pip install --no-deps -e . && snakemake --cores 2", 0):
        ".ci/run runs this set-up on a clean clone; its `snakemake --cores 2` is docs/workflow.md's main job, run here",
    ("Set-up", ". .venv/bin/activate && pytest -n 2 --dist loadfile", 0): "the test suite itself (.ci/run runs it)",
    ("The main job", "snakemake --workflow-profile profiles/slurm", 0):
        "needs a SLURM cluster: tests/test_slurm.py (marker slurm) runs it on a local one",
    ("The main job", "bash scripts/slurm_local.sh install && pip install -e '.[dev,slurm]' && pytest -m slurm "
                     "tests/test_slurm.py", 0): "installs system packages (apt-get): CI's slurm step runs it",
    ("The remote", "dvc push", 1): "pushes to s3://my-bucket (network, dvc[s3])",
    ("committed recording", "bash scripts/device_session.sh bench", 0): "GPU only (the H200 session)",
    ("Using the table at run time", "python: import torch", 0):
        "Python on a GPU (tests/gpu/test_runtime_gpu.py runs it on the H200)",
    ("five-minute tour", "python: from tunetable import gemm", 0):
        "Python on a GPU with a model (tests/gpu/test_runtime_gpu.py runs gemm() on the H200)",
    ("Refreshing the lock", "bash scripts/lock.sh", 0):
        "resolves against PyPI (network) and rewrites requirements/: a lock refresh is a reviewed commit",
    ("A tour", "tunetable compile --table gemm_mma", 0):
        "nvcc over the whole grid takes minutes on 2 cores; tests/test_compile_nvcc.py compiles real configurations",
    ("A tour", "tunetable record --table gemm_mma --name NAME SHARDS...", 0):
        "records cuda-backend shards only: GPU (scripts/device_session.sh runs it)",
}
# A torch.profiler trace for the commands that import one (the README's trace.json is the user's).
TRACE = REPO / "tests" / "fixtures" / "shapes" / "torch_profiler_trace.json"
# (section, command, occurrence) -> the commands actually run (placeholders filled in).
SUBSTITUTE = {
    ("Your model's shapes", "tunetable shapes import trace.json --out shapes/mymodel.csv", 0):
        [f"tunetable shapes import {TRACE} --out shapes/mymodel.csv", "tunetable suggest --shapes shapes/mymodel.csv",
         "rm -r shapes"],
    ("A tour", "tunetable shapes import FILE [--out PATH]", 0):
        [f"tunetable shapes import {TRACE} --out results/shapes/tour.csv"],
    ("A tour", "tunetable suggest --shape M,N,K", 0): ["tunetable suggest --shape 77,4096,4096 --shape 200,5120,5120"],
    ("A tour", "--shapes FILE", 0): ["tunetable suggest --shapes results/shapes/tour.csv"],
    ("The remote", "dvc remote add --local -d local /tmp/tunetable-dvc-remote", 0):
        ["dvc remote add --local -d local {remote}"],
    ("A tour", "tunetable rank --table gemm_mma SHARDS...", 0): ["tunetable rank --table gemm_mma {shards}"],
    ("A tour", "tunetable profile FILES...", 0): ["tunetable profile {shards}"],
    ("A tour", "tunetable kt export --table gemm_mma --out DIR", 0):
        ["tunetable kt export --table gemm_mma --out results/kt/tour"],
    ("A tour", "tunetable kt import FILE... --table gemm_mma", 0):
        ["tunetable kt import results/kt/tour/gemm_mma_M128_N4096_K4096.json --table gemm_mma"],
    ("A tour", "tunetable codegen --all [--check]", 0): ["tunetable codegen --all", "tunetable codegen --all --check"],
    ("A tour", "tunetable metrics", 0): ["tunetable metrics --help"],
    ("A tour", "audit", 0): ["tunetable audit --help"],
    ("A tour", "trace", 0): ["tunetable trace --help"],
    # with a revision (the workspace's page, `tunetable plots` alone: tests/test_plots_page.py)
    ("A tour", "tunetable plots [REV...]", 0): ["tunetable plots HEAD"],
    ("A tour", "tunetable gc [--yes]", 0): ["tunetable gc", "tunetable gc --yes"],
    ("The docs site", "mkdocs build --strict -d /tmp/tunetable-site", 0): ["mkdocs build --strict -q -d {remote}-site"],
}
# (section, command, occurrence) -> text the output must hold when the command fails as the README says.
FAILS = {
    ("repro` after changing", "dvc push", 0): "no remote specified",
    ("repro` after changing", "dvc gc -w --all-commits -c", 0): "no remote specified",
}
PROSE = ("snakemake --report report.html",)   # commands given inline in the text, run too
# The first command run, docs/workflow.md's main job: conftest.py's main_job_clone ran it in the fresh clone (once
# per test run; tests/test_fresh_clone.py starts from it too), and this test goes on in a copy taken just after it.
MAIN_JOB = ("The main job", "snakemake --cores 2", 0)


@dataclass(frozen=True)
class Block:
    """An indented block of README.md: the section it is in, its first line number, its lines."""

    section: str
    line: int
    lines: tuple[str, ...]


def readme_blocks(text: str) -> list[Block]:
    """Every 4-space-indented block after a blank line, with the heading above it."""
    blocks, current, section, start, blank = [], [], "", 0, True
    for number, line in enumerate(text.splitlines(), 1):
        heading = re.match(r"^#+\s+(.*)$", line)
        if line.startswith("    ") and (current or blank):
            current, start = current + [line[4:]], start or number
        else:
            if current:
                blocks.append(Block(section, start, tuple(current)))
            current, start = [], 0
            section = heading.group(1) if heading else section
        blank = not line.strip()
    if current:
        blocks.append(Block(section, start, tuple(current)))
    return blocks


def block_commands(lines: tuple[str, ...]) -> list[str]:
    """The commands of a block: `\\` continuations joined, comment lines and trailing `  # comments` dropped."""
    commands, current = [], ""
    for raw in lines:
        line = "" if raw.strip().startswith("#") else re.split(r"\s{2,}#\s", raw)[0].rstrip()
        if not line.strip():
            continue
        current = f"{current} {line.strip()}" if current else line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        commands.append(current)
        current = ""
    return commands


def is_command_block(block: Block) -> bool:
    """True when the block's first line starts with a command the project's users type, or is Python."""
    return block.lines[0].split()[0] in COMMAND_WORDS or is_python(block)


def is_python(block: Block) -> bool:
    """A block of Python (run with the project's interpreter, the block on stdin)."""
    return block.lines[0].startswith(("import ", "from "))


def run_list(block: Block) -> list[str]:
    """A block's commands; a Python block is one, named ``python: <first line>`` (its text is run)."""
    return [f"python: {block.lines[0]}"] if is_python(block) else block_commands(block.lines)


def pages_text() -> str:
    """PAGES, one after the other (each page's headings name its sections)."""
    return "\n".join((REPO / page).read_text() for page in PAGES)


def tour_commands(tour: str) -> list[str]:
    """The backticked commands of the tour table's first column (docs/commands.md)."""
    commands = []
    for row in tour.splitlines():
        if row.startswith("| `"):
            commands += re.findall(r"`([^`]+)`", row.split(" | ")[0])
    return commands


def keyed(section: str, command: str, seen: dict[tuple[str, str], int]) -> tuple[str, str, int]:
    """(section key of EXCLUDED/SUBSTITUTE/FAILS that matches, command, occurrence in that section)."""
    table_keys = {key[0] for key in (*EXCLUDED, *SUBSTITUTE, *FAILS)}
    short = next((key for key in table_keys if key in section), section)
    count = seen.get((short, command), 0)
    seen[(short, command)] = count + 1
    return short, command, count


def shell(command: str, *, cwd: Path, python: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one README command as a user's shell would (`y` answers a confirmation prompt), or Python code."""
    if python is not None:
        return subprocess.run([sys.executable, "-"], cwd=cwd, env=tool_env(), capture_output=True, text=True,
                              input=python, timeout=600, check=False)
    return subprocess.run(command, shell=True, cwd=cwd, env=tool_env(), capture_output=True, text=True,
                          input="y\n", timeout=600, check=False)


def test_every_block_is_a_command_block_or_a_known_illustration() -> None:
    for block in readme_blocks(pages_text()):
        if not is_command_block(block):
            assert any(block.lines[0].startswith(prefix) for prefix in NOT_COMMANDS), (
                f"README.md or docs/ (PAGES joined), line {block.line}: neither commands nor a known illustration "
                f"({block.lines[0][:60]!r}): "
                "classify it in tests/test_readme_commands.py")


def test_every_readme_command_runs_in_a_clone(tmp_path: Path, main_job_clone: MainJobClone) -> None:
    text = pages_text()
    # A fresh clone of a project of two commits (the README audits HEAD~1 HEAD), after its main job.
    clone = main_job_clone.copy_to(tmp_path / "clone")
    listed: list[tuple[str, str, int]] = []
    seen: dict[tuple[str, str], int] = {}
    outputs: dict[str, str] = {}
    ran: list[tuple[str, str, int]] = []
    python = {f"python: {b.lines[0]}": "\n".join(b.lines) + "\n" for b in readme_blocks(text) if is_python(b)}
    runs = [(block.section, command) for block in readme_blocks(text) if is_command_block(block)
            for command in run_list(block)]
    runs += [("A tour of the commands", command) for command in tour_commands((REPO / TOUR).read_text())]
    runs += [("prose", command) for command in PROSE]
    assert all(command in text for command in PROSE)
    for section, command in runs:
        key = keyed(section, command, seen)
        listed.append(key)
        if key in EXCLUDED:
            continue
        ran.append(key)
        if key == MAIN_JOB:   # run in this clone before the copy: nothing may come before it
            assert ran == [MAIN_JOB], f"README commands run before the main job: {ran[:-1]}"
        shards = " ".join(sorted(str(p.relative_to(clone)) for p in (clone / "results" / "raw" / "gemm_mma").rglob(
            "*.pkl")))
        for actual in SUBSTITUTE.get(key, [command]):
            actual = actual.format(remote=tmp_path / "remote", shards=shards)
            if key == MAIN_JOB:
                returncode, output = main_job_clone.main.returncode, main_job_clone.main.output
            else:
                done = shell(actual, cwd=clone, python=python.get(command))
                returncode, output = done.returncode, done.stdout + done.stderr
            outputs.setdefault(command, output)
            assert "Traceback" not in output, f"{actual}:\n{output[-3000:]}"
            if key in FAILS:
                assert returncode != 0 and FAILS[key] in output, f"{actual}:\n{output[-3000:]}"
            else:
                assert returncode == 0, f"README command `{actual}` ({section}) exited {returncode}:\n" \
                                             f"{output[-3000:]}"
    assert set(EXCLUDED) | set(SUBSTITUTE) | set(FAILS) <= set(listed), "a listed command is no longer in the README"
    assert len(ran) >= 35 and len(listed) == len(ran) + len(EXCLUDED)  # every command but the excluded ran
    # What the README quotes is what the commands print.
    main = outputs["snakemake --cores 2"]
    banner = next(b for b in readme_blocks(text) if b.lines[0].startswith("tunetable: REPLAYING"))
    for line in banner.lines:
        assert any(printed.startswith(line.removesuffix("...").rstrip()) for printed in main.splitlines()), line
    closing = next(b for b in readme_blocks(text) if b.lines[0].startswith("tunetable: shards:"))
    assert all(line in main.splitlines() for line in closing.lines), main[-3000:]
    figures = next(b for b in readme_blocks(text) if b.lines[0].startswith("tunetable: gemm_dispatch:"))
    assert figures.lines[0] in main.splitlines(), main[-3000:]
    quoted = next(b for b in readme_blocks(text) if b.lines[0].startswith("No remote provided"))
    assert quoted.lines[0] in outputs["dvc pull"] or quoted.lines[0] in outputs["dvc push"]
    assert quoted.lines[1].split(" ... ")[0] in outputs["dvc push"]
    # The trace of a line number the README names is an entry of a generated region.
    assert outputs["tunetable trace kernels/tuning_configs.py:57"].startswith("gemm_mma[")
    # No leftovers: the only change is the team remote the README commits in .dvc/config.
    status = git("status", "--porcelain", "--untracked-files=all", cwd=clone).output.splitlines()
    assert status == [" M .dvc/config"], status
    # The GPU-need line, as the README quotes it, for M=77.
    gpu = next(b for b in readme_blocks(text) if b.lines[0].startswith("tunetable: 10 shards need a GPU"))
    edit_params(clone, lambda d: d["tables"]["gemm_mma"]["shapes"]["M"].insert(3, 77))
    dry = snakemake("-n", "--cores", "2", cwd=clone).output
    assert gpu.lines[0] in dry.splitlines(), dry[-2000:]
