"""What the Snakefile needs at parse time: the plan (tables, backend, content keys) and target lists.

Parsing must stay cheap and deterministic (a cluster job re-parses the Snakefile): no CUDA
context, no network. The backend is resolved once here, so a replayed run never asks for the
compile stage and a live run asks for exactly one GPU per bench job.

A raw shard's path carries the content key of everything that produced it, so a shard on disk is
final: only missing shards get a producing rule. Existing ones are inputs flagged ``before_update``
(Snakemake then searches no producer for them), so nothing upstream (a re-created compile report
after a fresh clone, a forced rule) can re-measure them.

Scale (tens of thousands of shards): Snakemake checks a requested file against every output of a
candidate rule, formats every wildcard constraint into the output pattern, and costs ~0.4 ms per job
and per input it checks. So no rule lists an unbounded number of outputs (replay serves at most
REPLAY_CHUNK shards per job, a live bench job measures at most LIVE_CHUNK), no constraint lists shard
names, existing shards are ``before_update`` inputs (never looked up), and only rank takes every
shard as an input (metrics take one per table, for the content key). Both DAGs grow linearly.

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

import copy
import fcntl
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunetable import paths, rawstore
from tunetable.bench.plan import gpu_visible, resolve_backend, sidecar_path
from tunetable.dvc_cache import CacheReport, cache_reproduced_outs  # noqa: F401 - the Snakefile's onsuccess
from tunetable.errors import TuneTableError
from tunetable.keys import canonical_json, kernel_source_hash, sha256_file, sha256_text
from tunetable.params import (  # noqa: F401 - the Snakefile validates with SCHEMA_PATH
    SCHEMA_PATH,
    DispatchSpec,
    SelectorSpec,
    TableSpec,
    dispatch_specs,
    load_params,
    selector_specs,
    table_specs,
)
from tunetable.results import BASELINE_ID
from tunetable.run_summary import summary
from tunetable.shardkey import grid_config_ids, shard_key

# The CLI as the interpreter running Snakemake sees it: works without an activated venv.
CLI = f"{shlex.quote(sys.executable)} -m tunetable"
# Live bench jobs claim a free GPU first (Snakemake assigns no device ids): see pipeline/gpu_claim.py.
GPU_CLAIM = f"{shlex.quote(sys.executable)} -m tunetable.gpu_claim "
# Parks other keys' shards outside results/raw and restores parked ones (pipeline/rawstore.py).
RAWSTORE = f"{shlex.quote(sys.executable)} -m tunetable.rawstore"
STAMPS = paths.RESULTS / "stamps"
# Appended to a rule's shell command whose output goes to {log}: when the command fails, its error
# lines (the CLI's `error: ...`), else the log's last lines, reach the terminal too, and the status stays.
SHOW_ERRORS = " || {{ status=$?; grep -h '^error: ' {log} >&2 || tail -n 5 {log} >&2; exit $status; }}"
RUN_LOCK = Path(".snakemake") / "tunetable-run.lock"
_RUN_LOCK_HANDLE: Any = None  # held (fcntl) for the life of the snakemake process that parsed the Snakefile
KEY_PATTERN = "[0-9a-f]{16}"
# Missing shards one replay job serves at most: Snakemake matches a requested shard against at most
# this many outputs of its rule (so the DAG grows linearly), and one process start (~0.8 s) serves
# this many shards (~3 ms each). docs/workflow.md, "How it is wired", names this number.
REPLAY_CHUNK = 100
# A live bench job measures up to LIVE_CHUNK missing shards of one table in one process (one CUDA context,
# one compile report read; Snakemake itself costs ~0.4 ms per job, so one job per shard made the DAG of
# 20 k missing shards 15 s), and a table's shards are cut into at least LIVE_SPREAD windows (a job each)
# while it has that many, so that a host with several GPUs (--resources gpu=N) keeps each busy.
LIVE_CHUNK = 20
LIVE_SPREAD = 8
# Minutes one live shard may take (SLURM's `runtime` of a bench job is this times its shards, unless a
# profile's set-resources gives `bench: runtime:` per shard).
LIVE_SHARD_MINUTES = 20
NO_RECORDING = "no-recording.parquet"  # what a live plan passes when no table names a recording (never read)
# Set to 1 to run without the shards that need a GPU (no GPU here, not in the recording): the rest is kept.
ALLOW_MISSING_ENV = "TUNETABLE_ALLOW_MISSING"
SHOWN_SHARDS = 3


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

    params = dict(config)
    declared = tuple(table_specs(params, path=params_path))
    dispatch = tuple(dispatch_specs(params, path=params_path))
    selectors = tuple(selector_specs(params, path=params_path))
    check_manifest_paths([*declared, *dispatch, *selectors], path=params_path)
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
    # A selector is built from its tables' recordings (never from this run's shards): it needs them all.
    by_name = {spec.name: spec for spec in declared}
    missing = {spec.name: [t for t in spec.tables if skip_reason(by_name[t]) is not None] for spec in selectors}
    shards = {spec.name: tuple(Shard(spec.name, keys[spec.name], m, n, k) for (m, n, k) in spec.shapes())
              for spec in tables}
    # Replaying, a shard without its journal counts as absent too: its checksum cannot be verified (a
    # shard written before checksums were recorded), and serving it again costs nothing.
    journals = first.backend == "replay"
    absent = absent_paths(shards, folder_of=lambda shard: Path(shard.path).parent, journals=journals)
    parked = absent - absent_paths(shards, folder_of=lambda shard: rawstore.parked_path(shard.path).parent,
                                   journals=journals)
    return Plan(tables=tables, backend=first.backend, backend_line="\n".join(lines), keys=keys,
                recordings=recordings, skipped=skipped, dispatches=active, skipped_dispatches=skipped_dispatches,
                shards=shards, absent=absent, parked=parked,
                selectors=tuple(spec for spec in selectors if not missing[spec.name]),
                skipped_selectors={name: f"the recording of table {', '.join(names)} is absent"
                                   for name, names in missing.items() if names})


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
    lines += [f"SKIPPING selector {name}: {why}; manifests/{name}.yaml and its generated list stay as committed"
              for name, why in plan.skipped_selectors.items()]
    if plan.left_out:
        lines.append(left_out_line(plan).removeprefix("tunetable: "))
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


def closing_summary(plan: Plan, config: Mapping[str, Any]) -> str:
    """The lines a successful run ends with: shards served, each table's figures, what changed (run_summary)."""

    served = {table: len(shards) for table, shards in missing_by_table(plan).items()}
    targets = {spec.codegen.target for spec in (*table_specs(dict(config)), *dispatch_specs(dict(config)))}
    names = [spec.name for spec in (*plan.tables, *plan.dispatches)]
    return summary(served=served, restored=len(parked_shards(plan)), backend=plan.backend, names=names,
                   pathspecs=["manifests", *sorted(targets), str(paths.RESULTS / "metrics"),
                              str(paths.RESULTS / "plots")])


def left_out_line(plan: Plan) -> str:
    """The line naming the shards a run goes without (TUNETABLE_ALLOW_MISSING=1)."""
    return (f"tunetable: LEAVING OUT {shard_list(plan.left_out)} ({ALLOW_MISSING_ENV}=1: they need a GPU); "
            "their shapes have no measurement in this run")


def manifest_path(table: str) -> Path:
    """The checked-in manifest of a table."""
    return Path("manifests") / f"{table}.yaml"


def select_stamp(table: str) -> Path:
    """Stamp written after select rewrote manifests/<table>.yaml (holds its sha256)."""
    return STAMPS / "select" / f"{table}.sha256"


def metrics_stamp(table: str) -> Path:
    """Stamp written after metrics rewrote a table's metrics JSON, plot CSV and PNG (holds their sha256)."""
    return STAMPS / "metrics" / f"{table}.sha256"


def report_plot(table: str) -> Path:
    """A copy of the table's plot for `snakemake --report` (an output Snakemake may delete; not checked in)."""
    return paths.RESULTS / "report" / f"{table}.png"


def stamp_matches(stamp: str | Path) -> bool:
    """True when every file a ``sha256sum`` stamp lists is present with the recorded hash."""

    try:
        lines = Path(stamp).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    listed = [line.split(None, 1) for line in lines if line.strip() and not line.startswith("#")]
    if not listed:
        return False
    for entry in listed:
        if len(entry) != 2 or not Path(entry[1].lstrip("*")).is_file():
            return False
        if sha256_file(entry[1].lstrip("*")) != entry[0]:
            return False
    return True


def drop_stale_stamps(plan: Plan) -> list[str]:
    """Remove each metrics stamp whose checked-in files are missing or changed, so that the rule runs again.

    Checked-in files are never Snakemake outputs (Snakemake deletes outputs before a job and after a
    failure); the stamp stands for them, so it is only as good as the files it lists.
    """
    dropped = []
    for spec in (*plan.tables, *plan.dispatches):
        stamp = metrics_stamp(spec.name)
        if stamp.is_file() and not stamp_matches(stamp):
            stamp.unlink()
            dropped.append(str(stamp))
    return dropped


def release_stale_locks(*, workdir: str | Path = ".") -> list[str]:
    """Remove Snakemake's locks when no other run holds this working copy: a killed run's locks, left behind.

    Every snakemake run of this Snakefile holds an fcntl lock on .snakemake/tunetable-run.lock for its
    whole life (the kernel drops it when the process dies, SIGKILL included). Taking it proves that no
    other run is active here, so any Snakemake lock file is stale; failing to take it leaves everything
    to Snakemake's own locking.
    """

    global _RUN_LOCK_HANDLE
    root = Path(workdir)
    if _RUN_LOCK_HANDLE is None:
        (root / RUN_LOCK).parent.mkdir(parents=True, exist_ok=True)
        handle = open(root / RUN_LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return []
        _RUN_LOCK_HANDLE = handle
    locks = sorted((root / ".snakemake" / "locks").glob("*.lock"))
    for lock in locks:
        lock.unlink(missing_ok=True)
    return [str(lock) for lock in locks]


def codegen_stamp() -> Path:
    """Stamp written after codegen rewrote and re-checked every generated table."""
    return STAMPS / "codegen.ok"


def shard_paths(plan: Plan, *, table: str) -> list[str]:
    """Raw shard files of a table for the current content key, in params.yaml shape order."""
    plan.table(table)  # an unknown table is one clear error
    return [shard.path for shard in plan.shards[table]]


def shard_inputs(plan: Plan, *, table: str, existing: Callable[[str], Any]) -> list[Any]:
    """A table's shards as rule inputs: existing ones wrapped in ``existing`` (the Snakefile passes
    ``before_update``: no producer is searched for them), missing ones plain (their rule makes them)."""
    return [as_input(plan, path=path, existing=existing) for path in shard_paths(plan, table=table)]


def as_input(plan: Plan, *, path: str, existing: Callable[[str], Any]) -> Any:
    """A shard path as a rule input: wrapped in ``existing`` when it is on disk, plain when a rule makes it."""
    return path if path in plan.absent else existing(path)


def key_shard_inputs(plan: Plan, *, tables: Sequence[str], existing: Callable[[str], Any]) -> list[Any]:
    """One shard of each table (its first), as ``shard_inputs`` wraps it: what metrics needs for the content key.

    Metrics read the ranked table, never the shards; listing every shard would cost Snakemake a
    producer search or an mtime check per shard (tens of thousands) for a path it only takes a folder
    name from. The ranked parquet, a rank output, changes whenever a shard does.
    """
    return [as_input(plan, path=plan.shards[table][0].path, existing=existing) for table in tables
            if plan.shards[table]]


def measure_inputs(plan: Plan, *, existing: Callable[[str], Any]) -> list[Any]:
    """What ``measure_all`` asks for: every existing shard (wrapped in ``existing``) and one output of each
    job that makes the missing ones (a replay job makes all of its shards: asking for each again would
    cost a producer search per shard; measure_all has no output, so its input list may change)."""
    present = [existing(shard.path) for spec in plan.tables for shard in plan.shards[spec.name]
               if shard.path not in plan.absent]
    made = [shards[0].path for _, shards in restore_jobs(plan)]
    return present + made + replay_targets(plan) + [job.shards[0].path for job in live_jobs(plan)]


def replay_targets(plan: Plan) -> list[str]:
    """One journal per replay job: asked for by name, so a job runs when its shards are missing and also
    when only their journals are (a shard written before checksums: Snakemake re-runs a job for the
    outputs requested from it, not for its other missing outputs)."""
    return [job.shards[0].journal for job in replay_jobs(plan)] if plan.backend == "replay" else []


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


def stale_raw(plan: Plan) -> list[str]:
    """What results/raw holds besides this plan's key folders: parked before this run's shards are counted."""
    return [str(path) for path in rawstore.stale_entries(current=plan.keys)]


def park_inputs(plan: Plan) -> list[str]:
    """The park stamp, when results/raw holds other keys' shards (measure_all and all ask for it)."""
    return [park_stamp()] if stale_raw(plan) else []


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
        rows = (pl.read_parquet(plan.recordings[table], columns=["table", "M", "N", "K", "config_id", "kernel_hash"])
                .filter((pl.col("table") == table) & (pl.col("kernel_hash") == kernel_source_hash(spec.kernel))))
        recorded: dict[tuple[int, int, int], set[str]] = {}
        for m, n, k, config_id in rows.select("M", "N", "K", "config_id").iter_rows():
            recorded.setdefault((int(m), int(n), int(k)), set()).add(str(config_id))
        unrecorded += [shard for shard in shards if not wanted <= recorded.get((shard.m, shard.n, shard.k), set())]
    return unrecorded


def live_without_gpu(plan: Plan) -> list[Shard]:
    """A live plan's shards to measure when no GPU is visible here (run locally, they would fail after compiling)."""

    return missing_shards(plan) if plan.backend == "cuda" and not gpu_visible() else []


def shard_list(shards: Sequence[Shard | str], *, bare: bool = False) -> str:
    """``5 shards (gemm_mma M77_N4096_K4096, M77_N14336_K4096, ... and 2 more)``, per table (bare: no count)."""
    by_table: dict[str, list[str]] = {}
    for shard in shards:
        table, stem = ((shard.table, shard.stem) if isinstance(shard, Shard)
                       else (Path(shard).parent.parent.name, Path(shard).stem))
        by_table.setdefault(table, []).append(stem)
    parts = []
    for table, stems in by_table.items():
        more = f" and {len(stems) - SHOWN_SHARDS} more" if len(stems) > SHOWN_SHARDS else ""
        parts.append(f"{table} {', '.join(stems[:SHOWN_SHARDS])}{more}")
    count = sum(len(stems) for stems in by_table.values())
    return "; ".join(parts) if bare else f"{count} shard{'s' if count != 1 else ''} ({'; '.join(parts)})"


def needs_gpu_line(shards: Sequence[Shard], plan: Plan) -> str:
    """The one line said before any work when shards need a GPU and none is visible: which, and what to do."""
    if plan.backend == "replay":
        where = ", ".join(sorted({str(plan.recordings[s.table]) for s in shards}))
        why = f"{shard_list(shards, bare=True)} are not in {where}"
        keep = f"or keep the rest: {ALLOW_MISSING_ENV}=1 snakemake --cores 2 (or dvc repro)"
    else:
        why = f"{shard_list(shards, bare=True)} are to be measured live (backend cuda)"
        keep = "or submit them with `--workflow-profile profiles/slurm`, or replay: --config 'bench={backend: replay}'"
    return (f"tunetable: {len(shards)} shard{'s' if len(shards) != 1 else ''} need a GPU and none is visible here: "
            f"{why}. Measure them on a GPU host (`snakemake --cores N` there, or `bash scripts/device_session.sh "
            f"bench` to record them for replay), {keep}.")


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


def park_stamp() -> str:
    """Temporary flag of the job that parked other keys' shards (measure_all needs it only when there are some)."""
    return str(STAMPS / "parked.ok")


def missing_by_table(plan: Plan) -> dict[str, list[Shard]]:
    """Missing shards grouped per table (tables with none are left out)."""
    grouped: dict[str, list[Shard]] = {}
    for shard in missing_shards(plan):
        grouped.setdefault(shard.table, []).append(shard)
    return grouped


@dataclass(frozen=True)
class ShardBatch:
    """One measuring rule: missing shards of one table, served (replay) or measured (bench) by one process."""

    name: str                  # <verb>_<table>, or <verb>_<table>_part<i> when a table needs several
    table: str
    shards: tuple[Shard, ...]
    log: str


def shard_batches(plan: Plan, *, verb: str, size: Callable[[int], int]) -> list[ShardBatch]:
    """Each table's shards in shape order, cut into windows of ``size(table's shard count)``; a rule per window
    holding missing shards (those only), named ``<verb>_<table>`` or ``<verb>_<table>_part<i>`` (i: the window).

    Windows over every shard of the table, not over the missing ones: a cluster job re-parses the
    Snakefile when it starts, after other jobs may have finished, and must find its rule with the same
    name and outputs (a window's missing shards are made by its own job only).
    """
    jobs = []
    for spec in plan.tables:
        shards = plan.shards[spec.name]
        windows = chunks(shards, size=size(len(shards)))
        folder = STAMPS.parent / "logs" / "bench" / spec.name / plan.keys[spec.name]
        for index, window in enumerate(windows, start=1):
            missing = tuple(shard for shard in window if is_missing(plan, shard))
            suffix = f"_part{index}" if len(windows) > 1 else ""
            if missing:
                jobs.append(ShardBatch(name=f"{verb}_{spec.name}{suffix}", table=spec.name, shards=missing,
                                       log=str(folder / f"{verb}{suffix}.log")))
    return jobs


def replay_jobs(plan: Plan, *, chunk: int = REPLAY_CHUNK) -> list[ShardBatch]:
    """The replay rules of a run: each table's shards in windows of REPLAY_CHUNK, a rule per window missing any."""
    return shard_batches(plan, verb="replay", size=lambda _count: chunk) if plan.backend == "replay" else []


def live_chunk_size(count: int, *, chunk: int = LIVE_CHUNK, spread: int = LIVE_SPREAD) -> int:
    """Shards per live bench window of a table of ``count`` shards: at most ``chunk``, at least ``spread`` windows."""
    return max(1, min(chunk, count // spread))  # floor: count // size >= spread windows


def live_jobs(plan: Plan, *, chunk: int = LIVE_CHUNK, spread: int = LIVE_SPREAD) -> list[ShardBatch]:
    """The live bench rules of a run: each table's shards in windows of live_chunk_size, a rule per window to make."""
    if plan.backend != "cuda":
        return []
    return shard_batches(plan, verb="bench", size=lambda count: live_chunk_size(count, chunk=chunk, spread=spread))


def bench_resources(*, shards: int) -> dict[str, int]:
    """A live bench rule's own resources: one GPU, LIVE_SHARD_MINUTES per shard."""
    return {"gpu": 1, "runtime": LIVE_SHARD_MINUTES * shards}


def apply_bench_profile(resources: Any, overrides: Mapping[str, Any], *, shards: int) -> None:
    """Give a bench rule a profile's ``set-resources: bench:``, as Snakemake does for a rule named bench (the
    bench rules are named per chunk); ``runtime`` there is minutes per shard, times the rule's ``shards``."""
    given = overrides.get("bench")
    if not given:
        return
    resources.update(given)
    runtime = given.get("runtime")
    if runtime is not None and not runtime.is_evaluable() and isinstance(runtime.value, int):
        resources["runtime"] = runtime.value * shards


def restore_jobs(plan: Plan, *, chunk: int = REPLAY_CHUNK) -> list[tuple[str, tuple[Shard, ...]]]:
    """(rule name, shards) of the rules that rename parked shards back, REPLAY_CHUNK per rule."""
    parts = chunks(parked_shards(plan), size=chunk)
    return [(f"restore_parked{f'_part{index}' if len(parts) > 1 else ''}", part)
            for index, part in enumerate(parts, start=1)]


def chunks(shards: Sequence[Shard], *, size: int) -> list[tuple[Shard, ...]]:
    """``shards`` in order, cut into tuples of at most ``size``."""
    return [tuple(shards[start:start + size]) for start in range(0, len(shards), size)]


def shape_options(shards: list[Shard]) -> str:
    """``--shape M,N,K`` for each shard, as one shell fragment."""
    return " ".join(f"--shape {shard.shape_arg}" for shard in shards)


def compile_stamp(*, table: str, key: str) -> str:
    """Stamp of a table's grid file + compile report for one content key."""
    return str(STAMPS / "compile" / table / f"{key}.ok")


def replay_inputs(plan: Plan, *, table: str) -> list[str]:
    """A table's recording and its provenance sidecar."""

    recording = plan.recordings[table]
    return [str(recording), str(sidecar_path(recording))]


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
    files: list[str] = [str(select_stamp(spec.name)) for spec in (*plan.tables, *plan.dispatches, *plan.selectors)]
    files += [str(manifest_path(name)) for name in (*plan.skipped, *plan.skipped_dispatches, *plan.skipped_selectors)]
    for spec in (*table_specs(params), *dispatch_specs(params), *selector_specs(params)):
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


def selector_inputs(spec: SelectorSpec, *, params: Mapping[str, Any]) -> list[str]:
    """What a selector is built from: each of its tables' recording and provenance sidecar."""

    found = []
    for table in spec.tables:
        recording = Path(params["tables"][table]["recording"])
        found += [str(recording), str(sidecar_path(recording))]
    return found


def selector_settings(config: Mapping[str, Any], *, name: str) -> dict[str, Any]:
    """What a selector manifest depends on besides the recordings: its tables, their shapes and families, its size."""
    spec = dict((config.get("selector") or {})[name])
    tables = {t: {"family": config["tables"][t]["family"], "shapes": config["tables"][t]["shapes"]}
              for t in spec.get("tables") or ()}
    return {"tables": tables, "candidates": spec.get("candidates")}


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


def metrics_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What metrics depend on besides their inputs: every table's declared shapes (a shape the run leaves
    out, or one reverted, changes the metrics while the shard list may stay the same)."""
    return {name: spec.get("shapes") for name, spec in config["tables"].items()}


def codegen_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every table's and dispatch list's codegen settings, and what the builds region renders."""
    settings = {name: spec["codegen"] for name, spec in config["tables"].items()}
    settings.update({name: spec["codegen"] for name, spec in (config.get("dispatch") or {}).items()})
    tables = {name: [spec["family"], spec.get("arch")] for name, spec in config["tables"].items()}
    settings["builds"] = {"region": config.get("builds"), "flags": (config.get("compile") or {}).get("nvcc_flags"),
                          "tables": tables}
    settings.update({name: spec["codegen"] for name, spec in (config.get("selector") or {}).items()})
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
