"""The committed dvc.lock describes the committed code and params (what a fresh clone reproduces).

DVC re-runs a stage whose recorded deps differ from the files, so a lock left behind by a code
change makes the first `dvc repro` of every fresh clone re-run the pipeline and rewrite dvc.lock.
This checks the deps, params and commands (the working tree's: what would be committed); the
outs, which depend on the workspace's results, are checked on a real fresh clone in
tests/test_fresh_clone.py.
"""

from __future__ import annotations

import json
import shutil

import pytest
from pipeline_repo import BIN, REPO, run

REFRESH = ("refresh it: `snakemake --cores 2 && dvc repro` (only code changed: nothing is measured or replayed "
           "again), then commit dvc.lock")


def stage_outs() -> set[str]:
    """Paths that are some stage's out: as another stage's dep they reflect the workspace, not the commit."""
    from tunetable.yamlio import load_yaml_file

    stages = load_yaml_file(REPO / "dvc.yaml")["stages"]
    return {next(iter(out)) if isinstance(out, dict) else out
            for stage in stages.values() for kind in ("outs", "metrics", "plots") for out in stage.get(kind, [])}


@pytest.mark.skipif(shutil.which("git") is None, reason="dvc needs git")
def test_committed_lock_matches_the_code_and_params() -> None:
    done = run([str(BIN / "dvc"), "status", "--json"], cwd=REPO)
    status = json.loads(done.output.strip().splitlines()[-1])
    outs = stage_outs()
    stale = []
    for stage, entries in status.items():
        for entry in entries:
            if not isinstance(entry, dict):
                stale.append(f"{stage}: {entry}")
                continue
            for kind, changes in entry.items():
                if kind == "changed outs":
                    continue
                if kind == "changed deps":
                    stale += [f"{stage}: {path} {what}" for path, what in changes.items() if path not in outs]
                else:
                    stale.append(f"{stage}: {kind}")
    assert not stale, f"dvc.lock is stale ({'; '.join(stale)}): {REFRESH}"


def test_no_dep_is_an_empty_file() -> None:
    """DVC warns "'<path>' is empty." for an empty dep on every status, repro and main job."""
    from tunetable.yamlio import load_yaml_file

    stages = load_yaml_file(REPO / "dvc.yaml")["stages"]
    empty = sorted({dep for stage in stages.values() for dep in stage.get("deps", [])
                    if (REPO / dep).is_file() and (REPO / dep).stat().st_size == 0})
    assert not empty, f"dvc.yaml deps that are empty files (give each a docstring): {', '.join(empty)}"
