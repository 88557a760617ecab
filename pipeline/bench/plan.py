"""Bench planning: settings, tasks, content keys and backend choice (no pycuda, no polars).

Importable by the Snakefile and by a GPU machine that has only numpy/pandas/pyarrow/pyyaml.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tunetable.errors import TuneTableError
from tunetable.inputs import load_json_file
from tunetable.kernels.families import FAMILIES
from tunetable.keys import git_revision, nvcc_version
from tunetable.params import TableSpec
from tunetable.results import BASELINE_ID

BACKENDS = ("cuda", "replay", "auto")
GIT_REV_ENV = "TUNETABLE_GIT_REV"   # the device machine gets a copy of the tree without .git
DEFAULT_RECORDING = "data/recordings/h200_gemm_mma.parquet"


@dataclass(frozen=True)
class BenchSettings:
    """How every configuration is measured (params.yaml ``bench:``)."""

    warmup_ms: float = 25.0
    rounds: int = 10
    min_batch_ms: float = 0.3
    l2_factor: float = 3.0
    timeout_s: float = 30.0
    verify_rtol: float = 0.02
    seed: int = 1234

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (sent to workers, hashed into content keys)."""
        return {
            "warmup_ms": self.warmup_ms, "rounds": self.rounds, "min_batch_ms": self.min_batch_ms,
            "l2_factor": self.l2_factor, "timeout_s": self.timeout_s, "verify_rtol": self.verify_rtol,
            "seed": self.seed,
        }


def settings_from_params(*, params: Mapping[str, Any]) -> BenchSettings:
    """BenchSettings from a loaded params.yaml (missing keys take the defaults)."""
    bench = dict(params.get("bench") or {})
    base = BenchSettings()
    return BenchSettings(
        warmup_ms=float(bench.get("warmup_ms", base.warmup_ms)),
        rounds=int(bench.get("rounds", base.rounds)),
        min_batch_ms=float(bench.get("min_batch_ms", base.min_batch_ms)),
        l2_factor=float(bench.get("l2_factor", base.l2_factor)),
        timeout_s=float(bench.get("timeout_s", base.timeout_s)),
        verify_rtol=float(bench.get("verify_rtol", base.verify_rtol)),
    )


@dataclass(frozen=True)
class ConfigTask:
    """One thing to measure on every shape: a compiled kernel configuration or the cuBLAS baseline."""

    config_id: str
    kind: str = "kernel"                               # "kernel" | "baseline"
    mesh_idx: int = -1
    family: str = ""
    params: tuple[tuple[str, Any], ...] = ()
    defines: tuple[tuple[str, Any], ...] = ()
    cubin: str | None = None
    build_status: str = "ok"                           # "ok" | "build" (compile failed)
    build_error: str | None = None
    compile_info: tuple[tuple[str, Any], ...] = ()     # registers, smem_bytes, spill_bytes, ...


def baseline_task() -> ConfigTask:
    """The cuBLAS baseline, measured like a configuration on every shape."""
    return ConfigTask(config_id=BASELINE_ID, kind="baseline", mesh_idx=-1, family="cublas")


COMPILE_INFO_FIELDS = ("registers", "smem_bytes", "spill_bytes", "stack_bytes", "compile_s")


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; TuneTableError when it is absent, malformed or not an object."""
    if not path.is_file():
        raise TuneTableError("no such file (run the earlier stage first)", path=path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TuneTableError(f"malformed JSON: {exc.msg}", path=path, where=f"line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise TuneTableError("expected a JSON object", path=path)
    return data


def tasks_from_reports(*, grid_path: Path, compile_path: Path) -> tuple[str, list[ConfigTask]]:
    """(kernel_hash, tasks) from the grid file and the compile report; pruned configs are left out."""
    grid = _read_json(grid_path)
    report = _read_json(compile_path)
    if grid.get("kernel_hash") != report.get("kernel_hash"):
        raise TuneTableError(
            f"compile report is for kernel {report.get('kernel_hash')}, grid for {grid.get('kernel_hash')}: recompile",
            path=compile_path,
        )
    records = {}
    for index, record in enumerate(report.get("records") or []):
        if not isinstance(record, dict) or "config_id" not in record:
            raise TuneTableError("record without config_id", path=compile_path, where=f"records[{index}]")
        records[record["config_id"]] = record
    tasks = []
    for index, entry in enumerate(grid.get("configs") or []):
        config_id = entry.get("id") if isinstance(entry, dict) else None
        if config_id is None:
            raise TuneTableError("config without id", path=grid_path, where=f"configs[{index}]")
        record = records.get(config_id)
        if record is None:
            raise TuneTableError(f"config {config_id} is not in the compile report: recompile", path=compile_path)
        if record.get("status") == "pruned":
            continue
        params = dict(entry.get("params") or {})
        derived = dict(entry.get("derived") or {})
        tasks.append(ConfigTask(
            config_id=config_id,
            kind="kernel",
            mesh_idx=index,
            family=str(grid.get("family", "")),
            params=tuple(params.items()),
            defines=tuple({**params, **derived}.items()),
            cubin=record.get("cubin"),
            build_status="ok" if record.get("status") == "ok" else "build",
            build_error=record.get("error"),
            compile_info=tuple((name, record.get(name)) for name in COMPILE_INFO_FIELDS),
        ))
    return str(grid.get("kernel_hash")), tasks


def launch_payload(*, task: ConfigTask, m: int, n: int, k: int, families: Mapping[str, Any]) -> dict[str, Any]:
    """What a worker needs to launch a task on one shape (geometry from the kernel family)."""
    if task.kind == "baseline":
        return {"kind": "baseline"}
    family = families.get(task.family)
    if family is None:
        raise TuneTableError(f"unknown kernel family '{task.family}' (known: {', '.join(sorted(families))})")
    defines = dict(task.defines)
    family.check_shape(m, n, k)
    launch = family.launch(defines, m, n, k)
    return {
        "kind": "kernel",
        "family": task.family,
        "defines": defines,
        "cubin": task.cubin,
        "entry": family.entry,
        "grid": list(launch.grid),
        "block": list(launch.block),
        "smem_bytes": int(launch.smem_bytes),
        "workspace_bytes": int(launch.workspace_bytes),
    }


def default_families() -> Mapping[str, Any]:
    """The project's kernel families (kernels/families/<name>/family.py), imported lazily."""

    return FAMILIES


def measured_git_revision() -> str:
    """The git revision measured: $TUNETABLE_GIT_REV where the tree has no .git, else git's."""
    return os.environ.get(GIT_REV_ENV) or git_revision()


# --- devices ---------------------------------------------------------------------------------

def _libcuda_loadable() -> bool:
    """True when the CUDA driver library (libcuda) loads."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def visible_gpu_ids() -> list[str]:
    """GPU ids this process may use (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN), no CUDA context made."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda p: int(p.removeprefix("/dev/nvidia")))
    if not nodes or not _libcuda_loadable():
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [item.strip() for item in env.split(",") if item.strip() and item.strip() != "-1"]
    return [node.removeprefix("/dev/nvidia") for node in nodes]


def gpu_visible() -> bool:
    """True when a CUDA device node exists and libcuda loads (no context is created)."""
    return bool(visible_gpu_ids())


def device_name() -> str:
    """Name of the first visible GPU (NVML, else /proc/driver/nvidia), or 'none'."""
    if not gpu_visible():
        return "none"
    try:
        import pynvml  # lazy and optional (the cuda extra): the device's name where NVML exists
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else str(name)
        except pynvml.NVMLError:
            pass
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        for line in Path(info).read_text().splitlines():
            if line.startswith("Model:"):
                return line.split(":", 1)[1].strip()
    return "cuda-unknown"


# --- recordings and backend choice -------------------------------------------------------------

def recording_path(*, table: TableSpec) -> Path:
    """The recording the replay backend serves for a table (params.yaml tables.<name>.recording)."""
    return Path(table.recording or DEFAULT_RECORDING)


def sidecar_path(recording: Path) -> Path:
    """The provenance JSON beside a recording."""
    return recording.with_suffix(".json")


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


@dataclass(frozen=True)
class BackendChoice:
    """The backend a run uses and the line that says why (printed loudly by the CLI)."""

    backend: str
    reason: str
    provenance: dict[str, Any] = field(default_factory=dict)


def resolve_backend(*, requested: str, recording: Path) -> BackendChoice:
    """cuda or replay; ``auto`` is cuda when a GPU is visible, else replay of ``recording``."""
    if requested not in BACKENDS:
        raise TuneTableError(f"unknown backend '{requested}' (one of {', '.join(BACKENDS)})", where="--backend")
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


def toolchain_fingerprint(*, params: Mapping[str, Any], table: TableSpec, nvcc: str | None = None) -> str:
    """nvcc build id (this machine's unless given), flags and arch: what makes a cubin."""
    flags = " ".join((params.get("compile") or {}).get("nvcc_flags") or [])
    return f"{nvcc or nvcc_version()}|{flags}|{table.arch}"


def recorded_nvcc(provenance: Mapping[str, Any]) -> str:
    """The nvcc build id(s) a recording was measured with (its sidecar's ``nvcc``)."""
    value = provenance.get("nvcc")
    values = value if isinstance(value, list) else [value] if value else []
    return ",".join(sorted(str(v) for v in values)) or "nvcc-unknown"
