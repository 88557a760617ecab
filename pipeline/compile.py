"""The compile stage: a grid's configurations to cubins, and the compile report with ptxas resources.

Compiling itself (the nvcc command line, the content-addressed cubin cache, parallel nvcc runs)
is ``tunetable.kernels.jit``, shared with the runtime's compile on first use; this module adds
what the build reports: ``compile_configs`` over ``KernelConfig``s, ptxas resource parsing, and
``build_records``, which prunes configurations whose resources exceed the device limits. The
cache lives at ``compile.cache_dir`` (default ``.cache/cubins``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.grid import DeviceLimits, Pruned, config_threads, family_smem_bytes, limit_violations
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.jit import DEFAULT_TIMEOUT_S, CompileResult, compile_many

WORKERS_ENV = "TUNETABLE_COMPILE_WORKERS"

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


@dataclass(frozen=True)
class FunctionResources:
    """What ptxas reports for one function: registers, static smem, stack and spills."""

    name: str
    registers: int | None = None
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int | None = None
    entry: bool = False


@dataclass(frozen=True)
class CompileRecord:
    """One row of the compile report (docs/internals.md), plus a few readable extras."""

    config_id: str
    status: str  # "ok" | "build" | "pruned"
    cubin: str | None = None
    registers: int | None = None
    smem_bytes: int | None = None
    spill_bytes: int | None = None
    stack_bytes: int | None = None
    compile_s: float | None = None
    error: str | None = None
    reason: str | None = None
    label: str = ""
    static_smem_bytes: int | None = None
    dynamic_smem_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    cached: bool = False


def parse_ptxas(text: str) -> dict[str, FunctionResources]:
    """Resources per function from ``ptxas -v`` output (entry kernels and non-inlined functions)."""
    fields: dict[str, dict[str, Any]] = {}
    entries: set[str] = set()
    current_entry: str | None = None
    current_properties: str | None = None
    for line in text.splitlines():
        if match := _ENTRY.search(line):
            current_entry = match.group(1)
            entries.add(current_entry)
            fields.setdefault(current_entry, {})
        elif match := _PROPERTIES.search(line):
            current_properties = match.group(1)
            fields.setdefault(current_properties, {})
        elif (match := _FRAME.search(line)) and current_properties is not None:
            stack, stores, loads = (int(group) for group in match.groups())
            fields[current_properties].update(stack_bytes=stack, spill_stores=stores, spill_loads=loads)
        elif (match := _USED.search(line)) and current_entry is not None:
            update: dict[str, Any] = {"registers": int(match.group(1))}
            if smem := _SMEM.search(line):
                update["smem_bytes"] = int(smem.group(1))
            if barriers := _BARRIERS.search(line):
                update["barriers"] = int(barriers.group(1))
            fields[current_entry].update(update)
    return {name: FunctionResources(name=name, entry=name in entries, **values) for name, values in fields.items()}


def main_function(functions: Mapping[str, FunctionResources], *, entry: str | None) -> FunctionResources | None:
    """The function whose resources stand for the configuration: ``entry`` if present, else the hungriest kernel."""
    if entry is not None and entry in functions:
        return functions[entry]
    kernels = [item for item in functions.values() if item.entry] or list(functions.values())
    if not kernels:
        return None
    return max(kernels, key=lambda item: (item.registers or 0, item.spill_stores, item.name))


def family_entry(family: str) -> str | None:
    """The kernel entry name of a family (``tunetable.kernels.families``), or None for an ad-hoc family."""
    found = FAMILIES.get(family)
    return found.entry if found is not None else None


def resolve_workers(*, requested: int | None, configured: int | None) -> int:
    """Pool size: --workers, else $TUNETABLE_COMPILE_WORKERS, else compile.workers, else the CPU count."""
    if requested is not None and requested > 0:
        return requested
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            raise TuneTableError(f"expected a positive integer, got '{env}'", where=WORKERS_ENV) from None
        if value < 1:
            raise TuneTableError(f"expected a positive integer, got '{env}'", where=WORKERS_ENV)
        return value
    if configured:
        return configured
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def compile_configs(
    configs: Iterable[KernelConfig],
    *,
    kernel_path: str | Path,
    flags: Sequence[str],
    arch: str,
    cache_dir: str | Path,
    workers: int,
    use_cache: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_result: Callable[[KernelConfig, CompileResult], None] | None = None,
) -> dict[str, CompileResult]:
    """Compile every configuration (cache hits here, misses as ``workers`` parallel nvcc runs), by config id."""
    by_id = {config.id: config for config in configs}
    report = (lambda config_id, result: on_result(by_id[config_id], result)) if on_result is not None else None
    return compile_many(((config.id, config.defines()) for config in by_id.values()), kernel_path=kernel_path,
                        flags=flags, arch=arch, cache_dir=cache_dir, workers=workers, use_cache=use_cache,
                        timeout_s=timeout_s, on_result=report)


def build_records(
    configs: Sequence[KernelConfig],
    *,
    results: Mapping[str, CompileResult],
    limits: DeviceLimits,
    entry: str | None = None,
    grid_pruned: Sequence[Pruned] = (),
    relative_to: str | Path | None = None,
) -> list[CompileRecord]:
    """Report records in grid order: compiled ones (ok / build / pruned by resources), then grid-pruned ones."""
    records = [
        _record(config, results[config.id], limits=limits, entry=entry, relative_to=relative_to)
        for config in configs
        if config.id in results
    ]
    records.extend(
        CompileRecord(config_id=item.config.id, status="pruned", reason=item.reason, label=item.config.label())
        for item in grid_pruned
        if item.stage == "limit"
    )
    return records


def _record(
    config: KernelConfig, result: CompileResult, *, limits: DeviceLimits, entry: str | None,
    relative_to: str | Path | None
) -> CompileRecord:
    """One configuration's record; ptxas resources over the device limits turn 'ok' into 'pruned'."""
    if result.status != "ok":
        return CompileRecord(
            config_id=config.id, status="build", compile_s=round(result.compile_s, 3),
            error=result.error, label=config.label(), cached=result.cached,
        )
    main = main_function(parse_ptxas(result.ptxas_log), entry=entry)
    dynamic = family_smem_bytes(config.family, config.defines())
    static = main.smem_bytes if main is not None else None
    total = (static or 0) + (dynamic or 0) if (static is not None or dynamic is not None) else None
    registers = main.registers if main is not None else None
    problems = limit_violations(
        config.defines(), limits=limits, smem_bytes=total, registers=registers, threads=config_threads(config)
    )
    cubin = result.cubin
    if cubin is not None and relative_to is not None:
        cubin = os.path.relpath(cubin, relative_to)
    return CompileRecord(
        config_id=config.id,
        status="pruned" if problems else "ok",
        cubin=cubin,
        registers=registers,
        smem_bytes=total,
        spill_bytes=(main.spill_stores + main.spill_loads) if main is not None else None,
        stack_bytes=main.stack_bytes if main is not None else None,
        compile_s=round(result.compile_s, 3),
        reason="; ".join(problems) or None,
        label=config.label(),
        static_smem_bytes=static,
        dynamic_smem_bytes=dynamic,
        spill_stores=main.spill_stores if main is not None else None,
        spill_loads=main.spill_loads if main is not None else None,
        cached=result.cached,
    )


def compile_document(
    records: Sequence[CompileRecord], *, table: str, kernel_hash: str, nvcc: str, arch: str, flags: Sequence[str]
) -> dict[str, Any]:
    """The ``results/compile/T.json`` document (docs/internals.md)."""
    return {
        "table": table,
        "kernel_hash": kernel_hash,
        "nvcc": nvcc,
        "arch": arch,
        "flags": list(flags),
        # 'cached' says how this run got a record, not what the record is: kept out so reruns are byte-identical.
        "records": [{k: v for k, v in asdict(record).items() if k != "cached"} for record in records],
    }
