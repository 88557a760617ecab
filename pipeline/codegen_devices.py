"""The generated file's other devices: one region holding, per device besides the primary one, its lists.

The primary device's lists sit in hand-placed regions (``BEGIN-TUNING-LIST-GEMM_MMA``). Another device's
exist only once it has tables (docs/devices.md), so codegen writes their scaffold itself, inside
``BEGIN-TUNING-DEVICE-TABLES`` / ``END-TUNING-DEVICE-TABLES``: per device, one list (or dict) per device
table, dispatch list and selector, each holding an empty marker region (``BEGIN-H100-TUNING-LIST-GEMM_MMA``)
that its own job then fills like any other, and, for a complete device only, its ``DEVICE_TABLES`` entry.
Names come from params.yaml's schema-checked keys (lower-case letters, digits, underscores), so every
line is an identifier, a string literal or a marker: no manifest text reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.codegen_render import check_comment_text, optional_string_literal, replace_generated_region
from tunetable.device_tables import (
    base_tables,
    complete_devices,
    device_tables_of,
    other_devices,
    split_device_table,
)
from tunetable.errors import TuneTableError
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.devices import coverage_recording_path
from tunetable.manifest import UNKNOWN, load_manifest_document

DEVICE_TABLES_BEGIN_MARKER = "BEGIN-TUNING-DEVICE-TABLES"
DEVICE_TABLES_END_MARKER = "END-TUNING-DEVICE-TABLES"


@dataclass(frozen=True)
class DeviceList:
    """One list of a device's scaffold: which base table, dispatch list or selector, its type and markers."""

    base: str
    kind: str                 # "table", "dispatch" or "selector"
    entry_class: str          # the list's item type (a family's entry class, FamilyChoice, SelectorFile)
    begin_marker: str
    end_marker: str

    def variable(self, device: str) -> str:
        """The Python name of the list: ``H100_GEMM_MMA_CONFIGS``, ``H100_GEMM_DISPATCH``, ``H100_SELECTOR_FILES``."""
        prefix = device.upper()
        return {"table": f"{prefix}_{self.base.upper()}_CONFIGS", "dispatch": f"{prefix}_{self.base.upper()}",
                "selector": f"{prefix}_SELECTOR_FILES"}[self.kind]


@dataclass(frozen=True)
class DeviceBlock:
    """A device's scaffold: its lists in params.yaml order; ``complete``: it has its own dispatch and selector."""

    device: str
    lists: tuple[DeviceList, ...]
    complete: bool


def _entry_class(family: str) -> str:
    """A family's generated entry class (``TableEntry`` for a family without a folder)."""
    found = FAMILIES.get(family)
    return found.entry_type.__name__ if found is not None else "TableEntry"


def device_blocks(params: Mapping[str, Any]) -> tuple[DeviceBlock, ...]:
    """The scaffold of every device besides the primary one that has device tables in (expanded) ``params``."""
    names = device_tables_of(params)
    complete = set(complete_devices(params, names))
    blocks = []
    for device in other_devices(params):
        lists = []
        for section, kind in (("tables", "table"), ("dispatch", "dispatch"), ("selector", "selector")):
            for name, raw in (params.get(section) or {}).items():
                base, owner = split_device_table(name)
                if owner != device:
                    continue
                entry = (_entry_class(str(raw["family"])) if kind == "table"
                         else "FamilyChoice" if kind == "dispatch" else "SelectorFile")
                lists.append(DeviceList(base=base, kind=kind, entry_class=entry,
                                        begin_marker=str(raw["codegen"]["begin_marker"]),
                                        end_marker=str(raw["codegen"]["end_marker"])))
        if lists:
            blocks.append(DeviceBlock(device=device, lists=tuple(lists), complete=device in complete))
    return tuple(blocks)


def measured_on(manifests: Sequence[Path]) -> str | None:
    """The GPU one device's tables were measured on: the ``device`` their manifests' provenance names (a
    manifest not there yet, or naming none, is left out), None when none names one; two GPUs are an error."""
    named: dict[Path, str] = {}
    for path in manifests:
        if not path.is_file():
            continue
        device = (load_manifest_document(path).provenance or {}).get("device")
        if device is None or device == UNKNOWN:      # select's word for measurements that name no GPU
            continue
        if not isinstance(device, str) or not device.strip():
            raise TuneTableError(f"provenance.device is {device!r}: the name of the GPU measured on", path=path)
        named[path] = device
    if len(set(named.values())) > 1:
        found = "; ".join(f"{path}: {device!r}" for path, device in named.items())
        raise TuneTableError(f"one device's tables name different GPUs in their provenance's device ({found}): "
                             "select them all from one GPU's measurements")
    return next(iter(named.values()), None)


def _list_lines(item: DeviceList, *, device: str, indent: str) -> list[str]:
    """A device list with its empty marker region (its job fills it)."""
    name = item.variable(device)
    if item.kind == "selector":
        return [f"{name}: dict[str, SelectorFile] = {{", f"{indent}# {item.begin_marker}",
                f"{indent}# {item.end_marker}", "}"]
    return [f"{name}: list[{item.entry_class}] = [", f"{indent}# {item.begin_marker}", f"{indent}# {item.end_marker}",
            "]"]


def _entry_lines(block: DeviceBlock, *, measured_on: str | None, indent: str) -> list[str]:
    """A complete device's ``DEVICE_TABLES`` entry: its tables, dispatch lists and selector files."""
    device = block.device
    lines = [f'DEVICE_TABLES["{device}"] = DeviceTables(']
    for key, kind in (("tables", "table"), ("dispatch", "dispatch")):
        lines.append(f"{indent}{key}={{")
        lines += [f'{indent * 2}"{item.base}": {item.variable(device)},' for item in block.lists if item.kind == kind]
        lines.append(f"{indent}}},")
    selectors = [item for item in block.lists if item.kind == "selector"]
    lines += [f"{indent}selector_files={selectors[0].variable(device) if selectors else '{}'},",
              f"{indent}measured_on={optional_string_literal(measured_on)},", ")"]
    return lines


def render_device_tables_region(blocks: Sequence[DeviceBlock], *, bases: Sequence[str], source_label: str,
                                path: Any, measured_on: Mapping[str, str | None] | None = None,
                                indent: str = "    ") -> str:
    """The region's text: a header, then per device its lists and (complete) its ``DEVICE_TABLES`` entry, which
    names the GPU ``measured_on`` gives for it."""
    check_comment_text(source_label, what="source label", path=path)
    lines = [f"# Automatically generated from [{source_label}]: the tables of every device besides the primary one"]
    if not blocks:
        lines.append("# (none has recordings yet: the runtime serves every GPU the primary device's tables)")
    for block in blocks:
        have = [item.base for item in block.lists if item.kind == "table"]
        if block.complete:
            lines.append(f"# Device {block.device}: its own tables, dispatch lists and selectors")
        else:
            missing = [base for base in bases if base not in have]
            lines.append(f"# Device {block.device}: tables {', '.join(have)} only (not yet: {', '.join(missing)}); "
                         "no DEVICE_TABLES entry: its fallback serves it whole")
        for item in block.lists:
            lines += _list_lines(item, device=block.device, indent=indent)
        if block.complete:
            lines += _entry_lines(block, measured_on=(measured_on or {}).get(block.device), indent=indent)
    return "\n".join(lines)


# dvc.yaml cannot glob: the other devices' files are listed in its marker regions, derived from the device tables
# present (``tunetable codegen --all`` writes them, ``--check`` checks them), so that adding a device's recordings
# needs no hand edit. Each region: (marker stem, indent, the lines of one name).
DVC_FILE = "dvc.yaml"
DVC_REGIONS = ("DVC-DEVICE-RECORDINGS", "DVC-DEVICE-OUTS", "DVC-DEVICE-METRICS", "DVC-DEVICE-MANIFESTS",
               "DVC-DEVICE-PLOTS", "DVC-COVERAGE-RECORDINGS")
# An empty coverage region says why; the device regions stay empty (no other device has tables).
DVC_EMPTY = {"DVC-COVERAGE-RECORDINGS": "# (none: no selector names coverage shapes, or none recorded)"}


def coverage_recordings(params: Mapping[str, Any], *, root: Any) -> list[str]:
    """The coverage recordings present under ``root`` (every declared device's, each table's; only when a selector
    names coverage shapes): what the selector's fit reads besides the tables' recordings."""
    if not any((raw or {}).get("coverage") for raw in (params.get("selector") or {}).values()):
        return []
    paths = [coverage_recording_path(device=device, table=base) for device in params.get("devices") or {}
             for base in base_tables(params)]
    return [path for path in paths if (root / path).is_file()]


def dvc_device_lines(params: Mapping[str, Any], *, root: Any) -> dict[str, list[str]]:
    """Per dvc.yaml region, its lines for the device tables, dispatch lists and selectors of (expanded) ``params``."""
    tables = device_tables_of(params)
    lists = [name for name in params.get("dispatch") or {} if split_device_table(name)[1] is not None]
    selectors = {name: raw for name, raw in (params.get("selector") or {}).items()
                 if split_device_table(name)[1] is not None}
    recordings = [str(params["tables"][name]["recording"]) for name in tables
                  if (root / str(params["tables"][name]["recording"])).is_file()]
    persist = ["cache: false", "persist: true"]
    outs: list[str] = []
    for name in [*tables, *lists]:
        outs += _dvc_out(f"manifests/{name}.yaml", persist)
    for name, raw in selectors.items():
        outs += _dvc_out(f"manifests/{name}.yaml", persist) + _dvc_out(str(raw["data"]), persist)
    for name in [*tables, *lists]:
        outs += _dvc_out(f"results/plots/{name}.csv", ["cache: false"]) + _dvc_out(f"results/plots/{name}.png",
                                                                                  ["cache: false"])
    return {
        "DVC-DEVICE-RECORDINGS": [f"- {path}" for path in recordings],
        "DVC-DEVICE-OUTS": outs,
        "DVC-DEVICE-METRICS": [line for name in [*tables, *lists]
                               for line in _dvc_out(f"results/metrics/{name}.json", ["cache: false"])],
        "DVC-DEVICE-MANIFESTS": [f"- manifests/{name}.yaml" for name in [*tables, *lists, *selectors]]
        + [f"- {raw['data']}" for raw in selectors.values()],
        "DVC-DEVICE-PLOTS": [f"- results/plots/{name}.png" for name in [*tables, *lists]],
        "DVC-COVERAGE-RECORDINGS": [f"- {path}" for path in coverage_recordings(params, root=root)],
    }


def _dvc_out(path: str, settings: Sequence[str]) -> list[str]:
    """One out of a dvc.yaml list: ``- path:`` and its settings, indented under it."""
    return [f"- {path}:", *(f"    {setting}" for setting in settings)]


def render_dvc_regions(text: str, *, lines: Mapping[str, list[str]], path: Any) -> str:
    """dvc.yaml's text with each device region that it holds rewritten (indented as its begin marker)."""

    for stem in DVC_REGIONS:
        begin = next((line for line in text.splitlines() if f"# BEGIN-{stem}" in line), None)
        if begin is None:
            continue
        indent = begin[: len(begin) - len(begin.lstrip())]
        empty = DVC_EMPTY.get(stem, "# (no other device has tables)")
        body = [f"{indent}{line}" for line in lines.get(stem, [])] or [f"{indent}{empty}"]
        text = replace_generated_region(text, begin_marker=f"BEGIN-{stem}", end_marker=f"END-{stem}",
                                        generated="\n".join(body), path=path)
    return text
