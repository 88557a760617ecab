"""Explain a table change between two revisions: params changes (cause), entries and times (effect).

A shape selector's change is reviewed, not diffed (tunetable.selector_review): the cells whose choice
changed, the predictions that moved, the recordings behind it.

For each table: the manifest entries that changed, and for each declared shape whose chosen
configuration or measured time changed, the table's time at each revision with the speedup
(time before / time after). A dispatch list the same way: per shape the table serving it and its
speedup over cuBLAS (same shard) at each revision.

Everything comes from what git holds where it can (params.yaml, manifests, metrics: the content key
of each table's shards), and a side's times from the first of:

1. the shards of that content key on disk (results/raw, or results/parked: a shard there is final,
   so a key names the same bytes at every revision);
2. DVC at that revision (the cache, then the remote);
3. the table's recording at that revision (git), ranked here as ``tunetable rank`` does, when its
   rows are the ones the manifest was selected from (same data hash): a fresh clone with an empty
   DVC cache and no remote audits from git alone.

What cannot be compared is said in one line per table and side, with why; never a traceback.
"""

from __future__ import annotations

import difflib
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from tunetable import lineage, paths, rawstore, resultset
from tunetable.errors import TuneTableError
from tunetable.device_tables import (
    base_tables,
    device_table_name,
    other_devices,
    split_device_table,
    with_device_tables,
)
from tunetable.kernels.families.devices import device_of_name, device_specs_from_mapping
from tunetable.manifest import ManifestEntry, lookup, ranges_from_text
from tunetable.params import primary_recording, table_spec
from tunetable.results import BASELINE_ID, journal_of
from tunetable.select_winners import data_hash
from tunetable.selector_review import SelectorReview, review_selector, selector_side
from tunetable.measurement_plan import grid_config_ids
from tunetable.trace import ranked_results
from tunetable.yamlio import load_yaml

MISSING = object()


@dataclass(frozen=True)
class ParamChange:
    """One params.yaml value that differs (dotted key; None where absent)."""

    key: str
    before: Any
    after: Any


@dataclass(frozen=True)
class EntryChange:
    """A manifest entry removed from or added to the table (index: its position on that side)."""

    change: str                      # "removed" | "added"
    index: int
    values: Mapping[str, Any]


@dataclass(frozen=True)
class ShapeChange:
    """The table's pick at one shape before and after, with its measured times (ms)."""

    m: int
    n: int
    k: int
    config_before: str | None
    config_after: str | None
    ms_before: float | None
    ms_after: float | None

    @property
    def speedup(self) -> float | None:
        """time before / time after (> 1: faster now)."""
        return self.ms_before / self.ms_after if self.ms_before and self.ms_after else None


@dataclass(frozen=True)
class DispatchShapeChange:
    """A dispatch list at one shape before and after: the table serving it, its config and speedup over cuBLAS."""

    m: int
    n: int
    k: int
    table_before: str | None
    table_after: str | None
    config_before: str | None
    config_after: str | None
    speedup_before: float | None     # cuBLAS median / the served config's median, same shard
    speedup_after: float | None


@dataclass(frozen=True)
class TableAudit:
    """Everything that changed in one table (or dispatch list: ``shapes`` holds DispatchShapeChange)."""

    table: str
    key_before: str | None
    key_after: str | None
    entries: tuple[EntryChange, ...]
    shapes: tuple[Any, ...]
    shapes_total: int
    sources: tuple[str, ...] = ()    # where each side's times came from
    gaps: tuple[str, ...] = ()       # what could not be compared, and why (one line each)
    dispatch: bool = False
    device: str = ""                 # whose measurements (rev_b's manifest): 'h200 (NVIDIA H200)', '' unknown


def device_label(*, params: Mapping[str, Any], provenance: Mapping[str, Any], table: str = "") -> str:
    """'h200 (NVIDIA H200)': the declared device a manifest's provenance names ('' when it names none); a device
    table's (``gemm_mma.h100``) is its own device's."""
    name = str(provenance.get("device") or "")
    if not name:
        return ""
    key = split_device_table(table)[1] or device_of_name(name=name, devices=device_specs_from_mapping(
        params.get("devices") or {}))
    return f"{key} ({name})" if key else name


def with_devices_at(params: Mapping[str, Any], *, root: Path, rev: str | None) -> dict[str, Any]:
    """``params`` with the device tables whose manifest exists at ``rev`` (None: the working tree), docs/devices.md."""
    names = [device_table_name(base=base, device=device) for device in other_devices(params)
             for base in base_tables(params)
             if lineage.git_text(root=root, rev=rev, path=f"manifests/{base}.{device}.yaml") is not None]
    return with_device_tables(params, names)


@dataclass(frozen=True)
class Audit:
    """The audit of a revision pair."""

    rev_a: str
    rev_b: str
    params: tuple[ParamChange, ...]
    tables: tuple[TableAudit, ...]
    selectors: tuple[SelectorReview, ...] = ()


def flatten(value: Any, *, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values (lists are leaves, as in ``dvc params diff``)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, prefix=f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def params_changes(*, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ParamChange]:
    """Every dotted key whose value differs, sorted by key."""
    flat_a, flat_b = flatten(dict(before)), flatten(dict(after))
    changes = []
    for key in sorted(set(flat_a) | set(flat_b)):
        a, b = flat_a.get(key, MISSING), flat_b.get(key, MISSING)
        if a != b:
            changes.append(ParamChange(key, None if a is MISSING else a, None if b is MISSING else b))
    return changes


def _entry_key(entry: ManifestEntry) -> tuple[tuple[str, str], ...]:
    """A manifest entry's values as a hashable, key-order-independent key."""
    return tuple(sorted((str(k), repr(v)) for k, v in entry.values.items()))


def entry_changes(*, before: Sequence[ManifestEntry], after: Sequence[ManifestEntry]) -> list[EntryChange]:
    """Entries removed and added, aligned like a diff (entries kept unchanged are left out)."""
    matcher = difflib.SequenceMatcher(a=[_entry_key(e) for e in before], b=[_entry_key(e) for e in after],
                                      autojunk=False)
    changes = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        changes.extend(EntryChange("removed", i, dict(before[i].values)) for i in range(a0, a1))
        changes.extend(EntryChange("added", i, dict(after[i].values)) for i in range(b0, b1))
    return changes


def _load_params_text(text: str | None, *, label: str) -> dict[str, Any]:
    """Parsed params.yaml text at a revision ({} when absent or not a mapping); malformed YAML is an error."""
    if text is None:
        return {}
    data = load_yaml(text, path=f"params.yaml (at {label})")
    return data if isinstance(data, dict) else {}


def _shapes(params: Mapping[str, Any], table: str) -> list[tuple[int, int, int]]:
    """A table's (M, N, K) shapes as declared in raw params ([] when the table is not declared)."""
    spec = (params.get("tables") or {}).get(table) or {}
    shapes = spec.get("shapes") or {}
    return [(int(m), int(n), int(k)) for n, k in shapes.get("NK", []) for m in shapes.get("M", [])]


# --- one side of a table: its manifest, content key and measured times ------------------------------

@dataclass
class ShardReads:
    """What an audit has read of its shards, shared by every side: the same bytes (and journal) are verified and
    unpickled once, and a configuration's times in them picked out once (the two sides of a select-only change,
    and a dispatch list's tables, read the same shards again)."""

    payloads: dict[tuple[str, bytes, bytes | None], dict[str, Any]] = field(default_factory=dict)
    times: dict[tuple[str, bytes, bytes | None, str], tuple[float | None, float | None]] = field(default_factory=dict)

    def time(self, *, data: bytes, journal: bytes | None, path: Path, key: str,
             config: str) -> tuple[float | None, float | None]:
        """(the configuration's median, the shard's cuBLAS median) in ms, read once per shard bytes and config."""
        shard = (str(path), hashlib.sha256(data).digest(),
                 None if journal is None else hashlib.sha256(journal).digest())
        found = self.times.get((*shard, config))
        if found is None:
            payload = self.payloads.get(shard)
            if payload is None:
                payload = self.payloads[shard] = lineage.shard_payload(data, path=path, journal=journal)
            view = lineage.view_of(payload=payload, path=path, key=key, config_id=config)
            found = self.times[(*shard, config)] = (view.config_ms, view.cublas_ms)
        return found


@dataclass
class _Side:
    """A table at one revision: manifest entries, content key, and where its times come from."""

    root: Path
    rev: str | None
    label: str
    table: str
    params: Mapping[str, Any]
    entries: tuple[ManifestEntry, ...]
    provenance: Mapping[str, Any]
    key: str | None
    reader: lineage.DataReader
    dvc_error: str | None = None
    recording: Any = field(default=MISSING)     # ranked recording rows (polars), None when unusable
    recording_note: str | None = None
    recording_label: str = ""
    used: set[str] = field(default_factory=set)
    unknown: int = 0
    reads: ShardReads = field(default_factory=ShardReads)   # the audit's one ShardReads, shared by every side

    def _shard_bytes(self, path: Path) -> tuple[bytes | None, bytes | None, str | None]:
        """A shard's bytes, its journal's (the checksum it is verified against) and where they came from:
        on disk (raw or parked), else DVC at this revision."""
        for candidate in (self.root / path, self.root / rawstore.parked_path(path)):
            if candidate.is_file():
                journal = journal_of(candidate)
                return (candidate.read_bytes(), journal.read_bytes() if journal.is_file() else None,
                        f"{candidate.parent.relative_to(self.root).as_posix()}/ (on disk)")
        if self.rev is None or self.dvc_error is not None:
            return None, None, None
        try:
            data = self.reader.read_bytes(path)
            journal = self.reader.read_bytes(journal_of(path)) if data is not None else None
        except Exception as exc:  # DVC raises many kinds (DataIndexDirError, remote errors): say which, once
            self.dvc_error = f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
            return None, None, None
        return (data, journal, "DVC (cache or remote)") if data is not None else (None, None, None)

    def _recording_rows(self) -> Any:
        """The recording at this revision ranked here, if they are the rows the manifest was selected from."""
        if self.recording is not MISSING:
            return self.recording
        self.recording = None
        name = primary_recording(self.params, self.table) if self.table in (self.params.get("tables") or {}) else None
        if not name:
            self.recording_note = "the table names no recording"
            return None
        data = lineage.git_bytes(root=self.root, rev=self.rev, path=name)
        if data is None:
            self.recording_note = f"{name} is not in git at {self.label}"
            return None
        try:
            ranked = _ranked_recording(data=data, name=str(name), table=self.table, params=self.params,
                                       kernel_hash=str(self.provenance.get("kernel_hash", "")))
        except TuneTableError as exc:
            self.recording_note = f"{name} at {self.label} cannot be read ({exc})"
            return None

        selected = self.provenance.get("data_hash")
        found = data_hash(ranked=ranked) if ranked is not None and ranked.height else None
        if found is None or found != selected:
            self.recording_note = (f"{name} at {self.label} holds other rows than the manifest was selected from "
                                   f"(data hash {found or 'none'}, manifest {selected or 'unknown'})")
            return None
        self.recording = ranked
        self.recording_label = f"{name} at {self.label} (git; the rows the manifest was selected from)"
        return ranked

    def time(self, *, m: int, n: int, k: int, config: str | None) -> tuple[float | None, float | None]:
        """(the configuration's median, the same shard's cuBLAS median) in ms; (None, None) when unknown."""
        if config is None:
            return None, None
        if self.key is not None:
            path = paths.raw_shard(self.table, self.key, m, n, k)
            data, journal, source = self._shard_bytes(path)
            if data is not None:
                found = self.reads.time(data=data, journal=journal, path=path, key=self.key, config=config)
                self.used.add(str(source))
                return found
        ranked = self._recording_rows()
        if ranked is not None:
            import polars as pl  # lazy: only this path needs it

            rows = ranked.filter((pl.col("M") == m) & (pl.col("N") == n) & (pl.col("K") == k)
                                 & (pl.col("config_id") == config))
            if rows.height:
                self.used.add(self.recording_label)
                row = rows.row(0, named=True)
                return float(row["median_ms"]), (None if row.get("cublas_ms") is None else float(row["cublas_ms"]))
        self.unknown += 1
        return None, None

    def gap(self, *, wanted: int) -> str | None:
        """One line saying which times of this side are unknown and why (None when every one is known)."""
        if not self.unknown:
            return None
        if self.key is None:
            shards = f"no metrics file at {self.label} names the content key of its shards"
        else:
            shards = f"its shards (key {self.key}) are not on disk"
            if self.rev is not None:
                shards += (f", DVC cannot give them ({self.dvc_error}: not in the DVC cache and no remote "
                           "reachable; docs/workflow.md, The remote)" if self.dvc_error else ", nor in DVC")
        recording = f", and {self.recording_note}" if self.recording_note else ""
        return (f"{self.table}: {self.unknown} of {wanted} times at {self.label} not compared: "
                f"{shards}{recording}")


def _ranked_recording(*, data: bytes, name: str, table: str, params: Mapping[str, Any], kernel_hash: str) -> Any:
    """A recording's rows of ``table`` (the manifest's kernel, the grid at that revision, its shapes), ranked."""
    import polars as pl  # lazy: only this path needs it


    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TuneTableError(f"unreadable recording ({exc.__class__.__name__})", path=name) from None
    if "table" in frame.columns:   # a device table's recording holds its rows under the base table's name
        frame = frame.filter(pl.col("table") == split_device_table(table)[0])
    if kernel_hash and "kernel_hash" in frame.columns:
        frame = frame.filter(pl.col("kernel_hash").is_in(kernel_hash.split(",")))
    configs = _grid_ids(params=params, table=table)
    if configs is not None and "config_id" in frame.columns:

        frame = frame.filter(pl.col("config_id").is_in([*configs, BASELINE_ID]))
    if not frame.height:
        return None
    loaded = resultset.from_frame(frame=frame, path=name, name=table)
    return ranked_results(results=[loaded], shapes=_shapes(params, table))


def _grid_ids(*, params: Mapping[str, Any], table: str) -> list[str] | None:
    """The grid's configuration ids at that revision (today's family code), None when it cannot be expanded."""

    try:
        return grid_config_ids(params=dict(params), table=table_spec(dict(params), table))
    except Exception:  # an older revision's params may not fit today's schema or families: no grid filter
        return None


def _side(*, root: Path, rev: str | None, label: str, table: str, manifest: str,
          params: Mapping[str, Any], reads: ShardReads) -> _Side:
    """One side of an audit: the manifest's entries at a revision, its content key and time sources."""
    text = lineage.git_text(root=root, rev=rev, path=manifest)
    provenance, entries = ({}, []) if text is None else ranges_from_text(text, path=f"{manifest}@{label}")
    reader = lineage.DataReader(root=root, rev=rev)
    metrics = lineage.metrics_at(root=root, rev=rev, table=table)
    key = metrics.get("content_key") or provenance.get("content_key")
    return _Side(root=root, rev=rev, label=label, table=table, params=params, entries=tuple(entries),
                 provenance=provenance, key=str(key) if key else None, reader=reader, reads=reads)


def _pair(*, root: Path, at: Sequence[tuple[str | None, str, Mapping[str, Any]]], name: str, manifest: str,
          reads: ShardReads) -> tuple[_Side, _Side]:
    """A table's or list's two sides, ``at`` (revision, label, params) each, sharing the audit's ShardReads."""
    a, b = (_side(root=root, rev=rev, label=label, table=name, manifest=manifest, params=params, reads=reads)
            for rev, label, params in at)
    return a, b


def _sources(sides: Sequence[_Side]) -> tuple[str, ...]:
    """Where each side's times came from."""
    return tuple(f"{side.table} at {side.label}: times from {'; '.join(sorted(side.used))}" for side in sides
                 if side.used)


def audit_table(*, a: _Side, b: _Side, shapes: Sequence[tuple[int, int, int]], all_shapes: bool) -> TableAudit:
    """One table's changes: entries, and per shape the pick and its time at each side."""
    changed_shapes = []
    for shape in shapes:
        m, n, k = shape
        entry_a, entry_b = lookup(a.entries, m=m, n=n, k=k), lookup(b.entries, m=m, n=n, k=k)
        config_a = entry_a.config_id if entry_a else None
        config_b = entry_b.config_id if entry_b else None
        if config_a == config_b and a.key == b.key and not all_shapes:
            continue
        ms_a, _ = a.time(m=m, n=n, k=k, config=config_a)
        ms_b, _ = b.time(m=m, n=n, k=k, config=config_b)
        if config_a == config_b and ms_a == ms_b and not all_shapes:
            continue
        changed_shapes.append(ShapeChange(m, n, k, config_a, config_b, ms_a, ms_b))
    wanted = len(changed_shapes)
    return TableAudit(table=a.table, key_before=a.key, key_after=b.key,
                      entries=tuple(entry_changes(before=a.entries, after=b.entries)), shapes=tuple(changed_shapes),
                      shapes_total=len(shapes), sources=_sources([a, b]),
                      gaps=tuple(g for g in (a.gap(wanted=wanted), b.gap(wanted=wanted)) if g),
                      device=device_label(params=b.params, provenance=b.provenance, table=a.table))


def audit_dispatch(*, name: str, a: _Side, b: _Side, tables: Mapping[str, tuple[_Side, _Side]],
                   shapes: Sequence[tuple[int, int, int]], all_shapes: bool) -> TableAudit:
    """A dispatch list's changes: entries, and per shape the table serving it and its speedup over cuBLAS."""
    def entry_at(side: _Side, m: int, n: int, k: int) -> tuple[str | None, str | None]:
        """(table, config) a side's entry serves a shape with."""
        entry = lookup(side.entries, m=m, n=n, k=k)
        return (str(entry.values.get("TABLE", "")), entry.config_id) if entry is not None else (None, None)

    def speedup(pick: tuple[str | None, str | None], table_side: int, m: int, n: int, k: int) -> float | None:
        """The served configuration's speedup over the same shard's cuBLAS at that side."""
        table, config = pick
        if table not in tables or config is None:
            return None
        ms, cublas = tables[table][table_side].time(m=m, n=n, k=k, config=config)
        return cublas / ms if ms and cublas else None

    same_keys = all(pair[0].key == pair[1].key for pair in tables.values())
    changed = []
    for m, n, k in shapes:
        pick_a, pick_b = entry_at(a, m, n, k), entry_at(b, m, n, k)
        if pick_a == pick_b and same_keys and not all_shapes:
            continue
        speedup_a, speedup_b = speedup(pick_a, 0, m, n, k), speedup(pick_b, 1, m, n, k)
        if pick_a == pick_b and speedup_a == speedup_b and not all_shapes:
            continue
        changed.append(DispatchShapeChange(m, n, k, pick_a[0], pick_b[0], pick_a[1], pick_b[1], speedup_a, speedup_b))
    sides = [side for pair in tables.values() for side in pair]
    wanted = len(changed)
    return TableAudit(table=name, key_before=None, key_after=None,
                      entries=tuple(entry_changes(before=a.entries, after=b.entries)), shapes=tuple(changed),
                      shapes_total=len(shapes), sources=_sources(sides),
                      gaps=tuple(g for side in sides if (g := side.gap(wanted=wanted))), dispatch=True,
                      device=device_label(params=b.params, provenance=b.provenance, table=name))


def audit(*, root: Path, rev_a: str = "HEAD", rev_b: str | None = None, tables: Sequence[str] = (),
          all_shapes: bool = False) -> Audit:
    """Audit the revision pair (rev_b None: the working tree): every table and dispatch list, or those named."""
    if not root.is_dir():
        raise TuneTableError("no such folder", where="--root", path=root)
    commit_a = lineage.resolve_rev(root=root, rev=rev_a)
    commit_b = lineage.resolve_rev(root=root, rev=rev_b) if rev_b is not None else None
    label_a, label_b = rev_a, lineage.rev_label(rev_b)
    raw_a = _load_params_text(lineage.git_text(root=root, rev=commit_a, path="params.yaml"), label=rev_a)
    raw_b = _load_params_text(lineage.git_text(root=root, rev=commit_b, path="params.yaml"), label=label_b)
    params_a = with_devices_at(raw_a, root=root, rev=commit_a)
    params_b = with_devices_at(raw_b, root=root, rev=commit_b)
    declared = list(dict.fromkeys([*(params_a.get("tables") or {}), *(params_b.get("tables") or {})]))
    lists = list(dict.fromkeys([*(params_a.get("dispatch") or {}), *(params_b.get("dispatch") or {})]))
    selectors = list(dict.fromkeys([*(params_a.get("selector") or {}), *(params_b.get("selector") or {})]))
    _check_names(tables, declared=declared, lists=lists, selectors=selectors)

    def spec_of(section: str, name: str) -> Mapping[str, Any]:
        """A table's or list's raw params (the later side's, else the earlier)."""
        return (params_b.get(section) or {}).get(name) or (params_a.get(section) or {}).get(name) or {}

    def manifest_of(section: str, name: str) -> str:
        """Where a table's or list's manifest lives."""
        return str((spec_of(section, name).get("codegen") or {}).get("manifest", f"manifests/{name}.yaml"))

    sides: dict[str, tuple[_Side, _Side]] = {}
    at = ((commit_a, label_a, params_a), (commit_b, label_b, params_b))
    reads = ShardReads()

    def table_sides(name: str) -> tuple[_Side, _Side]:
        """A table's two sides (built once: a dispatch list reuses its tables')."""
        if name not in sides:
            sides[name] = _pair(root=root, at=at, name=name, manifest=manifest_of("tables", name), reads=reads)
        return sides[name]

    results = []
    for name in [t for t in declared if not tables or t in tables]:
        a, b = table_sides(name)
        shapes = list(dict.fromkeys([*_shapes(params_a, name), *_shapes(params_b, name)]))
        results.append(audit_table(a=a, b=b, shapes=shapes, all_shapes=all_shapes))
    for name in [d for d in lists if not tables or d in tables]:
        members = [str(t) for t in spec_of("dispatch", name).get("tables") or []]
        a, b = _pair(root=root, at=at, name=name, manifest=manifest_of("dispatch", name), reads=reads)
        shapes = list(dict.fromkeys(shape for t in members for params in (params_a, params_b)
                                    for shape in _shapes(params, t)))
        # keyed as the list's entries name them (a device's: base tables)
        results.append(audit_dispatch(name=name, a=a, b=b, tables={split_device_table(t)[0]: table_sides(t)
                                                                   for t in members},
                                      shapes=shapes, all_shapes=all_shapes))
    reviews = tuple(review_selector(name=name, before=selector_side(root=root, rev=commit_a, label=label_a, name=name,
                                                                   spec=_section(params_a, "selector", name)),
                                    after=selector_side(root=root, rev=commit_b, label=label_b, name=name,
                                                        spec=_section(params_b, "selector", name)))
                    for name in selectors if not tables or name in tables)
    return Audit(rev_a=label_a, rev_b=label_b, params=tuple(params_changes(before=raw_a, after=raw_b)),
                 tables=tuple(results), selectors=reviews)


def _check_names(names: Sequence[str], *, declared: Sequence[str], lists: Sequence[str],
                 selectors: Sequence[str]) -> None:
    """Every name given with --table is a table, dispatch list or selector of either side."""
    unknown = [name for name in names if name not in declared and name not in lists and name not in selectors]
    if unknown:
        raise TuneTableError(f"unknown table, dispatch list or selector '{unknown[0]}' (tables: "
                             f"{', '.join(declared)}; dispatch lists: {', '.join(lists) or 'none'}; selectors: "
                             f"{', '.join(selectors) or 'none'})", path="params.yaml", where="tables")


def _section(params: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any]:
    """``params[section][name]``, empty when absent."""
    return (params.get(section) or {}).get(name) or {}
