"""Each table names its own recording: replay finds it per table, and a run without a GPU leaves out
(loudly) a table whose recording has not landed, together with the dispatch lists that need it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pipeline_repo import edit_params, two_families

from tunetable.workflow import messages, run_plan, targets
from tunetable.measurement_plan import recording_path
from tunetable.errors import TuneTableError
from tunetable.kernels.families import FAMILIES
from tunetable.params import dispatch_specs, load_params, table_spec
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
MMA_RECORDING = "data/recordings/h200_gemm_mma.parquet"
WGMMA_RECORDING = "data/recordings/h200_gemm_wgmma.parquet"
NO_RECORDING = f"{MMA_RECORDING} is absent: these tests key and replay the committed H200 recording"
pytestmark = pytest.mark.skipif(not (REPO / MMA_RECORDING).is_file(), reason=NO_RECORDING)
REPLAY = {"backend": "replay"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """params.yaml of two families and gemm_mma's recording only (gemm_wgmma's has not landed here)."""
    for name in ("params.yaml", MMA_RECORDING,
                 MMA_RECORDING.replace(".parquet", ".json")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, tmp_path / name)
    edit_params(tmp_path, two_families)
    monkeypatch.chdir(tmp_path)  # the plan reads params.yaml's relative paths, as the Snakefile does
    return tmp_path


def params_of(root: Path, **bench: object) -> dict:
    """The project's params with bench settings overridden (as `--config bench=...` does)."""
    params = load_params(root / "params.yaml")
    return {**params, "bench": {**params["bench"], **bench}}


def test_each_table_replays_its_own_recording() -> None:
    params = load_params(REPO / "params.yaml")
    for name, recording in (("gemm_mma", MMA_RECORDING), ("gemm_wgmma", WGMMA_RECORDING)):
        assert recording_path(table=table_spec(params, name)) == Path(recording)
    assert "recording" not in params["bench"]


def test_replay_key_of_gemm_mma_is_the_one_its_checked_in_metrics_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moving the recording into the table keeps gemm_mma's replay byte-identical (same content key)."""
    monkeypatch.chdir(REPO)
    plan = run_plan.make_plan(params_of(REPO, **REPLAY))
    metrics = json.loads((REPO / "results" / "metrics" / "gemm_mma.json").read_text())
    assert plan.keys["gemm_mma"] == metrics["content_key"]
    assert plan.recordings["gemm_mma"] == Path(MMA_RECORDING)


def test_replay_leaves_out_a_table_whose_recording_is_absent(project: Path) -> None:
    plan = run_plan.make_plan(params_of(project, **REPLAY))
    assert [spec.name for spec in plan.tables] == ["gemm_mma"]
    assert set(plan.keys) == {"gemm_mma"} and plan.recordings == {"gemm_mma": Path(MMA_RECORDING)}
    assert list(plan.skipped) == ["gemm_wgmma"] and WGMMA_RECORDING in plan.skipped["gemm_wgmma"]
    assert plan.dispatches == () and list(plan.skipped_dispatches) == ["gemm_dispatch"]
    banner = messages.banner(plan).splitlines()
    assert banner[0] == "tunetable: REPLAYING the committed recording (no GPU timing happens in this run)"
    assert banner[1].startswith(
        f"tunetable: backend replay (requested): serving {MMA_RECORDING}, measured on NVIDIA H200")
    assert banner[2].startswith(f"tunetable: SKIPPING table gemm_wgmma: its recording {WGMMA_RECORDING} is absent")
    assert "tunetable record --table gemm_wgmma --name h200_gemm_wgmma" in banner[2]
    assert banner[3].startswith("tunetable: SKIPPING dispatch list gemm_dispatch: table gemm_wgmma is not part")
    assert banner[4].startswith("tunetable: SKIPPING selector gemm_selector: the recording of table gemm_wgmma")
    # Codegen still renders every declared list: the left-out manifests are plain inputs.
    inputs = targets.codegen_inputs(plan, params_of(project, **REPLAY))
    assert "manifests/gemm_wgmma.yaml" in inputs and "manifests/gemm_dispatch.yaml" in inputs
    assert str(FAMILIES["gemm_wgmma"].snippet) in inputs and "kernels/snippets/gemm_dispatch.snippet" in inputs
    assert "manifests/gemm_selector.yaml" in inputs
    with pytest.raises(TuneTableError, match="table 'gemm_wgmma' is not part of this run: its recording"):
        plan.table("gemm_wgmma")


def test_replay_covers_every_table_with_a_recording_and_keys_each_by_its_own(project: Path) -> None:
    params = params_of(project, **REPLAY)
    before = run_plan.make_plan(params).keys["gemm_mma"]
    shutil.copyfile(REPO / "data/recordings/h200_gemm_mma_rerun.parquet", project / "data/recordings/other.parquet")
    shutil.copyfile(REPO / "data/recordings/h200_gemm_mma_rerun.json", project / "data/recordings/other.json")
    params["tables"]["gemm_wgmma"]["recording"] = "data/recordings/other.parquet"  # overrides the derived path
    plan = run_plan.make_plan(params)
    assert [spec.name for spec in plan.tables] == ["gemm_mma", "gemm_wgmma"] and plan.skipped == {}
    assert [spec.name for spec in plan.dispatches] == ["gemm_dispatch"] and plan.skipped_dispatches == {}
    assert plan.keys["gemm_mma"] == before  # another table's recording does not touch this key
    assert len(messages.banner(plan).splitlines()) == 3 + 2  # one serving line per table, then the two devices
    assert "serving data/recordings/other.parquet" in messages.banner(plan)
    assert targets.replay_inputs(plan, table="gemm_wgmma") == ["data/recordings/other.parquet",
                                                               "data/recordings/other.json"]
    params["tables"]["gemm_wgmma"]["recording"] = MMA_RECORDING  # same file: a different key still (table name)
    assert run_plan.make_plan(params).keys["gemm_wgmma"] != before


def test_replay_with_no_recording_at_all_is_one_error_naming_the_first(project: Path) -> None:
    (project / MMA_RECORDING).unlink()
    with pytest.raises(TuneTableError) as info:
        run_plan.make_plan(params_of(project, **REPLAY))
    assert str(info.value) == f"{MMA_RECORDING}: no such recording (make one with `tunetable record` on a GPU)"


def test_a_recording_without_its_sidecar_is_an_error_not_a_skip(project: Path) -> None:
    (project / MMA_RECORDING.replace(".parquet", ".json")).unlink()
    with pytest.raises(TuneTableError, match="recording has no provenance sidecar"):
        run_plan.make_plan(params_of(project, **REPLAY))


def test_a_table_naming_no_recording_is_left_out_of_a_replay(project: Path) -> None:
    # Without `devices:` (an older params.yaml) a table names its recording itself, or none.
    params = params_of(project, **REPLAY)
    del params["devices"]
    params["tables"]["gemm_mma"]["recording"] = MMA_RECORDING
    plan = run_plan.make_plan(params)
    assert [spec.name for spec in plan.tables] == ["gemm_mma"]
    assert plan.skipped["gemm_wgmma"].startswith("it names no recording")
    del params["tables"]["gemm_mma"]["recording"]
    with pytest.raises(TuneTableError, match=r"tables.gemm_mma.recording: the table names no recording to replay"):
        run_plan.make_plan(params)
    live = run_plan.make_plan({**params, "bench": {**params["bench"], "backend": "cuda"}})
    assert [spec.name for spec in live.tables] == ["gemm_mma", "gemm_wgmma"]


def test_live_plan_covers_every_declared_table(project: Path) -> None:
    plan = run_plan.make_plan(params_of(project, backend="cuda"))
    assert [spec.name for spec in plan.tables] == ["gemm_mma", "gemm_wgmma"]
    assert plan.skipped == {} and [spec.name for spec in plan.dispatches] == ["gemm_dispatch"]
    assert plan.recordings == {} and "SKIPPING table" not in messages.banner(plan)
    # The selector is built from the tables' recordings, not from a live run's shards: without
    # gemm_wgmma's it stays as committed, loudly.
    assert plan.selectors == () and list(plan.skipped_selectors) == ["gemm_selector"]
    assert messages.banner(plan).splitlines()[-3] == (  # before the device lines
        "tunetable: SKIPPING selector gemm_selector: the recording of table gemm_wgmma is absent; "
        "manifests/gemm_selector.yaml and its generated list stay as committed")


def test_bench_cli_replays_a_table_from_its_own_recording_only(project: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tunetable", "bench", "--table", "gemm_wgmma", "--backend", "replay",
                           "--shape", "1,4096,4096"], cwd=project, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "-1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {WGMMA_RECORDING}: no such recording (make one with `tunetable record` on a GPU)")


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_schema_wants_the_recording_in_the_table(tmp_path: Path) -> None:
    data = load_yaml_file(REPO / "params.yaml")
    data["bench"]["recording"] = MMA_RECORDING  # the old place
    with pytest.raises(TuneTableError, match=r"bench: Additional properties are not allowed \('recording'"):
        load_params(_write(tmp_path, data))
    data = load_yaml_file(REPO / "params.yaml")
    data["tables"]["gemm_mma"]["recording"] = "data/recordings/h200_gemm_mma.json"
    with pytest.raises(TuneTableError, match=r"tables.gemm_mma.recording: .*does not match"):
        load_params(_write(tmp_path, data))


def test_dispatch_lists_name_declared_tables_only(tmp_path: Path) -> None:
    data = load_yaml_file(REPO / "params.yaml")
    assert [(s.name, s.tables, s.tie_tolerance) for s in dispatch_specs(data)] == [
        ("gemm_dispatch", tuple(data["tables"]), 0.0)]  # every declared table is a candidate
    data["dispatch"]["gemm_dispatch"]["tables"][1] = "gemm_nope"
    with pytest.raises(TuneTableError) as info:
        load_params(_write(tmp_path, data))
    assert str(info.value).endswith("dispatch.gemm_dispatch.tables[1]: unknown table 'gemm_nope' "
                                    f"(declared: {', '.join(data['tables'])})")
    data = load_yaml_file(REPO / "params.yaml")
    data["dispatch"]["gemm_mma"] = data["dispatch"].pop("gemm_dispatch")
    with pytest.raises(TuneTableError, match="dispatch.gemm_mma: a dispatch list cannot share its name with a table"):
        load_params(_write(tmp_path, data))
