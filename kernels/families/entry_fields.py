"""The typed fields of generated entries: what codegen checks before rendering and the runtime on load.

One definition for both sides: ``tunetable codegen`` types every manifest value by its table's declared
fields (``EntryFields``) before a literal is written, and the runtime checks the shape selector's data
file (kernels/data/<selector>.json) against the same fields when it loads it. A field is an integer in a
range, a boolean, a finite positive number (a dispatch entry's ``SPEEDUP_VS_CUBLAS``), a string from a known
set (``CONFIG_ID``: the id of the entry's tunables), or rows of numbers. Errors are ``TuneTableError``
naming the file and the entry (``params[i]``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.kernels.families.common import ENTRY_FIELDS, INT32_MAX, config_id

MAX_ROWS = 10_000                           # rows of one tuple field (bounds the work on odd input)
CONFIG_ID = re.compile(r"^c[0-9a-f]{10}$")  # tunetable.kernels.families.common.config_id
EXTRA_KEYS = ("_template",)                 # a key codegen reads that is no field of the entry
TERM_ROW = (int, int, float, float, float, float)   # a selector candidate's BIAS_TERMS / CUBLAS_TERMS row
CELL_ROW = (int, int, int)                          # a selector candidate's CELLS row


@dataclass(frozen=True)
class Field:
    """One declared field of a table entry: its manifest key, type and allowed values."""

    name: str                       # as in the manifest and the snippet (UPPER_CASE)
    kind: type                      # int, bool, float (finite, > 0), str, or tuple (rows of numbers, ``row``)
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
        if self.kind is float:
            return None if positive_number(value) else f"expected a finite positive number, got {value!r}"
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
        """The value as the snippet receives it: a float field as a float literal, a tuple field as a tuple
        literal (one row per line)."""
        if self.kind is float:
            return repr(float(value))
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
    missing_hint: str = ""                      # what to do about a missing field (an older manifest's)

    def by_name(self) -> dict[str, Field]:
        """The fields by manifest key."""
        return {item.name: item for item in self.fields}


def finite_number(value: Any) -> bool:
    """An int or float (never a bool) that is finite."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (isinstance(value, int) or math.isfinite(value)))


def positive_number(value: Any) -> bool:
    """A finite number (``finite_number``) above zero."""
    return finite_number(value) and value > 0


def shape_fields() -> list[Field]:
    """M, M_END, N, K: int32, M >= 1, and M < M_END (checked per entry)."""
    return [Field("M", int, low=1, high=INT32_MAX - 1), Field("M_END", int, low=2), Field("N", int, low=1),
            Field("K", int, low=1)]


def python_type(annotation: Any) -> type:
    """int, bool or str from a dataclass field's type (annotations may be strings)."""
    names = {"int": int, "bool": bool, "str": str}
    resolved = names.get(annotation, annotation) if isinstance(annotation, str) else annotation
    if resolved not in (int, bool, str):
        raise TypeError(f"a table entry field of type {annotation!r} (codegen renders int, bool and str)")
    return resolved


def family_tunables(entry_type: type) -> list[tuple[str, type]]:
    """A family entry class's tunables after the shape fields: (UPPER_CASE name, type), in grid order."""
    return [(item.name.upper(), python_type(item.type)) for item in dataclasses.fields(entry_type)
            if item.name not in ENTRY_FIELDS]


def selector_entry_fields(*, label: str, table_families: Mapping[str, str],
                          entry_types: Mapping[str, type]) -> dict[str, EntryFields]:
    """A shape selector's candidate fields per family: its range, candidate, terms and the family's tunables.

    ``table_families``: the selector's tables and their families; ``entry_types``: each family's entry class.
    """
    found = {}
    for family in dict.fromkeys(table_families.values()):
        tables = tuple(table for table, name in table_families.items() if name == family)
        fields = [Field("M", int, low=1, high=INT32_MAX - 1), Field("M_END", int, low=2), Field("RANK", int),
                  Field("TABLE", str, choices=tables), Field("KERNEL", str, choices=(family,)), Field("CONFIG_ID", str),
                  Field("REGISTERS", int), Field("SMEM_BYTES", int), Field("BIAS_TERMS", tuple, row=TERM_ROW),
                  Field("CUBLAS_TERMS", tuple, row=TERM_ROW), Field("CELLS", tuple, row=CELL_ROW)]
        tunables = family_tunables(entry_types[family])
        fields += [Field(name, kind) for name, kind in tunables]
        found[family] = EntryFields(label=f"{label} ({family} entries)", fields=tuple(fields), family=family,
                                    tunables=tuple(name for name, _ in tunables))
    return found


def check_entries(entries: Sequence[Mapping[str, Any]], *, fields: EntryFields, path: str | Path,
                  first: int = 0) -> None:
    """Every entry holds exactly the declared fields, each a value of its type and range; else one error line.

    ``first``: the index of the first entry in its manifest (the errors name it).
    """
    declared = fields.by_name()
    for index, entry in enumerate(entries, start=first):
        where = f"params[{index}]"
        _check_keys(entry, fields=fields, path=path, where=where)
        for name, item in declared.items():
            problem = item.problem(entry[name])
            if problem:
                raise TuneTableError(f"{name}: {problem}", path=path, where=where)
        if "M_END" in declared and entry["M"] >= entry["M_END"]:
            raise TuneTableError(f"[M, M_END) = [{entry['M']}, {entry['M_END']}) is empty: M must be below M_END",
                                 path=path, where=where)
        _check_identity(entry, fields=fields, path=path, where=where)


def _check_keys(entry: Mapping[str, Any], *, fields: EntryFields, path: str | Path, where: str) -> None:
    """The entry has no key that is not a field and lacks none of the fields."""
    declared = fields.by_name()
    names = ", ".join(declared)
    unknown = [key for key in entry if key not in declared and key not in EXTRA_KEYS]
    if unknown:
        raise TuneTableError(f"{unknown[0]}: not a field of {fields.label} (fields: {names})", path=path, where=where)
    missing = [name for name in declared if name not in entry]
    if missing:
        hint = f": {fields.missing_hint}" if fields.missing_hint else ""
        raise TuneTableError(f"lacks {', '.join(missing)} (fields of {fields.label}: {names}){hint}", path=path,
                             where=where)


def _check_identity(entry: Mapping[str, Any], *, fields: EntryFields, path: str | Path, where: str) -> None:
    """CONFIG_ID is the id of the entry's tunables; a dispatch entry's KERNEL is its TABLE's family."""
    if fields.family is not None:
        expected = config_id(family=fields.family, params={name: entry[name] for name in fields.tunables})
        if entry["CONFIG_ID"] != expected:
            raise TuneTableError(f"CONFIG_ID {entry['CONFIG_ID']} is not the id of the entry's tunables "
                                 f"({expected})", path=path, where=where)
    if fields.table_families and entry["KERNEL"] != fields.table_families[entry["TABLE"]]:
        raise TuneTableError(f"KERNEL {entry['KERNEL']} is not the family of table {entry['TABLE']} "
                             f"({fields.table_families[entry['TABLE']]})", path=path, where=where)
