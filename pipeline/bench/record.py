"""Export cuda-backend shards to a recording: data/recordings/NAME.parquet + NAME.json provenance."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any, Sequence

from tunetable.atomic import atomic_write_all
from tunetable.errors import TuneTableError
from tunetable.inputs import SIDECAR_HASH, check_recording, inside, safe_name
from tunetable.results import ROW_FIELDS, read_shard
import pandas as pd


def recording_frame(*, table: str, shard_paths: Sequence[Path]) -> Any:
    """All rows of the shards (cuda backend only) with a ``table`` column, in shard then row order."""

    frames = []
    for path in shard_paths:
        frame = read_shard(path)["merged_df"]
        absent = [name for name in ROW_FIELDS if name not in frame.columns]
        if absent:
            raise TuneTableError(f"shard lacks columns {', '.join(absent[:5])}", path=path)
        backends = sorted(set(frame["backend"].dropna()))
        if backends != ["cuda"]:
            raise TuneTableError(f"only cuda-backend shards can be recorded, this one is {backends}", path=path)
        frame = frame.copy()
        frame["table"] = table
        frames.append(frame)
    if not frames:
        raise TuneTableError("no shards given", where="SHARDS")
    return pd.concat(frames, ignore_index=True)


def record_command(*, table: str, name: str, shards: Sequence[Path]) -> str:
    """The record command as provenance, its shards summarised by folder (``DIR/*.pkl (n shards)``)."""
    folders = sorted({str(Path(path).parent) for path in shards})
    listed = " ".join(f"{folder}/*.pkl" for folder in folders)
    return f"tunetable record --table {table} --name {name} {listed} ({len(shards)} shards)"


def shard_provenance(shard_paths: Sequence[Path], key: str) -> list[Any]:
    """The distinct values of one provenance entry of the shards (e.g. 'settings', 'command')."""
    distinct: list[Any] = []
    for path in shard_paths:
        value = read_shard(path).get("provenance", {}).get(key)
        if value is not None and value not in distinct:
            distinct.append(value)
    return distinct


def recording_provenance(*, frame: Any, table: str, command: str, git_rev: str,
                         settings: Sequence[dict[str, Any]] = (), bench_commands: Sequence[str] = ()) -> dict[str, Any]:
    """Device, driver, measurement dates, command, git revisions and content keys of a recording."""
    def distinct(column: str) -> list[Any]:
        return sorted({str(v) for v in frame[column].dropna()})

    times = distinct("time")
    devices, drivers = distinct("device"), distinct("driver")
    return {
        "table": table,
        "device": devices[0] if len(devices) == 1 else devices,
        "driver": drivers[0] if len(drivers) == 1 else drivers,
        "date": times[-1][:10] if times else None,
        "measured_from": times[0] if times else None,
        "measured_to": times[-1] if times else None,
        "command": command,
        "git_rev": git_rev,
        "measured_git_revs": distinct("git_rev"),
        "nvcc": distinct("nvcc"),
        "content_keys": distinct("content_key"),
        "kernel_hashes": distinct("kernel_hash"),
        "rows": int(len(frame)),
        "shapes": int(frame[["M", "N", "K"]].drop_duplicates().shape[0]),
        "statuses": {str(k): int(v) for k, v in frame["status"].value_counts().sort_index().items()},
        "bench_settings": settings[0] if len(settings) == 1 else list(settings),
        "bench_commands": sorted(bench_commands),
    }


def write_recording(*, frame: Any, provenance: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, Path]:
    """Write NAME.parquet and NAME.json atomically; returns both paths."""
    safe_name(name, what="recording name", path=None, where="--name")
    parquet = inside(out_dir / f"{name}.parquet", folder=out_dir)
    sidecar = inside(out_dir / f"{name}.json", folder=out_dir)
    check_recording(frame, path=parquet)   # what replay will refuse is never written
    buffer = io.BytesIO()
    frame.to_parquet(buffer, engine="pyarrow", index=False)
    data = buffer.getvalue()
    # The sidecar holds the parquet's sha256: replay refuses a recording edited after it was made.
    provenance = {**provenance, SIDECAR_HASH: hashlib.sha256(data).hexdigest()}
    atomic_write_all(outputs={parquet: data,
                              sidecar: (json.dumps(provenance, indent=2, sort_keys=True) + "\n").encode("utf-8")})
    return parquet, sidecar
