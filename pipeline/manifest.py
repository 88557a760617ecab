"""Manifests, read one way: the one loader every reader of ``manifests/*.yaml`` goes through.

A manifest is a YAML mapping with an ordered ``params`` list (``defaults: &defaults`` merged with
``<<: *defaults``) and an optional ``provenance`` mapping (docs/internals.md). ``load_manifest_document``
parses it safely and checks its structure with Modular ``tuning_codegen``'s messages (codegen
renders it); ``manifest_ranges`` types the entries the lookup reads (M, M_END, N, K, CONFIG_ID),
and ``lookup`` is the lookup contract of every table (``covering_index``, shared with the runtime).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.inputs import check_int_bits
from tunetable.kernels.families.common import covering_index
from tunetable.yamlio import decode_utf8, load_yaml, read_bytes


# The provenance value of a field that no measurement named (no GPU, no date): select writes it, codegen and
# metrics read it.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Manifest:
    """A loaded manifest: the ordered, merged ``params`` entries and the optional provenance."""

    params: list[dict[str, Any]]
    provenance: dict[str, Any] | None = None


@dataclass(frozen=True)
class ManifestEntry:
    """One manifest entry as the lookup sees it (merged with its defaults)."""

    index: int
    m: int
    m_end: int
    n: int
    k: int
    config_id: str
    values: Mapping[str, Any]


def read_text(path: Path, *, keep_newlines: bool = False) -> str:
    """Read UTF-8 text; ``keep_newlines`` skips newline translation (a CRLF target stays CRLF).

    Missing, unreadable, a folder or not UTF-8 (naming the line) is one error line (tunetable.yamlio).
    """
    text = decode_utf8(read_bytes(path), path=path)
    return text if keep_newlines else text.replace("\r\n", "\n").replace("\r", "\n")


def parse_yaml(text: str, *, path: Path) -> Any:
    """Parsed YAML text through the project's one YAML loader (tunetable.yamlio: libyaml's safe parser when
    present, duplicate keys and alias bombs refused); malformed YAML is a TuneTableError naming the line."""
    return load_yaml(text, path=path)


def _entry_identity(entry: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """An entry's keys and values as a hashable key that spots duplicate entries."""
    return tuple(sorted((key, repr(value)) for key, value in entry.items()))


def validate_manifest(data: Any, *, path: str | Path) -> Manifest:
    """Check a parsed manifest (mapping, params sequence of mappings, no duplicates) and return it."""
    if not isinstance(data, Mapping):
        raise TuneTableError("expected a YAML mapping", path=path)
    check_int_bits(data, path=path)   # tunetable.inputs: int64 values, bounded nesting
    raw = data.get("params")
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise TuneTableError("expected 'params' to be a sequence", path=path)
    entries: list[dict[str, Any]] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for index, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise TuneTableError(f"params[{index}] must be a mapping", path=path)
        merged = {str(key): value for key, value in entry.items()}
        identity = _entry_identity(merged)
        if identity in seen:
            raise TuneTableError(f"duplicate params entry at index {index}", path=path)
        seen.add(identity)
        entries.append(merged)
    provenance = data.get("provenance")
    if provenance is not None and not isinstance(provenance, Mapping):
        raise TuneTableError("expected 'provenance' to be a mapping", path=path)
    return Manifest(
        params=entries, provenance=None if provenance is None else {str(k): v for k, v in provenance.items()}
    )


def load_manifest_document(path: str | Path) -> Manifest:
    """Load a manifest through tunetable.yamlio (anchors and ``<<`` merges work) and validate it."""
    source = Path(path)
    return validate_manifest(parse_yaml(read_text(source), path=path), path=path)


def load_yaml_document(path: str | Path) -> Any:
    """Any YAML file parsed safely (a manifest's top-level ``name``/``file`` for profile); errors name the line."""
    return parse_yaml(read_text(Path(path)), path=Path(path))


def load_manifest(path: str | Path) -> list[dict[str, Any]]:
    """The manifest's ``params`` entries in file order (Modular's ``load_manifest``)."""
    return load_manifest_document(path).params


def parse_manifest_text(text: str, *, path: str | Path) -> Manifest:
    """A manifest from its text (a git revision's, for audit and trace), parsed and checked like a file."""
    return validate_manifest(parse_yaml(text, path=Path(path)), path=path)


def _int_field(*, raw: Mapping[str, Any], key: str, path: str | Path, index: int) -> int:
    """An entry's integer field, or a TuneTableError naming the entry and the key."""
    try:
        return int(raw[key])
    except (TypeError, ValueError):
        raise TuneTableError(f"{key} must be an integer, got {raw[key]!r}", path=path,
                             where=f"params[{index}]") from None


def manifest_ranges(manifest: Manifest, *, path: str | Path) -> list[ManifestEntry]:
    """The entries typed for the lookup (M, M_END, N, K as integers, CONFIG_ID), in lookup order."""
    entries = []
    for index, raw in enumerate(manifest.params):
        missing = [key for key in ("M", "M_END", "N", "K", "CONFIG_ID") if key not in raw]
        if missing:
            raise TuneTableError(f"entry lacks {', '.join(missing)}", path=path, where=f"params[{index}]")
        m, m_end, n, k = (_int_field(raw=raw, key=key, path=path, index=index) for key in ("M", "M_END", "N", "K"))
        entries.append(ManifestEntry(index=index, m=m, m_end=m_end, n=n, k=k, config_id=str(raw["CONFIG_ID"]),
                                     values=dict(raw)))
    return entries


def load_ranges(path: str | Path) -> tuple[dict[str, Any], list[ManifestEntry]]:
    """(provenance mapping, typed entries) of a manifest file."""
    manifest = load_manifest_document(path)
    return dict(manifest.provenance or {}), manifest_ranges(manifest, path=path)


def ranges_from_text(text: str, *, path: str | Path) -> tuple[dict[str, Any], list[ManifestEntry]]:
    """(provenance mapping, typed entries) of manifest text."""
    manifest = parse_manifest_text(text, path=path)
    return dict(manifest.provenance or {}), manifest_ranges(manifest, path=path)


def lookup(entries: Sequence[Any], *, m: int, n: int, k: int) -> Any | None:
    """The entry a table gives (M, N, K): the first with equal N and K whose [M, M_END) holds m, or None."""
    index = covering_index(entries, m=m, n=n, k=k)
    return None if index is None else entries[index]
