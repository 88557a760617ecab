"""The versioned pipeline end to end: real snakemake and real dvc in a temporary git repo, replay backend.

These replay the committed H200 recording; without it they skip with a message saying so.
One module-scoped project (three shapes) is reproduced, extended, reverted, changed and audited
in order; the fresh-clone test runs the full default table, as the README's main job does.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipeline_repo import (
    NO_RECORDING, RECORDING, dvc, edit_params, git, make_project, rewritten, shard_times, small_table,
    snakemake, tunetable,
)
from tunetable.yamlio import load_yaml, load_yaml_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not RECORDING.is_file(), reason=NO_RECORDING),
]

TABLE = "gemm_mma"


def manifest_entries(root: Path) -> list[dict]:
    """The manifest's entries, merged with their defaults."""
    return load_yaml_file(root / "manifests" / f"{TABLE}.yaml")["params"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-shape copy of the project, reproduced once with `dvc repro` and committed with its lock."""
    base = tmp_path_factory.mktemp("pipeline")
    root = make_project(base / "repo", remote=base / "remote", params_edit=small_table)
    first = dvc("repro", cwd=root)
    assert len([path for path in shard_times(root) if f"/raw/{TABLE}/" in path]) == 3, first.output[-3000:]
    assert "REPLAYING" in first.output
    dvc("push", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "reproduced", cwd=root)
    return root


def test_repro_writes_every_artefact(project: Path) -> None:
    metrics = load_yaml_file(project / "results" / "metrics" / f"{TABLE}.json")
    assert metrics["shapes"] == 3
    assert metrics["entries"] == len(manifest_entries(project))
    assert metrics["content_key"] in {p.name for p in (project / "results" / "raw" / TABLE).iterdir()}
    plot = (project / "results" / "plots" / f"{TABLE}.csv").read_text().splitlines()
    assert plot[0].startswith("shape,M,N,K,config_id") and len(plot) == 4
    assert (project / "results" / "plots" / f"{TABLE}.png").read_bytes()[:4] == b"\x89PNG"
    generated = (project / "kernels" / "tuning_configs.py").read_text()
    assert all(f'config_id="{e["CONFIG_ID"]}"' in generated for e in manifest_entries(project))
    assert tunetable("codegen", "--all", "--check", cwd=project).returncode == 0


def test_noop_runs_nothing(project: Path) -> None:
    status = dvc("status", cwd=project)
    assert "up to date" in status.output
    again = snakemake("--cores", "2", cwd=project)
    assert "Nothing to be done" in again.output


def test_report_holds_ranked_tables_and_plot(project: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    snakemake("--report", str(report), cwd=project)
    html = report.read_text(errors="replace")
    assert f"{TABLE}.csv" in html and f"{TABLE}.failures.csv" in html and f"{TABLE}.png" in html


def test_adding_one_shape_reruns_only_that_shard_and_reverting_reuses(project: Path) -> None:
    before = shard_times(project)
    edit_params(project, lambda d: d["tables"][TABLE]["shapes"]["M"].insert(2, 128))
    added = dvc("repro", cwd=project)
    new = rewritten(before, shard_times(project))
    # One shard per device that has the table: gemm_mma's and the H100's gemm_mma.h100 (same shapes, its recording).
    assert sorted((Path(p).parts[2], Path(p).name) for p in new) == [
        ("gemm_mma", "M128_N4096_K4096.pkl"), ("gemm_mma.h100", "M128_N4096_K4096.pkl")], added.output[-3000:]
    assert '"shapes": 4,' in (project / "results" / "metrics" / f"{TABLE}.json").read_text()
    git("checkout", "--", "params.yaml", cwd=project)
    extended = shard_times(project)
    reverted = dvc("repro", cwd=project)
    assert rewritten(extended, shard_times(project)) == [], reverted.output[-3000:]
    assert "replay_" not in reverted.output  # no replay job at all: every shard was on disk
    assert git("status", "--porcelain", "manifests", "kernels", "results/metrics", cwd=project).output == ""


def _exclude_first_winner(data: dict, entry: dict) -> None:
    """Params edit: a grid rule that removes exactly the configuration of ``entry``."""
    names = [k for k in entry if k not in ("M", "M_END", "N", "K", "KERNEL", "CONFIG_ID")]
    clause = " and ".join(f"{name} == {entry[name]}" for name in names)
    data["tables"][TABLE]["grid"].setdefault("rules", []).append(f"not ({clause})")


def test_params_change_changes_table_and_audit_explains_it(project: Path) -> None:
    before = manifest_entries(project)
    winner = before[0]
    edit_params(project, lambda d: _exclude_first_winner(d, winner))
    before_change = shard_times(project)
    dvc("repro", cwd=project)
    changed = rewritten(before_change, shard_times(project))   # a grid change is a new content key: every shape
    assert sorted({Path(p).parts[2] for p in changed}) == [TABLE, f"{TABLE}.h100"] and len(changed) == 2 * 3
    after = manifest_entries(project)
    assert winner["CONFIG_ID"] not in {e["CONFIG_ID"] for e in after}
    params_diff = dvc("params", "diff", cwd=project).output
    assert "grid.rules" in params_diff
    # The old shards must come from DVC (cache, then remote), not the workspace.
    old_key = load_yaml(git("show", f"HEAD:results/metrics/{TABLE}.json", cwd=project).output)["content_key"]
    assert not (project / "results" / "raw" / TABLE / old_key).exists()  # the old key was parked, outside DVC's out
    shutil.rmtree(project / "results" / "parked" / TABLE / old_key)
    shutil.rmtree(project / ".dvc" / "cache")
    report = tunetable("audit", cwd=project).output
    assert "tables.gemm_mma.grid.rules" in report
    assert old_key in report
    assert winner["CONFIG_ID"] in report
    row = next(line for line in report.splitlines() if line.count(winner["CONFIG_ID"]) == 1
               and re.search(rf"^\W*{winner['M']}\W", line))
    # the table's time (µs, three decimals as every time) before and after; the speedup ends in x
    assert len(re.findall(r"\d+\.\d{3}(?![\dx])", row)) == 2, row


def test_trace_follows_an_entry_to_its_shards(project: Path) -> None:
    entries = manifest_entries(project)
    out = tunetable("trace", TABLE, "0", cwd=project).output
    assert entries[0]["CONFIG_ID"] in out
    metrics = load_yaml_file(project / "results" / "metrics" / f"{TABLE}.json")
    assert metrics["content_key"] in out
    device = json.loads(RECORDING.with_suffix(".json").read_text())["device"]
    assert device in out
    lines = (project / "kernels" / "tuning_configs.py").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "# index: [0]" in text)
    by_line = tunetable("trace", f"kernels/tuning_configs.py:{line}", cwd=project).output
    assert by_line.splitlines()[0] == out.splitlines()[0]
