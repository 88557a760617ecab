"""What the bench measures and how: its settings, the tasks of a shard, their launch payloads (no pycuda, no polars).

Importable by the Snakefile and by a GPU machine that has only numpy/pandas/pyarrow/pyyaml. Which
backend, which content key and which jobs a table's measurement has: tunetable.measurement_plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tunetable.errors import TuneTableError
from tunetable.kernels.families import FAMILIES
from tunetable.results import BASELINE_ID


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

