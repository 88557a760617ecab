"""Replay and recording: matching on (table, M, N, K, config_id, kernel_hash), errors, provenance."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunetable.bench.record import recording_frame, recording_provenance, shard_provenance, write_recording
from tunetable.bench.replay import ReplayRunner, load_recording
from tunetable.bench.devices import gpu_visible
from tunetable.bench.live import LiveRunner
from tunetable.bench.runner import ShardJob, run_shards
from tunetable.bench.tasks import BenchSettings, ConfigTask, baseline_task
from tunetable.errors import TuneTableError
from tunetable.measurement_plan import resolve_backend
from tunetable.results import ROW_FIELDS, read_shard

REPO = Path(__file__).resolve().parents[1]
SETTINGS = BenchSettings(warmup_ms=1, rounds=3, min_batch_ms=0.05, timeout_s=10)
SHAPES = [(16, 32, 24), (8, 32, 24)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two shards measured by the real worker with the CPU test runner (backend 'cpu-test')."""
    root = tmp_path_factory.mktemp("measured")
    tasks = (ConfigTask(config_id="cA", mesh_idx=0, family="cpu", params=(("TILE", 16),)),
             ConfigTask(config_id="cB", mesh_idx=1, family="cpu", params=(("TILE", 32),)))
    jobs = [ShardJob(table="t", m=m, n=n, k=k, tasks=tasks,
                     payloads={"cA": {"entry": "gemm"}, "cB": {"entry": "gemm_wrong"}},
                     journal_path=root / f"{m}.journal.jsonl", shard_path=root / f"{m}.pkl", content_key="measkey",
                     kernel_hash="kh1", provenance={"git_rev": "abc123", "nvcc": "nvcc-x"})
            for (m, n, k) in SHAPES]
    run_shards(jobs=jobs, runner=LiveRunner(backend="cpu-test", settings=SETTINGS, gpus=[None]))
    return {"root": root, "tasks": tasks, "shards": [job.shard_path for job in jobs]}


def recorded(measured: dict, tmp_path: Path) -> tuple[Path, dict]:
    """A recording of the measured shards; `record` itself accepts only cuda rows, so the frame is
    relabelled here to exercise the file format (the timings are real CPU timings, not GPU ones)."""
    import pandas as pd

    frames = [read_shard(path)["merged_df"].assign(table="t") for path in measured["shards"]]
    frame = pd.concat(frames, ignore_index=True)
    provenance = recording_provenance(frame=frame, table="t", command="test", git_rev="abc123",
                                      settings=shard_provenance(measured["shards"], "settings"))
    parquet, _ = write_recording(frame=frame, provenance=provenance, out_dir=tmp_path, name="rec")
    return parquet, provenance


def test_record_refuses_shards_not_measured_by_cuda(measured: dict) -> None:
    with pytest.raises(TuneTableError, match="only cuda-backend shards can be recorded"):
        recording_frame(table="t", shard_paths=measured["shards"])


def test_record_cli_error_is_one_line_and_writes_nothing(measured: dict, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tunetable", "record", "--table", "t", "--name", "x",
                             "--out-dir", str(tmp_path), *map(str, measured["shards"])],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "only cuda-backend shards" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_recording_round_trip_keeps_every_field_and_provenance(measured: dict, tmp_path: Path) -> None:
    parquet, provenance = recorded(measured, tmp_path)
    sidecar = json.loads(parquet.with_suffix(".json").read_text())
    # The sidecar is the provenance plus the parquet's sha256 (replay refuses a recording edited since).
    assert sidecar == {**json.loads(json.dumps(provenance)),
                       "parquet_sha256": hashlib.sha256(parquet.read_bytes()).hexdigest()}
    assert sidecar["device"] == "cpu-test-backend" and sidecar["rows"] == 4 and sidecar["shapes"] == 2
    assert sidecar["statuses"] == {"ok": 2, "verify": 2} and sidecar["content_keys"] == ["measkey"]
    assert sidecar["bench_settings"]["rounds"] == 3 and sidecar["date"] == sidecar["measured_to"][:10]
    index = load_recording(parquet)
    row = index[("t", 16, 32, 24, "cA", "kh1")]
    assert set(ROW_FIELDS) <= set(row) and len(row["samples_ms"]) == 3


def replay_jobs(tasks, shapes, root: Path, *, kernel_hash: str = "kh1", key: str = "replaykey") -> list[ShardJob]:
    """Replay jobs of the measured table's shapes (replay needs no payloads)."""
    return [ShardJob(table="t", m=m, n=n, k=k, tasks=tuple(tasks), payloads={},
                     journal_path=root / f"r{m}.journal.jsonl", shard_path=root / f"r{m}_{n}_{k}.pkl",
                     content_key=key, kernel_hash=kernel_hash) for (m, n, k) in shapes]


def replayer(parquet: Path, provenance: dict, *, allow_missing: bool = False) -> ReplayRunner:
    return ReplayRunner(recording=load_recording(parquet), recording_path=parquet, provenance=provenance,
                        allow_missing=allow_missing)


def test_replay_is_a_backend_of_the_runner_serving_recorded_samples(measured: dict, tmp_path: Path) -> None:
    parquet, provenance = recorded(measured, tmp_path)
    original = read_shard(measured["shards"][0])["merged_df"].set_index("config_id")
    jobs = replay_jobs(measured["tasks"], [SHAPES[0]], tmp_path)
    events: list[str] = []
    rows = run_shards(jobs=jobs, runner=replayer(parquet, provenance),
                      on_event=lambda kind, job, record: events.append(kind))
    assert events == ["config", "config", "shard"]
    served = {r["config_id"]: r for r in rows[jobs[0].shard_path]}
    shard = read_shard(jobs[0].shard_path)
    assert list(shard["merged_df"]["config_id"]) == ["cA", "cB"]
    assert shard["provenance"] == {"backend": "replay", "recording": str(parquet), "content_key": "replaykey",
                                   "kernel_hash": "kh1", **{f"recording_{k}": v for k, v in provenance.items()}}
    assert served["cA"]["samples_ms"] == list(original.loc["cA", "samples_ms"])
    assert served["cA"]["median_ms"] == original.loc["cA", "median_ms"]
    assert served["cA"]["backend"] == "replay" and served["cA"]["content_key"] == "replaykey"
    assert served["cA"]["measured_key"] == "measkey" and served["cA"]["git_rev"] == "abc123"
    assert served["cA"]["time"] == original.loc["cA", "time"] and served["cA"]["device"] == "cpu-test-backend"
    assert served["cB"]["status"] == "verify"
    assert served["cA"]["spec"] == "t/TILE=16/$M=16/$N=32/$K=24"


def test_replay_of_unrecorded_entries_lists_the_first_missing(measured: dict, tmp_path: Path) -> None:
    parquet, _ = recorded(measured, tmp_path)
    tasks = [*measured["tasks"], ConfigTask(config_id="cNEW", mesh_idx=2, family="cpu"), baseline_task()]
    jobs = replay_jobs(tasks, [*SHAPES, (64, 32, 24)], tmp_path, key="k")
    with pytest.raises(TuneTableError) as error:
        run_shards(jobs=jobs, runner=replayer(parquet, {}))
    assert not any(job.shard_path.exists() for job in jobs)  # checked before anything is written
    message = str(error.value)
    assert message.startswith(f"{parquet}: 8 entries of table t (kernel kh1) are not recorded: ")
    assert "M=16 N=32 K=24 cNEW; M=16 N=32 K=24 cublas; M=8 N=32 K=24 cNEW" in message and "and 3 more" in message


def test_a_changed_kernel_hash_matches_nothing(measured: dict, tmp_path: Path) -> None:
    parquet, _ = recorded(measured, tmp_path)
    with pytest.raises(TuneTableError, match="4 entries of table t \\(kernel kh2\\)"):
        run_shards(jobs=replay_jobs(measured["tasks"], SHAPES, tmp_path, kernel_hash="kh2"),
                   runner=replayer(parquet, {}))


def test_allow_missing_gives_missing_rows(measured: dict, tmp_path: Path) -> None:
    parquet, _ = recorded(measured, tmp_path)
    tasks = [*measured["tasks"], ConfigTask(config_id="cNEW", mesh_idx=2, family="cpu")]
    jobs = replay_jobs(tasks, [SHAPES[1]], tmp_path, key="k")
    rows = run_shards(jobs=jobs,
                      runner=replayer(parquet, {}, allow_missing=True))[jobs[0].shard_path]
    assert [(r["config_id"], r["status"]) for r in rows] == [("cA", "ok"), ("cB", "verify"), ("cNEW", "missing")]
    assert rows[2]["median_ms"] is None and rows[2]["samples_ms"] == []


def test_auto_without_a_gpu_says_replay_with_the_recording_device_and_date(measured: dict, tmp_path: Path) -> None:
    if gpu_visible():
        pytest.skip("a GPU is visible here: auto picks cuda")
    parquet, provenance = recorded(measured, tmp_path)
    choice = resolve_backend(requested="auto", recording=parquet)
    assert choice.backend == "replay" and "auto: NO CUDA device visible" in choice.reason
    assert f"measured on cpu-test-backend (driver {provenance['driver']}) on {provenance['date']}" in choice.reason
    with pytest.raises(TuneTableError, match="no such recording"):
        resolve_backend(requested="replay", recording=tmp_path / "absent.parquet")
