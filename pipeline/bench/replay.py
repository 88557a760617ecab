"""The replay runner: a recording's rows for matching (table, M, N, K, config_id, kernel_hash).

``ReplayRunner`` is a ``Runner`` (tunetable.bench.runner), the peer of ``tunetable.bench.live.LiveRunner``
(Kernel Tuner's simulation runner): ``run_shards`` takes either, and a table's search drives its
``RecordingSession`` (the ``Measurer``) exactly like a live worker's. It runs in process (nothing
to isolate) and measures nothing: ``measure_tasks`` answers from the recording. A replayed row keeps everything of the
measurement (samples, device, driver, time, git_rev, measured_key) and says ``backend="replay"``
with the content key of the shard it now belongs to. ``check`` runs before any shard is written:
anything not recorded is an error listing the first missing entries, or with ``allow_missing``
a ``missing`` row, which can never be ranked or selected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from tunetable.bench.runner import Event, Row, ShardJob, ShardSearch, measure_shard
from tunetable.bench.tasks import ConfigTask
from tunetable.errors import TuneTableError
from tunetable.inputs import load_checked_recording
from tunetable.results import KBENCH_FIELDS, ROW_FIELDS, spec_string

MATCH_KEYS = ("table", "M", "N", "K", "config_id", "kernel_hash")
SHOW_MISSING = 5


def load_recording(path: Path, *,
                   served_as: Mapping[str, str] | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The recording's rows keyed by MATCH_KEYS, after checking it whole (``tunetable.inputs.check_recording``).

    Its sidecar (NAME.json beside it), when there is one, must describe exactly these rows. ``served_as``
    maps a recorded table name to the table its rows serve (a device table ``gemm_mma.h100`` replays the
    rows its device's recording holds under ``gemm_mma``).
    """
    frame = load_checked_recording(path)
    renamed = dict(served_as or {})
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in frame.to_dict(orient="records"):
        table = renamed.get(record["table"], record["table"])
        key = (table, int(record["M"]), int(record["N"]), int(record["K"]), record["config_id"], record["kernel_hash"])
        index[key] = record
    return index


def _plain(value: Any) -> Any:
    """numpy scalars/arrays from parquet as plain Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def replay_row(*, table: str, m: int, n: int, k: int, task: ConfigTask, recorded: dict[str, Any] | None,
               kernel_hash: str, content_key: str) -> dict[str, Any]:
    """One shard row served from a recorded row (or a ``missing`` row when there is none)."""
    params = dict(task.params)
    if recorded is None:
        row = {name: None for name in ROW_FIELDS}
        row.update({"M": m, "N": n, "K": k, "config_id": task.config_id, "kind": task.kind, "status": "missing",
                    "error": "not in the recording", "samples_ms": [], "kernel_hash": kernel_hash,
                    "backend": "replay", "content_key": content_key})
    else:
        row = {name: _plain(recorded.get(name)) for name in ROW_FIELDS}
        row.update({"backend": "replay", "content_key": content_key})
        row["samples_ms"] = list(row.get("samples_ms") or [])
        if row["measured_key"] is None:
            row["measured_key"] = recorded.get("content_key")
    spec = (spec_string(table, params, m, n, k) if task.kind == "kernel"
            else f"{table}/cublas/$M={m}/$N={n}/$K={k}")
    kbench = {"mesh_idx": task.mesh_idx, "name": table, "met (ms)": row.get("median_ms"),
              "iters": int(_plain(recorded.get("iters")) or 0) if recorded is not None else 0, "spec": spec}
    ordered = {name: kbench[name] for name in KBENCH_FIELDS}
    ordered.update(params)
    ordered.update({name: row[name] for name in ROW_FIELDS})
    return ordered


def missing_entries(*, recording: Mapping[tuple[Any, ...], Any], jobs: Sequence[ShardJob]) -> list[tuple[Any, ...]]:
    """(M, N, K, config_id) of every task of ``jobs`` the recording does not hold, in job and task order."""
    return [(job.m, job.n, job.k, task.config_id) for job in jobs for task in job.tasks
            if (job.table, job.m, job.n, job.k, task.config_id, job.kernel_hash) not in recording]


@dataclass(frozen=True)
class ReplayRunner:
    """The Runner that replays: serves each shard's tasks from a loaded recording (``load_recording``)."""

    recording: Mapping[tuple[Any, ...], dict[str, Any]]
    recording_path: Path
    provenance: Mapping[str, Any] = field(default_factory=dict)   # the recording's sidecar
    allow_missing: bool = False
    backend: str = "replay"

    def check(self, jobs: Sequence[ShardJob]) -> None:
        """Every task of every job is recorded (else one error naming the first missing), before anything is written."""
        missing = missing_entries(recording=self.recording, jobs=jobs)
        if missing and not self.allow_missing:
            first = jobs[0]
            shown = "; ".join(f"M={m} N={n} K={k} {cid}" for m, n, k, cid in missing[:SHOW_MISSING])
            more = f" and {len(missing) - SHOW_MISSING} more" if len(missing) > SHOW_MISSING else ""
            raise TuneTableError(
                f"{len(missing)} entries of table {first.table} (kernel {first.kernel_hash}) are not recorded: "
                f"{shown}{more} (measure them with --backend cuda, or pass --allow-missing)",
                path=self.recording_path,
            )

    def run(self, jobs: Sequence[ShardJob], *, search: ShardSearch | None, on_event: Event) -> dict[Path, list[Row]]:
        """Serve every job in process, in the given order (each through ``measure_shard``)."""
        session = RecordingSession(runner=self, on_event=on_event)
        return {job.shard_path: measure_shard(job, measurer=session, search=search, on_event=on_event)
                for job in jobs}


@dataclass(frozen=True)
class RecordingSession:
    """The Measurer of a replay: a shard's tasks as the recording holds them."""

    runner: ReplayRunner
    on_event: Event

    def measure_tasks(self, job: ShardJob, tasks: Sequence[ConfigTask]) -> None:
        """Nothing to measure: the recording holds every sample (``check`` made sure of it)."""
        for task in tasks:
            self.on_event("config", job, {"config_id": task.config_id, "kind": task.kind, "status": "ok",
                                          "median_ms": None, "resumed": True, "tflops": 0.0})

    def task_rows(self, job: ShardJob, tasks: Sequence[ConfigTask]) -> list[Row]:
        """The shard rows of ``tasks`` as recorded (a task never recorded is a ``missing`` row)."""
        recording = self.runner.recording
        return [replay_row(table=job.table, m=job.m, n=job.n, k=job.k, task=task,
                           recorded=recording.get((job.table, job.m, job.n, job.k, task.config_id, job.kernel_hash)),
                           kernel_hash=job.kernel_hash, content_key=job.content_key)
                for task in tasks]

    def shard_record(self, job: ShardJob) -> tuple[list[Row], dict[str, Any]]:
        """No build rows (nothing was compiled); the provenance names the recording and its sidecar's facts."""
        return [], {"backend": "replay", "recording": str(self.runner.recording_path),
                    "content_key": job.content_key, "kernel_hash": job.kernel_hash,
                    **{f"recording_{key}": value for key, value in self.runner.provenance.items()}}
