"""Bench planning without a GPU: settings, launch payloads, content keys, report errors, CLI errors."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tunetable.kernels.families import FAMILIES
from tunetable.bench.tasks import (
    ConfigTask,
    baseline_task,
    launch_payload,
    settings_from_params,
    tasks_from_reports,
)
from tunetable.errors import TuneTableError
from tunetable.measurement_plan import parse_shapes, shard_key, shard_payloads
from tunetable.params import load_params, table_spec

REPO = Path(__file__).resolve().parents[1]
SPLIT = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "WARPS_M": 1, "WARPS_N": 4, "WARPS_K": 1, "STAGES": 4,
         "SPLIT_K": 4, "GROUP_M": 1}


def test_settings_come_from_params_bench() -> None:
    settings = settings_from_params(params={"bench": {"rounds": 7, "timeout_s": 3, "warmup_ms": 1}})
    assert (settings.rounds, settings.timeout_s, settings.warmup_ms, settings.l2_factor) == (7, 3.0, 1.0, 3.0)


def test_launch_payload_of_a_split_k_config() -> None:
    task = ConfigTask(config_id="c1", family="gemm_mma", defines=tuple(SPLIT.items()), cubin="x.cubin")
    payload = launch_payload(task=task, m=32, n=4096, k=4096, families=FAMILIES)
    # 2 row tiles of 16 x 64 column tiles of 64, 4 K slices; fp32 partials [4, 32, 4096], then one
    # int counter per tile (2 x 64) for the in-kernel reduction: one kernel, nothing else to launch.
    assert payload["grid"] == [2 * 64, 1, 4] and payload["block"] == [128, 1, 1]
    assert payload["smem_bytes"] == 4 * (16 + 64) * 64 * 2
    assert payload["workspace_bytes"] == 4 * 32 * 4096 * 4 + 2 * 64 * 4 == 2_097_152 + 512
    assert set(payload) == {"kind", "family", "defines", "cubin", "entry", "grid", "block", "smem_bytes",
                            "workspace_bytes"}
    assert launch_payload(task=baseline_task(), m=1, n=8, k=8, families=FAMILIES) == {"kind": "baseline"}


def test_a_shape_the_family_rejects_becomes_that_tasks_error() -> None:
    task = ConfigTask(config_id="c1", family="gemm_mma", defines=tuple(SPLIT.items()), cubin="x.cubin")
    payloads = shard_payloads(tasks=[task, baseline_task()], m=4, n=100, k=64, families=FAMILIES)
    assert payloads["c1"].startswith("shape rejected: gemm_mma: N and K must be multiples of 8")
    assert payloads["cublas"] == {"kind": "baseline"}


def test_an_unknown_family_stops_the_shard_instead_of_becoming_a_failed_row() -> None:
    # TuneTableError is a ValueError: the shape-rejection handler must not swallow this user error.
    task = ConfigTask(config_id="c1", family="gemm_nope", defines=tuple(SPLIT.items()), cubin="x.cubin")
    with pytest.raises(TuneTableError, match="unknown kernel family 'gemm_nope'"):
        shard_payloads(tasks=[task], m=64, n=4096, k=4096, families=FAMILIES)


def test_shard_key_changes_with_backend_and_bench_settings() -> None:
    params = load_params(REPO / "params.yaml")
    table = table_spec(params, "gemm_mma")
    cuda = shard_key(params, table, "cuda")
    assert cuda == shard_key(params, table, "cuda") and len(cuda) == 16
    changed = {**params, "bench": {**params["bench"], "rounds": params["bench"]["rounds"] + 1}}
    assert shard_key(changed, table, "cuda") != cuda
    other_kernel = replace(table, kernel="tests/fixtures/bench/gemm_test.cu")
    assert shard_key(params, other_kernel, "cuda") != cuda
    with pytest.raises(TuneTableError, match="resolved backend"):
        shard_key(params, table, "auto")


def test_replay_key_takes_the_recordings_nvcc_not_this_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh clone on a machine without nvcc (or with another one) must get the committed lock's keys.
    from tunetable import keys

    params = load_params(REPO / "params.yaml")
    table = table_spec(params, "gemm_mma")
    here = shard_key(params, table, "replay")
    monkeypatch.setattr(keys, "nvcc_version", lambda: "nvcc-absent")
    monkeypatch.setattr("tunetable.measurement_plan.nvcc_version", lambda: "nvcc-absent")
    assert shard_key(params, table, "replay") == here
    metrics = json.loads((REPO / "results" / "metrics" / "gemm_mma.json").read_text())
    assert metrics["content_key"] == here  # the committed metrics name the key a fresh clone makes


def test_parse_shapes_names_the_bad_option() -> None:
    assert parse_shapes(["1,4096,4096", "8x16x32"]) == [(1, 4096, 4096), (8, 16, 32)]
    with pytest.raises(TuneTableError, match=r"--shape\[1\]: expected M,N,K"):
        parse_shapes(["1,2,3", "1,2"])


def test_reports_that_disagree_are_clear_errors(tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    report = tmp_path / "compile.json"
    grid.write_text(json.dumps({"family": "gemm_mma", "kernel_hash": "h1",
                                "configs": [{"id": "ca", "params": {"A": 1}}, {"id": "cb", "params": {"A": 2}},
                                            {"id": "cc", "params": {"A": 3}}]}))
    report.write_text(json.dumps({"kernel_hash": "h1", "records": [
        {"config_id": "ca", "status": "ok", "cubin": "a.cubin", "registers": 90},
        {"config_id": "cb", "status": "build", "cubin": None, "error": "ptxas: too much shared data"},
        {"config_id": "cc", "status": "pruned", "cubin": None}]}))
    kernel_hash, tasks = tasks_from_reports(grid_path=grid, compile_path=report)
    assert kernel_hash == "h1" and [(t.config_id, t.build_status, t.mesh_idx) for t in tasks] == [
        ("ca", "ok", 0), ("cb", "build", 1)]
    assert dict(tasks[0].compile_info)["registers"] == 90 and tasks[1].build_error.startswith("ptxas")
    report.write_text(json.dumps({"kernel_hash": "h2", "records": []}))
    with pytest.raises(TuneTableError, match="compile report is for kernel h2, grid for h1"):
        tasks_from_reports(grid_path=grid, compile_path=report)
    report.write_text("{not json")
    with pytest.raises(TuneTableError, match=r"compile.json: line 1: malformed JSON"):
        tasks_from_reports(grid_path=grid, compile_path=report)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "-1"})


def test_bench_cli_errors_are_one_line(tmp_path: Path) -> None:
    both = run_cli("bench", "--table", "gemm_mma", "--all-shapes", "--shape", "1,8,8", cwd=REPO)
    assert both.returncode == 2 and both.stderr.strip() == ("error: bench: give --shape M,N,K (repeatable) or "
                                                            "--all-shapes, not both or neither")
    bad = run_cli("bench", "--table", "gemm_mma", "--shape", "1,8", cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.strip() == ("error: --shape[0]: expected M,N,K with positive integers, "
                                                          "got '1,8'")
    params = tmp_path / "params.yaml"
    # tables.gemm_mma.recording overrides the primary device's derived recording path
    params.write_text((REPO / "params.yaml").read_text().replace(
        "\n  gemm_mma:\n", f"\n  gemm_mma:\n    recording: {tmp_path / 'none.parquet'}\n", 1))
    replay = run_cli("bench", "--table", "gemm_mma", "--shape", "1,4096,4096", "--backend", "replay",
                     "--params", str(params), cwd=REPO)
    assert replay.returncode == 2 and "none.parquet: no such recording" in replay.stderr
    assert "Traceback" not in replay.stderr


def test_cuda_jobs_refuse_a_compile_report_whose_cubins_are_gone(tmp_path: Path) -> None:
    from tunetable.measurement_plan import cuda_jobs
    from tunetable.keys import kernel_source_hash

    params = load_params(REPO / "params.yaml")
    table = table_spec(params, "gemm_mma")
    kernel_hash = kernel_source_hash(table.kernel)
    (tmp_path / "grid").mkdir()
    (tmp_path / "compile").mkdir()
    cubin = tmp_path / "present.cubin"
    cubin.write_bytes(b"\x7fELF")
    (tmp_path / "grid" / "gemm_mma.json").write_text(json.dumps({"family": "gemm_mma", "kernel_hash": kernel_hash,
        "configs": [{"id": "ca", "params": SPLIT}, {"id": "cb", "params": SPLIT}]}))
    records = [{"config_id": "ca", "status": "ok", "cubin": str(cubin)},
               {"config_id": "cb", "status": "ok", "cubin": str(tmp_path / "gone.cubin")}]
    (tmp_path / "compile" / "gemm_mma.json").write_text(json.dumps({"kernel_hash": kernel_hash, "records": records}))
    with pytest.raises(TuneTableError,
                       match=r"compile/gemm_mma.json: 1 compiled cubins are missing \(first: .*gone.cubin\)"):
        cuda_jobs(table=table, shapes=[(1, 4096, 4096)], key="k", results_root=tmp_path)
    records[1]["cubin"] = str(cubin)
    (tmp_path / "compile" / "gemm_mma.json").write_text(json.dumps({"kernel_hash": kernel_hash, "records": records}))
    jobs = cuda_jobs(table=table, shapes=[(1, 4096, 4096), (3, 4096, 4096)], key="k", results_root=tmp_path)
    assert [j.shard_path.name for j in jobs] == ["M1_N4096_K4096.pkl", "M3_N4096_K4096.pkl"]
    assert [t.config_id for t in jobs[0].tasks] == ["ca", "cb", "cublas"]


def test_shard_key_changes_with_the_search_and_not_without_one(tmp_path: Path) -> None:
    params = load_params(REPO / "params.yaml")
    table = table_spec(params, "gemm_mma")
    default = shard_key(params, replace(table, search={}), "cuda")
    # No search, a plain exhaustive, or settings that change nothing of an unbudgeted exhaustive run: today's key.
    for same in ({"strategy": "exhaustive"}, {"strategy": "exhaustive", "seed": 3, "transfer": False}):
        assert shard_key(params, replace(table, search=same), "cuda") == default
    keys = {default}
    for search in ({"strategy": "model", "max_fevals": 5}, {"strategy": "model", "max_fevals": 6},
                   {"strategy": "model", "max_fevals": 5, "seed": 1}, {"strategy": "random", "max_fevals": 5},
                   {"strategy": "exhaustive", "top_k": 10}, {"strategy": "exhaustive", "time_limit": 60}):
        key = shard_key(params, replace(table, search=search), "cuda")
        assert key not in keys, search
        keys.add(key)
    # learn_from is keyed by the recording's content, not its path.
    first, second, copy = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "a_copy.parquet"
    first.write_bytes(b"one")
    second.write_bytes(b"two")
    copy.write_bytes(b"one")
    learned = {name: shard_key(params, replace(table, search={"strategy": "model", "max_fevals": 5,
                                                               "learn_from": str(path)}), "cuda")
               for name, path in (("first", first), ("second", second), ("copy", copy))}
    assert learned["first"] == learned["copy"] != learned["second"] and learned["first"] not in keys
    with pytest.raises(TuneTableError, match=r"gone.parquet: tables.gemm_mma.search.learn_from: no such recording"):
        shard_key(params, replace(table, search={"strategy": "model", "max_fevals": 5,
                                                 "learn_from": str(tmp_path / "gone.parquet")}), "cuda")
    with pytest.raises(TuneTableError, match=r"tables.gemm_mma.search: search setting max_fevals must be a positive"):
        shard_key(params, replace(table, search={"strategy": "model", "max_fevals": True}), "cuda")
