"""The raw-result contract: one kbench-compatible pickle per (table, shape) shard, checksummed.

A shard is a dict ``{"name", "file", "merged_df", "build_df", "provenance"}`` pickled with a
pinned protocol. ``merged_df`` has kbench's columns (``mesh_idx``, ``name``, ``met (ms)``,
``iters``, ``spec`` and one column per parameter) plus the project's own (ROW_FIELDS).

Every shard's sha256 is recorded in its journal (``<stem>.journal.jsonl`` beside it, a
``{"type": "shard"}`` record, fsynced) before the shard is renamed into place, and verified on every
read, before a byte of it is unpickled: a truncated, corrupt or replaced shard is an error naming
it, never skipped. Every ``.pkl`` (a shard, or a kbench file from elsewhere) is read through
``tunetable.safe_pickle``, which never runs code from the file.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_bytes
from tunetable.bench.journal import Journal
from tunetable.errors import TuneTableError
from tunetable.safe_pickle import RefusedFile, load_pickle
from tunetable.yamlio import read_bytes

PICKLE_PROTOCOL = 4
STATUSES = ("ok", "build", "verify", "launch", "timeout", "missing")
BASELINE_ID = "cublas"

# Columns every row carries, in this order; parameter columns (BLOCK_M, ...) follow ``spec``.
KBENCH_FIELDS = ("mesh_idx", "name", "met (ms)", "iters", "spec")
ROW_FIELDS = (
    "M", "N", "K",
    "config_id",        # KernelConfig.id, or "cublas" for baseline rows
    "kind",             # "kernel" | "baseline"
    "status",           # one of STATUSES; only "ok" rows can be ranked or selected
    "error",            # first lines of the failure, or None
    "samples_ms",       # every timed sample (list of float), per launch
    "median_ms", "iqr_ms", "mean_ms", "min_ms",
    "tflops",           # 2*M*N*K / median
    "rel_err",          # ||C - C_ref|| / ||C_ref||
    "registers", "smem_bytes", "spill_bytes", "stack_bytes", "compile_s",
    "sm_clock_mhz", "power_w",   # mean NVML readings while this config ran
    "backend",          # "cuda" | "replay"
    "device", "driver", "nvcc", "git_rev", "time",  # of the measurement itself (ISO UTC time)
    "kernel_hash",      # keys.kernel_source_hash of the kernel source measured
    "content_key",      # the content key of the shard this row belongs to
    "measured_key",     # the content key of the cuda run that measured it (== content_key live)
)
# Columns of rows measured by a budgeted search (params.yaml ``search:``), after ROW_FIELDS. Such a
# shard holds only the configurations the search measured, plus the cuBLAS baseline. Shards
# measured exhaustively (no ``search:``, the default) do not carry them.
SEARCH_FIELDS = (
    "search",             # the search's label, e.g. "model(max_fevals=5,seed=0)"
    "search_strategy",    # exhaustive | random | model | evolutionary
    "search_seed",
    "search_step",        # 0-based order of the measurement within the shape's search (None: baseline)
    "search_max_fevals", "search_time_limit", "search_top_k",   # the budget (None: unlimited)
)


def spec_string(table: str, params: dict[str, Any], m: int, n: int, k: int) -> str:
    """kbench spec: ``table/P1=v1/.../$M=m/$N=n/$K=k`` (``$`` marks runtime arguments)."""
    parts = [table, *(f"{key}={value}" for key, value in params.items()), f"$M={m}", f"$N={n}", f"$K={k}"]
    return "/".join(parts)


def _gapped_int_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Columns whose values are all ints but missing on some rows (parameters on cuBLAS rows)."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    gapped = []
    for name in names:
        values = [row.get(name) for row in rows]
        present = [v for v in values if v is not None]
        if present and len(present) < len(values) and all(type(v) is int for v in present):
            gapped.append(name)
    return gapped


CHECKSUM_RECORD = "shard"   # the journal record type holding a shard's sha256
KEY_FOLDER = re.compile(r"^[0-9a-f]{16}$")


def journal_of(shard: str | Path) -> Path:
    """The journal beside a shard (``M1_N4096_K4096.pkl`` -> ``M1_N4096_K4096.journal.jsonl``)."""
    path = Path(shard)
    return path.with_name(f"{path.stem}.journal.jsonl")


def is_shard_path(path: str | Path) -> bool:
    """True for a file laid out as a raw shard (``.../raw/<table>/<16-hex key>/<stem>.pkl``) or with a journal."""
    source = Path(path)
    parts = source.parts
    laid_out = len(parts) >= 4 and parts[-4] == "raw" and bool(KEY_FOLDER.match(parts[-2]))
    return laid_out or journal_of(source).is_file()


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def recorded_checksums(journal_text: str, *, name: str) -> list[tuple[str, int]]:
    """(sha256, size) of every checksum record for shard file ``name`` in a journal's text, oldest first."""
    found = []
    for line in journal_text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line (kill mid-write); complete records still count
        if (isinstance(record, dict) and record.get("type") == CHECKSUM_RECORD and record.get("file") == name
                and isinstance(record.get("sha256"), str) and type(record.get("bytes")) is int):
            found.append((record["sha256"], record["bytes"]))
    return found


def verify_shard(data: bytes, *, path: str | Path, journal_text: str | None) -> None:
    """The shard's bytes must match a checksum its journal recorded when it was written; else one error line."""

    remedy = "delete it (and its journal, if any) to measure or replay it again"
    if journal_text is None:
        raise RefusedFile(f"no checksum recorded: its journal {journal_of(path).name} is missing; {remedy}",
                             path=path)
    recorded = recorded_checksums(journal_text, name=Path(path).name)
    if not recorded:
        raise RefusedFile(f"no checksum recorded in its journal {journal_of(path).name} (written before "
                             f"tunetable recorded them?); {remedy}", path=path)
    digest = sha256_bytes(data)
    if any(digest == sha for sha, _ in recorded):
        return
    sha, size = recorded[-1]
    what = f"truncated ({len(data)} of {size} bytes)" if len(data) < size else "corrupt or replaced"
    raise RefusedFile(f"{what}: sha256 {digest[:16]} does not match the {sha[:16]} recorded in "
                         f"{journal_of(path).name}; {remedy}", path=path)


def record_checksum(path: Path, data: bytes) -> None:
    """Append the shard's checksum record to its journal (fsynced) before the shard is renamed into place.

    A journal that already records these bytes is left as it is (rewriting an unchanged shard adds nothing).
    """

    digest = sha256_bytes(data)
    existing = _journal_text(path)
    if existing is not None and (digest, len(data)) in recorded_checksums(existing, name=path.name):
        return
    with Journal(journal_of(path)) as journal:
        journal.append({"type": CHECKSUM_RECORD, "file": path.name, "sha256": digest, "bytes": len(data)})


def write_shard(
    path: str | Path,
    *,
    table: str,
    rows: list[dict[str, Any]],
    build_rows: list[dict[str, Any]],
    provenance: dict[str, Any],
) -> str:
    """Write a shard atomically as a kbench-style pickle of pandas DataFrames; returns its sha256.

    The checksum lands in the journal first: a kill between the two leaves a recorded checksum and
    no shard (the shard is missing, so it is made again), never a shard nobody can verify.
    """
    import pandas as pd  # lazy: the Snakefile's parse imports this module (BASELINE_ID) and must not pay for pandas

    merged = pd.DataFrame(rows)
    for name in _gapped_int_columns(rows):  # pandas would make them float (128.0 in manifests)
        merged[name] = merged[name].astype("Int64")
    payload = {
        "name": table,
        "file": str(path),
        "merged_df": merged,
        "build_df": pd.DataFrame(build_rows),
        "provenance": dict(provenance),
    }
    data = pickle.dumps(payload, protocol=PICKLE_PROTOCOL)
    record_checksum(Path(path), data)
    atomic_write_bytes(path, data)
    return sha256_bytes(data)


def _read_bytes(path: str | Path) -> bytes:
    """A result file's bytes; missing or unreadable is one error line."""

    return read_bytes(path)


def _journal_text(path: str | Path) -> str | None:
    """The text of a shard's journal, or None when there is none (undecodable bytes are replaced)."""
    journal = journal_of(path)
    try:
        return journal.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TuneTableError(f"cannot read: {exc.strerror or exc}", path=journal) from None


def payload_from_bytes(data: bytes, *, path: str | Path) -> dict[str, Any]:
    """A result pickle's checked content (restricted unpickler); it must be a mapping with a ``merged_df`` frame."""
    import pandas as pd  # lazy: pandas only where frames are built (this module is on the Snakefile's parse path)

    payload = load_pickle(data, path=path)
    if not isinstance(payload, dict) or "merged_df" not in payload:
        raise TuneTableError("not a kbench result pickle: no merged_df", path=path)
    for key in ("merged_df", "build_df"):
        if key in payload and not isinstance(payload[key], pd.DataFrame):
            raise TuneTableError(f"not a kbench result pickle: {key} is not a DataFrame", path=path)
    return payload


def read_shard(path: str | Path) -> dict[str, Any]:
    """Read a raw shard: its checksum verified against its journal, then read by the restricted unpickler."""
    data = _read_bytes(path)
    verify_shard(data, path=path, journal_text=_journal_text(path))
    return payload_from_bytes(data, path=path)


def read_result_file(path: str | Path) -> dict[str, Any]:
    """Read a shard (verified, see ``read_shard``) or a kbench pickle from elsewhere (restricted unpickler only).

    A file counts as a shard when it is laid out as one (``raw/<table>/<key>/``) or has a journal beside it.
    """
    if is_shard_path(path):
        return read_shard(path)
    return payload_from_bytes(_read_bytes(path), path=path)
