"""Helpers for the pipeline tests: a throw-away git + DVC copy of the project, and the real tools run in it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"
BIN = Path(sys.executable).parent
NO_RECORDING = (
    f"{RECORDING.relative_to(REPO)} is absent: the pipeline tests replay the committed H200 recording "
    "(made by `tunetable bench --backend cuda` + `tunetable record` on the GPU)"
)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "tunetable-test", "GIT_AUTHOR_EMAIL": "test@tunetable.invalid",
    "GIT_COMMITTER_NAME": "tunetable-test", "GIT_COMMITTER_EMAIL": "test@tunetable.invalid",
}


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (exit 2, no traceback)."""
    assert "Traceback" not in result.stderr + result.stdout
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@dataclass(frozen=True)
class Done:
    """A finished command: exit status and combined output."""

    returncode: int
    output: str


def tool_env() -> dict[str, str]:
    """Environment with this interpreter's bin first (snakemake, dvc, tunetable), no analytics."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["DVC_NO_ANALYTICS"] = "1"
    env["COLUMNS"] = "250"  # rich tables on one line each
    env.update(GIT_ENV)
    return env


def run(args: list[str], *, cwd: Path, check: bool = True, timeout: float = 300,
        env: dict[str, str] | None = None) -> Done:
    """Run a command in ``cwd`` (``env``: extra variables); with ``check`` a failure shows the command's output."""
    done = subprocess.run(args, cwd=cwd, env={**tool_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)
    result = Done(done.returncode, done.stdout + done.stderr)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{result.output[-4000:]}")
    return result


def snakemake(*args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None) -> Done:
    """The real snakemake, targets first."""
    return run([str(BIN / "snakemake"), *args], cwd=cwd, check=check, env=env)


def dvc(*args: str, cwd: Path, check: bool = True) -> Done:
    """The real dvc."""
    return run([str(BIN / "dvc"), *args], cwd=cwd, check=check)


def tunetable(*args: str, cwd: Path, check: bool = True) -> Done:
    """The project's CLI, as installed."""
    return run([sys.executable, "-m", "tunetable", *args], cwd=cwd, check=check)


def git(*args: str, cwd: Path, check: bool = True) -> Done:
    """git with a fixed identity."""
    return run(["git", *args], cwd=cwd, check=check)


def project_files(*, lock: bool = False) -> list[str]:
    """Files of the project as a clone would have them (tracked + untracked not ignored), no DVC state
    (``lock``: with dvc.lock, which a fresh clone has and reproduces)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    skip = (".dvc/cache", ".dvc/tmp") if lock else (".dvc/cache", ".dvc/tmp", "dvc.lock")
    return sorted(p for p in listed if not p.startswith(skip) and (REPO / p).is_file())


# The files of a device other than the primary (docs/devices.md): its recordings and what the main job makes of them.
DEVICE_FILES = ("data/recordings/{device}_*", "manifests/*.{device}.yaml", "kernels/data/*.{device}.json",
                "results/metrics/*.{device}.json", "results/plots/*.{device}.*")


def without_other_devices(root: Path) -> list[Path]:
    """Remove every other device's recordings and generated files from the copy at ``root`` (the project as it was
    before they were recorded: its main job replays the primary device's tables only); the paths removed."""
    others = list(load_yaml_file(root / "params.yaml").get("devices") or {})[1:]
    removed = sorted(path for device in others for pattern in DEVICE_FILES
                     for path in root.glob(pattern.format(device=device)))
    for path in removed:
        path.unlink()
    return removed


def make_project(dest: Path, *, remote: Path | None, params_edit=None, lock: bool = False) -> Path:
    """Copy the project into ``dest`` as a fresh git repo with DVC and a private local remote (None: the
    project's own DVC config, which names no remote); ``lock``: with the working tree's dvc.lock; commit it."""
    for name in project_files(lock=lock):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    if params_edit is not None:
        edit_params(dest, params_edit)
    git("init", "-q", "-b", "main", cwd=dest)
    if not (dest / ".dvc" / "config").is_file():
        dvc("init", "-q", cwd=dest)
    if remote is not None:
        dvc("remote", "add", "-f", "-d", "local", str(remote), cwd=dest)
    git("add", "-A", cwd=dest)
    git("commit", "-q", "-m", "project", cwd=dest)
    return dest


def edit_params(root: Path, edit) -> None:
    """Apply ``edit(params_dict)`` to root/params.yaml (rewritten with yaml.safe_dump)."""
    path = root / "params.yaml"
    data = load_yaml_file(path)
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def job_counts(output: str) -> dict[str, int]:
    """Jobs per rule, summed over every snakemake run in the output (a dry-run prints its table twice)."""
    counts: dict[str, int] = {}
    for run_output in output.split("Building DAG of jobs")[1:]:
        block = re.search(r"Job stats:\n(.*?)\n\n", run_output + "\n\n", flags=re.S)
        for line in block.group(1).splitlines() if block else []:
            match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
            if match and match.group(1) != "total":
                counts[match.group(1)] = counts.get(match.group(1), 0) + int(match.group(2))
    return counts


def shard_times(root: Path) -> dict[str, int]:
    """Every raw shard under results/raw with its modification time (ns)."""
    raw = root / "results" / "raw"
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in raw.rglob("*.pkl")} if raw.is_dir() else {}


def rewritten(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Shards written between two snapshots (new, or rewritten in place)."""
    return sorted(path for path, mtime in after.items() if before.get(path) != mtime)


SMALL_M = (1, 64, 4096)


def small_table(data: dict) -> None:
    """Params edit: one (N, K) pair and up to three M values in every table (those its recording covers)."""
    for spec in data["tables"].values():
        spec["shapes"]["NK"] = [[4096, 4096]]
        spec["shapes"]["M"] = [m for m in SMALL_M if m in spec["shapes"]["M"]]


def only_tables(data: dict, *names: str) -> None:
    """Params edit: keep only the named tables, in every dispatch list and selector too (a project of fewer
    families)."""
    data["tables"] = {name: spec for name, spec in data["tables"].items() if name in names}
    for spec in (*(data.get("dispatch") or {}).values(), *(data.get("selector") or {}).values()):
        spec["tables"] = [name for name in spec["tables"] if name in names]


def two_families(data: dict) -> None:
    """Params edit: the gemm_mma + gemm_wgmma project these tests were written for (no gemm_wgmma_swap)."""
    only_tables(data, "gemm_mma", "gemm_wgmma")


@dataclass(frozen=True)
class MainJobClone:
    """A fresh clone of the project (dvc.lock committed, no DVC cache, no remote) after the README's main job."""

    origin: Path
    clone: Path
    pull: Done      # `dvc pull` before anything (no remote configured)
    main: Done      # `snakemake --cores 2`, the main job

    def copy_to(self, dest: Path) -> Path:
        """The clone, copied to ``dest`` with its files' modification times (Snakemake and DVC see it as run)."""
        shutil.copytree(self.clone, dest, symlinks=True)
        return dest


def main_job_clone(shared: Path) -> MainJobClone:
    """Make the fresh clone and run its main job once per test run, in ``shared`` (a folder every pytest-xdist
    worker of the run sees): the first worker builds it under an flock, the others wait and read its outputs."""
    shared.mkdir(parents=True, exist_ok=True)
    origin, clone, outputs = shared / "origin", shared / "clone", shared / "outputs.json"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)    # released when the file closes, or when a worker dies
        if not outputs.is_file():
            for partial in (origin, clone):     # a worker that failed halfway left them
                shutil.rmtree(partial, ignore_errors=True)
            make_project(origin, remote=None, lock=True)
            # A second commit, so that `tunetable audit HEAD~1 HEAD` (the README's) has a HEAD~1.
            git("commit", "-q", "--allow-empty", "-m", "a second commit (the README audits HEAD~1 HEAD)", cwd=origin)
            git("clone", "-q", str(origin), str(clone), cwd=shared)
            pull = dvc("pull", cwd=clone, check=False)
            main = snakemake("--cores", "2", cwd=clone)
            temp = outputs.with_suffix(".tmp")
            temp.write_text(json.dumps({name: [done.returncode, done.output] for name, done in (("pull", pull),
                                                                                                ("main", main))}))
            temp.rename(outputs)
    done = {key: Done(*value) for key, value in json.loads(outputs.read_text()).items()}
    return MainJobClone(origin=origin, clone=clone, pull=done["pull"], main=done["main"])
