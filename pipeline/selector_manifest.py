"""The shape selector's two files: its data file (the fit) and its short manifest (what a reviewer reads).

``tunetable select --selector <name>`` fits the selector (tunetable.selector_fit) and writes

- the data file ``selector.<name>.data`` (kernels/data/<name>.json, package data; the format is
  tunetable.kernels.families.selector_data, the schema docs/selector_data.md), one candidate per line;
- manifests/<name>.yaml: the recordings behind the fit (``provenance:``) and the data file's path,
  sha256 and candidate count (``data:``). A re-record changes a few lines of it; ``tunetable audit``
  reviews what the new fit chooses differently.

Codegen (tunetable.codegen) checks the data file against the manifest's sha256 and its candidates
against the typed fields before it writes the sha256 and provenance into kernels/tuning_configs.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.inputs import INT32_MAX, check_int, check_int_bits
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.selector_data import (
    FORMAT,
    SelectorData,
    parse_selector_file,
    selector_file_text,
)
from tunetable.kernels.runtime.selector_serve import BIAS_NK_SCALE, CUBLAS_NK_SCALE, LATTICE
from tunetable.manifest import UNKNOWN, load_yaml_document
from tunetable.select_winners import yaml_mapping_lines
from tunetable.selector_fit import (
    CELL_RADIUS,
    DEFAULT_CANDIDATES,
    PROBES_PER_RANGE,
    SelectorBuild,
    TableMeasurements,
    build_selector,
)

DATA_KEYS = ("path", "format", "sha256", "candidates")


@dataclass(frozen=True)
class SelectorManifest:
    """A selector manifest: the recordings behind the fit and the data file it names."""

    provenance: Mapping[str, Any]
    data_path: str
    sha256: str
    candidates: int


def entry_types() -> dict[str, type]:
    """Each family's entry class (what a selector data file's candidates are typed by)."""
    return {name: family.entry_type for name, family in FAMILIES.items()}


def selector_provenance(*, name: str, build: SelectorBuild, candidates: int) -> dict[str, Any]:
    """The recordings behind the selector (each table's and coverage recording's data hash, device, date, git revision)
    and its settings."""
    recordings = [*build.tables, *(t.coverage for t in build.tables if t.coverage is not None)]
    dates = [str(t.provenance.get("date", UNKNOWN)) for t in recordings]
    known = [d for d in dates if d != UNKNOWN]
    devices = sorted({str(t.provenance.get("device", UNKNOWN)) for t in recordings})
    provenance: dict[str, Any] = {
        "table": name,
        "tables": ",".join(t.table for t in build.tables),
        "basis": "log(median / cuBLAS yardstick, the tables' rows pooled) - log(perf model / roofline floor) "
                 "per (N, K), linear in log M between anchors; at a shape their mean weighted by "
                 "e^(-octaves beyond the (N, K)'s Ms) x "
                 + (f"e^(-(N, K) distance in octaves / {BIAS_NK_SCALE})" if BIAS_NK_SCALE else "1 for every (N, K)")
                 + f" (cuBLAS: e^(-distance / {CUBLAS_NK_SCALE}))",
        "device": ",".join(devices),
        "date": max(known) if known else UNKNOWN,
        "anchors": ",".join(str(a) for a in build.anchors),
        "candidates": candidates,
        "lattice": f"N, K in {LATTICE[0]}..{LATTICE[-1]} ({len(LATTICE)} values), {PROBES_PER_RANGE} Ms per range, "
                   f"a shortlist per point over the points within {CELL_RADIUS}",
    }
    for table in build.tables:
        provenance.update(recording_provenance(prefix=table.table, recording=table, shapes=len(table.own_shapes())))
    for table in build.tables:
        if table.coverage is not None:
            shapes = len(table.times) - len(table.own_shapes())
            provenance.update(recording_provenance(prefix=coverage_prefix(table.table), recording=table.coverage,
                                                   shapes=shapes))
    return provenance


def coverage_prefix(table: str) -> str:
    """The provenance keys' prefix of ``table``'s coverage recording (``<table>_coverage``_data_hash, ...)."""
    return f"{table}_coverage"


def recording_provenance(*, prefix: str, recording: TableMeasurements, shapes: int) -> dict[str, Any]:
    """One recording behind the fit: <prefix>_recording (its path), _data_hash (sha256 of its values), _kernel_hash,
    _git_rev, _date and _shapes (how many of its shapes the fit read)."""
    found: dict[str, Any] = {f"{prefix}_recording": recording.source}
    for key in ("data_hash", "kernel_hash", "git_rev", "date"):
        found[f"{prefix}_{key}"] = str(recording.provenance.get(key, UNKNOWN))
    found[f"{prefix}_shapes"] = shapes
    return found


def sha256_hex(text: str) -> str:
    """The sha256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def manifest_text_of(*, name: str, data_path: str, data_text: str, data: SelectorData) -> str:
    """The short manifest naming the data file (path, format, sha256, candidates) and the recordings behind it."""
    header = [f"tunetable shape selector {name}: generated by `tunetable select --selector`; do not edit by hand.",
              f"The fitted selector is data: {data_path} (one candidate per line; docs/selector_data.md),",
              "shipped with the package; codegen checks it against data.sha256 below and writes that sha256 and",
              "the provenance into kernels/tuning_configs.py (SELECTOR_FILES), which the runtime checks on load.",
              "`tunetable audit` reviews a change of it (cells whose choice changed, predictions that moved);",
              f"`tunetable trace {name} INDEX` shows the measurements behind candidate INDEX."]
    lines = [f"# {line}" for line in header]
    lines += ["provenance:", *yaml_mapping_lines(mapping=dict(data.provenance), indent="  ")]
    described = {"path": data_path, "format": FORMAT, "sha256": sha256_hex(data_text),
                 "candidates": len(data.candidates)}
    lines += ["data:", *yaml_mapping_lines(mapping=described, indent="  ")]
    return "\n".join(lines) + "\n"


def fit_selector_files(*, name: str, tables: Sequence[TableMeasurements], data_path: str,
                       candidates: int = DEFAULT_CANDIDATES,
                       progress: Callable[[int, int], None] | None = None) -> tuple[str, str]:
    """(manifest text, data file text) of a fitted selector, byte-identical for the same recordings and settings."""
    build = build_selector(tables=tables, candidates=candidates, progress=progress)
    provenance = selector_provenance(name=name, build=build, candidates=candidates)
    data = SelectorData(name=name, tables=tuple((t.table, t.family) for t in build.tables),
                        provenance=tuple(provenance.items()), candidates=build.candidates)
    data_text = selector_file_text(data)
    return manifest_text_of(name=name, data_path=data_path, data_text=data_text, data=data), data_text


def parse_selector_manifest(raw: Any, *, path: str | Path) -> SelectorManifest:
    """A selector manifest's checked fields (a mapping with ``provenance:`` and ``data:``); else one error line."""
    if not isinstance(raw, dict) or set(raw) != {"provenance", "data"}:
        raise TuneTableError("expected a mapping with provenance: and data: (a shape selector's manifest)", path=path)
    data = raw["data"]
    if not isinstance(data, dict) or list(data) != list(DATA_KEYS):
        raise TuneTableError(f"expected {', '.join(DATA_KEYS)}", path=path, where="data")
    if data["format"] != FORMAT:
        raise TuneTableError(f"format {data['format']!r} is not {FORMAT!r}", path=path, where="data.format")
    if not isinstance(data["sha256"], str) or len(data["sha256"]) != 64:
        raise TuneTableError(f"expected 64 hex digits, got {data['sha256']!r}", path=path, where="data.sha256")
    if not isinstance(raw["provenance"], dict):
        raise TuneTableError("expected a mapping", path=path, where="provenance")
    check_int_bits(raw, path=path)   # a 0x literal of thousands of digits: one line, not a traceback later
    candidates = check_int(data["candidates"], name="candidates", low=0, high=INT32_MAX, path=path,
                           where="data.candidates")
    return SelectorManifest(provenance=raw["provenance"], data_path=str(data["path"]), sha256=data["sha256"],
                            candidates=candidates)


def load_selector_manifest(path: str | Path) -> SelectorManifest:
    """The selector manifest at ``path`` (YAML through the strict loader), checked."""
    return parse_selector_manifest(load_yaml_document(path), path=path)


def check_selector_data(raw: bytes, *, manifest: SelectorManifest, path: str | Path, name: str,
                        table_families: Mapping[str, str], manifest_path: str | Path) -> SelectorData:
    """The data file's checked content: its sha256 is the manifest's, its tables the selector's, every candidate
    typed; else one error line naming the file."""
    digest = hashlib.sha256(raw).hexdigest()
    if digest != manifest.sha256:
        raise TuneTableError(f"sha256 {digest[:16]}... is not the {manifest.sha256[:16]}... that {manifest_path} "
                             "names: re-run `tunetable select --selector` (or restore the file)", path=path)
    data = parse_selector_file(raw, path=path, entry_types=entry_types(), name=name)
    if dict(data.tables) != dict(table_families):
        raise TuneTableError(f"tables {dict(data.tables)} are not the selector's {dict(table_families)} "
                             "(params.yaml): re-run `tunetable select --selector`", path=path, where="tables")
    if len(data.candidates) != manifest.candidates:
        raise TuneTableError(f"{len(data.candidates)} candidates, the manifest says {manifest.candidates}",
                             path=path, where="candidates")
    return data
