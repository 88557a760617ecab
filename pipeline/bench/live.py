"""The live runner: configurations interleaved across repetition rounds, journalled, resumable.

Per shard (one table and shape): every configuration is first verified and warmed up, then the
timed rounds visit every configuration once per round, in an order that rotates from round
to round (every configuration leads once per cycle), so clock and thermal drift spread over all configurations instead
of picking winners. Every verify, failure and timed batch is journalled (fsynced) before the next
step, so a rerun after kill -9 re-measures nothing already measured. A failure in the worker
(fault, crash, hang) marks that configuration and the run goes on with a fresh worker.

``LiveRunner`` is the ``Runner`` (tunetable.bench.runner) that measures: one worker process per
GPU (a thread each) over a ``Backend`` (cuda, or cpu-test for tests); a ``WorkerSession`` is
the ``Measurer`` of one worker.
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tunetable.bench.failures import WorkerFailure
from tunetable.bench.journal import ConfigProgress, Journal, progress_by_config, read_journal
from tunetable.bench.runner import Event, Row, ShardJob, ShardSearch, measure_shard, no_event
from tunetable.bench.tasks import BenchSettings, ConfigTask
from tunetable.bench.worker import WorkerProcess
from tunetable.errors import TuneTableError
from tunetable.results import KBENCH_FIELDS, ROW_FIELDS, spec_string

SHAPE_TIMEOUT_FLOOR_S = 120.0
# Rough rates for estimates and shard ordering only (never for results): a mid-grid mma.sync
# configuration and HBM; per config and shape: load, verify, NVML, protocol; per shape: inputs, reference.
ESTIMATE_TFLOPS = 150.0
ESTIMATE_TBPS = 2.5
ESTIMATE_OVERHEAD_MS = 3.0
ESTIMATE_SHAPE_S = 0.5



def now_iso() -> str:
    """UTC time, ISO 8601, seconds."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def round_order(config_ids: Sequence[str], round_index: int, *, rounds: int | None = None) -> list[str]:
    """The visiting order of one round: rotated by the round number, so every configuration leads once every
    len(ids) rounds. Given the number of ``rounds``, by len(ids) // rounds places a round: with more configurations
    than rounds, a rotation by one keeps the first ones early in every round (the bench's ~120 configurations
    over 10 rounds; runtime_gemm's interleaved timing, where placement_probe's first contenders read apart)."""
    ids = list(config_ids)
    if not ids:
        return ids
    stride = max(1, len(ids) // rounds) if rounds else 1
    shift = round_index * stride % len(ids)
    return ids[shift:] + ids[:shift]


def sample_stats(samples: Sequence[float]) -> dict[str, float | None]:
    """Median, IQR, mean and min of per-launch samples (ms)."""
    if not samples:
        return {"median_ms": None, "iqr_ms": None, "mean_ms": None, "min_ms": None}
    values = np.asarray(samples, dtype=float)
    q25, q75 = np.percentile(values, [25, 75])
    return {"median_ms": float(np.median(values)), "iqr_ms": float(q75 - q25),
            "mean_ms": float(values.mean()), "min_ms": float(values.min())}


def _mean_or_none(values: list[Any]) -> float | None:
    """The mean of the values that are not None, or None when there are none."""
    present = [float(v) for v in values if v is not None]
    return float(np.mean(present)) if present else None


def build_row(
    *, job: ShardJob, task: ConfigTask, progress: ConfigProgress, rounds: int, backend: str
) -> dict[str, Any]:
    """The shard row of one task from its journal progress (ROW_FIELDS + kbench fields + params)."""
    params = dict(task.params)
    info = dict(task.compile_info)
    latest = progress.final or (progress.samples[-1] if progress.samples else None) or progress.prepared or {}
    ok = progress.final is None and len(progress.samples) >= rounds
    samples = [float(s["sample_ms"]) for s in progress.samples[:rounds]] if ok else []
    stats = sample_stats(samples)
    flops = 2.0 * job.m * job.n * job.k
    status = "ok" if ok else (progress.final or {}).get("status", "missing")
    row: dict[str, Any] = {
        "mesh_idx": task.mesh_idx,
        "name": job.table,
        "met (ms)": stats["median_ms"],
        "iters": int(sum(int(s.get("batch", 1)) for s in progress.samples[:rounds])) if ok else 0,
        "spec": spec_string(job.table, params, job.m, job.n, job.k) if task.kind == "kernel"
        else f"{job.table}/cublas/$M={job.m}/$N={job.n}/$K={job.k}",
        "M": job.m, "N": job.n, "K": job.k,
        "config_id": task.config_id,
        "kind": task.kind,
        "status": status,
        "error": None if ok else (progress.final or {}).get("error", "not measured"),
        "samples_ms": samples,
        **stats,
        "tflops": flops / (stats["median_ms"] * 1e-3) / 1e12 if stats["median_ms"] else None,
        "rel_err": (progress.final or progress.prepared or {}).get("rel_err"),
        "registers": info.get("registers"), "smem_bytes": info.get("smem_bytes"),
        "spill_bytes": info.get("spill_bytes"), "stack_bytes": info.get("stack_bytes"),
        "compile_s": info.get("compile_s"),
        "sm_clock_mhz": _mean_or_none([s.get("sm_clock_mhz") for s in progress.samples[:rounds]]) if ok else None,
        "power_w": _mean_or_none([s.get("power_w") for s in progress.samples[:rounds]]) if ok else None,
        "backend": backend,
        "device": latest.get("device"), "driver": latest.get("driver"),
        "nvcc": job.provenance.get("nvcc"), "git_rev": job.provenance.get("git_rev"),
        "time": latest.get("time"),
        "kernel_hash": job.kernel_hash,
        "content_key": job.content_key,
        "measured_key": job.content_key,
    }
    ordered = {name: row[name] for name in KBENCH_FIELDS}
    ordered.update(params)
    ordered.update({name: row[name] for name in ROW_FIELDS})
    return ordered


class WorkerSession:
    """The Measurer of one worker process (one GPU): measures shards' tasks, restarting it after faults and hangs."""

    def __init__(self, *, worker: WorkerProcess, settings: BenchSettings, backend: str = "cuda",
                 on_event: Event | None = None):
        self.worker = worker
        self.settings = settings
        self.backend = backend
        self.on_event = on_event or no_event
        self._ready_shape: tuple[Any, ...] | None = None
        self._prepared: set[str] = set()

    # -- worker session -----------------------------------------------------------------------
    def _stamp(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with the worker's device, driver and pid and the current time added."""
        return {**record, "device": self.worker.info.get("device"), "driver": self.worker.info.get("driver"),
                "worker_pid": self.worker.info.get("pid"), "time": now_iso()}

    def _ensure_shape(self, job: ShardJob) -> None:
        """Start the worker if it is down and prepare ``job``'s shape on it (once per shape and worker start)."""
        if not self.worker.alive:
            try:
                self.worker.start()
            except WorkerFailure as exc:
                raise TuneTableError(f"the bench worker does not start: {exc}", path=job.shard_path) from None
            self._ready_shape = None
        key = (job.shape, self.worker.starts)
        if self._ready_shape == key:
            return
        self._prepared = set()
        try:
            reply = self.worker.request(
                {"op": "shape", "M": job.m, "N": job.n, "K": job.k, "settings": self.settings.as_dict()},
                timeout=max(SHAPE_TIMEOUT_FLOOR_S, 4 * self.settings.timeout_s),
            )
        except WorkerFailure as exc:
            raise TuneTableError(f"preparing shape {job.shape} failed: {exc}", path=job.shard_path) from None
        if not reply.get("ok"):
            raise TuneTableError(f"preparing shape {job.shape} failed: {reply.get('error')}", path=job.shard_path)
        self._ready_shape = key

    def _finalise(self, journal: Journal, job: ShardJob, task: ConfigTask, status: str, error: str,
                  extra: dict[str, Any] | None = None) -> None:
        """Journal a task's final record (status, error, extras) and report it as a 'final' event."""
        record = self._stamp({"type": "final", "config_id": task.config_id, "status": status,
                              "error": error, **(extra or {})})
        journal.append(record)
        self.on_event("final", job, record)

    def _prepare(self, journal: Journal, job: ShardJob, task: ConfigTask) -> bool:
        """Verify and warm up one task in the current worker; False when it failed (journalled)."""
        self._ensure_shape(job)
        timeout = self.settings.timeout_s + 2 * self.settings.warmup_ms / 1e3
        try:
            reply = self.worker.request(
                {"op": "prepare", "config_id": task.config_id, "payload": job.payloads[task.config_id]},
                timeout=timeout,
            )
        except WorkerFailure as exc:
            self._finalise(journal, job, task, exc.status, str(exc))
            return False
        if reply.get("status") != "ok":
            self._finalise(journal, job, task, reply.get("status", "launch"), reply.get("error") or "failed",
                           {"rel_err": reply.get("rel_err")})
            return False
        record = self._stamp({"type": "prepared", "config_id": task.config_id,
                              **{k: v for k, v in reply.items() if k not in ("ok", "status")}})
        journal.append(record)
        self._prepared.add(task.config_id)
        return True

    def _sample(self, journal: Journal, job: ShardJob, task: ConfigTask) -> float | None:
        """One timed batch of one task: its per-launch ms, or None when it failed (journalled)."""
        if task.config_id not in self._prepared or not self.worker.alive:
            if not self._prepare(journal, job, task):
                return None
        try:
            reply = self.worker.request({"op": "sample", "config_id": task.config_id},
                                        timeout=self.settings.timeout_s)
        except WorkerFailure as exc:
            self._finalise(journal, job, task, exc.status, str(exc))
            return None
        if not reply.get("ok"):
            self._finalise(journal, job, task, reply.get("status", "launch"), reply.get("error") or "failed")
            return None
        record = self._stamp({"type": "sample", "config_id": task.config_id,
                              **{k: v for k, v in reply.items() if k != "ok"}})
        journal.append(record)
        self.on_event("sample", job, record)
        return float(reply["sample_ms"])

    def _measured(self, job: ShardJob, task: ConfigTask, samples: list[float], *, resumed: bool = False) -> None:
        """Tell the caller a configuration has all its samples (progress: done, current best)."""
        median = sample_stats(samples)["median_ms"]
        self.on_event("config", job, {"config_id": task.config_id, "kind": task.kind, "status": "ok",
                                      "median_ms": median, "resumed": resumed,
                                      "tflops": 2.0 * job.m * job.n * job.k / (median * 1e-3) / 1e12})

    # -- one shard ------------------------------------------------------------------------------
    def measure_tasks(self, job: ShardJob, tasks: Sequence[ConfigTask]) -> None:
        """Measure what the journal lacks of ``tasks``: verify and warm up each, then interleaved rounds."""
        rounds = self.settings.rounds
        progress = progress_by_config(read_journal(job.journal_path))
        with Journal(job.journal_path) as journal:
            pending = []
            for task in tasks:
                state = progress.get(task.config_id, ConfigProgress())
                if state.final is not None:
                    self.on_event("final", job, {**state.final, "resumed": True})
                    continue
                if len(state.samples) >= rounds:
                    self._measured(job, task, [float(x["sample_ms"]) for x in state.samples[:rounds]], resumed=True)
                    continue
                if task.build_status != "ok":
                    self._finalise(journal, job, task, "build", task.build_error or "compile failed")
                elif isinstance(job.payloads.get(task.config_id), str):
                    self._finalise(journal, job, task, "launch", job.payloads[task.config_id])
                else:
                    pending.append(task)
            live = [task for task in pending if self._prepare(journal, job, task)]
            values = {task.config_id: [float(x["sample_ms"])
                                       for x in progress.get(task.config_id, ConfigProgress()).samples]
                      for task in live}
            by_id = {task.config_id: task for task in live}
            round_index = 0
            while True:
                due = [cid for cid in by_id if len(values[cid]) < rounds]
                if not due:
                    break
                for config_id in round_order(due, round_index, rounds=rounds):
                    sample = self._sample(journal, job, by_id[config_id])
                    if sample is None:
                        del by_id[config_id]
                        continue
                    values[config_id].append(sample)
                    if len(values[config_id]) == rounds:
                        self._measured(job, by_id[config_id], values[config_id])
                round_index += 1

    def task_rows(self, job: ShardJob, tasks: Sequence[ConfigTask]) -> list[dict[str, Any]]:
        """The shard rows of ``tasks`` from the journal (a task never measured is a ``missing`` row)."""
        progress = progress_by_config(read_journal(job.journal_path))
        return [build_row(job=job, task=task, progress=progress.get(task.config_id, ConfigProgress()),
                          rounds=self.settings.rounds, backend=self.backend) for task in tasks]

    def shard_record(self, job: ShardJob) -> tuple[list[Row], dict[str, Any]]:
        """The shard's build rows (the compile report's) and provenance: the job's, the worker's device, settings."""
        build_rows = [{"config_id": t.config_id, "build_status": t.build_status, "build_error": t.build_error,
                       **dict(t.compile_info)} for t in job.tasks]
        provenance = {**job.provenance, "content_key": job.content_key, "kernel_hash": job.kernel_hash,
                      "backend": self.backend, "device": self.worker.info.get("device"),
                      "driver": self.worker.info.get("driver"), "settings": self.settings.as_dict()}
        return build_rows, provenance


def estimate_shard_s(*, job: ShardJob, settings: BenchSettings, measurements: int | None = None) -> float:
    """Rough seconds to measure one shard (the pre-run estimate; the order of shards over GPUs).

    ``measurements``: how many of its tasks a search budget measures (default: all of them).
    Against the committed recordings' own H200 runs it is 8-18 % low (277 s for 336 s, 187 s for 203 s).
    """
    flops = 2.0 * job.m * job.n * job.k
    nbytes = 2.0 * (job.m * job.k + job.n * job.k + job.m * job.n)
    launch_ms = max(flops / (ESTIMATE_TFLOPS * 1e12), nbytes / (ESTIMATE_TBPS * 1e12)) * 1e3
    per_config_ms = (settings.warmup_ms + 2 * launch_ms + ESTIMATE_OVERHEAD_MS
                     + settings.rounds * (max(settings.min_batch_ms, launch_ms) + 0.3))
    count = len(job.tasks) if measurements is None else measurements
    return ESTIMATE_SHAPE_S + count * per_config_ms / 1e3


def longest_first(*, jobs: Sequence[ShardJob], settings: BenchSettings) -> list[ShardJob]:
    """Shards by decreasing estimated cost (ties: given order): GPUs pulling from one queue then
    finish together instead of one GPU ending alone on the largest shapes."""
    return sorted(jobs, key=lambda job: -estimate_shard_s(job=job, settings=settings))





def estimate_seconds(*, jobs: Sequence[ShardJob], settings: BenchSettings, gpus: int,
                     measurements: Callable[[ShardJob], int] | None = None) -> float:
    """A rough wall-time estimate of measuring the jobs (printed before a cuda run).

    ``measurements(job)``: how many tasks a search budget measures in a shard (default: all).
    """
    return sum(estimate_shard_s(job=job, settings=settings,
                                measurements=None if measurements is None else measurements(job))
               for job in jobs) / max(1, gpus)

@dataclass(frozen=True)
class LiveRunner:
    """The Runner that measures: a worker process over ``backend`` (cuda, cpu-test) per GPU, a thread each."""

    backend: str                                   # the worker's Backend: cuda, or cpu-test (tests)
    settings: BenchSettings
    gpus: Sequence[str | None] = (None,)           # CUDA_VISIBLE_DEVICES of each worker (None: as inherited)

    def check(self, jobs: Sequence[ShardJob]) -> None:
        """Nothing to refuse up front: a task that cannot build or launch becomes its failure row."""

    def run(self, jobs: Sequence[ShardJob], *, search: ShardSearch | None, on_event: Event) -> dict[Path, list[Row]]:
        """Measure the jobs, a worker per GPU pulling from one queue (several GPUs without a search: largest first)."""
        pending: queue.Queue[ShardJob] = queue.Queue()
        several = len(self.gpus) > 1 and search is None
        for job in longest_first(jobs=jobs, settings=self.settings) if several else jobs:
            pending.put(job)
        results: dict[Path, list[Row]] = {}
        errors: list[BaseException] = []
        lock = threading.Lock()

        def drain(gpu: str | None) -> None:
            """Run queued shards on one worker for ``gpu`` until none are left or a thread failed (errors collected)."""
            worker = WorkerProcess(backend=self.backend, gpu=gpu)
            session = WorkerSession(worker=worker, settings=self.settings, backend=self.backend, on_event=on_event)
            try:
                while not errors:
                    try:
                        job = pending.get_nowait()
                    except queue.Empty:
                        return
                    rows = measure_shard(job, measurer=session, search=search, on_event=on_event)
                    with lock:
                        results[job.shard_path] = rows
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)
            finally:
                worker.stop()

        threads = [threading.Thread(target=drain, args=(gpu,), daemon=True) for gpu in (self.gpus or [None])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return results
