"""What the Snakefile needs at parse time: the plan (tables, backend, content keys) and target lists.

Parsing must stay cheap and deterministic (a cluster job re-parses the Snakefile): no CUDA
context, no network. The backend is resolved once here, so a replayed run never asks for the
compile stage and a live run asks for exactly one GPU per bench job.

A raw shard's path carries the content key of everything that produced it, so a shard on disk is
final: only missing shards get a producing rule. Existing ones are plain inputs, and nothing
upstream (a re-created compile report after a fresh clone, a forced rule) can re-measure them.

Without a GPU the tables replay their recordings (``tables.<name>.recording``). A table whose
recording is absent (a new table not measured on a GPU yet) is left out of the run and the banner
says so: its checked-in manifest and generated list stay as committed, and so does every dispatch
list that names it. With a GPU every declared table is measured.

Checked-in files (manifests/*.yaml, kernels/tuning_configs.py) are never Snakemake outputs:
Snakemake deletes a job's outputs before it runs and after it fails, which would delete reviewed
files. The select and codegen rules write them in place (atomically, through the CLI) and declare
a stamp under results/stamps/ as their output.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable import paths, rawstore
from tunetable.dvc_cache import CacheReport, cache_reproduced_outs  # noqa: F401 - the Snakefile's onsuccess
from tunetable.errors import TuneTableError
from tunetable.keys import canonical_json, sha256_text
from tunetable.params import (  # noqa: F401 - the Snakefile validates with SCHEMA_PATH
    SCHEMA_PATH,
    DispatchSpec,
    TableSpec,
    dispatch_specs,
    load_params,
    table_specs,
)

# The CLI as the interpreter running Snakemake sees it: works without an activated venv.
CLI = f"{shlex.quote(sys.executable)} -m tunetable"
# Live bench jobs claim a free GPU first (Snakemake assigns no device ids): see pipeline/gpu_claim.py.
GPU_CLAIM = f"{shlex.quote(sys.executable)} -m tunetable.gpu_claim "
# Parks other keys' shards outside results/raw and restores parked ones (pipeline/rawstore.py).
RAWSTORE = f"{shlex.quote(sys.executable)} -m tunetable.rawstore"
STAMPS = paths.RESULTS / "stamps"
KEY_PATTERN = "[0-9a-f]{16}"
NO_RECORDING = "no-recording.parquet"  # what a live plan passes when no table names a recording (never read)


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

    def table(self, name: str) -> TableSpec:
        """The TableSpec of a table this run covers."""
        for spec in self.tables:
            if spec.name == name:
                return spec
        why = f": {self.skipped[name]}" if name in self.skipped else ""
        raise TuneTableError(f"table '{name}' is not part of this run{why}", path="params.yaml", where="tables")


def check_params_file(path: str | Path) -> None:
    """Load and validate params.yaml before Snakemake does, so a bad file fails with one clear line."""
    load_params(path)


def check_manifest_paths(specs: Sequence[TableSpec | DispatchSpec], *, path: str | Path) -> None:
    """Each table's (and dispatch list's) manifest must be manifests/<name>.yaml: the rules derive it."""
    for spec in specs:
        expected = manifest_path(spec.name)
        if Path(spec.codegen.manifest) != expected:
            section = "dispatch" if isinstance(spec, DispatchSpec) else "tables"
            raise TuneTableError(
                f"manifest must be {expected} (the pipeline derives it from the name)",
                path=path, where=f"{section}.{spec.name}.codegen.manifest",
            )


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


def make_plan(config: Mapping[str, Any], *, params_path: str | Path = "params.yaml") -> Plan:
    """Resolve backend, covered tables and content keys (the Snakefile calls this once per parse)."""
    from tunetable.bench.plan import gpu_visible, resolve_backend, shard_key

    params = dict(config)
    declared = tuple(table_specs(params, path=params_path))
    dispatch = tuple(dispatch_specs(params, path=params_path))
    check_manifest_paths([*declared, *dispatch], path=params_path)
    requested = str((config.get("bench") or {}).get("backend", "auto"))
    live = requested == "cuda" or (requested == "auto" and gpu_visible())
    # Replaying, the first table whose recording is present speaks for the backend; with none
    # present, the first table naming one gives the error (no such recording).
    probe = next((spec for spec in declared if skip_reason(spec) is None), None)
    probe = probe or next((spec for spec in declared if spec.recording is not None), declared[0])
    recording = Path(probe.recording) if probe.recording is not None else None
    if recording is None and not live:
        recording = recording_of(probe, path=params_path)  # raises: no table names a recording
    first = resolve_backend(requested=requested, recording=recording or Path(NO_RECORDING))
    if first.backend == "cuda":
        tables, skipped, lines, recordings = declared, {}, [first.reason], {}
    else:
        tables = tuple(spec for spec in declared if skip_reason(spec) is None)
        skipped = {spec.name: str(skip_reason(spec)) for spec in declared if skip_reason(spec) is not None}
        recordings = {spec.name: recording_of(spec, path=params_path) for spec in tables}
        lines = [resolve_backend(requested=requested, recording=recordings[spec.name]).reason for spec in tables]
    keys = {spec.name: shard_key(params, spec, first.backend) for spec in tables}
    covered = {spec.name for spec in tables}
    active = tuple(spec for spec in dispatch if covered.issuperset(spec.tables))
    skipped_dispatches = {
        spec.name: f"table {', '.join(t for t in spec.tables if t not in covered)} is not part of this run"
        for spec in dispatch if spec not in active
    }
    return Plan(tables=tables, backend=first.backend, backend_line="\n".join(lines), keys=keys,
                recordings=recordings, skipped=skipped, dispatches=active, skipped_dispatches=skipped_dispatches)


def banner(plan: Plan) -> str:
    """The loud line printed at the start and end of a run: replayed or measured live."""
    if plan.backend == "replay":
        what = "REPLAYING the committed recording (no GPU timing happens in this run)"
    else:
        what = "MEASURING LIVE on the GPU"
    lines = [what, *plan.backend_line.splitlines()]
    lines += [f"SKIPPING table {name}: {why}; manifests/{name}.yaml and its generated list stay as committed"
              for name, why in plan.skipped.items()]
    lines += [f"SKIPPING dispatch list {name}: {why}; manifests/{name}.yaml and its generated list stay as committed"
              for name, why in plan.skipped_dispatches.items()]
    return "\n".join(f"tunetable: {line}" for line in lines)


def dvc_cache_line(report: CacheReport) -> str:
    """What the main job did for `dvc status` (empty when there is nothing to say)."""
    lines = []
    if report.cached:
        lines.append(f"stored the outs of DVC stage(s) {', '.join(report.cached)} in the DVC cache: they match "
                     "dvc.lock, so `dvc status` and `dvc repro` have nothing to do")
    if report.changed:
        lines.append(f"DVC stage(s) {', '.join(report.changed)} differ from dvc.lock: `dvc repro` records them")
    return "\n".join(f"tunetable: {line}" for line in lines)


def manifest_path(table: str) -> Path:
    """The checked-in manifest of a table."""
    return Path("manifests") / f"{table}.yaml"


def select_stamp(table: str) -> Path:
    """Stamp written after select rewrote manifests/<table>.yaml (holds its sha256)."""
    return STAMPS / "select" / f"{table}.sha256"


def codegen_stamp() -> Path:
    """Stamp written after codegen rewrote and re-checked every generated table."""
    return STAMPS / "codegen.ok"


def shard_paths(plan: Plan, *, table: str) -> list[str]:
    """Raw shard files of a table for the current content key, in params.yaml shape order."""
    key = plan.keys[table]
    return [str(paths.raw_shard(table, key, m, n, k)) for (m, n, k) in plan.table(table).shapes()]


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

    @property
    def path(self) -> str:
        """Where the shard lives."""
        return str(paths.raw_shard(self.table, self.key, self.m, self.n, self.k))

    @property
    def shape_arg(self) -> str:
        """``M,N,K`` as the bench CLI takes it."""
        return f"{self.m},{self.n},{self.k}"


def absent_shards(plan: Plan) -> list[Shard]:
    """Shards of the current keys that are not in results/raw (a shard there is final)."""
    return [shard for spec in plan.tables for (m, n, k) in spec.shapes()
            for shard in [Shard(spec.name, plan.keys[spec.name], m, n, k)] if not Path(shard.path).is_file()]


def parked_shards(plan: Plan) -> list[Shard]:
    """Absent shards with a parked copy (results/parked): restored by a rename, never re-measured."""
    return [shard for shard in absent_shards(plan) if rawstore.parked_path(shard.path).is_file()]


def missing_shards(plan: Plan) -> list[Shard]:
    """Shards to measure or replay: neither in results/raw nor parked."""
    return [shard for shard in absent_shards(plan) if not rawstore.parked_path(shard.path).is_file()]


def stale_raw(plan: Plan) -> list[str]:
    """What results/raw holds besides this plan's key folders: parked before this run's shards are counted."""
    return [str(path) for path in rawstore.stale_entries(current=plan.keys)]


def park_stamp() -> str:
    """Temporary flag of the job that parked other keys' shards (measure_all needs it only when there are some)."""
    return str(STAMPS / "parked.ok")


def missing_by_table(plan: Plan) -> dict[str, list[Shard]]:
    """Missing shards grouped per table (tables with none are left out)."""
    grouped: dict[str, list[Shard]] = {}
    for shard in missing_shards(plan):
        grouped.setdefault(shard.table, []).append(shard)
    return grouped


def shape_options(shards: list[Shard]) -> str:
    """``--shape M,N,K`` for each shard, as one shell fragment."""
    return " ".join(f"--shape {shard.shape_arg}" for shard in shards)


def compile_stamp(*, table: str, key: str) -> str:
    """Stamp of a table's grid file + compile report for one content key."""
    return str(STAMPS / "compile" / table / f"{key}.ok")


def compile_stamp_of(shard: str) -> str:
    """The compile stamp a live shard (``<table>/<key>/<stem>``) needs."""
    table, key, _ = shard.split("/")
    return compile_stamp(table=table, key=key)


def missing_shard_pattern(plan: Plan) -> str:
    """Regex matching exactly the missing shards as ``<table>/<key>/<stem>``."""
    import re

    names = [f"{s.table}/{s.key}/{s.stem}" for s in missing_shards(plan)]
    return "(?:" + "|".join(re.escape(name) for name in names) + ")"


def replay_inputs(plan: Plan, *, table: str) -> list[str]:
    """A table's recording and its provenance sidecar."""
    from tunetable.bench.plan import sidecar_path

    recording = plan.recordings[table]
    return [str(recording), str(sidecar_path(recording))]


def all_shards(plan: Plan) -> list[str]:
    """Raw shard files of every table."""
    return [p for spec in plan.tables for p in shard_paths(plan, table=spec.name)]


def ranked_outputs(table: str) -> dict[str, str]:
    """The files ``tunetable rank`` writes for a table."""
    parquet = paths.ranked(table)
    return {
        "parquet": str(parquet),
        "csv": str(parquet.with_suffix(".csv")),
        "md": str(parquet.with_suffix(".md")),
        "failures": str(parquet.with_name(f"{table}.failures.csv")),
    }


def metrics_outputs(table: str) -> dict[str, str]:
    """The files ``tunetable metrics`` writes for a table."""
    csv = paths.plot_data(table)
    return {"json": str(paths.metrics(table)), "csv": str(csv), "png": str(csv.with_suffix(".png"))}


def codegen_inputs(plan: Plan, config: Mapping[str, Any]) -> list[str]:
    """Select stamps, snippets and targets: a hand edit of a generated file re-runs codegen.

    Codegen renders every declared table and dispatch list; the manifests of those this run leaves
    out are plain inputs (their select rule is not part of the run).
    """
    params = dict(config)
    files: list[str] = [str(select_stamp(spec.name)) for spec in (*plan.tables, *plan.dispatches)]
    files += [str(manifest_path(name)) for name in (*plan.skipped, *plan.skipped_dispatches)]
    for spec in (*table_specs(params), *dispatch_specs(params)):
        files.append(spec.codegen.snippet)
        files.extend(spec.codegen.variants.values())
        files.append(spec.codegen.target)
    return sorted(set(files), key=files.index)


def dispatch_ranked_options(spec: DispatchSpec) -> str:
    """``--ranked TABLE=PATH`` for each table of a dispatch list, as one shell fragment."""
    return " ".join(f"--ranked {table}={ranked_outputs(table)['parquet']}" for table in spec.tables)


def dispatch_inputs(spec: DispatchSpec) -> list[str]:
    """What a dispatch list is selected from: each table's ranked parquet and select stamp (its manifest)."""
    return [path for table in spec.tables for path in (ranked_outputs(table)["parquet"], str(select_stamp(table)))]


def fingerprint(value: Any) -> str:
    """Short stable hash of settings: a Snakemake ``params:`` value that changes only when they do."""
    return sha256_text(canonical_json(value))[:16]


def settings_tag(value: Any) -> str:
    """A shell comment carrying a settings fingerprint: Snakemake's code trigger (which compares the
    command template) then re-runs the rule when the settings change, with no ``params:`` block."""
    return f"  # settings {fingerprint(value)}"


def select_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What manifests depend on besides the ranked tables: select settings and each table's family."""
    return {"select": config.get("select"), "families": {n: s["family"] for n, s in config["tables"].items()}}


def codegen_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every table's and dispatch list's codegen settings."""
    settings = {name: spec["codegen"] for name, spec in config["tables"].items()}
    settings.update({name: spec["codegen"] for name, spec in (config.get("dispatch") or {}).items()})
    return settings


def dispatch_settings(config: Mapping[str, Any], *, name: str) -> dict[str, Any]:
    """What a dispatch manifest depends on besides its inputs: the list's tables and tie tolerance."""
    spec = dict((config.get("dispatch") or {})[name])
    return {"tables": spec.get("tables"), "tie_tolerance": spec.get("tie_tolerance", 0.0)}


def wildcard_constraints(plan: Plan) -> dict[str, str]:
    """Regexes for the rule wildcards: only declared tables and current keys match."""
    names = "|".join(sorted(spec.name for spec in plan.tables))
    keys = "|".join(sorted(set(plan.keys.values()))) or KEY_PATTERN
    return {"table": f"(?:{names})", "key": f"(?:{keys})"}
