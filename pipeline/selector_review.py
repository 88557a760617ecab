"""Review a shape-selector change in a few lines: the cells whose choice changed, the predictions that moved.

The selector's data file is a fitted model that nobody reads line by line; what a reviewer needs is what it
now chooses differently. Both sides (a git revision, or the working tree) are read as the runtime reads
them (tunetable.kernels.families.selector_data; an older revision's selector manifest, whose entries were
the candidates, too) and scored by the runtime's own ``ShapeSelector`` on every cell: the geometric middle
M of each M range at each point of the (N, K) lattice. A cell is listed when its choice changed, or when the
same choice's predicted time moved by more than ``threshold``; the provenance keys that changed say which
recordings are behind it (their data hashes, dates, git revisions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.device_tables import split_device_table
from tunetable import lineage
from tunetable.errors import TuneTableError
from tunetable.kernels.families.common import INT32_MAX, ShapeCandidate
from tunetable.kernels.families.entry_fields import family_tunables
from tunetable.kernels.families.selector_data import candidate_from_entry, parse_selector_file
from tunetable.kernels.runtime.selector_serve import LATTICE, Prediction, ShapeSelector
from tunetable.selector_manifest import entry_types
from tunetable.yamlio import load_yaml

THRESHOLD = 0.05    # a predicted time moving by more than 5 % (same choice) is listed
LISTED = 12         # cells listed per section (the rest are counted): the review stays under 100 lines


@dataclass(frozen=True)
class SelectorSide:
    """A selector at one revision: its candidates and provenance, or why it could not be read."""

    label: str
    candidates: tuple[ShapeCandidate, ...] = ()
    provenance: Mapping[str, Any] | None = None
    source: str = ""                # the file it was read from
    gap: str | None = None


@dataclass(frozen=True)
class CellChange:
    """One cell (an M range's middle M, a lattice (N, K)) whose choice or predicted time changed."""

    span: tuple[int, int]
    shape: tuple[int, int, int]
    before: Prediction | None
    after: Prediction | None

    @property
    def ratio(self) -> float | None:
        """Predicted time before / after (> 1: predicted faster now)."""
        if self.before is None or self.after is None:
            return None
        return self.before.seconds / self.after.seconds


@dataclass(frozen=True)
class SelectorReview:
    """What changed in one selector between two revisions."""

    name: str
    before: SelectorSide
    after: SelectorSide
    cells: int = 0
    choices: tuple[CellChange, ...] = ()
    moved: tuple[CellChange, ...] = ()
    provenance: tuple[tuple[str, Any, Any], ...] = ()   # (key, before, after) of each changed provenance key
    threshold: float = THRESHOLD


def _from_data(raw: bytes, *, label: str, path: str, name: str) -> SelectorSide:
    """A side read from a data file's bytes."""
    data = parse_selector_file(raw, path=f"{path} ({label})", entry_types=entry_types(), name=name)
    return SelectorSide(label=label, candidates=data.candidates, provenance=dict(data.provenance), source=path)


def side_from_manifest(text: str, *, label: str, path: str) -> SelectorSide:
    """A side read from an older revision's selector manifest, whose ``params:`` entries were the candidates."""
    raw = load_yaml(text, path=f"{path} ({label})")
    if not isinstance(raw, dict) or not isinstance(raw.get("params"), list):
        return SelectorSide(label=label, gap=f"{path} at {label} names no data file and holds no candidates")
    types = entry_types()
    candidates = [candidate_from_entry(entry, tunables=[name for name, _ in family_tunables(types[entry["KERNEL"]])])
                  for entry in raw["params"]]
    return SelectorSide(label=label, candidates=tuple(candidates), provenance=dict(raw.get("provenance") or {}),
                        source=path)


def selector_side(*, root: Path, rev: str | None, label: str, name: str, spec: Mapping[str, Any]) -> SelectorSide:
    """Selector ``name`` at a revision (None: the working tree), from ``spec`` (its params.yaml mapping there)."""
    data = spec.get("data")
    manifest = str((spec.get("codegen") or {}).get("manifest", f"manifests/{name}.yaml"))
    try:
        if data:
            raw = lineage.git_bytes(root=root, rev=rev, path=str(data))
            if raw is not None:
                return _from_data(raw, label=label, path=str(data), name=split_device_table(name)[0])
            return SelectorSide(label=label, gap=f"{data} is absent at {label}")
        text = lineage.git_text(root=root, rev=rev, path=manifest)
        if text is None:
            return SelectorSide(label=label, gap=f"{manifest} is absent at {label}")
        return side_from_manifest(text, label=label, path=manifest)
    except (TuneTableError, KeyError, TypeError, ValueError) as exc:
        return SelectorSide(label=label, gap=f"cannot read the selector at {label}: {exc}")


def cell_shapes(candidates: Sequence[ShapeCandidate]) -> list[tuple[tuple[int, int], tuple[int, int, int]]]:
    """Every cell: (range, (middle M, N, K)) for each M range and lattice (N, K); an open last range's middle
    is one octave above its start."""
    spans = sorted({(c.m, c.m_end) for c in candidates})
    cells = []
    for start, end in spans:
        middle = start * 2 if end >= INT32_MAX else max(start, round(math.sqrt(start * end)))
        cells += [((start, end), (middle, n, k)) for n in LATTICE for k in LATTICE]
    return cells


def compare(before: SelectorSide, after: SelectorSide, *, threshold: float = THRESHOLD
            ) -> tuple[int, list[CellChange], list[CellChange]]:
    """(cells compared, cells whose choice changed, cells whose same choice's predicted time moved)."""
    old, new = ShapeSelector(before.candidates), ShapeSelector(after.candidates)
    cells = {shape: span for span, shape in cell_shapes(before.candidates) + cell_shapes(after.candidates)}
    choices, moved = [], []
    for (m, n, k), span in sorted(cells.items()):
        a, b = old.choose(m=m, n=n, k=k), new.choose(m=m, n=n, k=k)
        change = CellChange(span=span, shape=(m, n, k), before=a, after=b)
        if _choice(a) != _choice(b):
            choices.append(change)
        elif change.ratio is not None and abs(math.log(change.ratio)) > math.log1p(threshold):
            moved.append(change)
    return len(cells), choices, moved


def _choice(prediction: Prediction | None) -> tuple[str, str] | None:
    """A prediction's (table, configuration id)."""
    return None if prediction is None else (prediction.candidate.table, prediction.candidate.config_id)


def review_selector(*, name: str, before: SelectorSide, after: SelectorSide,
                    threshold: float = THRESHOLD) -> SelectorReview:
    """The review of one selector between two sides (nothing compared when a side could not be read)."""
    if before.gap or after.gap:
        return SelectorReview(name=name, before=before, after=after, threshold=threshold)
    cells, choices, moved = compare(before, after, threshold=threshold)
    old, new = dict(before.provenance or {}), dict(after.provenance or {})
    changed = tuple((key, old.get(key), new.get(key)) for key in dict.fromkeys([*old, *new])
                    if old.get(key) != new.get(key))
    return SelectorReview(name=name, before=before, after=after, cells=cells, choices=tuple(choices),
                          moved=tuple(moved), provenance=changed, threshold=threshold)
