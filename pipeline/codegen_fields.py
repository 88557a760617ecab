"""Codegen's field typing: each declared table's and dispatch list's fields, checked before rendering.

A table declared in params.yaml is *typed*: every manifest value is checked against the table's declared
fields (``EntryFields``: integers in their ranges with ``M < M_END``, booleans, strings from a known set,
``CONFIG_ID`` the id of the entry's tunables, rows of numbers) and every string field sits between quotes
in the snippet, so the generated code holds literals only and no manifest text ever becomes code. The
field types themselves live in tunetable.kernels.families.entry_fields, which the runtime shares (it
checks the shape selector's data file with them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tunetable.device_tables import split_device_table
from tunetable.errors import TuneTableError
from tunetable.grid import normalise_groups
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.entry_fields import (
    EntryFields,
    Field,
    family_tunables,
    shape_fields,
)
from tunetable.codegen_render import PLACEHOLDER
from tunetable.params import DispatchSpec, TableSpec

def table_fields(spec: TableSpec) -> EntryFields:
    """A table's entry fields: the family's entry class when it has a folder, else its grid's parameters."""
    fields = [*shape_fields(), Field("KERNEL", str, choices=(spec.family,)), Field("CONFIG_ID", str)]
    family = FAMILIES.get(spec.family)
    if family is not None:
        tunables = family_tunables(family.entry_type)
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
    """A dispatch list's entry fields: the shape, TABLE (one of its tables), KERNEL (that table's family), the
    winner's measured SPEEDUP_VS_CUBLAS (a finite positive number)."""
    # A device's dispatch list names its base tables (the runtime's keys on that device).
    bases = {split_device_table(table)[0]: families[table] for table in spec.tables}
    tables = tuple(bases)
    kernels = tuple(dict.fromkeys(bases.values()))
    fields = [*shape_fields(), Field("KERNEL", str, choices=kernels), Field("TABLE", str, choices=tables),
              Field("CONFIG_ID", str), Field("SPEEDUP_VS_CUBLAS", float)]
    # SPEEDUP_VS_CUBLAS is required: the PyTorch operator routes an entry below 1 to torch's matmul, so a manifest
    # written before it existed is selected again, never read as "tunetable faster everywhere".
    return EntryFields(label=f"dispatch list {spec.name}", fields=tuple(fields), table_families=bases,
                       missing_hint=f"a dispatch manifest from before SPEEDUP_VS_CUBLAS: select it again "
                                    f"(`snakemake --cores 2 --forcerun select_{spec.name}`)")


def literal_entries(entries: Sequence[Mapping[str, Any]], *, fields: EntryFields) -> list[dict[str, Any]]:
    """Checked entries with each value as its snippet receives it (``Field.literal``)."""
    declared = fields.by_name()
    return [{key: declared[key].literal(value) if key in declared else value for key, value in entry.items()}
            for entry in entries]


def check_snippet(snippet: str, *, fields: EntryFields, path: str | Path) -> None:
    """A typed table's snippet names declared fields only, each string field between quotes and no other."""
    declared = fields.by_name()
    for match in PLACEHOLDER.finditer(snippet):
        name = match.group(1)
        if name not in declared:
            raise TuneTableError(f"[@{name}] is not a field of {fields.label} (fields: {', '.join(declared)})",
                                 path=path)
        before, after = snippet[match.start() - 1: match.start()], snippet[match.end(): match.end() + 1]
        quoted = before == after and before in ("'", '"')
        if declared[name].kind is str and not quoted:
            raise TuneTableError(f"[@{name}] is a string field: write it between quotes, so that it renders as a "
                                 "string literal", path=path)
        if declared[name].kind is not str and quoted:
            raise TuneTableError(f"[@{name}] is not a string field: write it without quotes, so that it renders as "
                                 "the literal of its type", path=path)
