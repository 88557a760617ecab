"""Explain a table change between two revisions: params changes (cause), entries and times (effect).

For each table: the manifest entries that changed, and for each declared shape whose chosen
configuration or measured time changed, the table's time before and after (from the raw
shards at each revision, read through the DVC API) with their ratio.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from tunetable import lineage
from tunetable.errors import TuneTableError
from tunetable.manifest import ManifestEntry, lookup, ranges_from_text
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
    def ratio(self) -> float | None:
        """after / before (< 1: faster now)."""
        return self.ms_after / self.ms_before if self.ms_before and self.ms_after else None


@dataclass(frozen=True)
class TableAudit:
    """Everything that changed in one table."""

    table: str
    key_before: str | None
    key_after: str | None
    entries: tuple[EntryChange, ...]
    shapes: tuple[ShapeChange, ...]
    shapes_total: int


@dataclass(frozen=True)
class Audit:
    """The audit of a revision pair."""

    rev_a: str
    rev_b: str
    params: tuple[ParamChange, ...]
    tables: tuple[TableAudit, ...]


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


@dataclass(frozen=True)
class _Side:
    reader: lineage.DataReader
    entries: tuple[ManifestEntry, ...]
    key: str | None


def _side(*, root: Path, rev: str | None, table: str, manifest: str) -> _Side:
    """One side of an audit: the manifest's entries at a revision, its data reader and content key."""
    text = lineage.git_text(root=root, rev=rev, path=manifest)
    provenance, entries = ({}, []) if text is None else ranges_from_text(
        text, path=f"{manifest}@{lineage.rev_label(rev)}")
    reader = lineage.DataReader(root=root, rev=rev)
    metrics = lineage.metrics_at(root=root, rev=rev, table=table)
    key = lineage.content_key_at(reader=reader, table=table, metrics=metrics, provenance=provenance)
    return _Side(reader=reader, entries=tuple(entries), key=key)


def _time(side: _Side, *, table: str, shape: tuple[int, int, int], config: str | None) -> float | None:
    """A configuration's measured median (ms) at one shape on one side (None when unknown)."""
    if side.key is None or config is None:
        return None
    view = lineage.shard_view(reader=side.reader, table=table, key=side.key, m=shape[0], n=shape[1], k=shape[2],
                              config_id=config)
    return view.config_ms


def audit_table(*, root: Path, rev_a: str | None, rev_b: str | None, table: str, manifest: str,
                shapes: Sequence[tuple[int, int, int]], all_shapes: bool) -> TableAudit:
    """One table's changes: entries, and per shape the pick and its time at each side."""
    a = _side(root=root, rev=rev_a, table=table, manifest=manifest)
    b = _side(root=root, rev=rev_b, table=table, manifest=manifest)
    changed_shapes = []
    for shape in shapes:
        m, n, k = shape
        entry_a, entry_b = lookup(a.entries, m=m, n=n, k=k), lookup(b.entries, m=m, n=n, k=k)
        config_a = entry_a.config_id if entry_a else None
        config_b = entry_b.config_id if entry_b else None
        if config_a == config_b and a.key == b.key and not all_shapes:
            continue
        ms_a = _time(a, table=table, shape=shape, config=config_a)
        ms_b = _time(b, table=table, shape=shape, config=config_b)
        if config_a == config_b and ms_a == ms_b and not all_shapes:
            continue
        changed_shapes.append(ShapeChange(m, n, k, config_a, config_b, ms_a, ms_b))
    return TableAudit(table=table, key_before=a.key, key_after=b.key,
                      entries=tuple(entry_changes(before=a.entries, after=b.entries)), shapes=tuple(changed_shapes),
                      shapes_total=len(shapes))


def audit(*, root: Path, rev_a: str = "HEAD", rev_b: str | None = None, tables: Sequence[str] = (),
          all_shapes: bool = False) -> Audit:
    """Audit the revision pair (rev_b None: the working tree)."""
    if not root.is_dir():
        raise TuneTableError("no such folder", where="--root", path=root)
    commit_a = lineage.resolve_rev(root=root, rev=rev_a)
    commit_b = lineage.resolve_rev(root=root, rev=rev_b) if rev_b is not None else None
    params_a = _load_params_text(lineage.git_text(root=root, rev=commit_a, path="params.yaml"), label=rev_a)
    params_b = _load_params_text(lineage.git_text(root=root, rev=commit_b, path="params.yaml"),
                                 label=lineage.rev_label(rev_b))
    declared = list(dict.fromkeys([*(params_a.get("tables") or {}), *(params_b.get("tables") or {})]))
    unknown = [name for name in tables if name not in declared]
    if unknown:
        raise TuneTableError(f"unknown table '{unknown[0]}' (declared: {', '.join(declared)})", path="params.yaml",
                             where="tables")
    results = []
    for name in tables or declared:
        spec = (params_b.get("tables") or {}).get(name) or (params_a.get("tables") or {}).get(name)
        manifest = str((spec.get("codegen") or {}).get("manifest", f"manifests/{name}.yaml"))
        shapes = list(dict.fromkeys([*_shapes(params_a, name), *_shapes(params_b, name)]))
        results.append(audit_table(root=root, rev_a=commit_a, rev_b=commit_b, table=name, manifest=manifest,
                                   shapes=shapes, all_shapes=all_shapes))
    return Audit(rev_a=rev_a, rev_b=lineage.rev_label(rev_b),
                 params=tuple(params_changes(before=params_a, after=params_b)), tables=tuple(results))
