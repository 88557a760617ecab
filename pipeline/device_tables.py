"""Device tables: every declared table, dispatch list and selector on each declared device besides the primary one.

The primary device (params.yaml's first under ``devices:``) keeps the unsuffixed names. Table ``t`` on
another device ``d`` is the *device table* ``t.d`` (a dot never appears in a declared name): shards and
ranked tables under ``<t>.<d>``, ``manifests/<t>.<d>.yaml``, ``results/metrics/<t>.<d>.json``, the
generated region ``BEGIN-<D>-TUNING-LIST-<T>`` (a device prefix, so that the primary's marker is no
substring of it), its recording ``data/recordings/<d>_<t>.parquet``, whose rows it replays under ``t``.

Which device tables a project has is a rule over files (docs/devices.md): ``t.d`` exists when its
recording or its manifest does (``present_device_tables``); a device is *complete* when every declared
table has its device table, and only a complete device gets its own dispatch lists and selectors
(``gemm_dispatch.d``, ``gemm_selector.d``, data ``kernels/data/gemm_selector.d.json``): two devices'
times never meet in one decision, and the runtime serves a partial device its fallback's tables whole.
Pure functions over params.yaml's raw mapping: params.py derives specs from them by name.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tunetable.kernels.families.devices import device_of_name, device_specs_from_mapping, recording_path

SEPARATOR = "."
GROUP_DEVICES = "devices"    # a grid group's key: the devices whose tables have the group (absent: every device)


def device_table_name(*, base: str, device: str) -> str:
    """``gemm_mma`` on ``h100``: ``gemm_mma.h100``."""
    return f"{base}{SEPARATOR}{device}"


def split_device_table(name: str) -> tuple[str, str | None]:
    """(base name, device) of a device table; (name, None) for a declared (primary) name."""
    base, sep, device = name.rpartition(SEPARATOR)
    return (base, device) if sep and base and device else (name, None)


def device_marker(marker: str, *, device: str) -> str:
    """``BEGIN-TUNING-LIST-GEMM_MMA`` on ``h100``: ``BEGIN-H100-TUNING-LIST-GEMM_MMA``."""
    head, sep, rest = marker.partition("-")
    return f"{head}-{device.upper()}-{rest}" if sep else f"{device.upper()}-{marker}"


def device_data_path(path: str, *, device: str) -> str:
    """A selector's data file on ``device``: ``kernels/data/gemm_selector.json`` -> ``...gemm_selector.h100.json``."""
    source = Path(path)
    return source.with_name(f"{source.stem}{SEPARATOR}{device}{source.suffix}").as_posix()


def primary_device(params: Mapping[str, Any]) -> str | None:
    """The first declared device (its tables keep the unsuffixed names), None without ``devices:``."""
    return next(iter(params.get("devices") or {}), None)


def other_devices(params: Mapping[str, Any]) -> list[str]:
    """The declared devices besides the primary one, in declaration order."""
    return list(params.get("devices") or {})[1:]


def _device_codegen(raw: Mapping[str, Any], *, name: str, device: str, label: str | None = None) -> dict[str, Any]:
    """A codegen section on ``device``: manifest manifests/<name>.yaml, device-prefixed markers."""
    manifest = f"manifests/{name}.yaml"
    return {**copy.deepcopy(dict(raw)), "manifest": manifest, "source_label": label or manifest,
            "begin_marker": device_marker(str(raw["begin_marker"]), device=device),
            "end_marker": device_marker(str(raw["end_marker"]), device=device)}


def _base_of(params: Mapping[str, Any], name: str, *, section: str) -> tuple[str, str, Mapping[str, Any]] | None:
    """(base, device, the base's raw mapping) of ``name`` in ``section`` if it is a device name, else None."""
    base, device = split_device_table(name)
    declared = params.get(section) or {}
    if device is None or device not in other_devices(params) or base not in declared:
        return None
    return base, device, declared[base]


def _derived(params: Mapping[str, Any], name: str, *, section: str,
             changes: Callable[..., Mapping[str, Any]]) -> dict[str, Any] | None:
    """Device name ``name``'s raw mapping in ``section``: its base's, copied, with ``changes(base=, device=,
    raw=)`` set over it (keys keep their place); None when ``name`` is no device name there."""
    found = _base_of(params, name, section=section)
    if found is None:
        return None
    base, device, raw = found
    return {**copy.deepcopy(dict(raw)), **changes(base=base, device=device, raw=raw)}


def _in_grid_of(group: Any, *, device: str | None) -> bool:
    """Whether a grid group is in ``device``'s grid: one without ``devices`` is in every device's."""
    if not isinstance(group, Mapping) or device is None or GROUP_DEVICES not in group:
        return True      # (a malformed group goes on to normalise_groups, which names it)
    return device in group[GROUP_DEVICES]


def device_grid(grid: Mapping[str, Any], *, device: str | None) -> dict[str, Any]:
    """A table's grid on ``device`` (None, no declared devices: every group), each group without its ``devices``."""
    groups = [group for group in grid.get("groups") or [] if _in_grid_of(group, device=device)]
    return {**dict(grid), "groups": [{key: value for key, value in group.items() if key != GROUP_DEVICES}
                                     if isinstance(group, Mapping) else group for group in groups]}


def grid_device_error(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(where, message) of the first grid group's ``devices`` entry that is no declared device, None if none is."""
    declared = list(params.get("devices") or {})
    for table, raw in (params.get("tables") or {}).items():
        for index, group in enumerate(((raw or {}).get("grid") or {}).get("groups") or []):
            listed = (group.get(GROUP_DEVICES) or []) if isinstance(group, Mapping) else []
            unknown = next(((place, device) for place, device in enumerate(listed) if device not in declared), None)
            if unknown is not None:
                return (f"tables.{table}.grid.groups[{index}].{GROUP_DEVICES}[{unknown[0]}]",
                        f"'{unknown[1]}' is not a declared device (declared: {', '.join(declared) or 'none'})")
    return None


def table_on_device(params: Mapping[str, Any], *, base: str, device: str) -> str:
    """The table that measures declared table ``base`` on ``device``: ``base`` itself on the primary device, else
    its device table (``gemm_mma.h100``), whose grid has the groups given to that device."""
    return base if device == primary_device(params) else device_table_name(base=base, device=device)


def device_table_names(bases: Iterable[str], *, device: str) -> list[str]:
    """Declared table (or dispatch list) names on ``device``: ``device_table_name`` of each."""
    return [device_table_name(base=base, device=device) for base in bases]


def derived_table(params: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The raw mapping of device table ``name`` (the base table's, with its recording and codegen), or None."""
    return _derived(params, name, section="tables", changes=lambda base, device, raw: {
        "recording": recording_path(device=device, table=base),
        "codegen": _device_codegen(raw["codegen"], name=name, device=device)})


def derived_dispatch(params: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The raw mapping of a dispatch list on a device (its tables that device's), or None."""
    return _derived(params, name, section="dispatch", changes=lambda base, device, raw: {
        "tables": device_table_names(raw["tables"], device=device),
        "codegen": _device_codegen(raw["codegen"], name=name, device=device)})


def derived_selector(params: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The raw mapping of a shape selector on a device (its tables and data file that device's), or None."""

    def changes(*, base: str, device: str, raw: Mapping[str, Any]) -> dict[str, Any]:
        data = device_data_path(str(raw["data"]), device=device)
        return {"tables": device_table_names(raw["tables"], device=device), "data": data,
                "codegen": _device_codegen(raw["codegen"], name=name, device=device, label=data)}

    return _derived(params, name, section="selector", changes=changes)


def base_tables(params: Mapping[str, Any]) -> list[str]:
    """The declared tables (no device table), in params.yaml order."""
    return [name for name in params.get("tables") or {} if split_device_table(name)[1] is None]


def present_device_tables(params: Mapping[str, Any], *, root: Path, measured: Sequence[str] = (),
                          recordings: bool = True) -> list[str]:
    """The device tables a project has: those whose manifest exists under ``root`` (with ``recordings``: or
    whose recording does), and every table of the devices in ``measured`` (a GPU host measuring them);
    devices then tables in declared order."""
    found = []
    for device in other_devices(params):
        for base in base_tables(params):
            name = device_table_name(base=base, device=device)
            if (device in measured or (root / "manifests" / f"{name}.yaml").is_file()
                    or (recordings and (root / recording_path(device=device, table=base)).is_file())):
                found.append(name)
    return found


def complete_devices(params: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """The devices besides the primary one whose every declared table is among ``names``."""
    have = set(names)
    return [device for device in other_devices(params)
            if all(device_table_name(base=t, device=device) in have for t in base_tables(params))]


def with_device_tables(params: Mapping[str, Any], names: Iterable[str], *, root: Path | None = None) -> dict[str, Any]:
    """``params`` with the device tables ``names`` declared, and the dispatch lists and selectors of each
    complete device (``complete_devices``); without names, ``params`` unchanged (a shallow copy).

    A selector is fitted on recordings, never on a run's shards: with ``root``, a device's selector is
    declared once each of its tables' recordings exists there, or its manifest does (committed, it stays
    as committed, like the primary's whose recordings are absent: the run skips it, codegen renders it).
    A GPU host measuring a device's tables before they are recorded builds its dispatch lists, not its
    selectors."""
    listed = list(names)
    expanded = dict(params)
    if not listed:
        return expanded
    expanded["tables"] = {**params["tables"], **{name: derived_table(params, name) for name in listed}}
    complete = complete_devices(params, listed)
    for section, derive in (("dispatch", derived_dispatch), ("selector", derived_selector)):
        if params.get(section):
            names_on = [device_table_name(base=base, device=device) for device in complete
                        for base in params[section] if split_device_table(base)[1] is None]
            if section == "selector" and root is not None:
                names_on = [name for name in names_on if _selector_present(params, name, root=root)]
            expanded[section] = {**params[section], **{name: derive(params, name) for name in names_on}}
    return expanded


def _selector_present(params: Mapping[str, Any], name: str, *, root: Path) -> bool:
    """Whether device selector ``name`` exists at ``root``: every one of its device's recordings, or its manifest."""
    device = str(split_device_table(name)[1])
    return (root / "manifests" / f"{name}.yaml").is_file() or all(
        (root / recording_path(device=device, table=base)).is_file() for base in base_tables(params))


def device_tables_of(params: Mapping[str, Any]) -> list[str]:
    """The device tables an (expanded) params mapping declares, in order."""
    return [name for name in params.get("tables") or {} if split_device_table(name)[1] is not None]


def recording_device_error(*, device: str, recorded_on: str | None, params: Mapping[str, Any]) -> str | None:
    """Why a recording named for ``device`` may not serve its tables (its sidecar's GPU is recognised as
    another declared device, or as none), or None when the sidecar's ``device`` is ``device``."""
    specs = device_specs_from_mapping(params.get("devices") or {})
    holds = [spec.key for spec in specs if recorded_on is not None and spec.match.name in recorded_on]
    if device in holds:
        return None
    found = device_of_name(name=recorded_on or "", devices=specs)
    return (f"recorded on {recorded_on or 'an unnamed GPU'} (its sidecar's device), which is "
            f"{'device ' + found if found else 'no declared device'}, not {device}: a recording is named for the "
            f"device that made it")


def with_present_device_tables(params: Mapping[str, Any], *, root: Path,
                               measured: Sequence[str] = ()) -> dict[str, Any]:
    """``params`` with the device tables the project at ``root`` has (``present_device_tables``), the dispatch lists
    of its complete devices and the selectors of its fully recorded ones: what every command builds or reads."""
    return with_device_tables(params, present_device_tables(params, root=root, measured=measured), root=root)
