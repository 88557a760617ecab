"""The replay backend: serve a recording's rows for matching (table, M, N, K, config_id, kernel_hash).

A replayed row keeps everything of the measurement (samples, device, driver, time, git_rev,
measured_key) and says ``backend="replay"`` with the content key of the shard it now belongs to.
Anything not recorded is an error listing the first missing entries, or with ``allow_missing``
a ``missing`` row, which can never be ranked or selected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tunetable.bench.plan import ConfigTask
from tunetable.errors import TuneTableError
from tunetable.results import KBENCH_FIELDS, ROW_FIELDS, spec_string

MATCH_KEYS = ("table", "M", "N", "K", "config_id", "kernel_hash")
SHOW_MISSING = 5


def load_recording(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The recording's rows keyed by MATCH_KEYS (pandas + pyarrow; no polars)."""
    import pandas as pd

    if not path.is_file():
        raise TuneTableError("no such recording", path=path)
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise TuneTableError(f"unreadable recording: {exc}", path=path) from None
    absent = [name for name in MATCH_KEYS if name not in frame.columns]
    if absent:
        raise TuneTableError(f"recording lacks columns {', '.join(absent)}", path=path)
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in frame.to_dict(orient="records"):
        key = (record["table"], int(record["M"]), int(record["N"]), int(record["K"]), record["config_id"],
               record["kernel_hash"])
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


def replay_shapes(*, recording: dict[tuple[Any, ...], dict[str, Any]], recording_path: Path, table: str,
                  shapes: Sequence[tuple[int, int, int]], tasks: Sequence[ConfigTask], kernel_hash: str,
                  content_key: str, allow_missing: bool) -> dict[tuple[int, int, int], list[dict[str, Any]]]:
    """Rows of every shape; checks everything first, so a missing entry writes nothing."""
    missing = [(m, n, k, task.config_id) for (m, n, k) in shapes for task in tasks
               if (table, m, n, k, task.config_id, kernel_hash) not in recording]
    if missing and not allow_missing:
        shown = "; ".join(f"M={m} N={n} K={k} {cid}" for m, n, k, cid in missing[:SHOW_MISSING])
        more = f" and {len(missing) - SHOW_MISSING} more" if len(missing) > SHOW_MISSING else ""
        raise TuneTableError(
            f"{len(missing)} entries of table {table} (kernel {kernel_hash}) are not recorded: {shown}{more} "
            "(measure them with --backend cuda, or pass --allow-missing)",
            path=recording_path,
        )
    return {
        (m, n, k): [
            replay_row(table=table, m=m, n=n, k=k, task=task,
                       recorded=recording.get((table, m, n, k, task.config_id, kernel_hash)),
                       kernel_hash=kernel_hash, content_key=content_key)
            for task in tasks
        ]
        for (m, n, k) in shapes
    }
