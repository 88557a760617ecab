"""Scheduling and failure classification with the real subprocess worker and the CPU test backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_support import journal_records
from tunetable.bench.failures import WorkerFailure
from tunetable.bench.live import LiveRunner, longest_first, round_order, sample_stats
from tunetable.bench.runner import ShardJob, run_shards
from tunetable.bench.tasks import BenchSettings, ConfigTask
from tunetable.bench.worker import WorkerProcess
from tunetable.results import KBENCH_FIELDS, ROW_FIELDS, read_shard

SETTINGS = BenchSettings(warmup_ms=2, rounds=4, min_batch_ms=0.1, timeout_s=1.5)
CPU = LiveRunner(backend="cpu-test", settings=SETTINGS, gpus=[None])   # one worker over the CPU test backend


def make_job(
    tmp_path: Path, entries: dict[str, dict], *, m: int = 32, n: int = 48, k: int = 40, name: str = "s"
) -> ShardJob:
    tasks = tuple(ConfigTask(config_id=cid, mesh_idx=i, family="cpu", params=(("ENTRY", payload["entry"]),))
                  for i, (cid, payload) in enumerate(entries.items()))
    return ShardJob(table="t", m=m, n=n, k=k, tasks=tasks, payloads=dict(entries),
                    journal_path=tmp_path / f"{name}.journal.jsonl", shard_path=tmp_path / f"{name}.pkl",
                    content_key="key", kernel_hash="hash")


def test_round_order_rotates_so_every_config_leads_once_per_cycle() -> None:
    ids = ["a", "b", "c", "d"]
    orders = [round_order(ids, r) for r in range(5)]
    assert orders == [["a", "b", "c", "d"], ["b", "c", "d", "a"], ["c", "d", "a", "b"], ["d", "a", "b", "c"],
                      ["a", "b", "c", "d"]]
    assert round_order([], 3) == []


def test_round_order_given_the_rounds_spreads_the_leaders_over_the_list() -> None:
    ids = [f"c{index}" for index in range(10)]
    assert [round_order(ids, r, rounds=3)[0] for r in range(3)] == ["c0", "c3", "c6"]
    assert [round_order(ids, r, rounds=20)[0] for r in range(3)] == ["c0", "c1", "c2"]   # more rounds: by one


def test_sample_stats_median_and_iqr() -> None:
    stats = sample_stats([4.0, 1.0, 3.0, 2.0, 100.0])
    assert stats == {"median_ms": 3.0, "iqr_ms": 2.0, "mean_ms": 22.0, "min_ms": 1.0}
    assert sample_stats([])["median_ms"] is None


@pytest.mark.slow
def test_every_failure_kind_is_classified_and_the_run_goes_on(tmp_path: Path) -> None:
    entries = {
        "ok1": {"entry": "gemm"},
        "wrong": {"entry": "gemm_wrong"},
        "unwritten": {"entry": "gemm_unwritten"},
        "fault": {"entry": "fault"},
        "segv": {"entry": "segv"},
        "ok2": {"entry": "gemm"},
        "hang": {"entry": "hang"},
        "exit": {"entry": "exit"},
        "late_segv": {"entry": "segv", "after": 2},
        "late_hang": {"entry": "hang", "after": 1},
        "ok3": {"entry": "gemm"},
    }
    job = make_job(tmp_path, entries)
    rows = {r["config_id"]: r
            for r in run_shards(jobs=[job], runner=CPU)[job.shard_path]}
    assert {cid: r["status"] for cid, r in rows.items()} == {
        "ok1": "ok", "wrong": "verify", "unwritten": "verify", "fault": "launch", "segv": "launch", "ok2": "ok",
        "hang": "timeout", "exit": "launch", "late_segv": "launch", "late_hang": "timeout", "ok3": "ok",
    }
    assert "SIGSEGV" in rows["segv"]["error"] and "exit status 7" in rows["exit"]["error"]
    assert "illegal address" in rows["fault"]["error"] and "no answer within" in rows["hang"]["error"]
    assert rows["wrong"]["rel_err"] == pytest.approx(0.25, rel=1e-3)
    for cid in ("ok1", "ok2", "ok3"):
        assert len(rows[cid]["samples_ms"]) == 4 and rows[cid]["median_ms"] > 0 and rows[cid]["rel_err"] < 1e-5
    for cid in ("wrong", "late_segv", "late_hang"):  # a failed config's time never counts
        assert rows[cid]["samples_ms"] == [] and rows[cid]["median_ms"] is None and rows[cid]["tflops"] is None
    frame = read_shard(job.shard_path)["merged_df"]
    assert list(frame.columns[:5]) == list(KBENCH_FIELDS) and "ENTRY" in frame.columns
    assert set(ROW_FIELDS) <= set(frame.columns)
    assert list(frame["mesh_idx"]) == list(range(len(entries)))


def test_rounds_are_interleaved_across_configurations(tmp_path: Path) -> None:
    job = make_job(tmp_path, {cid: {"entry": "gemm"} for cid in ("a", "b", "c")})
    run_shards(jobs=[job], runner=CPU)
    visits = [r["config_id"] for r in journal_records(job.journal_path) if r["type"] == "sample"]
    assert visits == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]


def test_with_more_configurations_than_rounds_each_round_leads_with_another_part_of_the_list(tmp_path: Path) -> None:
    ids = [f"c{index}" for index in range(8)]
    job = make_job(tmp_path, {cid: {"entry": "gemm"} for cid in ids})
    run_shards(jobs=[job], runner=CPU)
    visits = [r["config_id"] for r in journal_records(job.journal_path) if r["type"] == "sample"]
    # 8 configurations, 4 rounds: each round starts two places on, so no configuration is always among the first
    assert [visits[index] for index in range(0, 32, 8)] == ["c0", "c2", "c4", "c6"]
    assert sorted(visits[8:16]) == ids


def test_worker_restarts_after_a_crash_and_keeps_serving(tmp_path: Path) -> None:
    worker = WorkerProcess(backend="cpu-test")
    info = worker.start()
    assert info["device"] == "cpu-test-backend"
    first_pid = info["pid"]
    worker.request({"op": "shape", "M": 8, "N": 8, "K": 8, "settings": SETTINGS.as_dict()}, timeout=10)
    with pytest.raises(WorkerFailure) as failure:
        worker.request({"op": "prepare", "config_id": "x", "payload": {"entry": "segv"}}, timeout=10)
    assert failure.value.status == "launch" and not worker.alive
    assert worker.start()["pid"] != first_pid
    worker.stop()


def test_shards_are_spread_over_several_workers(tmp_path: Path) -> None:
    jobs = [make_job(tmp_path, {"a": {"entry": "gemm"}}, m=8 * (i + 1), name=f"s{i}") for i in range(4)]
    results = run_shards(jobs=jobs, runner=LiveRunner(backend="cpu-test", settings=SETTINGS, gpus=["0", "1"]))
    assert sorted(results) == sorted(job.shard_path for job in jobs)
    workers = {r["worker_pid"] for job in jobs for r in journal_records(job.journal_path) if r["type"] == "prepared"}
    assert len(workers) == 2  # one worker per "GPU", both used


def test_a_worker_that_does_not_start_is_one_clear_error(tmp_path: Path) -> None:
    runner = LiveRunner(backend="no-such-backend", settings=SETTINGS)
    with pytest.raises(Exception) as error:
        run_shards(jobs=[make_job(tmp_path, {"a": {"entry": "gemm"}})], runner=runner)
    assert "does not start" in str(error.value)


def test_several_gpus_take_the_largest_shards_first(tmp_path: Path) -> None:
    small = make_job(tmp_path, {"a": {"entry": "gemm"}}, m=8, n=64, k=64, name="small")
    large = make_job(tmp_path, {"a": {"entry": "gemm"}}, m=8192, n=8192, k=8192, name="large")
    medium = make_job(tmp_path, {"a": {"entry": "gemm"}}, m=1024, n=4096, k=4096, name="medium")
    assert [j.shard_path.stem for j in longest_first(jobs=[small, large, medium], settings=SETTINGS)] == [
        "large", "medium", "small"]


def test_progress_events_count_every_configuration_once_also_on_resume(tmp_path: Path) -> None:
    entries = {"a": {"entry": "gemm"}, "bad": {"entry": "gemm_wrong"}, "b": {"entry": "gemm"}}
    job = make_job(tmp_path, entries)
    events: list[tuple[str, str, bool]] = []

    def record(kind: str, _job: ShardJob, payload: dict) -> None:
        if kind in ("config", "final"):
            events.append((kind, payload["config_id"], bool(payload.get("resumed"))))

    run_shards(jobs=[job], runner=CPU, on_event=record)
    assert sorted(events) == [("config", "a", False), ("config", "b", False), ("final", "bad", False)]
    events.clear()
    run_shards(jobs=[job], runner=CPU, on_event=record)  # all journalled
    assert sorted(events) == [("config", "a", True), ("config", "b", True), ("final", "bad", True)]


def test_bench_progress_logs_one_line_per_shard_with_its_best(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from tunetable.commands.bench import BenchProgress

    buffer = io.StringIO()
    job = make_job(tmp_path, {"a": {"entry": "gemm"}, "bad": {"entry": "fault"}})
    progress = BenchProgress(Console(file=buffer, width=200), total=2)
    with progress.progress:
        run_shards(jobs=[job], runner=CPU, on_event=progress)
    log = buffer.getvalue()
    assert "shard M=32 N=48 K=40 done: 2 rows, best a " in log and "1 failed so far" in log
    assert progress.progress.tasks[0].completed == 2


def _search_job(tmp_path: Path, *, m: int, n: int = 48, k: int = 40) -> ShardJob:
    """Eight CPU configurations (two of them wrong) and a baseline, named like real shards so neighbours find them."""
    from tunetable.bench.tasks import baseline_task

    entries = {f"c{i}": {"entry": "gemm_wrong" if i in (2, 5) else "gemm"} for i in range(8)}
    tasks = tuple(ConfigTask(config_id=cid, mesh_idx=i, family="cpu", params=(("ENTRY", payload["entry"]), ("TILE", i)))
                  for i, (cid, payload) in enumerate(entries.items())) + (baseline_task(),)
    stem = f"M{m}_N{n}_K{k}"
    return ShardJob(table="t", m=m, n=n, k=k, tasks=tasks, payloads={**entries, "cublas": {"entry": "gemm"}},
                    journal_path=tmp_path / f"{stem}.journal.jsonl", shard_path=tmp_path / f"{stem}.pkl",
                    content_key="key", kernel_hash="hash")


def test_a_search_measures_only_what_it_picks_and_records_itself_in_every_row(tmp_path: Path) -> None:
    from tunetable.results import SEARCH_FIELDS
    from tunetable.search import make_strategy
    from tunetable.search.driver import TableSearch

    search = TableSearch(plan=make_strategy({"strategy": "random", "max_fevals": 3, "seed": 2}), shard_dir=tmp_path)
    job = _search_job(tmp_path, m=16)
    rows = run_shards(jobs=[job], runner=CPU, search=search)[job.shard_path]
    kernels = [r for r in rows if r["kind"] == "kernel"]
    assert len(kernels) == 3 and rows[-1]["config_id"] == "cublas" and rows[-1]["status"] == "ok"
    assert [r["search_step"] for r in rows] == [0, 1, 2, None]
    for row in rows:
        assert (row["search"], row["search_strategy"], row["search_seed"], row["search_max_fevals"]) == \
            ("random(max_fevals=3,seed=2)", "random", 2, 3)
        assert row["search_time_limit"] is None and row["search_top_k"] is None
    # Only the picked configurations (and the baseline) ever reached the worker; wrong ones count as measured.
    touched = {r["config_id"] for r in journal_records(job.journal_path)}
    assert touched == {r["config_id"] for r in rows}
    assert all(r["status"] == ("verify" if r["ENTRY"] == "gemm_wrong" else "ok") for r in kernels)
    shard = read_shard(job.shard_path)
    frame = shard["merged_df"]
    assert set(ROW_FIELDS) <= set(frame.columns) and set(SEARCH_FIELDS) <= set(frame.columns)
    assert list(frame.columns[:5]) == list(KBENCH_FIELDS)
    assert shard["provenance"]["search"]["stop_reason"] == "max_fevals"
    assert [t["config_id"] for t in shard["provenance"]["search"]["trace"]] == [r["config_id"] for r in kernels]

    # A killed search resumes from the journal: the same picks, nothing measured twice.
    samples = sum(1 for r in journal_records(job.journal_path) if r["type"] == "sample")
    job.shard_path.unlink()
    again = run_shards(jobs=[job], runner=CPU, search=search)[job.shard_path]
    assert [(r["config_id"], r["median_ms"]) for r in again] == [(r["config_id"], r["median_ms"]) for r in rows]
    assert sum(1 for r in journal_records(job.journal_path) if r["type"] == "sample") == samples


def test_a_search_starts_from_the_winners_of_neighbours_measured_earlier(tmp_path: Path) -> None:
    from tunetable.search import make_strategy
    from tunetable.search.driver import TableSearch

    first, second = _search_job(tmp_path, m=64), _search_job(tmp_path, m=32)
    search = TableSearch(plan=make_strategy({"strategy": "model", "max_fevals": 4, "seed": 0}), shard_dir=tmp_path)
    results = run_shards(jobs=[first, second], runner=CPU, search=search)
    ok = sorted((r["median_ms"], r["config_id"]) for r in results[first.shard_path]
                if r["kind"] == "kernel" and r["status"] == "ok")
    seeds = read_shard(second.shard_path)["provenance"]["search"]["transfer_seeds"]
    assert seeds == [cid for _, cid in ok[:2]]
    assert [r["config_id"] for r in results[second.shard_path][:2]] == seeds   # measured first
    assert read_shard(first.shard_path)["provenance"]["search"]["transfer_seeds"] == []
