"""The plan of one Snakemake run, resolved once per parse: tables, backend, content keys, shards and their state.

Parsing must stay cheap and deterministic (a cluster job re-parses the Snakefile): no CUDA
context, no network. The backend is resolved once here, so a replayed run never asks for the
compile stage and a live run asks for exactly one GPU per bench job.

A raw shard's path carries the content key of everything that produced it, so a shard on disk is
final: only missing shards get a producing rule. Without a GPU the tables replay their recordings
(``tables.<name>.recording``). A table whose recording is absent (a new table not measured on a
GPU yet) is left out of the run and the banner says so: its checked-in manifest and generated list
stay as committed, and so does every dispatch list that names it. With a GPU every declared table
is measured.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunetable import paths, rawstore
from tunetable.bench.devices import device_name, gpu_visible, recognised_device
from tunetable.device_tables import (
    base_tables,
    complete_devices,
    device_table_name,
    other_devices,
    split_device_table,
    with_present_device_tables,
)
from tunetable.errors import TuneTableError
from tunetable.inputs import read_recording_columns
from tunetable.keys import kernel_source_hash
from tunetable.kernels.families.devices import recording_path
from tunetable.measurement_plan import BackendChoice, grid_config_ids, resolve_backend, shard_key
from tunetable.params import (
    DispatchSpec,
    SelectorSpec,
    TableSpec,
    device_specs,
    dispatch_specs,
    load_params,
    selector_specs,
    table_specs,
)
from tunetable.results import BASELINE_ID
from tunetable.workflow.stamps import manifest_path

NO_RECORDING = "no-recording.parquet"  # what a live plan passes when no table names a recording (never read)
# Set to 1 to run without the shards that need a GPU (no GPU here, not in the recording): the rest is kept.
ALLOW_MISSING_ENV = "TUNETABLE_ALLOW_MISSING"


@dataclass(frozen=True)
class Shard:
    """One (table, shape) result file for the table's current content key."""

    table: str
    key: str
    m: int
    n: int
    k: int

    @property
    def stem(self) -> str:
        """``M1_N4096_K4096``."""
        return paths.shape_name(self.m, self.n, self.k)

    path: str = field(init=False, compare=False, repr=False)   # where the shard lives (set once: it is asked often)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", str(paths.raw_shard(self.table, self.key, self.m, self.n, self.k)))

    @property
    def journal(self) -> str:
        """The journal beside the shard (its checksum record; a live shard's measurements too)."""
        return str(paths.journal(self.table, self.key, self.m, self.n, self.k))

    @property
    def shape_arg(self) -> str:
        """``M,N,K`` as the bench CLI takes it."""
        return f"{self.m},{self.n},{self.k}"


@dataclass(frozen=True)
class Plan:
    """Everything the rules need, resolved once per parse."""

    tables: tuple[TableSpec, ...]     # the tables this run measures or replays
    backend: str                      # resolved: "cuda" or "replay"
    backend_line: str                 # the loud line(s) that say which and why
    keys: Mapping[str, str]           # table -> content key of its raw shards
    recordings: Mapping[str, Path] = field(default_factory=dict)   # replay: table -> its recording
    skipped: Mapping[str, str] = field(default_factory=dict)        # declared tables left out -> why
    dispatches: tuple[DispatchSpec, ...] = ()                       # dispatch lists selected in this run
    skipped_dispatches: Mapping[str, str] = field(default_factory=dict)
    shards: Mapping[str, tuple[Shard, ...]] = field(default_factory=dict)  # table -> its shards, shape order
    absent: frozenset[str] = frozenset()     # paths of the shards not in results/raw (parked or missing)
    parked: frozenset[str] = frozenset()     # ... of those, the ones with a parked copy (results/parked)
    left_out: tuple[str, ...] = ()                                  # shard paths this run goes without
    selectors: tuple[SelectorSpec, ...] = ()                        # shape selectors built in this run
    skipped_selectors: Mapping[str, str] = field(default_factory=dict)
    device_lines: tuple[str, ...] = ()                              # which device's tables, which are skipped

    def table(self, name: str) -> TableSpec:
        """The TableSpec of a table this run covers."""
        for spec in self.tables:
            if spec.name == name:
                return spec
        why = f": {self.skipped[name]}" if name in self.skipped else ""
        raise TuneTableError(f"table '{name}' is not part of this run{why}", path="params.yaml", where="tables")


def check_params_file(path: str | Path) -> dict[str, Any]:
    """Load and validate params.yaml (tunetable.yamlio), so that a bad file fails with one clear line."""
    return load_params(path)


def merge_config(config: dict[str, Any], params: Mapping[str, Any], *, overrides: Mapping[str, Any] | None) -> None:
    """Fill Snakemake's ``config`` from params.yaml, then re-apply ``--config`` values (as ``configfile:`` does)."""
    from snakemake.utils import update_config  # lazy: only the main job's process has Snakemake loaded

    update_config(config, copy.deepcopy(dict(params)))
    if overrides:
        update_config(config, copy.deepcopy(dict(overrides)))


def check_manifest_paths(specs: Sequence[TableSpec | DispatchSpec | SelectorSpec], *, path: str | Path) -> None:
    """Each table's (dispatch list's, selector's) manifest must be manifests/<name>.yaml: the rules derive it."""
    for spec in specs:
        expected = manifest_path(spec.name)
        if Path(spec.codegen.manifest) != expected:
            section = ("dispatch" if isinstance(spec, DispatchSpec)
                       else "selector" if isinstance(spec, SelectorSpec) else "tables")
            raise TuneTableError(
                f"manifest must be {expected} (the pipeline derives it from the name)",
                path=path, where=f"{section}.{spec.name}.codegen.manifest",
            )


def live_requested(config: Mapping[str, Any]) -> bool:
    """Whether this run measures on a GPU (bench.backend cuda, or auto with a GPU visible)."""
    requested = str((config.get("bench") or {}).get("backend", "auto"))
    return requested == "cuda" or (requested == "auto" and gpu_visible())


def measured_device(config: Mapping[str, Any]) -> str | None:
    """The declared device whose tables this run measures: the GPU's when it is recognised, else the primary
    device (a GPU matching no declared device is measured as the primary's, as before devices existed)."""
    devices = list(config.get("devices") or {})
    if not devices or not live_requested(config):
        return None
    found = live_device(config)
    return found if found in devices else devices[0]


def device_params(config: Mapping[str, Any], *, params_path: str | Path = "params.yaml",
                  measured: str | None = None) -> dict[str, Any]:
    """``config`` with the project's device tables (docs/devices.md): replaying, every other device's tables
    that have a recording or a manifest; measuring (``measured``: ``measured_device``'s answer), those with a
    manifest and every table of the GPU's device."""
    params = dict(config)
    on_gpu = [measured] if measured in other_devices(params) else []
    return with_present_device_tables(params, root=Path(params_path).parent, measured=on_gpu)


def add_device_tables(config: dict[str, Any], *, params_path: str | Path = "params.yaml") -> None:
    """Declare the project's device tables in Snakemake's ``config`` (after its schema check: their names hold
    a dot, which params.yaml's own names may not), so that the rules see them as tables."""
    config.update(device_params(config, params_path=params_path, measured=measured_device(config)))


def recording_of(spec: TableSpec, *, path: str | Path) -> Path:
    """The recording a table names (tables.<name>.recording)."""
    if spec.recording is None:
        raise TuneTableError("the table names no recording to replay", path=path, where=f"tables.{spec.name}.recording")
    return Path(spec.recording)


def skip_reason(spec: TableSpec) -> str | None:
    """Why a replayed run must leave a table out (its recording is absent), or None."""
    if spec.recording is None:
        return "it names no recording (tables.<name>.recording) and no GPU measures it"
    if not Path(spec.recording).is_file():
        return (f"its recording {spec.recording} is absent and this run does not measure on a GPU "
                f"(measure it with `tunetable bench --table {spec.name} --backend cuda --all-shapes`, then "
                f"`tunetable record --table {spec.name} --name {Path(spec.recording).stem} SHARDS...`)")
    return None


def run_backend(declared: Sequence[TableSpec], *, requested: str, params_path: str | Path) -> BackendChoice:
    """The backend of the whole run (cuda or replay), as the first table that can speak for it resolves it."""
    live = requested == "cuda" or (requested == "auto" and gpu_visible())
    # Replaying, the first table whose recording is present speaks for the backend; with none
    # present, the first table naming one gives the error (no such recording).
    probe = next((spec for spec in declared if skip_reason(spec) is None), None)
    probe = probe or next((spec for spec in declared if spec.recording is not None), declared[0])
    recording = Path(probe.recording) if probe.recording is not None else None
    if recording is None and not live:
        recording = recording_of(probe, path=params_path)  # raises: no table names a recording
    return resolve_backend(requested=requested, recording=recording or Path(NO_RECORDING))


Covered = tuple[tuple[TableSpec, ...], dict[str, str], list[str], dict[str, Path]]


def covered_tables(declared: Sequence[TableSpec], *, backend: BackendChoice, requested: str, params_path: str | Path,
                   measured: str | None = None) -> Covered:
    """(tables the run covers, skipped table -> why, the backend lines, table -> its recording when replaying).

    Measuring, the run covers the tables of ``measured`` (the GPU's device; None: no devices declared) and leaves
    every other device's tables as committed."""
    if backend.backend == "cuda":
        # A declared table's first recording is the primary device's (params.table_recordings): whose it is.
        primary = next((spec.recordings[0][0] for spec in declared if spec.device is None and spec.recordings), None)
        mine = [spec for spec in declared if measured is None or (spec.device or primary) == measured]
        skipped = {spec.name: f"it is device {spec.device or primary}'s and this GPU is {measured}"
                   for spec in declared if spec not in mine}
        return tuple(mine), skipped, [backend.reason], {}
    tables = tuple(spec for spec in declared if skip_reason(spec) is None)
    skipped = {spec.name: str(skip_reason(spec)) for spec in declared if skip_reason(spec) is not None}
    recordings = {spec.name: recording_of(spec, path=params_path) for spec in tables}
    lines = [resolve_backend(requested=requested, recording=recordings[spec.name]).reason for spec in tables]
    return tables, skipped, lines, recordings


def make_plan(config: Mapping[str, Any], *, params_path: str | Path = "params.yaml") -> Plan:
    """Resolve backend, covered tables and content keys (the Snakefile calls this once per parse)."""

    measured = measured_device(config)   # asks the GPU, once per parse
    params = device_params(config, params_path=params_path, measured=measured)
    declared = tuple(table_specs(params, path=params_path))
    dispatch = tuple(dispatch_specs(params, path=params_path))
    selectors = tuple(selector_specs(params, path=params_path))
    check_manifest_paths([*declared, *dispatch, *selectors], path=params_path)
    requested = str((config.get("bench") or {}).get("backend", "auto"))
    first = run_backend(declared, requested=requested, params_path=params_path)
    tables, skipped, lines, recordings = covered_tables(declared, backend=first, requested=requested,
                                                        params_path=params_path, measured=measured)
    keys = {spec.name: shard_key(params, spec, first.backend) for spec in tables}
    covered = {spec.name for spec in tables}
    active = tuple(spec for spec in dispatch if covered.issuperset(spec.tables))
    skipped_dispatches = {
        spec.name: f"table {', '.join(t for t in spec.tables if t not in covered)} is not part of this run"
        for spec in dispatch if spec not in active
    }
    # A selector is built from its tables' recordings (never from this run's shards): it needs them all.
    by_name = {spec.name: spec for spec in declared}
    missing = {spec.name: [t for t in spec.tables if skip_reason(by_name[t]) is not None or t in skipped]
               for spec in selectors}
    shards = {spec.name: tuple(Shard(spec.name, keys[spec.name], m, n, k) for (m, n, k) in spec.shapes())
              for spec in tables}
    # Replaying, a shard without its journal counts as absent too: its checksum cannot be verified (a
    # shard written before checksums were recorded), and serving it again costs nothing.
    journals = first.backend == "replay"
    absent = absent_paths(shards, folder_of=lambda shard: Path(shard.path).parent, journals=journals)
    parked = absent - absent_paths(shards, folder_of=lambda shard: rawstore.parked_path(shard.path).parent,
                                   journals=journals)
    return Plan(device_lines=device_lines(params, covered=tables, backend=first.backend, path=params_path),
                tables=tables, backend=first.backend, backend_line="\n".join(lines), keys=keys,
                recordings=recordings, skipped=skipped, dispatches=active, skipped_dispatches=skipped_dispatches,
                shards=shards, absent=absent, parked=parked,
                selectors=tuple(spec for spec in selectors if not missing[spec.name]),
                skipped_selectors={name: f"the recording of table {', '.join(names)} is absent"
                                   for name, names in missing.items() if names})


def device_lines(params: Mapping[str, Any], *, covered: Sequence[TableSpec], backend: str,
                 path: str | Path) -> tuple[str, ...]:
    """The banner's device lines: whose tables this run measures or replays (``covered``: the tables it does), and
    every declared device left as committed, with why (no recording yet, or another device's GPU)."""
    devices = [spec.key for spec in device_specs(dict(params), path=path)]
    if not devices:
        return ()
    if backend == "cuda":
        found = live_device(params)
        measured = found if found in devices else devices[0]
        what = f"recognised as {found}" if found else "which matches no declared device"
        lines = [f"DEVICE {measured}: its tables are measured on this GPU ({device_name()}, {what})"]
        return tuple(lines + [f"SKIPPING device {device}: this GPU is {measured}; its tables stay as committed"
                              for device in devices if device != measured])
    primary, names = devices[0], [spec.name for spec in covered]
    missing = [base for base in base_tables(params) if base not in names]
    lines = [f"DEVICE {primary}: its tables replay its recordings (data/recordings/{primary}_<table>.parquet)"
             if not missing else
             f"DEVICE {primary}: tables {', '.join(n for n in names if split_device_table(n)[1] is None) or 'none'} "
             f"replay its recordings; not recorded here: {', '.join(missing)} (they stay as committed)"]
    for device in devices[1:]:
        lines.append(replayed_device_line(params, device=device, primary=primary, names=names))
    return tuple(lines)


def replayed_device_line(params: Mapping[str, Any], *, device: str, primary: str, names: Sequence[str]) -> str:
    """One banner line of a device besides the primary one in a replayed run (``names``: the tables it replays):
    its tables, whole or partial; or none, and then whether it has committed tables of its own."""
    mine = [name for name in names if split_device_table(name)[1] == device]
    committed = [name for name in params.get("tables") or {} if split_device_table(name)[1] == device]
    if not mine and committed:     # its manifests are here, its recordings are not: nothing to rebuild them from
        return (f"SKIPPING device {device}: no recording here (data/recordings/{device}_<table>.parquet); its tables "
                f"{', '.join(committed)} stay as committed")
    if not mine:
        return (f"SKIPPING device {device}: no recording yet (data/recordings/{device}_<table>.parquet: "
                f"scripts/device_record_h100.sh on that GPU); its tables stay as committed (the runtime serves it "
                f"{primary}'s: docs/devices.md)")
    present = ", ".join(Path(recording_path(device=device, table=split_device_table(name)[0])).name for name in mine)
    if device in complete_devices(params, names):
        return (f"DEVICE {device}: its tables replay its recordings ({present}), with its own dispatch lists and "
                "selectors")
    missing = [base for base in base_tables(params) if device_table_name(base=base, device=device) not in mine]
    if len(committed) > len(mine):
        return (f"DEVICE {device}: tables {', '.join(mine)} replay its recordings ({present}); not recorded here: "
                f"{', '.join(n for n in committed if n not in mine)} (they stay as committed), so its dispatch lists "
                "and selectors are not rebuilt")
    return (f"DEVICE {device}: tables {', '.join(mine)} replay its recordings ({present}); not recorded yet: "
            f"{', '.join(missing)}, so its dispatch lists and selectors are not built and the runtime serves it "
            "its fallback's tables whole (docs/devices.md)")


def live_device(params: Mapping[str, Any]) -> str | None:
    """The declared device the visible GPU is (None: none matches, or pycuda cannot say)."""
    try:
        return recognised_device(dict(params))
    except ImportError:
        return None


def absent_paths(shards: Mapping[str, Sequence[Shard]], *, folder_of: Callable[[Shard], Path],
                 journals: bool = False) -> frozenset[str]:
    """The shards (by results/raw path) whose file (with ``journals``: or journal) is not in ``folder_of(shard)``,
    from one listing per folder (not one stat per shard: tens of thousands of shards are parsed on every run)."""
    absent: set[str] = set()
    listings: dict[Path, set[str]] = {}
    for table_shards in shards.values():
        for shard in table_shards:
            folder = folder_of(shard)
            if folder not in listings:
                listings[folder] = {entry.name for entry in os.scandir(folder)} if folder.is_dir() else set()
            names = listings[folder]
            if f"{shard.stem}.pkl" not in names or (journals and f"{shard.stem}.journal.jsonl" not in names):
                absent.add(shard.path)
    return frozenset(absent)


def allow_missing() -> bool:
    """True when the user asked to run without the shards that need a GPU."""
    return os.environ.get(ALLOW_MISSING_ENV, "").strip().lower() in ("1", "true", "yes")


def leave_out(plan: Plan, shards: Sequence[Shard]) -> Plan:
    """The plan without ``shards`` (they are neither produced nor ranked; the banner names them)."""

    gone = {shard.path for shard in shards}
    kept = {table: tuple(shard for shard in table_shards if shard.path not in gone)
            for table, table_shards in plan.shards.items()}
    return replace(plan, shards=kept, absent=plan.absent - gone, parked=plan.parked - gone,
                   left_out=tuple(dict.fromkeys([*plan.left_out, *(shard.path for shard in shards)])))


def shard_paths(plan: Plan, *, table: str) -> list[str]:
    """Raw shard files of a table for the current content key, in params.yaml shape order."""
    plan.table(table)  # an unknown table is one clear error
    return [shard.path for shard in plan.shards[table]]


def absent_shards(plan: Plan) -> list[Shard]:
    """Shards of the current keys that are not in results/raw (a shard there is final)."""
    return [shard for spec in plan.tables for shard in plan.shards[spec.name] if shard.path in plan.absent]


def parked_shards(plan: Plan) -> list[Shard]:
    """Absent shards with a parked copy (results/parked): restored by a rename, never re-measured."""
    return [shard for shard in absent_shards(plan) if shard.path in plan.parked]


def missing_shards(plan: Plan) -> list[Shard]:
    """Shards to measure or replay: neither in results/raw nor parked."""
    return [shard for spec in plan.tables for shard in plan.shards[spec.name] if is_missing(plan, shard)]


def is_missing(plan: Plan, shard: Shard) -> bool:
    """True when a rule must measure or replay the shard: neither in results/raw nor parked."""
    return shard.path in plan.absent and shard.path not in plan.parked


def missing_by_table(plan: Plan) -> dict[str, list[Shard]]:
    """Missing shards grouped per table (tables with none are left out)."""
    grouped: dict[str, list[Shard]] = {}
    for shard in missing_shards(plan):
        grouped.setdefault(shard.table, []).append(shard)
    return grouped


def stale_raw(plan: Plan) -> list[str]:
    """What results/raw holds besides this plan's key folders: parked before this run's shards are counted."""
    return [str(path) for path in rawstore.stale_entries(current=plan.keys)]


def unrecorded_shards(plan: Plan, config: Mapping[str, Any]) -> list[Shard]:
    """Shards a replayed run must produce that its recording cannot serve (a shape or configuration never measured).

    Every configuration of the grid and the cuBLAS baseline must be recorded at the shape, with the
    table's kernel hash (what ``tunetable bench --backend replay`` requires). Read only when there are
    missing shards, so a no-op run never opens a recording.
    """
    if plan.backend != "replay":
        return []
    missing = missing_by_table(plan)
    if not missing:
        return []
    import polars as pl  # lazy: the Snakefile's parse imports this module; only this check reads parquet

    unrecorded = []
    for table, shards in missing.items():
        spec = plan.table(table)
        wanted = {*grid_config_ids(params=dict(config), table=spec), BASELINE_ID}
        # Checked whole first (tunetable.inputs): a corrupt recording is one line naming it, not a polars error.
        columns = ["table", "M", "N", "K", "config_id", "kernel_hash"]
        rows = (pl.from_pandas(read_recording_columns(plan.recordings[table], columns=columns))
                .filter((pl.col("table") == spec.base) & (pl.col("kernel_hash") == kernel_source_hash(spec.kernel))))
        recorded: dict[tuple[int, int, int], set[str]] = {}
        for m, n, k, config_id in rows.select("M", "N", "K", "config_id").iter_rows():
            recorded.setdefault((int(m), int(n), int(k)), set()).add(str(config_id))
        unrecorded += [shard for shard in shards if not wanted <= recorded.get((shard.m, shard.n, shard.k), set())]
    return unrecorded


def live_without_gpu(plan: Plan) -> list[Shard]:
    """A live plan's shards to measure when no GPU is visible here (run locally, they would fail after compiling)."""

    return missing_shards(plan) if plan.backend == "cuda" and not gpu_visible() else []
