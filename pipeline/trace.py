"""Lineage of one generated entry: generated lines -> manifest entry -> ranked rows -> raw shards.

``trace TABLE INDEX`` or ``trace FILE:LINE`` (a line inside a generated region) both resolve to
(table, index); the trace then reads the working tree: the generated file, the manifest, the
ranked table and the raw shards of the content key recorded in the table's metrics.

A dispatch list (params.yaml ``dispatch:``) traces the same way (``trace gemm_dispatch INDEX``, or
a line of its region): the decision (range, chosen table and configuration), each candidate
table's selected winner at every measured M of the range with the speedup over the cuBLAS row of
its own shard (read from the ranked table, else the raw shard, else the table's recording), and
then the trace of the chosen table's entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from tunetable import lineage, paths, rank, rawstore, resultset
from tunetable.codegen_render import marker_line
from tunetable.errors import TuneTableError
from tunetable.manifest import ManifestEntry, load_ranges, lookup
from tunetable.params import CodegenSpec, DispatchSpec, SelectorSpec, TableSpec
from tunetable.rank import read_checked_recording, read_ranked
from tunetable.results import journal_of
from tunetable.baseline import pooled_baselines
from tunetable.select_winners import Candidate, choose_tables, data_hash, table_baselines
from tunetable.selector_trace import candidate_at_line

GENERATED = "# Automatically generated from ["
INDEX = re.compile(r"#\s*index:\s*\[(\d+)\]")
RANKED_COLUMNS = ("rank", "config_id", "median_ms", "iqr_ms", "tflops", "slowdown_vs_best", "speedup_vs_cublas")
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
    ranked_note: str = ""                 # where the ranked rows came from (ranked table, raw shards, recording)
    shards_note: str = ""                 # where the measurement rows came from, when not every shard is on disk


def generated_entries(text: str, *, begin_marker: str, end_marker: str, path: str | Path) -> list[GeneratedEntry]:
    """The entries of one marker region, in order."""
    lines = text.splitlines()
    begin = marker_line(lines, begin_marker, kind="begin", path=path)
    end = marker_line(lines, end_marker, kind="end", path=path)
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


def check_traceable(*, name: str, tables: Sequence[str], dispatch: Sequence[str], path: str | Path,
                    selectors: Sequence[str] = ()) -> None:
    """``name`` must be a declared table, dispatch list or selector; an unknown one is an error listing them."""
    if name in tables or name in dispatch or name in selectors:
        return
    raise TuneTableError(f"unknown table, dispatch list or selector '{name}' "
                         f"(declared tables: {', '.join(sorted(tables))}; "
                         f"dispatch lists: {', '.join(sorted(dispatch)) or 'none'}; "
                         f"selectors: {', '.join(sorted(selectors)) or 'none'})", path=path)


def entry_at_line(*, root: Path, specs: Sequence[TableSpec | DispatchSpec | SelectorSpec], file: str,
                  line: int) -> tuple[str, int]:
    """(table, dispatch list or selector, index) of the generated entry holding a line of a generated file (or of
    a selector's data file)."""
    target = (root / file).resolve()
    selectors = [s for s in specs if isinstance(s, SelectorSpec) and (root / s.data).resolve() == target]
    if selectors:   # a selector's data file: one candidate per line
        return selectors[0].name, candidate_at_line(root=root, spec=selectors[0], line=line)
    tables = [s for s in specs if not isinstance(s, SelectorSpec) and (root / s.codegen.target).resolve() == target]
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
    """For each M of the entry's range: the top ranked rows at its shape, the picked configuration's row and rank."""

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


def _located(*, root: Path, codegen: CodegenSpec, label: str,
             index: int) -> tuple[GeneratedEntry, dict[str, Any], list[ManifestEntry]]:
    """Entry ``index`` of a generated region, with its manifest's provenance and entries."""
    target = root / codegen.target
    if not target.is_file():
        raise TuneTableError("no such file", path=codegen.target)
    generated = generated_entries(target.read_text(), begin_marker=codegen.begin_marker,
                                  end_marker=codegen.end_marker, path=codegen.target)
    found = [g for g in generated if g.index == index]
    if not found:
        raise TuneTableError(f"{label} has no entry {index} (it has {len(generated)})",
                             path=codegen.target, where=f"index {index}")
    provenance, entries = load_ranges(root / codegen.manifest)
    if index >= len(entries):
        raise TuneTableError(f"manifest has no entry {index}: regenerate the table (tunetable codegen --all)",
                             path=codegen.manifest, where=f"params[{index}]")
    return found[0], provenance, entries


def trace(*, root: Path, spec: TableSpec, index: int, cache: TraceCache | None = None) -> Trace:
    """Follow entry ``index`` of a table from the generated file down to the raw shards.

    On a fresh clone (no results yet) the ranked rows and the measurement rows come from the table's
    recording, ranked here, and the trace says so and whether they are the rows the manifest was
    selected from (same data hash). ``cache``: shared by the traces of a batch of entries (``TraceCache``).
    """
    cache = cache or TraceCache()
    generated, provenance, entries = _located(root=root, codegen=spec.codegen, label=f"table {spec.name}", index=index)
    entry = entries[index]
    m_values = [m for m in spec.m_values_of(entry.n, entry.k) if entry.m <= m < entry.m_end]
    source = cache.source(root=root, spec=spec)
    ranked_rows = _ranked_at(ranked=source.ranked, entry=entry, m_values=m_values) if source.ranked is not None else []
    reader = lineage.DataReader(root=root, rev=None)
    metrics = lineage.metrics_at(root=root, rev=None, table=spec.name)
    key = lineage.content_key_at(reader=reader, table=spec.name, metrics=metrics, provenance=provenance)
    shards = [_shard_or_parked(root=root, reader=reader, table=spec.name, key=key, m=m, n=entry.n, k=entry.k,
                               config_id=entry.config_id) for m in m_values] if key else []
    shards_note = ""
    if not all(view.found for view in shards) and spec.recording and (root / spec.recording).is_file():
        shards = [view if view.found else _recording_view(root=root, spec=spec, view=view, m=m, n=entry.n,
                                                          k=entry.k, config_id=entry.config_id, cache=cache)
                  for view, m in zip(shards, m_values)]
        shards_note = (f"shards of key {key} not on disk: these rows are the recording's {spec.recording} "
                       "(replay serves exactly them)")
    return Trace(
        table=spec.name, target=spec.codegen.target, generated=generated, manifest=spec.codegen.manifest,
        entry=entry, provenance=provenance, ranked_path=source.path or str(paths.ranked(spec.name)),
        ranked=tuple(ranked_rows), content_key=key, shards=tuple(shards),
        ranked_note=_source_note(source=source, selected=provenance.get("data_hash")), shards_note=shards_note,
    )


def _source_note(*, source: Any, selected: Any) -> str:
    """Where a table's ranked rows came from and whether they are the rows its manifest was selected from."""
    if source.kind == "none":
        return "no ranked table, raw shards or recording in the working tree (`snakemake rank_all`, or `dvc pull`)"
    how = {"ranked": "ranked table", "raw": "raw shards, ranked here", "recording": "recording, ranked here"}
    verdict = ("the rows the manifest was selected from" if source.data_hash == selected
               else f"OTHER rows than the manifest was selected from ({selected or 'unknown'})")
    return f"{how[source.kind]}, data hash {source.data_hash}: {verdict}"


def _shard_or_parked(*, root: Path, reader: lineage.DataReader, table: str, key: str, m: int, n: int, k: int,
                     config_id: str) -> lineage.ShardView:
    """A shard of the working tree, from results/raw or, for a key not current now, results/parked."""
    view = lineage.shard_view(reader=reader, table=table, key=key, m=m, n=n, k=k, config_id=config_id)
    parked = root / rawstore.parked_path(paths.raw_shard(table, key, m, n, k))
    if view.found or not parked.is_file():
        return view
    journal = journal_of(parked)
    payload = lineage.shard_payload(parked.read_bytes(), path=parked,
                                    journal=journal.read_bytes() if journal.is_file() else None)
    return lineage.view_of(payload=payload, path=parked.relative_to(root), key=key, config_id=config_id)


def _recording_view(*, root: Path, spec: TableSpec, view: lineage.ShardView, m: int, n: int, k: int,
                    config_id: str, cache: TraceCache) -> lineage.ShardView:
    """A missing shard's row for a configuration, as the recording holds it (what replay would serve)."""
    frame = cache.recording(root / str(spec.recording))
    rows = frame.filter((pl.col("M") == m) & (pl.col("N") == n) & (pl.col("K") == k)
                        & (pl.col("config_id") == config_id)
                        & ((pl.col("table") == spec.name) if "table" in frame.columns else pl.lit(True)))
    if not rows.height:
        return view
    row = {name: value for name, value in rows.row(0, named=True).items() if name in lineage.PROVENANCE_FIELDS}
    return replace(view, found=True, row=row, path=f"{Path(view.path).name} (recording)",
                   config_ms=row.get("median_ms") if row.get("status") == "ok" else None)


# --- dispatch lists ----------------------------------------------------------------------------
#
# A candidate table's measurements are read as one ranked frame, from the first of: the ranked
# table (results/ranked/<table>.parquet, what `select --dispatch` read), the raw shards of the
# table's content key (every shape of params.yaml present), the table's recording (restricted to
# the shapes of params.yaml). Raw shards and recordings are ranked here exactly as `tunetable
# rank` ranks them, so each source's data hash compares with the one in the dispatch manifest.


RANKED_REQUIRED = ("M", "N", "K", "config_id", "median_ms", "cublas_ms", "status")


@dataclass(frozen=True)
class TableSource:
    """A candidate table's ranked rows, the file(s) they were read from, and their data hash."""

    table: str
    kind: str                   # ranked | raw | recording | none
    path: str | None
    ranked: Any                 # polars DataFrame, or None for kind "none"
    data_hash: str | None


@dataclass(frozen=True)
class Measured:
    """A configuration's median, the cuBLAS yardstick it is compared against and the same shard's cuBLAS row."""

    median_ms: float
    cublas_ms: float            # the tables' shared yardstick at the shape (tunetable.baseline), else the shard's
    measured_key: str | None    # content key of the cuda run that measured it
    shard_cublas_ms: float | None = None    # the same shard's cuBLAS row (None: the same as cublas_ms)

    @property
    def speedup(self) -> float:
        """cuBLAS yardstick / configuration median (the dispatch list's basis)."""
        return self.cublas_ms / self.median_ms

    @property
    def shard_speedup(self) -> float:
        """The same shard's cuBLAS median / configuration median (what the shard's rows alone say)."""
        return (self.shard_cublas_ms if self.shard_cublas_ms is not None else self.cublas_ms) / self.median_ms


@dataclass(frozen=True)
class CandidateAtM:
    """One candidate table at one measured M: its selected entry there and how that entry measured."""

    table: str
    entry_index: int | None
    config_id: str | None
    measured: Measured | None


@dataclass(frozen=True)
class DecisionAtM:
    """Every candidate table at one measured M of a dispatch entry's range, and what the select rule picks."""

    m: int
    candidates: tuple[CandidateAtM, ...]
    rule_pick: str | None       # the table `select --dispatch` picks from these measurements (None: none measured)


@dataclass(frozen=True)
class DispatchTrace:
    """A dispatch entry: the decision, the measurements behind it, and the chosen table's entry traces."""

    name: str
    target: str
    generated: GeneratedEntry
    manifest: str
    entry: ManifestEntry
    table: str
    config_id: str
    tables: tuple[str, ...]
    tie_tolerance: float
    provenance: dict[str, Any]
    sources: tuple[TableSource, ...]
    decisions: tuple[DecisionAtM, ...]
    table_traces: tuple[Trace, ...]

    def selected_hash(self, table: str) -> str | None:
        """The data hash of ``table``'s ranked rows that the dispatch list was selected from (its provenance)."""
        value = self.provenance.get(f"{table}_data_hash")
        return str(value) if value is not None else None


def ranked_results(*, results: Sequence[Any], shapes: Sequence[tuple[int, int, int]]) -> Any:
    """Loaded result frames restricted to ``shapes`` and ranked as `tunetable rank` does."""

    frame = resultset.combine(results=results)
    wanted = pl.DataFrame(list(shapes), schema=["M", "N", "K"], orient="row")
    frame = frame.join(wanted, on=["M", "N", "K"], how="semi")
    parameters = resultset.union_names(groups=[r.parameters for r in results])
    return rank.rank_rows(rows=frame, parameters=parameters).ranked


def _raw_source(*, root: Path, spec: TableSpec) -> TableSource | None:
    """The raw shards of the table's content key, ranked; None unless every shape's shard is there."""

    reader = lineage.DataReader(root=root, rev=None)
    provenance, _entries = load_ranges(root / spec.codegen.manifest)
    metrics = lineage.metrics_at(root=root, rev=None, table=spec.name)
    key = lineage.content_key_at(reader=reader, table=spec.name, metrics=metrics, provenance=provenance)
    shards = [root / paths.raw_shard(spec.name, key, m, n, k) for m, n, k in spec.shapes()] if key else []
    if not shards or not all(shard.is_file() for shard in shards):
        return None
    results = [resultset.load_file(path=shard) for shard in shards]  # an unreadable shard is an error naming it
    return TableSource(table=spec.name, kind="raw", path=f"{paths.raw_dir(spec.name, key)}/", data_hash=None,
                       ranked=ranked_results(results=results, shapes=spec.shapes()))


def _recording_source(*, root: Path, spec: TableSpec, cache: TraceCache) -> TableSource | None:
    """The table's recording, restricted to the shapes of params.yaml and ranked; None when it is absent."""

    if not spec.recording or not (root / spec.recording).is_file():
        return None

    frame = cache.recording(root / spec.recording)
    loaded = resultset.from_frame(frame=frame, path=spec.recording, name=spec.name)
    return TableSource(table=spec.name, kind="recording", path=spec.recording, data_hash=None,
                       ranked=ranked_results(results=[loaded], shapes=spec.shapes()))


def table_source(*, root: Path, spec: TableSpec, cache: TraceCache | None = None) -> TableSource:
    """A candidate table's ranked rows: ranked table, else raw shards, else recording (kind "none": nothing)."""

    ranked_path = root / paths.ranked(spec.name)
    if ranked_path.is_file():
        ranked = read_ranked(path=ranked_path, required=RANKED_REQUIRED)
        source = TableSource(table=spec.name, kind="ranked", path=str(paths.ranked(spec.name)), data_hash=None,
                             ranked=ranked)
    else:
        source = _raw_source(root=root, spec=spec) or _recording_source(root=root, spec=spec,
                                                                        cache=cache or TraceCache())
    if source is None:
        return TableSource(table=spec.name, kind="none", path=None, ranked=None, data_hash=None)
    return replace(source, data_hash=data_hash(ranked=source.ranked))


@dataclass
class TraceCache:
    """What the traces of one tree share over a batch of entries: each table's source, ranked once, and each
    recording, read once and checked whole against its sidecar (a trace without one makes its own)."""

    sources: dict[str, tuple[TableSpec, TableSource]] = field(default_factory=dict)
    recordings: dict[str, pl.DataFrame] = field(default_factory=dict)

    def source(self, *, root: Path, spec: TableSpec) -> TableSource:
        """The table's source (``table_source``), made on first use and again for a changed spec."""
        found = self.sources.get(spec.name)
        if found is None or found[0] != spec:
            found = self.sources[spec.name] = (spec, table_source(root=root, spec=spec, cache=self))
        return found[1]

    def recording(self, path: Path) -> pl.DataFrame:
        """The recording's rows, read once from the bytes checked whole against its sidecar (one line if not)."""
        if str(path) not in self.recordings:
            self.recordings[str(path)] = read_checked_recording(path=path)
        return self.recordings[str(path)]


def measured(*, source: TableSource, m: int, n: int, k: int, config_id: str,
             yardstick: Mapping[tuple[int, int, int], float] | None = None) -> Measured | None:
    """A configuration's verified median at one shape and the cuBLAS median (None: not measured): the table's
    ``yardstick`` at the shape when given (``select --dispatch``'s basis), else the same shard's."""

    if source.ranked is None:
        return None
    rows = source.ranked.filter(
        (pl.col("M") == m) & (pl.col("N") == n) & (pl.col("K") == k) & (pl.col("config_id") == config_id)
        & (pl.col("status") == "ok") & pl.col("median_ms").is_not_null() & pl.col("cublas_ms").is_not_null())
    if not rows.height:
        return None
    row = rows.row(0, named=True)
    key = row.get("measured_key")
    shard = float(row["cublas_ms"])
    return Measured(median_ms=float(row["median_ms"]),
                    cublas_ms=yardstick.get((m, n, k), shard) if yardstick is not None else shard,
                    measured_key=str(key) if key is not None else None, shard_cublas_ms=shard)


def _candidate(*, source: TableSource, entries: Sequence[ManifestEntry], m: int, n: int, k: int,
               yardstick: Mapping[tuple[int, int, int], float], table: str | None = None) -> CandidateAtM:
    """What one table's manifest picks at a shape and its measurement (empty when no entry covers it);
    ``table``: the name the dispatch list's entries use for it (a device's: its base name)."""
    entry = lookup(entries, m=m, n=n, k=k)
    named = table or source.table
    if entry is None:
        return CandidateAtM(table=named, entry_index=None, config_id=None, measured=None)
    return CandidateAtM(table=named, entry_index=entry.index, config_id=entry.config_id,
                        measured=measured(source=source, m=m, n=n, k=k, config_id=entry.config_id,
                                          yardstick=yardstick))


def rule_pick(*, candidates: Sequence[CandidateAtM], order: Sequence[str], tolerance: float) -> str | None:
    """The table that `select --dispatch`'s rule picks from these candidates (None when none was measured)."""

    shape = (0, 0, 0)
    per_table = {c.table: {shape: Candidate(table=c.table, kernel=c.table, config_id=str(c.config_id),
                                            median_ms=c.measured.median_ms, cublas_ms=c.measured.cublas_ms)}
                 for c in candidates if c.measured is not None}
    if not per_table:
        return None
    return choose_tables(candidates=per_table, order=tuple(order), tolerance=tolerance)[shape].table


def trace_dispatch(*, root: Path, spec: DispatchSpec, tables: Mapping[str, TableSpec], index: int,
                   cache: TraceCache | None = None) -> DispatchTrace:
    """Follow entry ``index`` of a dispatch list to each candidate's measurements and the chosen table's entry
    (``cache``: shared by the traces of a batch of entries)."""
    cache = cache or TraceCache()
    generated, provenance, entries = _located(root=root, codegen=spec.codegen, label=f"dispatch list {spec.name}",
                                              index=index)
    entry = entries[index]
    chosen = str(entry.values.get("TABLE", ""))
    if chosen not in spec.tables:
        raise TuneTableError(f"entry names table '{chosen}', not one of this list's tables ({', '.join(spec.tables)})",
                             path=spec.codegen.manifest, where=f"params[{index}]")
    sources = {name: cache.source(root=root, spec=tables[name]) for name in spec.tables}
    # The cuBLAS yardstick the tables share, as `select --dispatch` compares them (tunetable.baseline).
    yardsticks = pooled_baselines(baselines={name: table_baselines(ranked=source.ranked) if source.ranked is not None
                                             else {} for name, source in sources.items()})
    selected = {name: load_ranges(root / tables[name].codegen.manifest)[1] for name in spec.tables}
    m_values = sorted({m for name in spec.tables for m in tables[name].m_values_of(entry.n, entry.k)
                       if entry.m <= m < entry.m_end})
    decisions = []
    for m in m_values:
        candidates = tuple(_candidate(source=sources[name], entries=selected[name], m=m, n=entry.n, k=entry.k,
                                      yardstick=yardsticks[name], table=name) for name in spec.tables)
        decisions.append(DecisionAtM(m=m, candidates=candidates,
                                     rule_pick=rule_pick(candidates=candidates, order=spec.tables,
                                                         tolerance=spec.tie_tolerance)))
    picked = [lookup(selected[chosen], m=m, n=entry.n, k=entry.k) for m in (m_values or [entry.m])]
    indices = list(dict.fromkeys(e.index for e in picked if e is not None))
    return DispatchTrace(
        name=spec.name, target=spec.codegen.target, generated=generated, manifest=spec.codegen.manifest, entry=entry,
        table=chosen, config_id=entry.config_id, tables=spec.tables, tie_tolerance=spec.tie_tolerance,
        provenance=provenance, sources=tuple(sources.values()), decisions=tuple(decisions),
        table_traces=tuple(trace(root=root, spec=tables[chosen], index=i, cache=cache) for i in indices),
    )
