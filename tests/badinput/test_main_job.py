"""The main job (`snakemake --cores 2`) with bad data and kills: it stops loudly, changes no checked-in file,
runs nothing from the data, and a rerun after SIGKILL at any point needs no manual step.

Each test runs the real Snakemake in a throw-away git + DVC copy of the project with two families (gemm_mma and
gemm_wgmma on both devices, the fewest a dispatch list takes: every kind of rule runs) and one (N, K) and up to
three M (tests/pipeline_repo.small_table), so these are marked slow; the shell
fragment that brings a job's error line to the terminal is checked on its own in the default run.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pipeline_repo import RECORDING, BIN, git, make_project, small_table, snakemake, tool_env, two_families

from tunetable.workflow.rule_shell import SHOW_ERRORS
from tunetable.results import journal_of, sha256_bytes


def test_a_failing_rule_shows_its_error_line_on_the_terminal(tmp_path):
    """SHOW_ERRORS, as the rules append it: the CLI's `error:` line reaches stderr, the status is kept."""
    log = tmp_path / "job.log"
    show = SHOW_ERRORS.replace("{log}", str(log)).replace("{{", "{").replace("}}", "}")  # as formatted
    command = ("( echo 'progress...'; echo 'error: results/raw/t/k/M1.pkl: truncated (3 of 9 bytes)' >&2; exit 2 )"
               f" > {log} 2>&1" + show)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr == "error: results/raw/t/k/M1.pkl: truncated (3 of 9 bytes)\n"
    assert "progress..." in log.read_text()


MAIN_JOB_SECONDS: dict[str, float] = {}   # how long the first main job took (the kill tests' time scale)


@pytest.fixture(scope="module")
def main_job(tmp_path_factory) -> Path:
    """A small project after one main job, its generated files committed (the state every test starts from)."""
    if not RECORDING.is_file():
        pytest.skip("the committed recording is absent")
    root = make_project(tmp_path_factory.mktemp("main") / "project",
                        remote=tmp_path_factory.mktemp("remote"),
                        params_edit=lambda data: (two_families(data), small_table(data)))
    started = time.monotonic()
    snakemake("--cores", "2", cwd=root)
    MAIN_JOB_SECONDS["first"] = time.monotonic() - started
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "small tables", cwd=root)
    return root


@pytest.fixture
def project(main_job: Path, tmp_path: Path) -> Path:
    """The test's own copy of main_job, with its files' modification times (Snakemake sees it as run): a test
    damages its copy, and the next starts from the committed state without a main job to put the data back."""
    return shutil.copytree(main_job, tmp_path / "project", symlinks=True)


def checked_in_state(root: Path) -> str:
    """`git status --short` of the copy: empty when every checked-in file is as committed."""
    return git("status", "--short", cwd=root).output


def a_shard(root: Path) -> Path:
    """One raw shard of the current plan."""
    return sorted((root / "results" / "raw").rglob("*.pkl"))[0]


@pytest.mark.slow
def test_a_truncated_shard_stops_the_main_job_with_one_line(project):
    shard = a_shard(project)
    shard.write_bytes(shard.read_bytes()[:-200])
    done = snakemake("--cores", "2", cwd=project, check=False)
    assert done.returncode != 0
    relative = shard.relative_to(project)
    lines = [line for line in done.output.splitlines() if line.startswith("error: ")]
    assert lines and all(line.startswith(f"error: {relative}: truncated (") for line in lines), done.output[-3000:]
    assert "Traceback" not in done.output
    assert checked_in_state(project) == ""  # no manifest, table or metrics file changed


@pytest.mark.slow
def test_a_payload_shard_with_a_forged_checksum_runs_nothing(project, tmp_path):
    """An attacker who can write results/raw can also write the journal: the restricted reader still refuses."""
    shard = a_shard(project)
    journal = journal_of(shard).read_bytes()
    marker = tmp_path / "PAYLOAD_RAN"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    evil = pickle.dumps({"merged_df": Payload()})
    shard.write_bytes(evil)
    record = {"type": "shard", "file": shard.name, "sha256": sha256_bytes(evil), "bytes": len(evil)}
    journal_of(shard).write_bytes(journal + (json.dumps(record, sort_keys=True) + "\n").encode())
    done = snakemake("--cores", "2", cwd=project, check=False)
    assert done.returncode != 0 and not marker.exists()
    assert f"error: {shard.relative_to(project)}: refused global 'posix.system'" in done.output
    assert checked_in_state(project) == ""


@pytest.mark.slow
def test_a_shard_without_its_journal_is_served_again(project):
    """A shard written before checksums were recorded (no journal) is replayed again, with no manual step."""
    shard = a_shard(project)
    journal_of(shard).unlink()
    snakemake("--cores", "2", cwd=project)
    assert journal_of(shard).is_file() and checked_in_state(project) == ""


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_killed_main_job_reruns_without_a_manual_step(project, seed):
    """SIGKILL of snakemake at a random point of a run with work to do (shards to replay, tables to rank,
    select, measure and generate); the next plain run just works and leaves every checked-in file as it was."""
    for folder in ("results/ranked", "results/stamps"):
        subprocess.run(["rm", "-rf", str(project / folder)], check=True)
    for shard in sorted((project / "results" / "raw").rglob("*.pkl"))[::2]:
        shard.unlink()
    duration = MAIN_JOB_SECONDS["first"]
    process = subprocess.Popen([str(BIN / "snakemake"), "--cores", "2"], cwd=project, env=tool_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.Random(seed).uniform(0.2, 0.9) * duration)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    time.sleep(2)  # the killed run's job processes finish (they are not children of the next run)
    done = snakemake("--cores", "2", cwd=project)  # no --unlock, no --rerun-incomplete
    assert "Traceback" not in done.output
    assert checked_in_state(project) == ""
    again = snakemake("--cores", "2", cwd=project)
    assert "Nothing to be done" in again.output
