"""Codegen's jobs: what to render where, from the six Modular flags or from params.yaml's declarations.

A ``TableJob`` renders a manifest through a snippet into a marker region (a table or a dispatch list);
a ``SelectorJob`` writes a shape selector's data-file record (sha256, provenance) into its region; a
``BuildsJob`` the ``BUILDS`` region. Paths declared in params.yaml resolve from its folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable.codegen_fields import EntryFields, dispatch_fields, table_fields
from tunetable.codegen_overlap import OverlapReport
from tunetable.codegen_devices import DeviceBlock, device_blocks
from tunetable.device_tables import (
    base_tables,
    complete_devices,
    device_table_names,
    device_tables_of,
    split_device_table,
)
from tunetable.kernels.families.devices import DeviceSpec
from tunetable.params import builds_spec, device_specs, dispatch_spec, selector_spec, table_spec


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


@dataclass(frozen=True)
class SelectorJob:
    """A shape selector's region: its manifest names the data file, whose sha256 and provenance it records."""

    manifest_path: Path
    data_path: Path
    data_label: str                 # the data file as params.yaml names it (and the manifest's data.path)
    record_path: str                # the data file from the target's folder (what the runtime opens)
    target_path: Path
    begin_marker: str
    end_marker: str
    source_label: str
    name: str
    table_families: Mapping[str, str]   # the selector's tables and their families, in params.yaml order


@dataclass(frozen=True)
class TableResult:
    """One table rendered: its region and the overlap check over its manifest."""

    job: "TableJob | SelectorJob"
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
    devices: tuple[DeviceSpec, ...] = ()     # params.yaml's devices: the DEVICES region (none: no region)
    recorded: tuple[str, ...] = ()           # the devices whose tables the target holds, primary first
    device_blocks: tuple[DeviceBlock, ...] = ()   # the other devices' lists (the DEVICE-TABLES region)
    # Per recorded device, its tables' manifests: the GPU each device was measured on (codegen_devices.measured_on)
    device_manifests: tuple[tuple[str, tuple[Path, ...]], ...] = ()


def _table_job(*, name: str, params: Mapping[str, Any], params_path: str | Path,
               families: Mapping[str, str]) -> TableJob:
    """The typed TableJob of a declared table or dispatch list."""
    root = Path(params_path).parent
    if name in (params.get("dispatch") or {}) and name not in params["tables"]:
        declared: Any = dispatch_spec(dict(params), name, path=params_path)
        fields = dispatch_fields(declared, families=families)
    else:
        declared = table_spec(dict(params), name, path=params_path)
        fields = table_fields(declared)
    spec = declared.codegen
    return TableJob(manifest_path=root / spec.manifest, snippet_path=root / spec.snippet,
                    target_path=root / spec.target, begin_marker=spec.begin_marker, end_marker=spec.end_marker,
                    source_label=spec.source_label,
                    snippet_variant_paths={variant: root / path for variant, path in spec.variants.items()},
                    name=name, fields=fields)


def _selector_job(*, name: str, params: Mapping[str, Any], params_path: str | Path,
                  families: Mapping[str, str]) -> SelectorJob:
    """The SelectorJob of a declared shape selector."""
    root = Path(params_path).parent
    declared = selector_spec(dict(params), name, path=params_path)
    spec = declared.codegen
    record = (root / declared.data).resolve().relative_to((root / spec.target).resolve().parent).as_posix()
    return SelectorJob(manifest_path=root / spec.manifest, data_path=root / declared.data,
                       data_label=declared.data, record_path=record, target_path=root / spec.target,
                       begin_marker=spec.begin_marker, end_marker=spec.end_marker,
                       source_label=spec.source_label, name=name,
                       table_families={split_device_table(table)[0]: families[table] for table in declared.tables})


def jobs_from_params(
    *, params: Mapping[str, Any], params_path: str | Path, names: Sequence[str] | None = None
) -> list[TableJob | SelectorJob]:
    """A job per table, dispatch list and selector declared in params.yaml (or only ``names``), tables first."""
    tables = params.get("tables") or {}
    selectors = params.get("selector") or {}
    selected = list(names) if names else [*tables, *(params.get("dispatch") or {}), *selectors]
    families = {table: str(raw["family"]) for table, raw in tables.items()}
    return [_selector_job(name=name, params=params, params_path=params_path, families=families)
            if name in selectors and name not in tables
            else _table_job(name=name, params=params, params_path=params_path, families=families)
            for name in selected]


def builds_job_from_params(*, params: Mapping[str, Any], params_path: str | Path) -> BuildsJob | None:
    """The ``BUILDS`` region params.yaml's ``builds:`` declares (every table's family, arch and the nvcc
    flags), or None when it declares none. Paths resolve from params.yaml's folder."""
    spec = builds_spec(dict(params), path=params_path)
    if spec is None:
        return None
    flags = tuple(str(flag) for flag in (params.get("compile") or {}).get("nvcc_flags") or ())
    lines = tuple(
        TableBuildLine(table=name, family=table.family, arch=table.arch, nvcc_flags=flags)
        for name in base_tables(params)      # a device table builds as its base table does
        for table in (table_spec(dict(params), name, path=params_path),)
    )
    devices = device_specs(dict(params), path=params_path)
    complete = complete_devices(params, device_tables_of(params))
    root = Path(params_path).parent
    recorded = (*(spec.key for spec in devices[:1]), *complete)
    manifests = tuple((device, tuple(root / table_spec(dict(params), name, path=params_path).codegen.manifest
                                     for name in (device_table_names(base_tables(params), device=device)
                                                  if device != recorded[0] else base_tables(params))))
                      for device in recorded)
    return BuildsJob(target_path=root / spec.target, begin_marker=spec.begin_marker,
                     end_marker=spec.end_marker, source_label=spec.source_label, lines=lines,
                     devices=devices, recorded=recorded, device_blocks=device_blocks(params),
                     device_manifests=manifests)


def declared_job(job: TableJob, *, params: Mapping[str, Any], params_path: str | Path) -> TableJob:
    """``job`` (from the six flags) typed like the declared table whose target and markers it names, if any."""

    target = job.target_path.resolve()
    for declared in jobs_from_params(params=params, params_path=params_path):
        if (declared.target_path.resolve() == target and declared.begin_marker == job.begin_marker
                and declared.end_marker == job.end_marker):
            fields = declared.fields if isinstance(declared, TableJob) else None
            return dataclasses.replace(job, name=declared.name, fields=fields)
    return job
