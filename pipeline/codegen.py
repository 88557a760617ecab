"""Generate deterministic tuning-table regions from YAML manifests (Modular tuning_codegen parity).

The pure core: snippets with ``[@NAME]`` placeholders are rendered once per manifest entry and
the result replaces the text between two marker lines of a target file. Output is byte-identical
to Modular's ``tuning_codegen`` for the same manifest, snippet and flags; tunetable adds a
provenance line (only when the manifest carries a ``provenance:`` mapping) and an overlap check.
Errors are ``TuneTableError`` with Modular's message text, prefixed by the file they concern.
Nothing here writes a file: ``generate_target`` returns the new text.

A table declared in params.yaml (``--all``, ``--table``, or the six flags naming a declared table's
target and markers) is *typed*: every manifest value is checked against the table's declared
fields before anything is rendered (``EntryFields``: integers in their ranges with ``M < M_END``,
booleans, strings from a known set, ``CONFIG_ID`` the id of the entry's tunables, rows of numbers)
and every string field sits between quotes in the snippet, so the generated code holds literals
only and no manifest text ever becomes code. A shape selector's entries are typed per family (their
``_template``). Manifests of tables tunetable does not declare keep Modular's
semantics (values inserted verbatim), byte for byte.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.grid import normalise_groups
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import ENTRY_FIELDS
from tunetable.keys import canonical_json, sha256_text

# The one manifest loader; Modular's load_manifest / validate_manifest are part of codegen's API (re-exported).
from tunetable.manifest import (  # noqa: F401
    Manifest,
    load_manifest,
    load_manifest_document,
    validate_manifest,
)
from tunetable.manifest import read_text as _read_text
from tunetable.params import (
    DispatchSpec,
    SelectorSpec,
    TableSpec,
    builds_spec,
    dispatch_spec,
    selector_spec,
    table_spec,
)

PLACEHOLDER = re.compile(r"\[@([A-Za-z_][A-Za-z0-9_]*)\]")
LINE_BREAK = re.compile(r"\r\n|\r|\n")
DEFAULT_INDENT = " " * 8
PARAMS_HASH_LENGTH = 12
# Longest M / M_END expression the overlap check will evaluate (bounds the work on odd input).
MAX_EXPRESSION_CHARS = 200


@dataclass(frozen=True)
class Overlap:
    """Two entries of one (N, K) whose [M, M_END) ranges intersect: the later one is shadowed."""

    first: int
    second: int
    n: Any
    k: Any
    first_range: tuple[int, int]
    second_range: tuple[int, int]

    def message(self) -> str:
        """One line naming both entries, the shape and the shadowed M interval."""
        lo = max(self.first_range[0], self.second_range[0])
        hi = min(self.first_range[1], self.second_range[1])
        return (
            f"params[{self.second}] [M, M_END) = [{self.second_range[0]}, {self.second_range[1]}) "
            f"overlaps params[{self.first}] [{self.first_range[0]}, {self.first_range[1]}) "
            f"for N={self.n}, K={self.k}; with first-match lookup params[{self.second}] is "
            f"shadowed for M in [{lo}, {hi})"
        )


@dataclass(frozen=True)
class OverlapReport:
    """Result of the overlap check: the overlaps found and entries that could not be checked."""

    overlaps: tuple[Overlap, ...] = ()
    notes: tuple[str, ...] = ()


INT32_MAX = 2**31 - 1
MAX_ROWS = 10_000                           # rows of one tuple field (bounds the work on odd input)
CONFIG_ID = re.compile(r"^c[0-9a-f]{10}$")  # tunetable.config.KernelConfig.id
EXTRA_KEYS = ("_template",)                 # a key codegen reads that is no field of the entry


@dataclass(frozen=True)
class Field:
    """One declared field of a table entry: its manifest key, type and allowed values."""

    name: str                       # as in the manifest and the snippet (UPPER_CASE)
    kind: type                      # int, bool, str, or tuple (rows of numbers, ``row`` their types)
    low: int = 0
    high: int = INT32_MAX
    choices: tuple[str, ...] = ()   # a str field's known strings (CONFIG_ID: its pattern instead)
    row: tuple[type, ...] = ()      # a tuple field: each row's element types (int >= 1, or finite float)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a value of this field, or None."""
        if self.kind is tuple:
            return self._rows_problem(value)
        if self.kind is bool:
            return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return f"expected an integer, got {value!r}"
            if not self.low <= value <= self.high:
                return f"{value} is outside [{self.low}, {self.high}]"
            return None
        if not isinstance(value, str):
            return f"expected a string, got {value!r}"
        if self.name == "CONFIG_ID" and not self.choices:
            return None if CONFIG_ID.match(value) else f"{value!r} is not a configuration id (c + 10 hex digits)"
        if value not in self.choices:
            return f"{value!r} is not one of {', '.join(self.choices)}"
        return None

    def _rows_problem(self, value: Any) -> str | None:
        """Why ``value`` is not a sequence of rows of ``row``'s types (at most MAX_ROWS), or None."""
        if not isinstance(value, (list, tuple)):
            return f"expected a list of rows, got {value!r}"
        if len(value) > MAX_ROWS:
            return f"{len(value)} rows (at most {MAX_ROWS})"
        for number, row in enumerate(value):
            if not isinstance(row, (list, tuple)) or len(row) != len(self.row):
                return f"row {number}: expected {len(self.row)} numbers, got {row!r}"
            for item, kind in zip(row, self.row):
                integer = type(item) is int
                if kind is int and not (integer and 1 <= item <= INT32_MAX):
                    return f"row {number}: expected an integer in [1, {INT32_MAX}], got {item!r}"
                if kind is float and not (integer or (type(item) is float and math.isfinite(item))):
                    return f"row {number}: expected a finite number, got {item!r}"
        return None

    def literal(self, value: Any) -> Any:
        """The value as the snippet receives it: a tuple field as a tuple literal, one row per line."""
        if self.kind is not tuple:
            return value
        rows = [f"        ({', '.join(repr(kind(item)) for item, kind in zip(row, self.row))})," for row in value]
        return "(\n" + "\n".join(rows) + "\n    )" if rows else "()"


@dataclass(frozen=True)
class EntryFields:
    """The declared fields of a table's (or dispatch list's) entries, which every manifest entry must hold."""

    label: str                                  # "table gemm_mma", "dispatch list gemm_dispatch"
    fields: tuple[Field, ...]
    family: str | None = None                   # a table: CONFIG_ID is the id of its tunables in this family
    tunables: tuple[str, ...] = ()
    table_families: Mapping[str, str] = field(default_factory=dict)  # a dispatch list: TABLE -> its family

    def by_name(self) -> dict[str, Field]:
        """The fields by manifest key."""
        return {item.name: item for item in self.fields}


def _shape_fields() -> list[Field]:
    """M, M_END, N, K: int32, M >= 1, and M < M_END (checked per entry)."""
    return [Field("M", int, low=1, high=INT32_MAX - 1), Field("M_END", int, low=2), Field("N", int, low=1),
            Field("K", int, low=1)]


def _python_type(annotation: Any) -> type:
    """int, bool or str from a dataclass field's type (annotations may be strings)."""
    names = {"int": int, "bool": bool, "str": str}
    resolved = names.get(annotation, annotation) if isinstance(annotation, str) else annotation
    if resolved not in (int, bool, str):
        raise TypeError(f"a table entry field of type {annotation!r} (codegen renders int, bool and str)")
    return resolved


def table_fields(spec: TableSpec) -> EntryFields:
    """A table's entry fields: the family's entry class when it has a folder, else its grid's parameters."""
    fields = [*_shape_fields(), Field("KERNEL", str, choices=(spec.family,)), Field("CONFIG_ID", str)]
    family = FAMILIES.get(spec.family)
    if family is not None:
        tunables = [(item.name.upper(), _python_type(item.type)) for item in dataclasses.fields(family.entry_type)
                    if item.name not in ENTRY_FIELDS]
    else:
        values: dict[str, list[Any]] = {}
        for _, group in normalise_groups(spec.grid, path="params.yaml", table=spec.name):
            for name, items in group.items():
                values.setdefault(name.upper(), []).extend(items)
        tunables = [(name, _grid_type(items)) for name, items in values.items()]
    fields += [Field(name, kind, choices=_string_values(spec, name) if kind is str else ()) for name, kind in tunables]
    return EntryFields(label=f"table {spec.name}", fields=tuple(fields), family=spec.family,
                       tunables=tuple(name for name, _ in tunables))


def _grid_type(values: Sequence[Any]) -> type:
    """The one type of a grid parameter's values (bool, int or str)."""
    kinds = {bool if isinstance(v, bool) else int if isinstance(v, int) else str for v in values}
    return kinds.pop() if len(kinds) == 1 else str


def _string_values(spec: TableSpec, name: str) -> tuple[str, ...]:
    """The strings a string tunable takes in the table's grid."""

    found = [str(v) for _, group in normalise_groups(spec.grid, path="params.yaml", table=spec.name)
             for key, items in group.items() if key.upper() == name for v in items]
    return tuple(dict.fromkeys(found))


def dispatch_fields(spec: DispatchSpec, *, families: Mapping[str, str]) -> EntryFields:
    """A dispatch list's entry fields: the shape, TABLE (one of its tables), KERNEL (that table's family)."""
    tables = tuple(spec.tables)
    kernels = tuple(dict.fromkeys(families[table] for table in tables))
    fields = [*_shape_fields(), Field("KERNEL", str, choices=kernels), Field("TABLE", str, choices=tables),
              Field("CONFIG_ID", str)]
    return EntryFields(label=f"dispatch list {spec.name}", fields=tuple(fields),
                       table_families={table: families[table] for table in tables})


def selector_fields(spec: SelectorSpec, *, families: Mapping[str, str]) -> dict[str, EntryFields]:
    """A shape selector's entry fields per family (the entry's ``_template``): its range, candidate and terms."""
    found = {}
    for family in dict.fromkeys(families[table] for table in spec.tables):
        tables = tuple(table for table in spec.tables if families[table] == family)
        terms = (int, int, float, float, float, float)
        fields = [Field("M", int, low=1, high=INT32_MAX - 1), Field("M_END", int, low=2), Field("RANK", int),
                  Field("TABLE", str, choices=tables), Field("KERNEL", str, choices=(family,)), Field("CONFIG_ID", str),
                  Field("REGISTERS", int), Field("SMEM_BYTES", int), Field("BIAS_TERMS", tuple, row=terms),
                  Field("CUBLAS_TERMS", tuple, row=terms), Field("CELLS", tuple, row=(int, int, int))]
        tunables = [(item.name.upper(), _python_type(item.type))
                    for item in dataclasses.fields(FAMILIES[family].entry_type) if item.name not in ENTRY_FIELDS]
        fields += [Field(name, kind) for name, kind in tunables]
        found[family] = EntryFields(label=f"selector {spec.name} ({family} entries)", fields=tuple(fields),
                                    family=family, tunables=tuple(name for name, _ in tunables))
    return found


def check_variant_entries(entries: Sequence[Mapping[str, Any]], *, fields: Mapping[str, EntryFields],
                          path: str | Path) -> None:
    """Every entry names one of the typed ``_template``s and holds exactly its fields; else one error line."""
    for index, entry in enumerate(entries):
        template = entry.get("_template")
        if template not in fields:
            raise TuneTableError(f"_template {template!r} is not one of {', '.join(fields)}", path=path,
                                 where=f"params[{index}]")
        check_entries([entry], fields=fields[template], path=path, first=index)


def literal_entries(entries: Sequence[Mapping[str, Any]], *,
                    fields: EntryFields | Mapping[str, EntryFields]) -> list[dict[str, Any]]:
    """Checked entries with each value as its snippet receives it (``Field.literal``)."""
    found = []
    for entry in entries:
        declared = (fields if isinstance(fields, EntryFields) else fields[entry["_template"]]).by_name()
        found.append({key: declared[key].literal(value) if key in declared else value for key, value in entry.items()})
    return found


def check_entries(entries: Sequence[Mapping[str, Any]], *, fields: EntryFields, path: str | Path,
                  first: int = 0) -> None:
    """Every entry holds exactly the declared fields, each a value of its type and range; else one error line.

    ``first``: the index of the first entry in its manifest (the errors name it).
    """

    declared = fields.by_name()
    names = ", ".join(declared)
    for index, entry in enumerate(entries, start=first):
        where = f"params[{index}]"
        unknown = [key for key in entry if key not in declared and key not in EXTRA_KEYS]
        if unknown:
            raise TuneTableError(f"{unknown[0]}: not a field of {fields.label} (fields: {names})", path=path,
                                 where=where)
        missing = [name for name in declared if name not in entry]
        if missing:
            raise TuneTableError(f"lacks {', '.join(missing)} (fields of {fields.label}: {names})", path=path,
                                 where=where)
        for name, item in declared.items():
            problem = item.problem(entry[name])
            if problem:
                raise TuneTableError(f"{name}: {problem}", path=path, where=where)
        if "M_END" in declared and entry["M"] >= entry["M_END"]:
            raise TuneTableError(f"[M, M_END) = [{entry['M']}, {entry['M_END']}) is empty: M must be below M_END",
                                 path=path, where=where)
        if fields.family is not None:
            expected = KernelConfig(family=fields.family, params=tuple((n, entry[n]) for n in fields.tunables)).id
            if entry["CONFIG_ID"] != expected:
                raise TuneTableError(f"CONFIG_ID {entry['CONFIG_ID']} is not the id of the entry's tunables "
                                     f"({expected})", path=path, where=where)
        if fields.table_families and entry["KERNEL"] != fields.table_families[entry["TABLE"]]:
            raise TuneTableError(f"KERNEL {entry['KERNEL']} is not the family of table {entry['TABLE']} "
                                 f"({fields.table_families[entry['TABLE']]})", path=path, where=where)


def check_snippet(snippet: str, *, fields: EntryFields, path: str | Path) -> None:
    """A typed table's snippet names declared fields only, and each string field between quotes."""
    declared = fields.by_name()
    for match in PLACEHOLDER.finditer(snippet):
        name = match.group(1)
        if name not in declared:
            raise TuneTableError(f"[@{name}] is not a field of {fields.label} (fields: {', '.join(declared)})",
                                 path=path)
        before, after = snippet[match.start() - 1: match.start()], snippet[match.end(): match.end() + 1]
        if declared[name].kind is str and not (before == after and before in ("'", '"')):
            raise TuneTableError(f"[@{name}] is a string field: write it between quotes, so that it renders as a "
                                 "string literal", path=path)


def check_comment_text(value: Any, *, what: str, path: str | Path | None) -> None:
    """Text written into a generated comment line must be printable on one line (no NUL, no line break)."""
    if not str(value).isprintable():
        raise TuneTableError(f"{what} {str(value)!r} holds characters that cannot go into a comment line "
                             "(control characters or line breaks)", path=path)


@dataclass(frozen=True)
class TableJob:
    """Everything needed to render one table into its target (flags or a params.yaml table)."""

    manifest_path: Path
    snippet_path: Path
    target_path: Path
    begin_marker: str
    end_marker: str
    source_label: str
    snippet_variant_paths: dict[str, Path] = field(default_factory=dict)
    name: str | None = None
    fields: EntryFields | None = None      # a declared table's fields: its values are typed before rendering
    variant_fields: Mapping[str, EntryFields] | None = None   # a selector's: per ``_template``


@dataclass(frozen=True)
class TableResult:
    """One table rendered: its region and the overlap check over its manifest."""

    job: TableJob
    region: str
    overlaps: OverlapReport


@dataclass(frozen=True)
class TargetResult:
    """One target file: its current text, the regenerated text and the tables rendered into it."""

    target_path: Path
    label: str
    current: str
    generated: str
    tables: tuple[TableResult, ...]
    builds: tuple["BuildsJob", ...] = ()

    @property
    def stale(self) -> bool:
        """True when the file on disk differs from what codegen would write."""
        return self.current != self.generated


@dataclass(frozen=True)
class TableBuildLine:
    """One table's build settings as the runtime reads them: family, arch, nvcc flags."""

    table: str
    family: str
    arch: str
    nvcc_flags: tuple[str, ...]


@dataclass(frozen=True)
class BuildsJob:
    """The ``BUILDS`` region of a generated file: how the runtime compiles each table (params.yaml ``builds:``)."""

    target_path: Path
    begin_marker: str
    end_marker: str
    source_label: str
    lines: tuple[TableBuildLine, ...]


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


def _one_line(value: Any) -> str:
    """A value as codegen renders it, with its whitespace collapsed onto one line."""
    return " ".join(format_value(value).split())


def provenance_comment(
    *, provenance: Mapping[str, Any], parameters: Sequence[Mapping[str, Any]], source_label: str, indent: str
) -> str:
    """The region's first line: manifest label, params hash, device and date of the measurement."""
    device = _one_line(provenance.get("device", "unknown"))
    date = _one_line(provenance.get("date", "unknown"))
    return (
        f"{indent}# Provenance: [{source_label}] params sha256:{params_hash(parameters)}, "
        f"device: {device}, date: {date}"
    )


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
            check_comment_text(_one_line(provenance.get(key, "unknown")), what=f"provenance.{key}", path=manifest_path)
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


def render_builds_region(job: BuildsJob, *, indent: str = "    ") -> str:
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


_INT_BINOPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}
_INT_UNARYOPS = {ast.USub: int.__neg__, ast.UAdd: int.__pos__}


def _int_node(node: ast.AST) -> int:
    """The value of an expression node of int literals, + - * // and unary signs; ValueError otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_BINOPS:
        return _INT_BINOPS[type(node.op)](_int_node(node.left), _int_node(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _INT_UNARYOPS:
        return _INT_UNARYOPS[type(node.op)](_int_node(node.operand))
    raise ValueError(f"unsupported syntax {type(node).__name__}")


def int_value(value: Any) -> int | None:
    """An int, or a string of int literals with + - * // and parentheses (ast whitelist, never eval)."""
    if type(value) is int:
        return value
    if not isinstance(value, str) or len(value) > MAX_EXPRESSION_CHARS:
        return None
    try:
        return _int_node(ast.parse(value.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _unevaluable(index: int, key: str, value: Any) -> str:
    """The note for an entry value that is not an integer expression (skipped in the overlap check)."""
    return f"params[{index}]: {key} {value!r} is not an integer expression; skipped in the overlap check"


def _entry_range(entry: Mapping[str, Any], index: int) -> tuple[tuple[int, int] | None, str | None]:
    """An entry's [M, M_END) range (M_END absent: exactly M), or a note why it cannot be checked."""
    if "M" not in entry:
        return None, None
    m = int_value(entry["M"])
    if m is None:
        return None, _unevaluable(index, "M", entry["M"])
    if entry.get("M_END") is None:
        return (m, m + 1), None
    m_end = int_value(entry["M_END"])
    if m_end is None:
        return None, _unevaluable(index, "M_END", entry["M_END"])
    return (m, m_end), None


def find_overlaps(parameters: Sequence[Mapping[str, Any]]) -> OverlapReport:
    """Entries with equal N and K whose [M, M_END) ranges intersect, in manifest order."""
    overlaps: list[Overlap] = []
    notes: list[str] = []
    seen: dict[tuple[str, str], list[tuple[int, tuple[int, int]]]] = {}
    for index, entry in enumerate(parameters):
        if "N" not in entry or "K" not in entry:
            continue
        span, note = _entry_range(entry, index)
        if note:
            notes.append(note)
        if span is None or span[0] >= span[1]:
            continue
        shape = (repr(entry["N"]), repr(entry["K"]))
        for earlier, earlier_span in seen.get(shape, []):
            if span[0] < earlier_span[1] and earlier_span[0] < span[1]:
                overlaps.append(
                    Overlap(
                        first=earlier, second=index, n=entry["N"], k=entry["K"],
                        first_range=earlier_span, second_range=span,
                    )
                )
        seen.setdefault(shape, []).append((index, span))
    return OverlapReport(overlaps=tuple(overlaps), notes=tuple(notes))


def render_table(job: TableJob) -> TableResult:
    """Read a table's manifest and snippets and render its region (no target involved)."""
    manifest = load_manifest_document(job.manifest_path)
    snippet = _read_text(job.snippet_path)
    variants = {name: _read_text(path) for name, path in job.snippet_variant_paths.items()}
    rendered = manifest.params
    if job.fields is not None:
        check_snippet(snippet, fields=job.fields, path=job.snippet_path)
        for name, path in job.snippet_variant_paths.items():
            check_snippet(variants[name], fields=job.fields, path=path)
        check_entries(manifest.params, fields=job.fields, path=job.manifest_path)
        rendered = literal_entries(manifest.params, fields=job.fields)
    elif job.variant_fields is not None:
        for name, path in job.snippet_variant_paths.items():
            if name not in job.variant_fields:
                raise TuneTableError(f"snippet variant {name} is no family of the selector's tables "
                                     f"({', '.join(job.variant_fields)})", path=path)
            check_snippet(variants[name], fields=job.variant_fields[name], path=path)
        check_variant_entries(manifest.params, fields=job.variant_fields, path=job.manifest_path)
        rendered = literal_entries(manifest.params, fields=job.variant_fields)
    region = render_region(
        rendered,
        snippet,
        source_label=job.source_label,
        snippet_variants=variants,
        provenance=manifest.provenance,
        manifest_path=job.manifest_path,
        hashed=manifest.params,
    )
    return TableResult(job=job, region=region, overlaps=find_overlaps(manifest.params))


def generate_target(
    *,
    manifest_path: str | Path,
    snippet_path: str | Path,
    target_path: str | Path,
    begin_marker: str,
    end_marker: str,
    source_label: str,
    snippet_variant_paths: Mapping[str, str | Path] | None = None,
) -> str:
    """Return the target's full text with the region regenerated (Modular's ``generate_target``)."""
    job = TableJob(
        manifest_path=Path(manifest_path),
        snippet_path=Path(snippet_path),
        target_path=Path(target_path),
        begin_marker=begin_marker,
        end_marker=end_marker,
        source_label=source_label,
        snippet_variant_paths={name: Path(p) for name, p in (snippet_variant_paths or {}).items()},
    )
    return generate_targets(jobs=[job])[0].generated


def _check_distinct_markers(tables: Sequence[TableResult], *, target_path: Path) -> None:
    """Tables sharing a target must not share a marker (the second would overwrite the first)."""
    owner: dict[str, str] = {}
    for table in tables:
        for marker in (table.job.begin_marker, table.job.end_marker):
            name = str(table.job.name)
            if marker in owner and owner[marker] != name:
                raise TuneTableError(
                    f"tables {owner[marker]} and {name} both use the marker {marker}", path=target_path
                )
            owner[marker] = name


def generate_targets(*, jobs: Sequence[TableJob], builds: Sequence[BuildsJob] = ()) -> list[TargetResult]:
    """Render every job; regions of jobs sharing a target apply to that target's text in job order,
    then its ``BUILDS`` region (``builds``)."""
    by_target: dict[Path, tuple[Path, list[TableResult], list[BuildsJob]]] = {}
    for job in jobs:
        by_target.setdefault(job.target_path.resolve(), (job.target_path, [], []))[1].append(render_table(job))
    for build in builds:
        by_target.setdefault(build.target_path.resolve(), (build.target_path, [], []))[2].append(build)
    results = []
    for target_path, tables, build_jobs in by_target.values():
        _check_distinct_markers(tables, target_path=target_path)
        current = _read_text(target_path, keep_newlines=True)
        text = current
        for table in tables:
            text = replace_generated_region(
                text,
                begin_marker=table.job.begin_marker,
                end_marker=table.job.end_marker,
                generated=table.region,
                path=target_path,
            )
        for build in build_jobs:
            text = replace_generated_region(text, begin_marker=build.begin_marker, end_marker=build.end_marker,
                                            generated=render_builds_region(build), path=target_path)
        results.append(
            TargetResult(
                target_path=target_path, label=str(target_path), current=current, generated=text,
                tables=tuple(tables), builds=tuple(build_jobs),
            )
        )
    return results


def unified_diff(*, current: str, generated: str, label: str) -> str:
    """The ``--check`` diff: target vs ``<target> (generated)``, lines joined by newlines."""
    return "\n".join(
        difflib.unified_diff(
            current.splitlines(), generated.splitlines(), fromfile=label, tofile=f"{label} (generated)", lineterm=""
        )
    )


def jobs_from_params(
    *, params: Mapping[str, Any], params_path: str | Path, names: Sequence[str] | None = None
) -> list[TableJob]:
    """A TableJob per table, dispatch list and selector declared in params.yaml (or only ``names``), tables first.

    Paths resolve from params.yaml's folder.
    """
    root = Path(params_path).parent
    tables = params.get("tables") or {}
    dispatches = params.get("dispatch") or {}
    selectors = params.get("selector") or {}
    selected = list(names) if names else [*tables, *dispatches, *selectors]
    families = {table: str(raw["family"]) for table, raw in tables.items()}
    jobs = []
    for name in selected:
        variant_fields = None
        if name in dispatches and name not in tables:
            declared = dispatch_spec(dict(params), name, path=params_path)
            fields = dispatch_fields(declared, families=families)
        elif name in selectors and name not in tables:
            declared = selector_spec(dict(params), name, path=params_path)
            fields = None
            variant_fields = selector_fields(declared, families=families)
        else:
            declared = table_spec(dict(params), name, path=params_path)
            fields = table_fields(declared)
        spec = declared.codegen
        jobs.append(
            TableJob(
                manifest_path=root / spec.manifest,
                snippet_path=root / spec.snippet,
                target_path=root / spec.target,
                begin_marker=spec.begin_marker,
                end_marker=spec.end_marker,
                source_label=spec.source_label,
                snippet_variant_paths={variant: root / path for variant, path in spec.variants.items()},
                name=name,
                fields=fields,
                variant_fields=variant_fields,
            )
        )
    return jobs


def builds_job_from_params(*, params: Mapping[str, Any], params_path: str | Path) -> BuildsJob | None:
    """The ``BUILDS`` region params.yaml's ``builds:`` declares (every table's family, arch and the nvcc
    flags), or None when it declares none. Paths resolve from params.yaml's folder."""
    spec = builds_spec(dict(params), path=params_path)
    if spec is None:
        return None
    flags = tuple(str(flag) for flag in (params.get("compile") or {}).get("nvcc_flags") or ())
    lines = tuple(
        TableBuildLine(table=name, family=table.family, arch=table.arch, nvcc_flags=flags)
        for name in params.get("tables") or {}
        for table in (table_spec(dict(params), name, path=params_path),)
    )
    return BuildsJob(target_path=Path(params_path).parent / spec.target, begin_marker=spec.begin_marker,
                     end_marker=spec.end_marker, source_label=spec.source_label, lines=lines)


def declared_job(job: TableJob, *, params: Mapping[str, Any], params_path: str | Path) -> TableJob:
    """``job`` (from the six flags) typed like the declared table whose target and markers it names, if any."""

    target = job.target_path.resolve()
    for declared in jobs_from_params(params=params, params_path=params_path):
        if (declared.target_path.resolve() == target and declared.begin_marker == job.begin_marker
                and declared.end_marker == job.end_marker):
            return dataclasses.replace(job, name=declared.name, fields=declared.fields,
                                       variant_fields=declared.variant_fields)
    return job
