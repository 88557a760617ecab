"""The shard journal: append-only JSON lines, flushed and fsynced per record, read back on resume.

Record types:
- ``{"type": "final", "config_id", "status", "error", ...}``: the configuration is done (a failure);
- ``{"type": "prepared", "config_id", "rel_err", "batch", ...}``: verified and warmed up;
- ``{"type": "sample", "config_id", "sample_ms", "batch", "sm_clock_mhz", "power_w"}``: one timed batch.
A half-written last line (kill -9 mid-write) is ignored; every complete line before it counts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ConfigProgress:
    """What the journal says about one configuration of a shard."""

    final: dict[str, Any] | None = None
    prepared: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)


class Journal:
    """An append-only JSONL file; each append is flushed and fsynced before it returns."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()
        self._handle = open(self.path, "a", encoding="utf-8")

    def _repair_tail(self) -> None:
        """Cut a torn last line (a kill mid-write) so the next record starts on its own line."""
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())

    def append(self, record: dict[str, Any]) -> None:
        """Write one record as a line; durable when this returns."""
        self._handle.write(json.dumps(record, sort_keys=True, allow_nan=True) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Close the file."""
        self._handle.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a journal (none when it does not exist)."""
    if not Path(path).is_file():
        return []
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line from a kill mid-write
        if isinstance(record, dict) and "type" in record and "config_id" in record:
            records.append(record)
    return records


def progress_by_config(records: list[dict[str, Any]]) -> dict[str, ConfigProgress]:
    """Fold journal records into per-configuration progress (later records win)."""
    progress: dict[str, ConfigProgress] = {}
    for record in records:
        entry = progress.setdefault(record["config_id"], ConfigProgress())
        if record["type"] == "final":
            entry.final = record
        elif record["type"] == "prepared":
            entry.prepared = record
        elif record["type"] == "sample":
            entry.samples.append(record)
    return progress
