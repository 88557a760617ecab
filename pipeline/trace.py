"""Lineage of one generated table entry: generated lines -> manifest entry -> ranked rows -> raw shards.

``trace TABLE INDEX`` or ``trace FILE:LINE`` (a line inside a generated region) both resolve to
(table, index); the trace then reads the working tree: the generated file, the manifest, the
ranked table and the raw shards of the content key recorded in the table's metrics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pipeline import lineage, paths
from pipeline.errors import TuneTableError
from pipeline.metrics import ManifestEntry, load_manifest
from pipeline.params import TableSpec

GENERATED = "# Automatically generated from ["
INDEX = re.compile(r"#\s*index:\s*\[(\d+)\]")
RANKED_COLUMNS = ("rank", "config_id", "median_ms", "iqr_ms", "tflops", "ratio_to_best", "ratio_to_cublas")
TOP_ROWS = 3


@dataclass(frozen=True)
class GeneratedEntry:
    """An entry of a generated region: its index and its lines (1-based, inclusive)."""

    index: int
    first_line: int
    last_line: int
    text: str


@dataclass(frozen=True)
class RankedAtM:
    """Ranked rows at one measured M of the entry's range: the best few and the entry's own row."""

    m: int
    rows: tuple[dict[str, Any], ...]
    picked_rank: int | None


@dataclass(frozen=True)
class Trace:
    """Everything behind one generated entry."""

    table: str
    target: str
    generated: GeneratedEntry
    manifest: str
    entry: ManifestEntry
    provenance: dict[str, Any]
    ranked_path: str
    ranked: tuple[RankedAtM, ...]
    content_key: str | None
    shards: tuple[lineage.ShardView, ...]


def _marker_line(lines: Sequence[str], marker: str, *, path: str | Path) -> int:
    hits = [i for i, line in enumerate(lines) if marker in line]
    if len(hits) != 1:
        raise TuneTableError(f"marker '{marker}' found on {len(hits)} lines (expected exactly one)", path=path)
    return hits[0]


def generated_entries(text: str, *, begin_marker: str, end_marker: str, path: str | Path) -> list[GeneratedEntry]:
    """The entries of one marker region, in order."""
    lines = text.splitlines()
    begin = _marker_line(lines, begin_marker, path=path)
    end = _marker_line(lines, end_marker, path=path)
    starts = [i for i in range(begin + 1, end) if GENERATED in lines[i]]
    entries = []
    for position, start in enumerate(starts):
        stop = (starts[position + 1] if position + 1 < len(starts) else end) - 1
        while stop > start and not lines[stop].strip():
            stop -= 1
        match = next((INDEX.search(lines[i]) for i in range(start, stop + 1) if INDEX.search(lines[i])), None)
        index = int(match.group(1)) if match else position
        entries.append(GeneratedEntry(index, start + 1, stop + 1, "\n".join(lines[start:stop + 1])))
    return entries


def parse_location(text: str) -> tuple[str, int] | None:
    """``FILE:LINE`` as (file, line); None when ``text`` is not of that form."""
    if ":" not in text:
        return None
    file, _, line = text.rpartition(":")
    return (file, int(line)) if line.isdigit() and file else None


def entry_at_line(*, root: Path, specs: Sequence[TableSpec], file: str, line: int) -> tuple[str, int]:
    """(table, index) of the generated entry holding a line of a generated file."""
    target = (root / file).resolve()
    tables = [s for s in specs if (root / s.codegen.target).resolve() == target]
    if not tables:
        raise TuneTableError("not a generated file of any declared table", path=file)
    if not target.is_file():
        raise TuneTableError("no such file", path=file)
    text = target.read_text()
    for spec in tables:
        for entry in generated_entries(text, begin_marker=spec.codegen.begin_marker,
                                       end_marker=spec.codegen.end_marker, path=file):
            if entry.first_line <= line <= entry.last_line:
                return spec.name, entry.index
    raise TuneTableError("line is not inside a generated entry", path=file, where=f"line {line}")


def _ranked_at(*, ranked: Any, entry: ManifestEntry, m_values: Sequence[int]) -> list[RankedAtM]:
    import polars as pl

    result = []
    for m in m_values:
        if not entry.m <= m < entry.m_end:
            continue
        rows = ranked.filter((pl.col("M") == m) & (pl.col("N") == entry.n) & (pl.col("K") == entry.k)).sort("rank")
        columns = [c for c in RANKED_COLUMNS if c in rows.columns]
        picked = rows.filter(pl.col("config_id") == entry.config_id)
        shown = pl.concat([rows.head(TOP_ROWS), picked]).unique(subset=["config_id"], keep="first", maintain_order=True)
        result.append(RankedAtM(
            m=m, rows=tuple(shown.select(columns).to_dicts()),
            picked_rank=int(picked["rank"][0]) if picked.height and "rank" in picked.columns else None,
        ))
    return result


def trace(*, root: Path, spec: TableSpec, index: int) -> Trace:
    """Follow entry ``index`` of a table from the generated file down to the raw shards."""
    import polars as pl

    target = root / spec.codegen.target
    if not target.is_file():
        raise TuneTableError("no such file", path=spec.codegen.target)
    generated = generated_entries(target.read_text(), begin_marker=spec.codegen.begin_marker,
                                  end_marker=spec.codegen.end_marker, path=spec.codegen.target)
    found = [g for g in generated if g.index == index]
    if not found:
        raise TuneTableError(f"table {spec.name} has no entry {index} (it has {len(generated)})",
                             path=spec.codegen.target, where=f"index {index}")
    provenance, entries = load_manifest(root / spec.codegen.manifest)
    if index >= len(entries):
        raise TuneTableError(f"manifest has no entry {index}: regenerate the table (tunetable codegen --all)",
                             path=spec.codegen.manifest, where=f"params[{index}]")
    entry = entries[index]
    ranked_path = root / paths.ranked(spec.name)
    ranked = pl.read_parquet(ranked_path) if ranked_path.is_file() else None
    m_values = [m for m in spec.m_values if entry.m <= m < entry.m_end]
    ranked_rows = _ranked_at(ranked=ranked, entry=entry, m_values=m_values) if ranked is not None else []
    reader = lineage.DataReader(root=root, rev=None)
    metrics = lineage.metrics_at(root=root, rev=None, table=spec.name)
    key = lineage.content_key_at(reader=reader, table=spec.name, metrics=metrics, provenance=provenance)
    shards = [
        lineage.shard_view(reader=reader, table=spec.name, key=key, m=m, n=entry.n, k=entry.k,
                           config_id=entry.config_id)
        for m in m_values
    ] if key else []
    return Trace(
        table=spec.name, target=spec.codegen.target, generated=found[0], manifest=spec.codegen.manifest,
        entry=entry, provenance=provenance, ranked_path=str(paths.ranked(spec.name)), ranked=tuple(ranked_rows),
        content_key=key, shards=tuple(shards),
    )
