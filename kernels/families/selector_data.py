"""The shape selector's data file (kernels/data/<selector>.json): its format, writer and checked reader.

A fitted selector is data, not code: ``tunetable select --selector`` writes it, codegen records its
sha256 and provenance in kernels/tuning_configs.py (``SELECTOR_FILES``), and the runtime reads it on
first use (``tunetable.kernels.runtime.decide.selector_candidates``). The schema (docs/selector_data.md)::

    {"format": "tunetable.selector/1",
     "selector": "<name>",
     "tables": {"<table>": "<family>", ...},
     "provenance": {"<key>": "<text>" or <integer>, ...},
     "candidates": [
    {"M": ..., "M_END": ..., "RANK": ..., "TABLE": ..., "KERNEL": ..., "CONFIG_ID": ..., "REGISTERS": ...,
     "SMEM_BYTES": ..., <the family's tunables>, "CELLS": [...], "BIAS_TERMS": [...], "CUBLAS_TERMS": [...]},
    ...]}

JSON because the runtime reads it with the standard library only; one candidate per line, keys in a
fixed order and numbers as Python writes them, so that the same fit gives the same bytes and a diff
names the candidates that changed. Every candidate is checked against the typed fields codegen uses
(``tunetable.kernels.families.entry_fields``); any problem is one error naming the file and the entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.kernels.families.common import ShapeCandidate
from tunetable.kernels.families.entry_fields import EntryFields, check_entries, selector_entry_fields

FORMAT = "tunetable.selector/1"
TOP_KEYS = ("format", "selector", "tables", "provenance", "candidates")
MAX_BYTES = 64 << 20    # a data file larger than this is refused before parsing (bounds the work on odd input)


@dataclass(frozen=True)
class SelectorData:
    """A fitted shape selector: its tables (and their families), provenance and candidates."""

    name: str
    tables: tuple[tuple[str, str], ...]                 # (table, family), in the selector's order
    provenance: tuple[tuple[str, str | int], ...]       # the recordings behind it and its settings
    candidates: tuple[ShapeCandidate, ...]


def candidate_entry(candidate: ShapeCandidate) -> dict[str, Any]:
    """A candidate as the data file holds it (the manifest keys: UPPER_CASE), in the file's key order."""
    return {"M": candidate.m, "M_END": candidate.m_end, "RANK": candidate.rank, "TABLE": candidate.table,
            "KERNEL": candidate.kernel, "CONFIG_ID": candidate.config_id, "REGISTERS": candidate.registers,
            "SMEM_BYTES": candidate.smem_bytes, **{name.upper(): value for name, value in candidate.tunables},
            "CELLS": [list(cell) for cell in candidate.cells],
            "BIAS_TERMS": [list(row) for row in candidate.bias_terms],
            "CUBLAS_TERMS": [list(row) for row in candidate.cublas_terms]}


def entry_terms(rows: Sequence[Sequence[Any]]) -> tuple[tuple[int, int, float, float, float, float], ...]:
    """An entry's BIAS_TERMS / CUBLAS_TERMS rows as the candidate holds them."""
    return tuple((int(n), int(k), float(a), float(b), float(c), float(d)) for n, k, a, b, c, d in rows)


def candidate_from_entry(entry: Mapping[str, Any], *, tunables: Sequence[str]) -> ShapeCandidate:
    """The ShapeCandidate of a checked entry (``tunables``: its family's -D names in grid order)."""
    return ShapeCandidate(
        m=int(entry["M"]), m_end=int(entry["M_END"]), rank=int(entry["RANK"]), table=str(entry["TABLE"]),
        kernel=str(entry["KERNEL"]), config_id=str(entry["CONFIG_ID"]), registers=int(entry["REGISTERS"]),
        smem_bytes=int(entry["SMEM_BYTES"]), bias_terms=entry_terms(entry["BIAS_TERMS"]),
        cublas_terms=entry_terms(entry["CUBLAS_TERMS"]),
        tunables=tuple((name.lower(), int(entry[name])) for name in tunables),
        cells=tuple((int(n), int(first), int(last)) for n, first, last in entry["CELLS"]))


def _line(value: Any) -> str:
    """One JSON value on one line (no spaces: the file is read by programs and diffed by line)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def selector_file_text(data: SelectorData) -> str:
    """The data file's text: the header one key per line, then one candidate per line (deterministic)."""
    provenance = ",\n".join(f" {_line(key)}:{_line(value)}" for key, value in data.provenance)
    candidates = ",\n".join(_line(candidate_entry(candidate)) for candidate in data.candidates)
    return (f'{{"format":{_line(FORMAT)},\n"selector":{_line(data.name)},\n"tables":{_line(dict(data.tables))},\n'
            f'"provenance":{{\n{provenance}\n}},\n"candidates":[\n{candidates}\n]}}\n')


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key written twice (the second would silently win)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key!r} appears twice in one object")
        found[key] = value
    return found


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity are no JSON numbers: refuse them."""
    raise ValueError(f"{name} is not a number")


def decode(raw: bytes, *, path: str | Path) -> dict[str, Any]:
    """The data file's top-level object (UTF-8 JSON, no duplicate keys, no NaN); else one error line."""
    if len(raw) > MAX_BYTES:
        raise TuneTableError(f"{len(raw)} bytes (at most {MAX_BYTES})", path=path)
    try:
        found = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise TuneTableError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=path) from None
    except (ValueError, RecursionError) as exc:
        raise TuneTableError(f"not a selector data file: {exc}", path=path) from None
    if not isinstance(found, dict) or list(found) != list(TOP_KEYS):
        keys = list(found) if isinstance(found, dict) else type(found).__name__
        raise TuneTableError(f"expected the keys {', '.join(TOP_KEYS)} in this order, got {keys}", path=path)
    if found["format"] != FORMAT:
        raise TuneTableError(f"format {found['format']!r} is not {FORMAT!r}", path=path, where="format")
    return found


def _tables(value: Any, *, families: Mapping[str, type], path: str | Path) -> tuple[tuple[str, str], ...]:
    """The ``tables`` mapping: table name -> a known family."""
    if not isinstance(value, dict) or not value:
        raise TuneTableError(f"expected a mapping of table to family, got {value!r}", path=path, where="tables")
    for table, family in value.items():
        if family not in families:
            raise TuneTableError(f"family {family!r} is not one of {', '.join(sorted(families))}", path=path,
                                 where=f"tables.{table}")
    return tuple(value.items())


def _provenance(value: Any, *, path: str | Path) -> tuple[tuple[str, str | int], ...]:
    """The ``provenance`` mapping: key -> text or integer (each printable on one line)."""
    if not isinstance(value, dict):
        raise TuneTableError(f"expected a mapping, got {value!r}", path=path, where="provenance")
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (str, int)) or not str(item).isprintable():
            raise TuneTableError(f"expected one line of text or an integer, got {item!r}", path=path,
                                 where=f"provenance.{key}")
    return tuple(value.items())


def parse_selector_file(raw: bytes, *, path: str | Path, entry_types: Mapping[str, type],
                        name: str | None = None) -> SelectorData:
    """The checked SelectorData of a data file's bytes (``entry_types``: each family's entry class; ``name``:
    the selector it must be). Every candidate holds exactly its family's typed fields."""
    found = decode(raw, path=path)
    if not isinstance(found["selector"], str) or (name is not None and found["selector"] != name):
        raise TuneTableError(f"selector {found['selector']!r} is not {name!r}", path=path, where="selector")
    tables = _tables(found["tables"], families=entry_types, path=path)
    fields = selector_entry_fields(label=f"selector {found['selector']}", table_families=dict(tables),
                                   entry_types=entry_types)
    entries = found["candidates"]
    if not isinstance(entries, list):
        raise TuneTableError(f"expected a list, got {type(entries).__name__}", path=path, where="candidates")
    candidates = tuple(_candidate(entry, index, fields=fields, path=path) for index, entry in enumerate(entries))
    return SelectorData(name=found["selector"], tables=tables, provenance=_provenance(found["provenance"], path=path),
                        candidates=candidates)


def _candidate(entry: Any, index: int, *, fields: Mapping[str, EntryFields], path: str | Path) -> ShapeCandidate:
    """Candidate ``index``, checked against its family's (its KERNEL's) fields."""
    where = f"candidates[{index}]"
    if not isinstance(entry, dict):
        raise TuneTableError(f"expected a mapping, got {entry!r}", path=path, where=where)
    declared = fields.get(entry.get("KERNEL"))
    if declared is None:
        raise TuneTableError(f"KERNEL {entry.get('KERNEL')!r} is not one of {', '.join(fields)}", path=path,
                             where=where)
    try:
        check_entries([entry], fields=declared, path=path, first=index)
    except TuneTableError as exc:   # the data file's place is candidates[i], not a manifest's params[i]
        raise TuneTableError(str(exc).replace(f"params[{index}]", where, 1)) from None
    return candidate_from_entry(entry, tunables=declared.tunables)
