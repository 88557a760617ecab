"""Files as they were at a git revision: git for tracked files, the DVC API for DVC-tracked data.

Shared by ``audit`` (two revisions) and ``trace`` (the working tree). A revision of ``None`` is
the working tree. Raw shards at an older revision come from the DVC cache, or from the remote
when the cache lacks them (DVCFileSystem fetches on demand).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable import paths
from tunetable.errors import TuneTableError
from tunetable.results import journal_of, payload_from_bytes, verify_shard
from tunetable.yamlio import decode_utf8, read_text

WORKTREE = "working tree"


def rev_label(rev: str | None) -> str:
    """How a revision is named in output."""
    return WORKTREE if rev is None else rev


def resolve_rev(*, root: Path, rev: str) -> str:
    """The full commit of a revision name; an unknown one is a clear error."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TuneTableError(f"unknown git revision '{rev}'", path=root)
    return done.stdout.strip()


def git_text(*, root: Path, rev: str | None, path: str | Path) -> str | None:
    """A git-tracked file's text at a revision (None when it did not exist there)."""

    if rev is None:
        file = root / path
        return read_text(file) if file.is_file() else None
    done = subprocess.run(["git", "show", f"{rev}:{Path(path).as_posix()}"], cwd=root,
                          capture_output=True, check=False)
    if done.returncode != 0:
        return None
    return decode_utf8(done.stdout, path=f"{path} (at {rev})").replace("\r\n", "\n")


def git_bytes(*, root: Path, rev: str | None, path: str | Path) -> bytes | None:
    """A git-tracked file's bytes at a revision (working tree: the file), None when it is not there."""
    if rev is None:
        file = root / path
        return file.read_bytes() if file.is_file() else None
    done = subprocess.run(["git", "show", f"{rev}:{Path(path).as_posix()}"], cwd=root, capture_output=True,
                          check=False)
    return done.stdout if done.returncode == 0 else None


@dataclass
class DataReader:
    """Reads DVC-tracked files at one revision (working tree: plain files), one filesystem per revision."""

    root: Path
    rev: str | None
    _fs: Any = field(default=None, repr=False)

    def _filesystem(self) -> Any:
        """The DVC filesystem of this revision, opened on first use."""
        if self._fs is None:
            from dvc.api import DVCFileSystem  # lazy: dvc takes ~1 s to import; only other revisions' shards need it

            self._fs = DVCFileSystem(url=str(self.root), rev=self.rev)
        return self._fs

    def read_bytes(self, path: str | Path) -> bytes | None:
        """The file's bytes at this revision, or None when it is not there (or not in cache/remote)."""
        if self.rev is None:
            file = self.root / path
            return file.read_bytes() if file.is_file() else None
        from dvc.exceptions import DvcException  # (lazy, with dvc)

        try:
            return self._filesystem().read_bytes(Path(path).as_posix())
        except (FileNotFoundError, DvcException):
            return None

    def listdir(self, path: str | Path) -> list[str]:
        """Names inside a folder at this revision ([] when absent)."""
        if self.rev is None:
            folder = self.root / path
            return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        from dvc.exceptions import DvcException  # (lazy, with dvc)

        try:
            return sorted(Path(p).name for p in self._filesystem().ls(Path(path).as_posix(), detail=False))
        except (FileNotFoundError, DvcException):
            return []


def shard_payload(data: bytes, *, path: str | Path, journal: bytes | None) -> dict[str, Any]:
    """A raw shard read from bytes at a revision: checksum verified against its journal, restricted unpickler."""

    text = None if journal is None else journal.decode("utf-8", errors="replace")
    verify_shard(data, path=path, journal_text=text)
    return payload_from_bytes(data, path=path)


def metrics_at(*, root: Path, rev: str | None, table: str) -> dict[str, Any]:
    """The table's metrics JSON at a revision ({} when absent)."""

    text = git_text(root=root, rev=rev, path=paths.metrics(table))
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def content_key_at(
    *, reader: DataReader, table: str, metrics: dict[str, Any], provenance: dict[str, Any]
) -> str | None:
    """The content key of the raw shards behind a table at a revision.

    The metrics JSON records it; otherwise a single key folder, or the one named by the
    manifest's provenance, identifies it.
    """
    key = metrics.get("content_key")
    keys = reader.listdir(paths.RESULTS / "raw" / table)
    if key and (key in keys or reader.rev is None):
        return str(key)
    named = str(provenance.get("results_key", ""))
    if named in keys:
        return named
    return keys[0] if len(keys) == 1 else None


@dataclass(frozen=True)
class ShardView:
    """What a raw shard says about one configuration at one shape."""

    path: str
    content_key: str
    found: bool
    config_ms: float | None = None       # the configuration's median (ok rows only)
    best_ms: float | None = None         # best ok kernel median at this shape
    best_config: str | None = None
    cublas_ms: float | None = None
    row: dict[str, Any] = field(default_factory=dict)   # the configuration's row (provenance columns)
    provenance: dict[str, Any] = field(default_factory=dict)


PROVENANCE_FIELDS = ("status", "median_ms", "iqr_ms", "tflops", "sm_clock_mhz", "power_w", "backend",
                     "device", "driver", "nvcc", "git_rev", "time", "kernel_hash", "content_key", "measured_key")


def _plain(value: Any) -> Any:
    """numpy/pandas scalars as plain values; NaN as None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def shard_view(*, reader: DataReader, table: str, key: str, m: int, n: int, k: int, config_id: str | None) -> ShardView:
    """Read one shard at the reader's revision and pick out a configuration, the best and cuBLAS."""
    path = paths.raw_shard(table, key, m, n, k)
    data = reader.read_bytes(path)
    if data is None:
        return ShardView(path=str(path), content_key=key, found=False)
    payload = shard_payload(data, path=path, journal=reader.read_bytes(journal_of(path)))
    return view_of(payload=payload, path=path, key=key, config_id=config_id)


def view_of(*, payload: dict[str, Any], path: str | Path, key: str, config_id: str | None) -> ShardView:
    """What a read shard says about a configuration, the best one and cuBLAS."""
    frame = payload["merged_df"]
    ok = frame[frame["status"] == "ok"] if "status" in frame.columns else frame
    kind = ok["kind"] if "kind" in ok.columns else None
    kernels = ok[kind != "baseline"] if kind is not None else ok
    baseline = ok[kind == "baseline"] if kind is not None else ok.iloc[0:0]
    best_ms = best_config = None
    if len(kernels):
        best = kernels.sort_values(["median_ms", "config_id"]).iloc[0]
        best_ms, best_config = float(best["median_ms"]), str(best["config_id"])
    chosen = frame[frame["config_id"] == config_id] if config_id is not None else frame.iloc[0:0]
    row = ({name: _plain(chosen.iloc[0][name]) for name in PROVENANCE_FIELDS if name in chosen.columns}
           if len(chosen) else {})
    config_ms = float(row["median_ms"]) if row.get("status") == "ok" and row.get("median_ms") is not None else None
    return ShardView(
        path=str(path), content_key=key, found=True, config_ms=config_ms, best_ms=best_ms, best_config=best_config,
        cublas_ms=float(baseline["median_ms"].min()) if len(baseline) else None, row=row,
        provenance=dict(payload.get("provenance") or {}),
    )
