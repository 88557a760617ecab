"""Codegen's rendering: snippets into regions, regions into target text (Modular tuning_codegen parity).

Snippets with ``[@NAME]`` placeholders are rendered once per manifest entry (``# Automatically generated
from [LABEL]``, ``# index: [i]``, the snippet, a trailing comma, indented 8 spaces) and the region replaces
the text between two marker lines of a target, the rest kept byte for byte. tunetable adds a provenance
line (only when the manifest carries a ``provenance:`` mapping), the ``BUILDS`` region and the shape
selectors' ``SELECTOR_FILES`` records, literals only. Nothing here reads or writes a file.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.kernels.jit import canonical_json, sha256_text
from tunetable.manifest import UNKNOWN

PLACEHOLDER = re.compile(r"\[@([A-Za-z_][A-Za-z0-9_]*)\]")
LINE_BREAK = re.compile(r"\r\n|\r|\n")
DEFAULT_INDENT = " " * 8
PARAMS_HASH_LENGTH = 12


def check_comment_text(value: Any, *, what: str, path: str | Path | None) -> None:
    """Text written into a generated comment line must be printable on one line (no NUL, no line break)."""
    if not str(value).isprintable():
        raise TuneTableError(f"{what} {str(value)!r} holds characters that cannot go into a comment line "
                             "(control characters or line breaks)", path=path)


def format_value(value: Any) -> str:
    """Format a manifest value for a snippet: True/False, None, else str(value)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "None"
    return str(value)


def render_snippet(snippet: str, parameters: Mapping[str, Any], *, indent: str = "") -> str:
    """Substitute ``[@NAME]`` placeholders, strip trailing whitespace, indent non-empty lines."""
    missing = sorted({name for name in PLACEHOLDER.findall(snippet) if name not in parameters})
    if missing:
        raise TuneTableError(f"Missing snippet parameters: {', '.join(missing)}")
    text = PLACEHOLDER.sub(lambda match: format_value(parameters[match.group(1)]), snippet).rstrip()
    return "\n".join(f"{indent}{line}" if line else line for line in text.splitlines())


def params_hash(parameters: Sequence[Mapping[str, Any]]) -> str:
    """Short sha256 of the merged entries (canonical JSON): insensitive to YAML layout and comments."""
    return sha256_text(canonical_json([dict(entry) for entry in parameters]))[:PARAMS_HASH_LENGTH]


GENERATED_LINE_LIMIT = 120   # the project's line length (pyproject's ruff), which the generated file keeps too


def _one_line(value: Any) -> str:
    """A value as codegen renders it, with its whitespace collapsed onto one line."""
    return " ".join(format_value(value).split())


def provenance_comment(
    *, provenance: Mapping[str, Any], parameters: Sequence[Mapping[str, Any]], source_label: str, indent: str
) -> str:
    """The region's first line: manifest label, params hash, device and date of the measurement."""
    device = _one_line(provenance.get("device", UNKNOWN))
    date = _one_line(provenance.get("date", UNKNOWN))
    head = f"{indent}# Provenance: [{source_label}] params sha256:{params_hash(parameters)}, "
    tail = f"device: {device}, date: {date}"
    if len(head) + len(tail) <= GENERATED_LINE_LIMIT:
        return head + tail
    # A long device name (another device's table) goes on a comment line of its own: lines stay within ruff's limit.
    return f"{head.rstrip()}\n{indent}# {tail}"


def _entry_snippet(
    entry: Mapping[str, Any], index: int, *, snippet: str, snippet_variants: Mapping[str, str]
) -> str:
    """The snippet an entry renders with: its ``_template`` variant, else the default snippet."""
    template = entry.get("_template")
    if template is None:
        return snippet
    if not isinstance(template, str):
        raise TuneTableError(f"params[{index}]._template must be a string")
    if template not in snippet_variants:
        raise TuneTableError(f"params[{index}] references unknown template '{template}'")
    return snippet_variants[template]


def render_region(
    parameters: Sequence[Mapping[str, Any]],
    snippet: str,
    *,
    source_label: str,
    snippet_variants: Mapping[str, str] | None = None,
    indent: str = DEFAULT_INDENT,
    provenance: Mapping[str, Any] | None = None,
    manifest_path: str | Path | None = None,
    hashed: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """Render every entry (header comments, snippet, trailing comma), joined by newlines.

    ``hashed``: the manifest's entries the provenance line hashes, when ``parameters`` are their literals.
    """
    variants = snippet_variants or {}
    check_comment_text(source_label, what="source label", path=manifest_path)
    pieces = []
    if provenance is not None:
        for key in ("device", "date"):
            check_comment_text(_one_line(provenance.get(key, UNKNOWN)), what=f"provenance.{key}", path=manifest_path)
        pieces.append(
            provenance_comment(provenance=provenance, parameters=parameters if hashed is None else hashed,
                               source_label=source_label, indent=indent)
        )
    for index, entry in enumerate(parameters):
        try:
            body = render_snippet(
                _entry_snippet(entry, index, snippet=snippet, snippet_variants=variants), entry, indent=indent
            )
        except TuneTableError as exc:
            where = None if str(exc).startswith(f"params[{index}]") else f"params[{index}]"
            raise TuneTableError(str(exc), path=manifest_path, where=where) from None
        pieces.append(
            f"{indent}# Automatically generated from [{source_label}]\n{indent}# index: [{index}]\n{body},"
        )
    return "\n".join(pieces)


def _string_literal(text: str) -> str:
    """A str as a double-quoted Python literal (JSON's escaping is Python's): data never becomes code."""
    return json.dumps(str(text))


def optional_string_literal(text: str | None) -> str:
    """None, or a str as a double-quoted Python literal (``_string_literal``)."""
    return "None" if text is None else _string_literal(text)


def render_builds_region(job: Any, *, indent: str = "    ") -> str:
    """One ``"<table>": TableBuild(...)`` item per table (two lines), literals only, after a provenance comment."""
    check_comment_text(job.source_label, what="source label", path=job.target_path)
    lines = [f"{indent}# Automatically generated from [{job.source_label}]: each table's family and arch, "
             "compile.nvcc_flags"]
    for item in job.lines:
        flags = ", ".join(_string_literal(flag) for flag in item.nvcc_flags)
        flags = f"({flags},)" if len(item.nvcc_flags) == 1 else f"({flags})"
        lines.append(f"{indent}{_string_literal(item.table)}: TableBuild(")
        lines.append(f"{indent * 2}family={_string_literal(item.family)}, arch={_string_literal(item.arch)}, "
                     f"nvcc_flags={flags}),")
    return "\n".join(lines)


# The DEVICES region of the builds target (beside BUILDS): params.yaml's devices and the recorded ones.
DEVICES_BEGIN_MARKER = "BEGIN-TUNING-DEVICES"
DEVICES_END_MARKER = "END-TUNING-DEVICES"


def _optional_literal(value: object) -> str:
    """None, an int or a float as a Python literal."""
    return "None" if value is None else repr(int(value)) if type(value) is int else repr(float(value))  # type: ignore[arg-type]


def render_devices_region(job: Any, *, measured_on: Mapping[str, str | None] | None = None,
                          indent: str = "    ") -> str:
    """``DEVICES`` (one ``"<device>": DeviceSpec(...)`` per declared device), ``RECORDED_DEVICES`` and the GPU the
    first one's tables were measured on (``measured_on``, by device): literals only."""
    check_comment_text(job.source_label, what="source label", path=job.target_path)
    lines = [f"# Automatically generated from [{job.source_label}]: the devices, how each is recognised, its "
             "fallbacks, its ceilings",
             "DEVICES: dict[str, DeviceSpec] = {"]
    for spec in job.devices:
        fallback = ", ".join(_string_literal(other) for other in spec.fallback)
        fallback = f"({fallback},)" if len(spec.fallback) == 1 else f"({fallback})"
        match = spec.match
        lines.append(f"{indent}{_string_literal(spec.key)}: DeviceSpec(")
        lines.append(f"{indent * 2}key={_string_literal(spec.key)}, arch={_string_literal(spec.arch)}, "
                     f"fallback={fallback},")
        lines.append(f"{indent * 2}match=DeviceMatch(name={_string_literal(match.name)}, "
                     f"sm_count={_optional_literal(match.sm_count)}, "
                     f"min_memory_gib={_optional_literal(match.min_memory_gib)}, "
                     f"max_memory_gib={_optional_literal(match.max_memory_gib)}),")
        ceilings = spec.ceilings
        lines.append(f"{indent * 2}ceilings=None)," if ceilings is None else
                     f"{indent * 2}ceilings=Ceilings(copy_tb_s={float(ceilings.copy_tb_s)!r}, "
                     f"tflops={float(ceilings.tflops)!r})),")
    recorded = ", ".join(_string_literal(key) for key in job.recorded)
    recorded = f"({recorded},)" if len(job.recorded) == 1 else f"({recorded})"
    measured = optional_string_literal((measured_on or {}).get(job.recorded[0]) if job.recorded else None)
    lines += ["}", "# The devices whose tables this file holds; the first one's are TABLES, DISPATCH and "
              "SELECTOR_FILES.", f"RECORDED_DEVICES: tuple[str, ...] = {recorded}",
              "# The GPU the first one's tables were measured on (their manifests' provenance; each other's: its "
              "DEVICE_TABLES entry).", f"PRIMARY_MEASURED_ON: str | None = {measured}"]
    return "\n".join(lines)


def _pieces(text: str, *, width: int = 72) -> list[str]:
    """A long text cut at spaces into pieces of about ``width`` characters (adjacent literals join them back)."""
    pieces = [""]
    for word in text.split(" "):
        if pieces[-1] and len(pieces[-1]) + len(word) >= width:
            pieces.append("")
        pieces[-1] += word + " "
    pieces[-1] = pieces[-1][:-1]
    return pieces


def render_selector_region(*, name: str, path: str, sha256: str, candidates: int,
                           provenance: Sequence[tuple[str, str | int]], source_label: str,
                           indent: str = "    ") -> str:
    """One ``"<selector>": SelectorFile(...)`` item: the data file's path, sha256, candidates and provenance."""
    check_comment_text(source_label, what="source label", path=path)
    rows = []
    for key, value in provenance:
        head = f"{indent * 3}({_string_literal(key)}, "
        pieces = [str(value)] if type(value) is int else [_string_literal(p) for p in _pieces(str(value))]
        rows += [head + pieces[0], *(" " * len(head) + piece for piece in pieces[1:])]
        rows[-1] += "),"
    lines = [f"{indent}# Automatically generated from [{source_label}]: its sha256, candidates and provenance",
             f"{indent}{_string_literal(name)}: SelectorFile(",
             f"{indent * 2}path={_string_literal(path)},",
             f"{indent * 2}sha256={_string_literal(sha256)},",
             f"{indent * 2}candidates={int(candidates)},",
             f"{indent * 2}provenance=(", *rows, f"{indent * 2}),",
             f"{indent}),"]
    return "\n".join(lines)


def marker_line(lines: Sequence[str], marker: str, *, kind: str, path: str | Path | None) -> int:
    """The 0-based index of the one line holding ``marker`` (Modular's error when not exactly one)."""
    hits = [number for number, line in enumerate(lines) if marker in line]
    if len(hits) != 1:
        raise TuneTableError(f"Expected exactly one {kind} marker: {marker}", path=path)
    return hits[0]


def replace_generated_region(
    source: str, *, begin_marker: str, end_marker: str, generated: str, path: str | Path | None = None
) -> str:
    """Replace the lines strictly between the begin and end marker lines; keep the rest byte for byte.

    The region takes the begin marker line's line ending, so a CRLF target stays CRLF throughout.
    """
    lines = source.splitlines(keepends=True)
    begin = marker_line(lines, begin_marker, kind="begin", path=path)
    end = marker_line(lines, end_marker, kind="end", path=path)
    if begin >= end:
        raise TuneTableError("The begin marker must precede the end marker", path=path)
    newline = line_ending(lines[begin])
    region = generated if newline == "\n" else LINE_BREAK.sub(newline, generated)
    return "".join(lines[: begin + 1]) + region + newline + "".join(lines[end:])


def line_ending(line: str) -> str:
    """A line's terminator (``\\r\\n``, ``\\n`` or ``\\r``); ``\\n`` for a line without one."""
    for ending in ("\r\n", "\n", "\r"):
        if line.endswith(ending):
            return ending
    return "\n"


def parse_snippet_variants(values: Sequence[str]) -> dict[str, str]:
    """Parse repeated ``NAME=PATH`` flags (split at the first '='); reject empty sides and duplicates."""
    variants: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise TuneTableError(f"Invalid --snippet-variant '{value}'; expected NAME=PATH")
        if name in variants:
            raise TuneTableError(f"Duplicate snippet variant '{name}'")
        variants[name] = path
    return variants


def unified_diff(*, current: str, generated: str, label: str) -> str:
    """The ``--check`` diff: target vs ``<target> (generated)``, lines joined by newlines."""
    return "\n".join(
        difflib.unified_diff(
            current.splitlines(), generated.splitlines(), fromfile=label, tofile=f"{label} (generated)", lineterm=""
        )
    )
