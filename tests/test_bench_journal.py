"""Journal and resume: a real bench process killed with SIGKILL resumes, losing and repeating nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from bench_support import journal_records, kill9_when, sample_counts, start_driver, write_spec

from tunetable.bench.journal import Journal, progress_by_config, read_journal
from tunetable.results import read_shard


def worker_gone(pid: int, *, within_s: float) -> bool:
    """True once no process ``pid`` exists (or it is a zombie awaiting its reaper)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_torn_last_line_is_ignored_and_cut_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text('{"type": "sample", "config_id": "a", "sample_ms": 1.0}\n{"type": "sam')
    assert [r["config_id"] for r in read_journal(path)] == ["a"]
    with Journal(path) as journal:
        journal.append({"type": "final", "config_id": "b", "status": "verify"})
    assert path.read_text().splitlines() == [
        '{"type": "sample", "config_id": "a", "sample_ms": 1.0}',
        '{"config_id": "b", "status": "verify", "type": "final"}',
    ]
    progress = progress_by_config(read_journal(path))
    assert progress["b"].final["status"] == "verify" and len(progress["a"].samples) == 1


@pytest.mark.slow
def test_kill9_mid_run_then_rerun_measures_only_what_is_missing(tmp_path: Path) -> None:
    rounds = 12
    journal = tmp_path / "M8_N8_K8.journal.jsonl"
    shard = tmp_path / "M8_N8_K8.pkl"
    configs = ["a", "b", "c", "wrong"]
    job = {"table": "t", "M": 96, "N": 96, "K": 96, "journal": str(journal), "shard": str(shard),
           "tasks": [{"config_id": cid, "mesh_idx": i} for i, cid in enumerate(configs)],
           "payloads": {"a": {"entry": "gemm"}, "b": {"entry": "gemm"}, "c": {"entry": "gemm"},
                        "wrong": {"entry": "gemm_wrong"}}}
    # batches of >= 20 ms make the run last long enough to be killed in the middle
    spec = write_spec(tmp_path / "spec.json", backend="cpu-test", jobs=[job],
                      settings={"warmup_ms": 1, "rounds": rounds, "min_batch_ms": 20, "timeout_s": 30})
    before = kill9_when(start_driver(spec), journal, samples=8, limit_s=60)
    measured_before = sum(sample_counts(journal).values())
    assert 8 <= measured_before < 3 * rounds and not shard.exists()
    worker_pid = journal_records(journal)[-1]["worker_pid"]
    assert worker_gone(worker_pid, within_s=10)  # the worker dies with the bench, even mid-request

    rerun = start_driver(spec)
    assert rerun.wait(timeout=120) == 0, rerun.stdout.read().decode()[-2000:]
    after = journal.read_text().splitlines()
    assert after[: len(before)] == before
    assert sample_counts(journal) == {"a": rounds, "b": rounds, "c": rounds}
    finals = [r for r in journal_records(journal) if r["type"] == "final"]
    assert [(r["config_id"], r["status"]) for r in finals] == [("wrong", "verify")]  # not re-verified
    rows = read_shard(shard)["merged_df"].set_index("config_id")
    for cid in ("a", "b", "c"):
        journalled = [r["sample_ms"] for r in journal_records(journal)
                      if r["type"] == "sample" and r["config_id"] == cid]
        assert list(rows.loc[cid, "samples_ms"]) == journalled
    assert rows.loc["wrong", "status"] == "verify"

    again = start_driver(spec)  # a third run finds everything measured and only rewrites the shard
    assert again.wait(timeout=60) == 0
    measurements = [line for line in journal.read_text().splitlines() if '"type": "shard"' not in line]
    assert measurements == [line for line in after if '"type": "shard"' not in line]
    read_shard(shard)  # the rewritten shard's checksum is recorded (a record of its own, type "shard")
