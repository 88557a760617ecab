"""A table's measurement, planned in one place: backend, content key, shard jobs, search.

Everything ``tunetable bench`` and the Snakefile decide before a shard is measured lives here:

- the backend (``resolve_backend``: cuda, replay, or auto) and the recording a replay serves;
- the content key of a table's shards (``shard_key``: bench settings, grid, kernel source,
  toolchain, backend, device, recording, a budgeted search), so a changed input gets new paths;
- the shard jobs (``cuda_jobs`` from the compile report, with launch payloads; ``replay_jobs``
  straight from the grid), the replay's runner and the table's search (``plan_measurement``:
  ``Measurement``). ``tunetable bench`` hands the jobs to ``run_shards`` with the plan's
  ``ReplayRunner`` or a ``LiveRunner`` over its GPUs (peers behind ``tunetable.bench.runner.Runner``).

The search imports the bench and the bench never imports the search; this module, above both,
composes them. Light on purpose (no numpy, pandas or search at import): the Snakefile's parse
computes every table's key through ``shard_key``; what only a run needs is imported where it runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunetable import paths
from tunetable.bench.devices import device_name, gpu_visible, recognised_device
from tunetable.bench.runner import ShardJob
from tunetable.bench.tasks import (
    BenchSettings,
    ConfigTask,
    baseline_task,
    default_families,
    launch_payload,
    settings_from_params,
    tasks_from_reports,
)
from tunetable.device_tables import recording_device_error
from tunetable.errors import TuneTableError
from tunetable.inputs import load_json_file, sidecar_path
from tunetable.grid import DeviceLimits, expand
from tunetable.keys import git_revision, kernel_source_hash, nvcc_version, results_key, sha256_file, sha256_text
from tunetable.params import TableSpec

if TYPE_CHECKING:
    from tunetable.bench.replay import ReplayRunner

Shape = tuple[int, int, int]
BACKEND_CHOICES = ("cuda", "replay", "auto")
GIT_REV_ENV = "TUNETABLE_GIT_REV"   # the device machine gets a copy of the tree without .git
DEFAULT_RECORDING = "data/recordings/h200_gemm_mma.parquet"


# --- the recording a replay serves, and the backend ----------------------------------------------

def recording_path(*, table: TableSpec) -> Path:
    """The recording the replay backend serves for a table (params.yaml tables.<name>.recording)."""
    return Path(table.recording or DEFAULT_RECORDING)


def recording_provenance(recording: Path) -> dict[str, Any]:
    """The recording's provenance (device, driver, date, command, git rev, content keys)."""
    sidecar = sidecar_path(recording)
    if not recording.is_file():
        raise TuneTableError("no such recording (make one with `tunetable record` on a GPU)", path=recording)
    if not sidecar.is_file():
        raise TuneTableError("recording has no provenance sidecar", path=sidecar)

    provenance = load_json_file(sidecar)   # tunetable.inputs: size, UTF-8, depth and integer bounds
    if not isinstance(provenance, dict):
        raise TuneTableError("a recording's sidecar must be a JSON object", path=sidecar)
    return provenance


def check_recording_device(params: Mapping[str, Any], *, table: TableSpec, provenance: Mapping[str, Any],
                           recording: Path) -> None:
    """A device table's recording must have been made on that device (its sidecar's ``device``): one line if not."""
    if table.device is None:
        return
    recorded_on = provenance.get("device")
    why = recording_device_error(device=table.device, recorded_on=str(recorded_on) if recorded_on else None,
                                 params=params)
    if why is not None:
        raise TuneTableError(f"refused for table {table.name}: {why}", path=recording)


def check_live_device(params: Mapping[str, Any], *, table: TableSpec) -> None:
    """A device table is measured on that device's GPU only (an H200 never writes into ``gemm_mma.h100``)."""
    if table.device is None:
        return
    try:
        found = recognised_device(dict(params))
    except ImportError:        # no pycuda here: the measurement itself stops with its own error
        return
    if found != table.device:
        raise TuneTableError(f"table {table.name} is device {table.device}'s, and this GPU ({device_name()}) is "
                             f"{'device ' + found if found else 'no declared device'}: measure it on a {table.device}",
                             path="params.yaml", where=f"devices.{table.device}")


def recorded_nvcc(provenance: Mapping[str, Any]) -> str:
    """The nvcc build id(s) a recording was measured with (its sidecar's ``nvcc``)."""
    value = provenance.get("nvcc")
    values = value if isinstance(value, list) else [value] if value else []
    return ",".join(sorted(str(v) for v in values)) or "nvcc-unknown"


@dataclass(frozen=True)
class BackendChoice:
    """The backend a run uses and the line that says why (printed loudly by the CLI)."""

    backend: str
    reason: str
    provenance: dict[str, Any] = field(default_factory=dict)


def resolve_backend(*, requested: str, recording: Path) -> BackendChoice:
    """cuda or replay; ``auto`` is cuda when a GPU is visible, else replay of ``recording``."""
    if requested not in BACKEND_CHOICES:
        raise TuneTableError(f"unknown backend '{requested}' (one of {', '.join(BACKEND_CHOICES)})",
                             where="--backend")
    if requested == "cuda" or (requested == "auto" and gpu_visible()):
        why = "requested" if requested == "cuda" else "auto: a CUDA device is visible"
        return BackendChoice("cuda", f"backend cuda ({why}; device {device_name()})")
    provenance = recording_provenance(recording)
    why = "requested" if requested == "replay" else "auto: NO CUDA device visible"
    return BackendChoice(
        "replay",
        f"backend replay ({why}): serving {recording}, measured on {provenance.get('device')} "
        f"(driver {provenance.get('driver')}) on {provenance.get('date')}",
        provenance,
    )


# --- the content key -----------------------------------------------------------------------------

def toolchain_fingerprint(*, params: Mapping[str, Any], table: TableSpec, nvcc: str | None = None) -> str:
    """nvcc build id (this machine's unless given), flags and arch: what makes a cubin."""
    flags = " ".join((params.get("compile") or {}).get("nvcc_flags") or [])
    return f"{nvcc or nvcc_version()}|{flags}|{table.arch}"


def search_settings(*, table: TableSpec, path: str | Path = "params.yaml") -> Any:
    """The table's ``search:`` as a tunetable.search.SearchSettings; a bad value names its place."""
    # Lazy: the search package imports numpy and its strategies; the Snakefile's parse of a table
    # without a budgeted search (search_key_part's first test) must not pay for them.
    from tunetable.search import SearchSettings

    try:
        return SearchSettings.from_mapping(table.search)
    except TuneTableError:
        raise
    except ValueError as exc:
        raise TuneTableError(str(exc), path=path, where=f"tables.{table.name}.search") from None


def search_key_part(*, table: TableSpec, path: str | Path = "params.yaml") -> dict[str, Any] | None:
    """What a budgeted search adds to the content key; None for the default (measure everything)."""
    raw = dict(table.search or {})
    if raw.get("strategy", "exhaustive") == "exhaustive" and set(raw) <= {"strategy", "seed", "transfer"}:
        return None   # the default: every configuration measured, as without a search
    settings = search_settings(table=table, path=path)
    if settings.measures_everything:
        return None
    learn_hash = None
    if settings.learn_from is not None:
        if not Path(settings.learn_from).is_file():
            raise TuneTableError("no such recording to learn from", path=settings.learn_from,
                                 where=f"tables.{table.name}.search.learn_from")
        learn_hash = sha256_file(settings.learn_from)[:16]
    selector_hash = None
    if settings.seed_from_selector:   # the seeds come from the selector's tables' recordings
        from tunetable.selector_seeds import seed_recordings  # lazy: on the Snakefile's parse path, only when seeding
        selector_hash = sha256_text("".join(sha256_file(p) for p in seed_recordings(path=path)))[:16]
    return settings.fingerprint(learn_from_hash=learn_hash, selector_hash=selector_hash)


def grid_config_ids(*, params: Mapping[str, Any], table: TableSpec) -> list[str]:
    """Ids of the configurations the grid keeps (tunetable.grid.expand)."""
    return [config.id for config in expand(table, limits=DeviceLimits.from_params(params)).kept]


def shard_key(params: Mapping[str, Any], table: TableSpec, backend: str) -> str:
    """Content key of a table's shards for a concrete backend (cuda or replay); a budgeted search is part of it."""
    if backend not in ("cuda", "replay"):
        raise TuneTableError(f"shard_key needs a resolved backend, not '{backend}'")
    settings = settings_from_params(params=params).as_dict()
    search = search_key_part(table=table)
    if search is not None:
        settings["search"] = search
    recording_hash = nvcc = None
    if backend == "replay":
        # Replayed shards hold the recording's measurements: its device and nvcc, never this machine's,
        # so a fresh clone without nvcc (or with another one) gets the same key as the committed lock.
        recording = recording_path(table=table)
        provenance = recording_provenance(recording)
        check_recording_device(params, table=table, provenance=provenance, recording=recording)
        device, nvcc = str(provenance.get("device")), recorded_nvcc(provenance)
        recording_hash = sha256_file(recording)[:16]
    else:
        device = device_name()
        check_live_device(params, table=table)
    return results_key(
        table=table.name,
        config_ids=grid_config_ids(params=params, table=table),
        bench_settings=settings,
        kernel_hash=kernel_source_hash(table.kernel),
        toolchain=toolchain_fingerprint(params=params, table=table, nvcc=nvcc),
        backend=backend,
        device=device,
        recording_hash=recording_hash,
    )


# --- the shard jobs ------------------------------------------------------------------------------

def parse_shapes(texts: Sequence[str]) -> list[Shape]:
    """``M,N,K`` options as shapes; a malformed one names the option and its index."""
    shapes = []
    for index, text in enumerate(texts):
        parts = text.replace("x", ",").split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise TuneTableError(f"expected M,N,K with positive integers, got '{text}'", where=f"--shape[{index}]")
        shapes.append(tuple(int(p) for p in parts))  # type: ignore[arg-type]
    return shapes


def measured_git_revision() -> str:
    """The git revision measured: $TUNETABLE_GIT_REV where the tree has no .git, else git's."""
    return os.environ.get(GIT_REV_ENV) or git_revision()


def shard_payloads(*, tasks: Sequence[ConfigTask], m: int, n: int, k: int,
                   families: Mapping[str, Any]) -> dict[str, Any]:
    """Launch payload per task for one shape; a shape the family rejects is that task's error text."""
    payloads: dict[str, Any] = {}
    for task in tasks:
        try:
            payloads[task.config_id] = launch_payload(task=task, m=m, n=n, k=k, families=families)
        except TuneTableError:
            raise  # a user error (an unknown family), not a shape this family rejects
        except (ValueError, KeyError) as exc:
            payloads[task.config_id] = f"shape rejected: {exc}"
    return payloads


def cuda_jobs(*, table: TableSpec, shapes: Sequence[Shape], key: str, results_root: Path,
              families: Mapping[str, Any] | None = None) -> list[ShardJob]:
    """One live job per shape: the compiled configurations (the compile report's) plus the cuBLAS baseline."""
    kernel_hash, tasks = tasks_from_reports(grid_path=paths.grid_file(table.name, root=results_root),
                                            compile_path=paths.compile_report(table.name, root=results_root))
    current = kernel_source_hash(table.kernel)
    if kernel_hash != current:
        raise TuneTableError(f"the kernel changed since the grid/compile stage ({kernel_hash} -> {current}): "
                             "run grid and compile again", path=table.kernel)
    lost = [t.cubin or t.config_id for t in tasks
            if t.build_status == "ok" and (not t.cubin or not Path(t.cubin).is_file())]
    if lost:
        raise TuneTableError(f"{len(lost)} compiled cubins are missing (first: {lost[0]}): run compile again",
                             path=paths.compile_report(table.name, root=results_root))
    tasks = [*tasks, baseline_task()]
    families = families if families is not None else default_families()
    provenance = {"nvcc": nvcc_version(), "git_rev": measured_git_revision(),
                  "command": "tunetable " + " ".join(sys.argv[1:])}
    return [
        ShardJob(table=table.name, m=m, n=n, k=k, tasks=tuple(tasks),
                 payloads=shard_payloads(tasks=tasks, m=m, n=n, k=k, families=families),
                 journal_path=paths.journal(table.name, key, m, n, k, root=results_root),
                 shard_path=paths.raw_shard(table.name, key, m, n, k, root=results_root),
                 content_key=key, kernel_hash=kernel_hash, provenance=provenance)
        for (m, n, k) in shapes
    ]


def grid_tasks(*, params: Mapping[str, Any], table: TableSpec) -> list[ConfigTask]:
    """Tasks straight from the grid (replay needs no compile report), plus the baseline."""
    kept = expand(table, limits=DeviceLimits.from_params(params)).kept
    tasks = [ConfigTask(config_id=config.id, kind="kernel", mesh_idx=index, family=table.family,
                        params=tuple(config.params), defines=tuple(config.defines().items()))
             for index, config in enumerate(kept)]
    return [*tasks, baseline_task()]


def replay_jobs(*, params: Mapping[str, Any], table: TableSpec, shapes: Sequence[Shape], key: str,
                results_root: Path) -> list[ShardJob]:
    """One replay job per shape: the grid's configurations plus the baseline (nothing to compile or launch)."""
    tasks = tuple(grid_tasks(params=params, table=table))
    kernel_hash = kernel_source_hash(table.kernel)
    return [ShardJob(table=table.name, m=m, n=n, k=k, tasks=tasks, payloads={},
                     journal_path=paths.journal(table.name, key, m, n, k, root=results_root),
                     shard_path=paths.raw_shard(table.name, key, m, n, k, root=results_root),
                     content_key=key, kernel_hash=kernel_hash)
            for (m, n, k) in shapes]


# --- the measurement: jobs left, their runner, the search ----------------------------------------

@dataclass(frozen=True)
class Measurement:
    """What ``tunetable bench`` runs for a table: the backend, the jobs left (in run order), the search."""

    table: TableSpec
    choice: BackendChoice
    key: str
    jobs: tuple[ShardJob, ...]           # the shards still to write, in the order they run
    done: int                            # shards already on disk (final: never re-measured)
    settings: BenchSettings
    search: Any                          # tunetable.search.SearchSettings, or None (measure everything)
    table_search: Any                    # tunetable.search.driver.TableSearch, or None
    replay: ReplayRunner | None          # the ReplayRunner of a replayed measurement (its recording loaded)
    expected: int                        # measurements the jobs take (the progress bar's total)


def recorded_compile_records(
    recording: Mapping[tuple[Any, ...], Mapping[str, Any]], *, table: str
) -> dict[str, dict[str, Any]]:
    """Per config id: what the compiler fixed (build status, registers, shared memory), from a recording's rows."""
    records: dict[str, dict[str, Any]] = {}
    for key, row in recording.items():
        if key[0] != table or row.get("kind") != "kernel":
            continue
        records.setdefault(str(key[4]), {"status": "build" if row.get("status") == "build" else "ok",
                                         "registers": row.get("registers"), "smem_bytes": row.get("smem_bytes")})
    return records


def replay_runner(*, table: TableSpec, choice: BackendChoice, allow_missing: bool) -> ReplayRunner:
    """The ReplayRunner of a table's recording (loaded and checked once)."""
    # Lazy: the recording is read with pandas, which the Snakefile's parse (content keys only) must not import.
    from tunetable.bench.replay import ReplayRunner, load_recording

    recording = recording_path(table=table)
    served_as = {table.base: table.name} if table.device is not None else None
    return ReplayRunner(recording=load_recording(recording, served_as=served_as), recording_path=recording,
                        provenance=choice.provenance, allow_missing=allow_missing)


def attach_search(*, params: Mapping[str, Any], table: TableSpec, search: Any, key: str, results_root: Path,
                  replay: ReplayRunner | None, params_path: str | Path) -> Any:
    """The table's TableSearch: the selector's seed model if asked for, a replay's compile records (recorded)."""
    # Lazy: the search (numpy and its strategies) is imported by a run with a budgeted search only.
    from tunetable.search.driver import table_search

    overrides = recorded_compile_records(replay.recording, table=table.name) if replay is not None else None
    seed_model = None
    if search.seed_from_selector:   # the shape selector's model, from the recordings of its tables
        # lazy: the selector ranks with polars, which the GPU host's bench does not have
        from tunetable.selector_seeds import seed_model as selector_seed_model

        seed_model = selector_seed_model(params=params, path=params_path)
    return table_search(settings=search, table=table.name, shard_dir=paths.raw_dir(table.name, key, root=results_root),
                        compile_overrides=overrides, seed_model=seed_model)


def plan_measurement(*, params: Mapping[str, Any], table: TableSpec, shapes: Sequence[Shape], choice: BackendChoice,
                     results_root: Path, allow_missing: bool = False,
                     params_path: str | Path = "params.yaml") -> Measurement:
    """The jobs of a table's shapes on the chosen backend, with the table's search when it has one."""
    key = shard_key(params, table, choice.backend)
    search = None if search_key_part(table=table, path=params_path) is None else search_settings(
        table=table, path=params_path)
    replay = None
    if choice.backend == "replay":
        replay = replay_runner(table=table, choice=choice, allow_missing=allow_missing)
        jobs = replay_jobs(params=params, table=table, shapes=shapes, key=key, results_root=results_root)
    else:
        jobs = cuda_jobs(table=table, shapes=shapes, key=key, results_root=results_root)
    todo = [job for job in jobs if not job.shard_path.is_file()]
    searching = None
    expected = sum(len(job.tasks) for job in todo)
    if search is not None:
        # Lazy: the search's own modules (numpy) only where a table has a budgeted search.
        from tunetable.search.driver import expected_measurements
        from tunetable.search.transfer import tuning_order

        searching = attach_search(params=params, table=table, search=search, key=key, results_root=results_root,
                                  replay=replay, params_path=params_path)
        order = {shape: index for index, shape in enumerate(tuning_order([job.shape for job in todo]))}
        todo.sort(key=lambda job: order[job.shape])
        expected = sum(expected_measurements(settings=search, tasks=job.tasks) for job in todo)
    return Measurement(table=table, choice=choice, key=key, jobs=tuple(todo), done=len(jobs) - len(todo),
                       settings=settings_from_params(params=params), search=search, table_search=searching,
                       replay=replay, expected=expected)

