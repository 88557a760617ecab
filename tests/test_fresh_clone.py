"""The headline workflows as a new user meets them: a fresh clone, no DVC cache, no DVC remote, no GPU.

One sequence, asserting on the terminal text a user sees at each step (its first three steps, made once per
test run, are shared with tests/test_readme_commands.py: conftest.py's main_job_clone):
clone -> `dvc pull` (no remote: says what to configure) -> the README's main job -> `dvc status` /
`dvc repro` (nothing to do, `git status` clean) -> `tunetable audit` -> add a shape that needs a GPU
(one line before any work; TUNETABLE_ALLOW_MISSING=1 keeps the rest) -> revert -> a select-only
change committed -> `dvc diff` and `tunetable audit HEAD~1 HEAD`, also with the results and the DVC
cache gone (git alone).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pipeline_repo import (
    NO_RECORDING, RECORDING, MainJobClone, dvc, edit_params, git, job_counts, snakemake, tunetable,
)

from tunetable.yamlio import load_yaml_file

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not RECORDING.is_file(), reason=NO_RECORDING)]

TABLE = "gemm_mma"
NEEDS_GPU = "need a GPU and none is visible here"


def lines_with(output: str, text: str) -> list[str]:
    """The lines of ``output`` holding ``text``."""
    return [line for line in output.splitlines() if text in line]


def clean(root: Path) -> str:
    """`git status --porcelain` (empty: nothing changed, nothing untracked)."""
    return git("status", "--porcelain", cwd=root).output


def test_the_whole_sequence_on_a_fresh_clone(tmp_path: Path, main_job_clone: MainJobClone) -> None:
    # The clone, its `dvc pull` and its main job are made once per run (conftest.py's main_job_clone, which
    # tests/test_readme_commands.py starts from too); this test goes on in a copy taken just after them.
    clone = main_job_clone.copy_to(tmp_path / "clone")
    shapes = load_yaml_file(clone / "params.yaml")["tables"][TABLE]["shapes"]
    nk = len(shapes["NK"])

    # dvc pull before anything: no remote is configured, and DVC says so in one line.
    pull = main_job_clone.pull
    assert pull.returncode != 0 and "No remote provided and no default remote set." in pull.output

    # The README's main job: a short terminal, ending with the summary.
    main = main_job_clone.main
    assert main.returncode == 0, main.output[-3000:]
    # Short: no per-job blocks (the profile hides them). 8000 characters held 3 tables and a dispatch list; the
    # H100's recordings (2026-12-06) doubled what the run builds, and each table adds a few summary lines.
    built = len(list((clone / "manifests").glob("*.yaml")))     # tables, dispatch lists, selectors
    assert built == 10 and "Traceback" not in main.output and len(main.output) < 1000 * built + 2000, \
        main.output[-3000:]
    assert max(len(line) for line in main.output.splitlines()) < 300  # no 7,000-character job blocks
    assert "tunetable: REPLAYING the committed recording (no GPU timing happens in this run)" in main.output
    tables = load_yaml_file(clone / "params.yaml")["tables"]
    counts = {name: len(spec["shapes"]["NK"]) * len(spec["shapes"]["M"]) for name, spec in tables.items()}
    # ... then each other device's table whose recording the clone has (gemm_mma.h100: the same shapes)
    counts |= {f"{name}.{device}": counts[name] for device in list(load_yaml_file(clone / "params.yaml")["devices"])[1:]
               for name in tables if (clone / f"data/recordings/{device}_{name}.parquet").is_file()}
    union = len({(m, n, k) for spec in tables.values() for n, k in spec["shapes"]["NK"] for m in spec["shapes"]["M"]})
    assert (f"tunetable: shards: {sum(counts.values())} replayed from the recordings ("
            + ", ".join(f"{name} {count}" for name, count in counts.items()) + ")") in main.output
    dispatch = json.loads((clone / "results" / "metrics" / "gemm_dispatch.json").read_text())  # as committed
    head = f"tunetable: gemm_dispatch: {dispatch['entries']} entries, {union}/{union} shapes, "
    assert lines_with(main.output, head)[0].endswith(f"speedup_vs_cublas {dispatch['geomean_speedup_vs_cublas']:.3f}x, "
                  f"{dispatch['shapes_faster_than_cublas']} shapes faster than cuBLAS")
    assert ("tunetable: changed against git: nothing (manifests, generated tables, metrics and plots as committed)"
            in main.output)
    assert ("tunetable: stored the outs of DVC stage(s) measure, select in the DVC cache: they match dvc.lock, "
            "so `dvc status` and `dvc repro` have nothing to do") in main.output
    assert "tunetable: logs in results/logs/; every job in full: snakemake --cores 2 --quiet host" in main.output

    # DVC agrees: nothing to do, no stage runs, git is clean.
    assert dvc("status", cwd=clone).output.strip() == "Data and pipelines are up to date."
    repro = dvc("repro", cwd=clone)
    assert "Running stage" not in repro.output
    assert all(f"Stage '{stage}' didn't change, skipping" in repro.output for stage in ("measure", "select", "codegen"))
    assert clean(clone) == ""
    assert "Everything is up to date." in dvc("pull", cwd=clone).output  # the cache holds what the lock names

    # Audit against HEAD: nothing changed, every table and the dispatch list say so.
    audit = tunetable("audit", cwd=clone)
    assert "params.yaml: no changes" in audit.output and "Traceback" not in audit.output
    for name, count in {**counts, "gemm_dispatch": union}.items():
        assert f"{name}: 0 of {count} shapes changed" in audit.output
    assert "not compared" not in audit.output

    # A shape the recording does not hold, on a machine without a GPU: one line, before any work.
    edit_params(clone, lambda d: d["tables"][TABLE]["shapes"]["M"].insert(3, 77))
    dry = snakemake("-n", "--cores", "2", cwd=clone)
    line = lines_with(dry.output, NEEDS_GPU)
    # M=77 is in neither device's recording: gemm_mma's and the H100's gemm_mma.h100's shards both need a GPU.
    assert len(line) == 1 and line[0].startswith(
        f"tunetable: {2 * nk} shards need a GPU and none is visible here: {TABLE} M77_N4096_K4096, ")
    assert f"; {TABLE}.h100 M77_N4096_K4096, " in line[0]
    assert "or keep the rest: TUNETABLE_ALLOW_MISSING=1 snakemake --cores 2 (or dvc repro)." in line[0]
    shards_before = sorted(p.name for p in (clone / "results" / "raw").rglob("*.pkl"))
    repro = dvc("repro", cwd=clone, check=False)
    assert repro.returncode != 0 and lines_with(repro.output, NEEDS_GPU)[0] == line[0]
    assert "Traceback" not in repro.output and "CalledProcessError" not in repro.output
    assert sorted(p.name for p in (clone / "results" / "raw").rglob("*.pkl")) == shards_before  # no work done
    assert clean(clone).split() == ["M", "params.yaml"]  # dvc.lock untouched
    kept = snakemake("--cores", "2", cwd=clone, env={"TUNETABLE_ALLOW_MISSING": "1"})
    assert lines_with(kept.output, f"tunetable: LEAVING OUT {2 * nk} shards ({TABLE} M77_N4096_K4096, ")
    table = json.loads(git("show", f"HEAD:results/metrics/{TABLE}.json", cwd=clone).output)  # as committed
    assert (f"tunetable: {TABLE}: {table['entries']} entries, {counts[TABLE]}/{counts[TABLE] + nk} shapes, "
            in kept.output)
    # Only the changed table's metrics are made again (its own and its H100 twin's), not every table's.
    assert job_counts(kept.output).get("metrics") == 2, kept.output[-3000:]
    changed = lines_with(kept.output, "tunetable: changed against git: ")[0]
    assert "results/metrics/gemm_mma.json" in changed and "manifests/" not in changed  # the table is as before

    # Revert: the committed table again, and nothing left over.
    git("checkout", "--", "params.yaml", cwd=clone)
    back = snakemake("--cores", "2", cwd=clone)
    assert "tunetable: changed against git: nothing" in back.output, back.output[-2000:]
    assert dvc("status", cwd=clone).output.strip() == "Data and pipelines are up to date."
    assert clean(clone) == ""

    # A select-only change, reproduced and committed; dvc diff and audit across the two commits.
    edit_params(clone, lambda d: d["select"].__setitem__("tie_tolerance", 0.05))
    changed_run = dvc("repro", cwd=clone)
    assert "Stage 'measure' didn't change, skipping" in changed_run.output
    git("add", "-A", cwd=clone)
    git("commit", "-q", "-m", "select: tie tolerance 0.05", cwd=clone)
    diff = dvc("diff", "HEAD~1", "HEAD", cwd=clone)
    assert "results/raw" not in diff.output and "results/ranked" not in diff.output, diff.output
    audit = tunetable("audit", "HEAD~1", "HEAD", cwd=clone)
    assert lines_with(audit.output, "select.tie_tolerance"), audit.output[-3000:]
    assert "manifest entries changed" in audit.output and "not compared" not in audit.output
    assert f"source: {TABLE} at HEAD~1: times from results/raw/{TABLE}/" in audit.output  # shards on disk

    # Git alone: no results, no DVC cache, no remote; the committed recordings answer.
    shutil.rmtree(clone / "results" / "raw")
    shutil.rmtree(clone / "results" / "ranked")
    shutil.rmtree(clone / ".dvc" / "cache")
    again = tunetable("audit", "HEAD~1", "HEAD", cwd=clone)
    assert "Traceback" not in again.output and "not compared" not in again.output, again.output[-3000:]
    assert (f"source: {TABLE} at HEAD~1: times from data/recordings/h200_gemm_mma.parquet at HEAD~1 (git; the rows "
            "the manifest was selected from)") in again.output
    changes = [line for line in audit.output.splitlines() if line.startswith("│")]
    assert changes and changes == [line for line in again.output.splitlines() if line.startswith("│")]
