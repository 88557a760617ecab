"""The bench harness on a real GPU: failures are classified, the run goes on, kill -9 loses nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench_support import (
    FIXTURES,
    journal_records,
    kill9_when,
    load_test_families,
    sample_counts,
    start_driver,
    write_spec,
)
from tunetable.bench.tasks import BenchSettings, ConfigTask, baseline_task, launch_payload
from tunetable.bench.live import LiveRunner
from tunetable.bench.runner import ShardJob, run_shards
from tunetable.results import read_shard

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

BUGS = {"good": 0, "illegal": 1, "spin": 2, "wrong": 3, "trap": 4}
SHAPE = (256, 512, 384)


def compile_variants(out: Path) -> dict[str, str]:
    """One cubin per planted bug of the test kernel (real nvcc)."""
    cubins = {}
    for name, bug in BUGS.items():
        cubin = out / f"gemm_test_{name}.cubin"
        subprocess.run(["nvcc", "-arch=sm_90", "-cubin", f"-DBUG={bug}", "-o", str(cubin),
                        str(FIXTURES / "gemm_test.cu")], check=True)
        cubins[name] = str(cubin)
    return cubins


def test_fault_hang_and_wrong_result_are_classified_and_the_run_goes_on(tmp_path: Path) -> None:
    cubins = compile_variants(tmp_path)
    families = load_test_families()
    order = ["good", "illegal", "good2", "spin", "wrong", "trap", "good3"]
    tasks = [ConfigTask(config_id=name, mesh_idx=i, family="gemm_test", params=(("VARIANT", name),),
                        cubin=cubins[name.rstrip("23")]) for i, name in enumerate(order)] + [baseline_task()]
    m, n, k = SHAPE
    job = ShardJob(table="bench_test", m=m, n=n, k=k, tasks=tuple(tasks),
                   payloads={t.config_id: launch_payload(task=t, m=m, n=n, k=k, families=families) for t in tasks},
                   journal_path=tmp_path / "shard.journal.jsonl", shard_path=tmp_path / "shard.pkl",
                   content_key="gputest", kernel_hash="gemm_test")
    settings = BenchSettings(warmup_ms=5, rounds=4, min_batch_ms=0.2, timeout_s=8)
    rows = {r["config_id"]: r
            for r in run_shards(jobs=[job], runner=LiveRunner(backend="cuda", settings=settings))[job.shard_path]}

    assert {cid: rows[cid]["status"] for cid in rows} == {
        "good": "ok", "illegal": "launch", "good2": "ok", "spin": "timeout", "wrong": "verify",
        "trap": "launch", "good3": "ok", "cublas": "ok",
    }
    assert "illegal" in rows["illegal"]["error"] or "memory" in rows["illegal"]["error"]
    assert rows["wrong"]["samples_ms"] == [] and rows["wrong"]["median_ms"] is None
    assert rows["wrong"]["rel_err"] > 0.1
    for cid in ("good", "good2", "good3", "cublas"):
        assert len(rows[cid]["samples_ms"]) == 4 and rows[cid]["median_ms"] > 0
        assert rows[cid]["rel_err"] < 0.02
        assert rows[cid]["sm_clock_mhz"] and rows[cid]["power_w"]
    shard = read_shard(job.shard_path)["merged_df"]
    assert list(shard["config_id"]) == order + ["cublas"]


def test_kill9_mid_run_resumes_without_losing_or_remeasuring(tmp_path: Path) -> None:
    cubin = compile_variants(tmp_path)["good"]
    families = load_test_families()
    rounds = 25
    m, n, k = 512, 512, 512
    tasks = [ConfigTask(config_id=f"c{i}", mesh_idx=i, family="gemm_test", cubin=cubin) for i in range(3)]
    payloads = {t.config_id: launch_payload(task=t, m=m, n=n, k=k, families=families) for t in tasks}
    payloads["cublas"] = {"kind": "baseline"}
    journal = tmp_path / "j.jsonl"
    job = {"table": "bench_test", "M": m, "N": n, "K": k, "journal": str(journal), "shard": str(tmp_path / "s.pkl"),
           "tasks": [{"config_id": t.config_id, "mesh_idx": t.mesh_idx} for t in tasks]
           + [{"config_id": "cublas", "mesh_idx": -1, "kind": "baseline"}], "payloads": payloads}
    spec = write_spec(tmp_path / "spec.json", backend="cuda", jobs=[job],
                      settings={"warmup_ms": 5, "rounds": rounds, "min_batch_ms": 2.0, "timeout_s": 20})
    before = kill9_when(start_driver(spec), journal, samples=20, limit_s=120)
    assert not (tmp_path / "s.pkl").exists()

    rerun = start_driver(spec)
    assert rerun.wait(timeout=300) == 0, rerun.stdout.read().decode()[-3000:]
    after = journal.read_text().splitlines()
    assert after[: len(before)] == before  # nothing measured before the kill was lost or rewritten
    assert sample_counts(journal) == {"c0": rounds, "c1": rounds, "c2": rounds, "cublas": rounds}
    rows = read_shard(tmp_path / "s.pkl")["merged_df"]
    assert set(rows["status"]) == {"ok"}
    journalled = [r["sample_ms"] for r in journal_records(journal) if r["type"] == "sample" and r["config_id"] == "c0"]
    assert list(rows.set_index("config_id").loc["c0", "samples_ms"]) == journalled
