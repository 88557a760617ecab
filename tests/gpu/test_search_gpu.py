"""A budgeted search driving the cuda backend: only the picked configurations reach the GPU, rows record the search."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench_support import FIXTURES, journal_records, load_test_families

from tunetable.bench.tasks import BenchSettings, ConfigTask, baseline_task, launch_payload
from tunetable.bench.live import LiveRunner
from tunetable.bench.runner import ShardJob, run_shards
from tunetable.results import SEARCH_FIELDS, read_shard
from tunetable.search import make_strategy
from tunetable.search.driver import TableSearch

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SHAPE = (256, 512, 384)


def test_a_search_measures_its_picks_on_the_gpu_and_resumes_from_the_journal(tmp_path: Path) -> None:
    cubins = {}
    for name, bug in (("good", 0), ("wrong", 3)):
        cubins[name] = str(tmp_path / f"gemm_test_{name}.cubin")
        subprocess.run(["nvcc", "-arch=sm_90", "-cubin", f"-DBUG={bug}", "-o", cubins[name],
                        str(FIXTURES / "gemm_test.cu")], check=True)
    families = load_test_families()
    variants = ["good", "good", "wrong", "good", "wrong", "good"]
    tasks = [ConfigTask(config_id=f"v{i}", mesh_idx=i, family="gemm_test", params=(("VARIANT", name), ("COPY", i)),
                        cubin=cubins[name]) for i, name in enumerate(variants)] + [baseline_task()]
    m, n, k = SHAPE
    stem = f"M{m}_N{n}_K{k}"
    job = ShardJob(table="bench_test", m=m, n=n, k=k, tasks=tuple(tasks),
                   payloads={t.config_id: launch_payload(task=t, m=m, n=n, k=k, families=families) for t in tasks},
                   journal_path=tmp_path / f"{stem}.journal.jsonl", shard_path=tmp_path / f"{stem}.pkl",
                   content_key="gpusearch", kernel_hash="gemm_test")
    settings = BenchSettings(warmup_ms=5, rounds=4, min_batch_ms=0.2, timeout_s=8)
    search = TableSearch(plan=make_strategy({"strategy": "random", "max_fevals": 3, "seed": 1}), shard_dir=tmp_path)
    rows = run_shards(jobs=[job], runner=LiveRunner(backend="cuda", settings=settings), search=search)[job.shard_path]

    kernels = [r for r in rows if r["kind"] == "kernel"]
    assert len(kernels) == 3 and rows[-1]["config_id"] == "cublas" and rows[-1]["status"] == "ok"
    assert [r["search_step"] for r in rows] == [0, 1, 2, None]
    for row in kernels:
        assert row["status"] == ("verify" if row["VARIANT"] == "wrong" else "ok")
        assert row["search_strategy"] == "random" and row["search_max_fevals"] == 3
    assert {r["config_id"] for r in journal_records(job.journal_path)} == {r["config_id"] for r in rows}
    frame = read_shard(job.shard_path)["merged_df"]
    assert set(SEARCH_FIELDS) <= set(frame.columns) and len(frame) == 4

    samples = sum(1 for r in journal_records(job.journal_path) if r["type"] == "sample")
    job.shard_path.unlink()
    again = run_shards(jobs=[job], runner=LiveRunner(backend="cuda", settings=settings), search=search)[job.shard_path]
    assert [r["config_id"] for r in again] == [r["config_id"] for r in rows]
    assert sum(1 for r in journal_records(job.journal_path) if r["type"] == "sample") == samples
