"""Load and validate params.yaml: the single source of settings (tables, dispatch, selector, compile, bench, select)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tunetable.device_tables import (
    derived_dispatch,
    derived_selector,
    derived_table,
    device_grid,
    grid_device_error,
    primary_device,
    split_device_table,
)
from tunetable.errors import TuneTableError
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.devices import (
    DeviceSpec,
    coverage_recording_path,
    device_specs_from_mapping,
    recording_path,
)
from tunetable.yamlio import load_yaml_file

SCHEMA_PATH = Path(__file__).with_name("schemas") / "params.schema.yaml"
DEFAULT_PARAMS = Path("params.yaml")


@dataclass(frozen=True)
class CodegenSpec:
    """Where a table's manifest, snippet and generated region live."""

    manifest: str
    snippet: str
    target: str
    begin_marker: str
    end_marker: str
    source_label: str
    variants: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSpec:
    """One tuning table declared in params.yaml."""

    name: str
    family: str
    kernel: str
    dtype: str
    arch: str
    nk: tuple[tuple[int, int], ...]
    m_values: tuple[int, ...]
    grid: dict[str, Any]
    codegen: CodegenSpec
    search: dict[str, Any]
    recording: str | None = None      # what the replay backend serves for this table (the primary device's)
    shape_list: tuple[tuple[int, int, int], ...] = ()   # shapes.list: a workload's (M, N, K), beside the product
    recordings: tuple[tuple[str, str], ...] = ()   # (device, recording) of every declared device, in order
    device: str | None = None         # a device table's device (``gemm_mma.h100``: h100); None: the primary's

    @property
    def base(self) -> str:
        """The declared table this is (a device table's base name: its recording's rows carry it)."""
        return split_device_table(self.name)[0]

    def shapes(self) -> list[tuple[int, int, int]]:
        """All (M, N, K) shapes of the table: the NK x M product (NK pairs outer, M inner), then the list's others."""
        product = [(m, n, k) for (n, k) in self.nk for m in self.m_values]
        return list(dict.fromkeys([*product, *self.shape_list]))

    def recording_device(self) -> str | None:
        """The device whose recording ``recording`` is (one of ``recordings``), or None (no declared device)."""
        return next((device for device, path in self.recordings if path == self.recording), None)

    def coverage_recording(self) -> str | None:
        """Its device's coverage recording of this table (``coverage_recording_path``), or None without a device."""
        device = self.recording_device()
        return None if device is None else coverage_recording_path(device=device, table=self.base)

    def m_values_of(self, n: int, k: int) -> list[int]:
        """The Ms the table holds for one (N, K), ascending."""
        return sorted({m for m, n_, k_ in self.shapes() if (n_, k_) == (n, k)})


def _format_location(error: Any) -> str:
    """A schema error's location as a dotted key path with [index] items, or '(top level)'."""
    parts = []
    for item in error.absolute_path:
        parts.append(f"[{item}]" if isinstance(item, int) else f".{item}")
    return "".join(parts).lstrip(".") or "(top level)"


MAX_SHOWN = 60          # characters of a value an error line quotes
MAX_INT_BITS = 64       # no setting is an integer beyond int64 (the schema bounds most far lower)


def _oversized(data: Any, *, where: str = "") -> tuple[str, str] | None:
    """(place, why) of the first integer beyond int64 in parsed params (the schema could not even print it)."""
    stack: list[tuple[str, Any]] = [(where, data)]
    while stack:
        place, value = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
            return place or "(top level)", f"an integer of {value.bit_length()} bits (at most {MAX_INT_BITS})"
        if isinstance(value, dict):
            stack.extend((f"{place}.{key}".lstrip("."), item) for key, item in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{place}[{index}]", item) for index, item in reversed(list(enumerate(value))))
    return None


def _short_message(error: Any) -> str:
    """A schema error's message with the offending value shortened (a 100 kB string stays one short line)."""
    message = str(error.message)
    shown = repr(error.instance)
    if len(shown) > MAX_SHOWN:
        message = message.replace(shown, f"{shown[:MAX_SHOWN]}... ({len(shown)} characters)")
    return message if len(message) <= 4 * MAX_SHOWN + 200 else f"{message[:4 * MAX_SHOWN]}..."


def validate_params(data: Any, *, path: str | Path) -> None:
    """Validate parsed params against the schema; raise one line naming the failing key."""
    import jsonschema  # lazy: the GPU image may lack it (CI validates params.yaml), and the runtime never loads it

    if not isinstance(data, dict):
        raise TuneTableError("expected a YAML mapping at the top level", path=path)
    oversized = _oversized(data)
    if oversized:
        raise TuneTableError(oversized[1], path=path, where=oversized[0])
    schema = load_yaml_file(SCHEMA_PATH)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        first = errors[0]
        raise TuneTableError(_short_message(first), path=path, where=_format_location(first))


def load_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """Read and validate params.yaml (tunetable.yamlio: safe, duplicate keys and alias bombs refused)."""
    source = Path(path)
    if not source.is_file():
        raise TuneTableError("no such file", path=source)
    data = load_yaml_file(source)
    validate_params(data, path=source)
    for spec in table_specs(data, path=source):
        check_table_shapes(spec, path=source)
    dispatch_specs(data, path=source)  # its tables must be declared ones
    device_specs(data, path=source)    # fallbacks must name declared devices
    unknown_device = grid_device_error(data)                # a grid group's devices too
    if unknown_device is not None:
        raise TuneTableError(unknown_device[1], path=source, where=unknown_device[0])
    selector_specs(data, path=source)
    return data


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int) -> dict[str, Any]:
    """load_params of a path, memoised per (path, mtime)."""
    return load_params(path)


def cached_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """load_params memoised on (path, mtime): cheap to call from every command."""
    source = Path(path)
    if not source.is_file():
        raise TuneTableError("no such file", path=source)
    return _cached(str(source), source.stat().st_mtime_ns)


def table_spec(params: dict[str, Any], name: str, *, path: str | Path = DEFAULT_PARAMS) -> TableSpec:
    """The TableSpec for table ``name``; an unknown name lists the declared ones."""
    tables = params["tables"]
    raw = tables.get(name) or derived_table(params, name)
    if raw is None:
        known = ", ".join(sorted(tables))
        raise TuneTableError(f"unknown table '{name}' (declared: {known})", path=path, where="tables")
    family_files = _family_files(raw, table=name, path=path)
    recordings = table_recordings(params, name)
    return TableSpec(
        name=name,
        family=raw["family"],
        kernel=family_files.get("kernel") or raw["kernel"],
        dtype=raw["dtype"],
        arch=raw.get("arch", "sm_90a"),
        nk=tuple((int(n), int(k)) for n, k in raw["shapes"].get("NK", ())),
        m_values=tuple(int(m) for m in raw["shapes"].get("M", ())),
        shape_list=shape_list(raw["shapes"], table=name, path=path),
        grid=device_grid(raw["grid"], device=split_device_table(name)[1] or primary_device(params)),
        codegen=codegen_spec(raw["codegen"], snippet=family_files.get("snippet")),
        search=dict(raw.get("search") or {"strategy": "exhaustive"}),
        recording=recordings[0][1] if recordings else raw.get("recording"),
        recordings=recordings,
        device=split_device_table(name)[1],
    )


def device_specs(params: dict[str, Any], *, path: str | Path = DEFAULT_PARAMS) -> tuple[DeviceSpec, ...]:
    """The devices params.yaml tunes for, in order (none when ``devices:`` is absent); fallbacks must be declared."""
    specs = device_specs_from_mapping(params.get("devices") or {})
    keys = {spec.key for spec in specs}
    for spec in specs:
        for index, other in enumerate(spec.fallback):
            if other not in keys or other == spec.key:
                raise TuneTableError(f"fallback '{other}' is not another declared device (declared: "
                                     f"{', '.join(sorted(keys))})", path=path,
                                     where=f"devices.{spec.key}.fallback[{index}]")
    return specs


def primary_recording(params: dict[str, Any], name: str) -> str | None:
    """The recording the replay backend serves for table ``name`` (the primary device's; None: it names none)."""
    found = table_recordings(params, name)
    return found[0][1] if found else params["tables"][name].get("recording")


def table_recordings(params: dict[str, Any], name: str) -> tuple[tuple[str, str], ...]:
    """(device, recording path) of table ``name`` for every declared device (a device table: its device's
    only); ``tables.<name>.recording`` overrides the primary device's path only."""
    base, device = split_device_table(name)
    if device is not None:
        derived = derived_table(params, name)
        return ((device, derived["recording"]),) if derived is not None else ()
    override = params["tables"][name].get("recording")
    found = []
    for index, device in enumerate(params.get("devices") or {}):
        derived = recording_path(device=device, table=name)
        found.append((device, override if index == 0 and override else derived))
    return tuple(found)


def shape_list(shapes: dict[str, Any], *, table: str, path: str | Path) -> tuple[tuple[int, int, int], ...]:
    """A table's ``shapes.list``: inline [[M, N, K], ...], or an M,N,K[,count] CSV beside params.yaml."""
    listed = shapes.get("list")
    if listed is None:
        return ()
    if isinstance(listed, str):
        from tunetable.shapes import read_workload  # lazy: only a table with a workload file reads one
        source = Path(path).parent / listed
        try:
            return tuple(item.shape for item in read_workload(source))
        except TuneTableError as exc:
            raise TuneTableError(f"tables.{table}.shapes.list: {exc}", path=path) from None
    return tuple((int(m), int(n), int(k)) for m, n, k in listed)


def check_table_shapes(spec: TableSpec, *, path: str | Path) -> None:
    """Every shape of a table must be one its family's kernels run (alignment, int32 extents)."""
    family = FAMILIES.get(spec.family)
    if family is None:
        return
    for index, shape in enumerate(spec.shapes()):
        try:
            family.check_shape(*shape)
        except ValueError as exc:
            raise TuneTableError(f"shape {index} (M={shape[0]}, N={shape[1]}, K={shape[2]}): {exc}", path=path,
                                 where=f"tables.{spec.name}.shapes") from None


# What a table of a registered family (kernels/families/<name>/) takes from the family's folder and
# so must not name itself (one fact, one place: docs/families.md): section, key, what it is.
FAMILY_OWNED = (("", "kernel", "kernel source"), ("grid", "derived", "derived values"),
                ("codegen", "snippet", "snippet"))


def _family_files(raw: dict[str, Any], *, table: str, path: str | Path) -> dict[str, str]:
    """The kernel source and snippet of a table from its family's folder ({} for an ad-hoc family).

    A table whose family has no folder names its kernel and snippet (and its derived values and
    rules) itself; one whose family has a folder must not.
    """
    family = FAMILIES.get(raw["family"])
    for section, key, what in FAMILY_OWNED:
        holder = (raw.get(section) if section else raw) or {}
        where = f"tables.{table}.{section + '.' if section else ''}{key}"
        if family is not None and key in holder:
            raise TuneTableError(f"family {family.name} has its {what} in {family.folder}; drop this key "
                                 "(a fact is written once)", path=path, where=where)
        if family is None and key != "derived" and key not in holder:
            raise TuneTableError(f"family '{raw['family']}' has no folder under kernels/families/ (known: "
                                 f"{', '.join(sorted(FAMILIES))}): name the table's {what}", path=path, where=where)
    if family is None:
        return {}
    return {"kernel": str(family.source), "snippet": str(family.snippet)}


def codegen_spec(raw: dict[str, Any], *, snippet: str | None = None) -> CodegenSpec:
    """A ``codegen:`` mapping (of a table or of a dispatch list) as a CodegenSpec (``snippet``: the family's)."""
    return CodegenSpec(
        manifest=raw["manifest"],
        snippet=snippet or raw["snippet"],
        target=raw["target"],
        begin_marker=raw["begin_marker"],
        end_marker=raw["end_marker"],
        source_label=raw["source_label"],
        variants=dict(raw.get("variants") or {}),
    )


def table_specs(params: dict[str, Any], *, path: str | Path = DEFAULT_PARAMS) -> list[TableSpec]:
    """Every declared table, in params.yaml order."""
    return [table_spec(params, name, path=path) for name in params["tables"]]


@dataclass(frozen=True)
class DispatchSpec:
    """A cross-family dispatch list declared in params.yaml: which table serves each shape."""

    name: str
    tables: tuple[str, ...]
    tie_tolerance: float
    codegen: CodegenSpec


def dispatch_spec(params: dict[str, Any], name: str, *, path: str | Path = DEFAULT_PARAMS) -> DispatchSpec:
    """The DispatchSpec ``name``; its tables must be declared and its name must not be a table's."""
    declared = params.get("dispatch") or {}
    raw = declared.get(name) or derived_dispatch(params, name)
    if raw is None:
        known = ", ".join(sorted(declared)) or "none"
        raise TuneTableError(f"unknown dispatch list '{name}' (declared: {known})", path=path, where="dispatch")
    tables = params["tables"]
    if name in tables:
        raise TuneTableError("a dispatch list cannot share its name with a table", path=path, where=f"dispatch.{name}")
    for index, table in enumerate(raw["tables"]):
        if table not in tables and derived_table(params, table) is None:
            raise TuneTableError(f"unknown table '{table}' (declared: {', '.join(sorted(tables))})", path=path,
                                 where=f"dispatch.{name}.tables[{index}]")
    return DispatchSpec(name=name, tables=tuple(raw["tables"]), tie_tolerance=float(raw.get("tie_tolerance", 0.0)),
                        codegen=codegen_spec(raw["codegen"]))


@dataclass(frozen=True)
class BuildsSpec:
    """Where codegen writes the runtime's build settings of every table (params.yaml ``builds:``)."""

    target: str
    begin_marker: str
    end_marker: str
    source_label: str


def builds_spec(params: dict[str, Any], *, path: str | Path = DEFAULT_PARAMS) -> BuildsSpec | None:
    """The ``builds:`` section (None when absent: then the runtime has no build settings to read)."""
    raw = params.get("builds")
    if raw is None:
        return None
    return BuildsSpec(target=raw["target"], begin_marker=raw["begin_marker"], end_marker=raw["end_marker"],
                      source_label=raw.get("source_label", Path(path).name))


def dispatch_specs(params: dict[str, Any], *, path: str | Path = DEFAULT_PARAMS) -> list[DispatchSpec]:
    """Every declared dispatch list, in params.yaml order (none when the section is absent)."""
    return [dispatch_spec(params, name, path=path) for name in (params.get("dispatch") or {})]


@dataclass(frozen=True)
class SelectorSpec:
    """A shape selector declared in params.yaml: the choice for shapes no table holds (pipeline/selector_fit.py)."""

    name: str
    tables: tuple[str, ...]
    candidates: int
    data: str                   # the fitted selector's data file (kernels/data/<name>.json)
    codegen: CodegenSpec
    coverage: str | None = None  # coverage shapes CSV: its recordings feed the fit only (tunetable.selector_fit)


DEFAULT_SELECTOR_CANDIDATES = 8


def selector_spec(params: dict[str, Any], name: str, *, path: str | Path = DEFAULT_PARAMS) -> SelectorSpec:
    """The SelectorSpec ``name``; its tables must be declared and its name must be no table's or dispatch list's."""
    declared = params.get("selector") or {}
    raw = declared.get(name) or derived_selector(params, name)
    if raw is None:
        known = ", ".join(sorted(declared)) or "none"
        raise TuneTableError(f"unknown selector '{name}' (declared: {known})", path=path, where="selector")
    tables = params["tables"]
    if name in tables or name in (params.get("dispatch") or {}):
        raise TuneTableError("a selector cannot share its name with a table or a dispatch list", path=path,
                             where=f"selector.{name}")
    for index, table in enumerate(raw["tables"]):
        if table not in tables and derived_table(params, table) is None:
            raise TuneTableError(f"unknown table '{table}' (declared: {', '.join(sorted(tables))})", path=path,
                                 where=f"selector.{name}.tables[{index}]")
    return SelectorSpec(name=name, tables=tuple(raw["tables"]),
                        candidates=int(raw.get("candidates", DEFAULT_SELECTOR_CANDIDATES)),
                        data=str(raw["data"]),
                        codegen=_selector_codegen(raw, target_root=Path(path).parent, name=name, path=path),
                        coverage=str(raw["coverage"]) if raw.get("coverage") else None)


def _selector_codegen(raw: dict[str, Any], *, target_root: Path, name: str, path: str | Path) -> CodegenSpec:
    """A selector's codegen: its manifest, target and markers; the data file stands in the snippet's place.

    A selector's region is rendered from its data file (its sha256 and provenance), not from a snippet, so
    the data file is what codegen reads besides the manifest (and what the codegen rule depends on). The data
    file must lie under the target's folder: it is package data, found from the generated file.
    """
    section = dict(raw["codegen"])
    data = Path(str(raw["data"]))
    if not (target_root / data).resolve().is_relative_to((target_root / section["target"]).resolve().parent):
        raise TuneTableError(f"the data file must lie under the folder of {section['target']} (package data)",
                             path=path, where=f"selector.{name}.data")
    return codegen_spec({**section, "variants": {}}, snippet=str(data))


def selector_specs(params: dict[str, Any], *, path: str | Path = DEFAULT_PARAMS) -> list[SelectorSpec]:
    """Every declared selector, in params.yaml order (none when the section is absent)."""
    return [selector_spec(params, name, path=path) for name in (params.get("selector") or {})]
