"""Lineage of one shape-selector candidate: its line of the data file -> the recorded measurements behind it.

``trace SELECTOR INDEX`` (or ``trace kernels/data/<selector>.json:LINE``) reads candidate INDEX of the
selector's data file and recomputes its bias terms at both ends of its M range from its table's recording
(tunetable.selector_fit), against the terms the file holds; with a shape, how each recorded (N', K')'s term
counts there, combined as the runtime combines them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.device_tables import split_device_table
from tunetable import selector_fit as building
from tunetable.selector_measurements import selector_tables, shared_yardstick
from tunetable.errors import TuneTableError
from tunetable.kernels.families.selector_data import SelectorData, candidate_entry, entry_terms, parse_selector_file
from tunetable.kernels.runtime import selector_serve as runtime
from tunetable.params import SelectorSpec, TableSpec
from tunetable.selector_manifest import coverage_prefix, entry_types

CANDIDATE_START = '{"M":'   # how a candidate's line of a data file begins


@dataclass(frozen=True)
class CandidateLine:
    """A candidate's line of the data file (1-based) and its text."""

    index: int
    first_line: int
    last_line: int
    text: str


def read_data(*, root: Path, spec: SelectorSpec) -> tuple[SelectorData, list[str]]:
    """A selector's data file, checked, and its lines."""
    path = root / spec.data
    if not path.is_file():
        raise TuneTableError("no such file", path=spec.data)
    raw = path.read_bytes()
    # A device's selector (gemm_selector.h100) keeps its base name inside its data file.
    data = parse_selector_file(raw, path=spec.data, entry_types=entry_types(), name=split_device_table(spec.name)[0])
    return data, raw.decode().splitlines()


def candidate_at_line(*, root: Path, spec: SelectorSpec, line: int) -> int:
    """The index of the candidate on ``line`` (1-based) of a selector's data file."""
    _, lines = read_data(root=root, spec=spec)
    starts = [number for number, text in enumerate(lines, start=1) if text.startswith(CANDIDATE_START)]
    if line not in starts:
        raise TuneTableError("line is not one of the data file's candidates", path=spec.data, where=f"line {line}")
    return starts.index(line)


# --- shape selectors ---------------------------------------------------------------------------
#
# A selector entry is one candidate of one M range. Its BIAS_TERMS come from the residuals of its
# configuration in its table's recording (pipeline/selector_fit.py): per (N, K), the measured median over
# the tables' shared cuBLAS yardstick against the perf model, at the range's end anchors, with its weight.


@dataclass(frozen=True)
class AnchorTrace:
    """The terms of a selector entry at one anchor M: every (N, K)'s, and the manifest's (value, weight) per (N, K)."""

    m: int
    terms: tuple[Any, ...]      # tunetable.selector_fit.GroupTerm
    manifest_terms: Mapping[tuple[int, int], tuple[float, float]]

    def stale(self) -> list[str]:
        """The (N, K) whose recomputed term or weight differs from the manifest's (or that only one side has)."""
        found = {(t.n, t.k): (t.value, t.weight) for t in self.terms}
        return [f"N={n}, K={k}" for n, k in sorted({*found, *self.manifest_terms})
                if (n, k) not in found or (n, k) not in self.manifest_terms
                or any(abs(a - b) > 1e-4 for a, b in zip(found[(n, k)], self.manifest_terms[(n, k)]))]


@dataclass(frozen=True)
class SelectorTrace:
    """A selector entry: its generated lines, manifest entry, and the measurements behind its bias."""

    name: str
    target: str
    generated: CandidateLine
    manifest: str
    entry: dict[str, Any]
    provenance: dict[str, Any]
    recording: str
    data_hash: str
    anchors: tuple[AnchorTrace, ...]
    on_shape: ShapeBias | None = None   # with a shape: the bias there, each (N', K')'s share
    coverage: tuple[str, str] | None = None   # (path, data hash) of the table's coverage recording read here

    def _built_hash(self, prefix: str) -> str | None:
        """The data hash the selector's provenance holds under ``<prefix>_data_hash`` (None: absent)."""
        value = self.provenance.get(f"{prefix}_data_hash")
        return str(value) if value is not None else None

    @property
    def selected_hash(self) -> str | None:
        """The data hash of the entry's table that the selector was built from (its provenance)."""
        return self._built_hash(str(self.entry.get("TABLE")))

    @property
    def selected_coverage_hash(self) -> str | None:
        """The data hash of the table's coverage recording the selector was built from (None: built without)."""
        return self._built_hash(coverage_prefix(str(self.entry.get("TABLE"))))


@dataclass(frozen=True)
class NearTerm:
    """One (N', K')'s term of a selector entry at one end, as it counts on one shape."""

    n: int
    k: int
    value: float
    weight: float       # the manifest's (e^-1 per octave of M beyond the (N', K')'s measured Ms)
    octaves: float      # distance from the shape's (N, K)
    share: float        # weight x e^(-octaves / BIAS_NK_SCALE), normalised over the end's terms


@dataclass(frozen=True)
class ShapeBias:
    """A selector entry's bias on one shape: each end's terms with their shares, and the bias at M."""

    shape: tuple[int, int, int]
    span: tuple[int, int]           # the entry's [M, M_END)
    scale: float | None
    ends: tuple[tuple[int, tuple[NearTerm, ...], float], ...]   # (anchor M, terms, bias there)
    position: float     # M's place between the ends in log M (0: start, 1: end)
    bias: float


def selector_bias_on(entry: Mapping[str, Any], *, span: tuple[int, int], shape: tuple[int, int, int]) -> ShapeBias:
    """A selector entry's bias on (M, N, K) from its manifest terms, combined as the runtime combines them."""
    m, n, k = shape
    rows = entry_terms(entry.get("BIAS_TERMS") or ())
    octaves = runtime.nk_octaves(n=n, k=k, pairs=[(row[0], row[1]) for row in rows])
    closeness = runtime.nk_closeness(octaves=octaves, scale=runtime.BIAS_NK_SCALE)
    ends = []
    for anchor, at in ((span[0], 2), (span[1], 4)):
        shares = runtime.nk_shares(weights=[row[at + 1] for row in rows], closeness=closeness)
        terms = tuple(NearTerm(n=row[0], k=row[1], value=row[at], weight=row[at + 1], octaves=d, share=share)
                      for row, d, share in zip(rows, octaves, shares))
        ends.append((anchor, terms, float(runtime.nk_mean(values=[row[at] for row in rows], shares=shares))))
    t = runtime.log_position(m=m, start=int(entry["M"]), end=int(entry["M_END"]))
    return ShapeBias(shape=shape, span=(int(entry["M"]), int(entry["M_END"])), scale=runtime.BIAS_NK_SCALE,
                     ends=tuple(ends), position=t,
                     bias=ends[0][2] + t * (ends[1][2] - ends[0][2]))


def selector_entry(*, root: Path, spec: SelectorSpec, index: int) -> tuple[CandidateLine, dict[str, Any],
                                                                          dict[str, Any]]:
    """Candidate ``index`` of a selector's data file: its line, its entry (the file's keys) and the provenance."""
    data, lines = read_data(root=root, spec=spec)
    if not 0 <= index < len(data.candidates):
        raise TuneTableError(f"selector {spec.name} has no entry {index} (it has {len(data.candidates)})",
                             path=spec.data, where=f"candidates[{index}]")
    number = [n for n, text in enumerate(lines, start=1) if text.startswith(CANDIDATE_START)][index]
    return (CandidateLine(index, number, number, lines[number - 1]), candidate_entry(data.candidates[index]),
            dict(data.provenance))


def trace_selector(*, root: Path, spec: SelectorSpec, tables: Mapping[str, TableSpec], index: int,
                   shape: tuple[int, int, int] | None = None) -> SelectorTrace:
    """Follow selector entry ``index`` to the recorded measurements behind its bias at both ends of its range
    (with ``shape``: and how each (N, K)'s term counts there)."""

    generated, entry, provenance = selector_entry(root=root, spec=spec, index=index)
    table = str(entry.get("TABLE"))
    if table not in spec.tables:
        raise TuneTableError(f"entry names table '{table}', not one of the selector's ({', '.join(spec.tables)})",
                             path=spec.data, where=f"candidates[{index}]")
    # Every table of the selector: the bias is against the cuBLAS yardstick they share (tunetable.baseline).
    shared = shared_yardstick(selector_tables(root=root, specs=[tables[name] for name in spec.tables],
                                              coverage=spec.coverage).tables)
    measurements = next(t for t in shared if t.table == table)
    config = next((c for c in measurements.configs if c.config_id == entry.get("CONFIG_ID")), None)
    if config is None:
        raise TuneTableError(f"configuration {entry.get('CONFIG_ID')} is not in table {table}'s recording",
                             path=measurements.source)
    anchors = tuple(int(a) for a in str(provenance.get("anchors", "")).split(",") if a)
    span = next(((lo, hi) for start, end, lo, hi in building.ranges_of(anchors)
                 if (start, end) == (entry["M"], entry["M_END"])), None)
    if span is None:
        raise TuneTableError(f"M range [{entry['M']}, {entry['M_END']}) is not a range of the anchors {anchors}",
                             path=spec.data, where=f"candidates[{index}]")
    groups = building.residual_points(table=measurements, config=config)
    rows = entry_terms(entry.get("BIAS_TERMS") or ())
    traced = []
    for m, at in dict.fromkeys([(span[0], 2), (span[1], 4)]):
        terms = building.bias_terms(groups=groups, m=m)
        traced.append(AnchorTrace(m=m, terms=tuple(terms),
                                  manifest_terms={(row[0], row[1]): (row[at], row[at + 1]) for row in rows}))
    return SelectorTrace(name=spec.name, target=spec.data, generated=generated,
                         manifest=spec.data, entry=entry, provenance=provenance,
                         recording=measurements.source, data_hash=str(measurements.provenance.get("data_hash")),
                         anchors=tuple(traced),
                         on_shape=None if shape is None else selector_bias_on(entry, span=span, shape=shape),
                         coverage=None if measurements.coverage is None else (
                             measurements.coverage.source, str(measurements.coverage.provenance.get("data_hash"))))
