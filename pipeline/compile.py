"""Compile kernel configurations to cubins with nvcc: parallel, content-addressed, GPU-blind.

``compile_config`` compiles one configuration (importable by the runtime for
compile-on-first-use); ``compile_configs`` answers what it can from the cache and runs the
misses as a pool of parallel nvcc processes; ``build_records`` turns the results into the compile report's
records, pruning configurations whose ptxas resources exceed the device limits.

Cache layout (``compile.cache_dir``, default ``.cache/cubins``): ``<key>.cubin`` plus a
``<key>.json`` sidecar holding the status, the full ptxas log and the original compile time,
so that a cache hit reports the same resources without running anything. The key hashes the
kernel source (with its local headers), the defines, the flags, ``nvcc --version`` and the
arch; a changed input therefore misses exactly the entries it affects. Every cache file is
written through a temp file and a rename, so two processes compiling the same configuration
leave one complete entry, never a torn one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_bytes, atomic_write_text
from tunetable.config import KernelConfig, Value
from tunetable.errors import TuneTableError
from tunetable.grid import DeviceLimits, Pruned, config_threads, family_smem_bytes, limit_violations
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.jit import include_flags
from tunetable.keys import canonical_json, kernel_source_hash, nvcc_version, sha256_text

# Bump when the nvcc command line built here changes shape: old cache entries then miss.
CACHE_FORMAT = 1
DEFAULT_TIMEOUT_S = 600.0
ERROR_LINES = 8
WORKERS_ENV = "TUNETABLE_COMPILE_WORKERS"

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")
_ARCH = re.compile(r"^sm_(\d+)([a-z]?)$")


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
class CompileResult:
    """The outcome of compiling one configuration (a build failure is a result, not an exception)."""

    key: str
    status: str  # "ok" | "build"
    cubin: str | None
    compile_s: float
    ptxas_log: str
    error: str | None = None
    cached: bool = False


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


def gencode(arch: str) -> str:
    """``sm_90a`` -> ``-gencode=arch=compute_90a,code=sm_90a``."""
    match = _ARCH.match(arch)
    if match is None:
        raise TuneTableError(f"arch '{arch}' is not of the form sm_NN or sm_NNa", where="arch")
    number, suffix = match.groups()
    return f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"


def render_define(value: Value) -> str:
    """A -D value as C sees it: booleans as 1/0, everything else as its text."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def define_flags(defines: Mapping[str, Value]) -> list[str]:
    """``-DNAME=value`` for every define, in the given order."""
    return [f"-D{name}={render_define(value)}" for name, value in defines.items()]


def cache_key(
    *, kernel_hash: str, defines: Mapping[str, Value], flags: Sequence[str], nvcc: str, arch: str
) -> str:
    """Content key of one cubin: source, defines, flags, compiler and arch."""
    payload = {
        "format": CACHE_FORMAT,
        "kernel": kernel_hash,
        "defines": {name: render_define(value) for name, value in defines.items()},
        "flags": list(flags),
        "nvcc": nvcc,
        "arch": arch,
    }
    return sha256_text(canonical_json(payload))[:32]


def cache_paths(cache_dir: str | Path, key: str) -> tuple[Path, Path]:
    """(cubin, sidecar JSON) of a cache entry."""
    root = Path(cache_dir)
    return root / f"{key}.cubin", root / f"{key}.json"


def lookup(*, cache_dir: str | Path, key: str) -> CompileResult | None:
    """A cached result, or None on a miss (a torn or unreadable entry counts as a miss)."""
    cubin, sidecar = cache_paths(cache_dir, key)
    try:
        meta = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key or meta.get("status") not in ("ok", "build"):
        return None
    if meta["status"] == "ok" and not cubin.is_file():
        return None
    return CompileResult(
        key=key,
        status=meta["status"],
        cubin=str(cubin) if meta["status"] == "ok" else None,
        compile_s=float(meta.get("compile_s") or 0.0),
        ptxas_log=str(meta.get("ptxas_log") or ""),
        error=meta.get("error"),
        cached=True,
    )


def _store(*, cache_dir: Path, result: CompileResult, cubin_bytes: bytes | None) -> None:
    """Write a cache entry: the cubin first, the sidecar last (a reader trusts the sidecar)."""
    cubin, sidecar = cache_paths(cache_dir, result.key)
    if cubin_bytes is not None:
        atomic_write_bytes(cubin, cubin_bytes)
    meta = {k: v for k, v in asdict(result).items() if k not in ("cubin", "cached")}
    atomic_write_text(sidecar, json.dumps(meta, indent=1, sort_keys=True) + "\n")


def first_error_lines(stderr: str, *, limit: int = ERROR_LINES) -> str:
    """The first lines of nvcc's complaint, without ptxas's info chatter."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip() and not line.startswith("ptxas info")]
    return "\n".join(lines[:limit]) or "nvcc failed without a message"


def compile_config(
    *,
    kernel_path: str | Path,
    defines: Mapping[str, Value],
    flags: Sequence[str],
    arch: str,
    cache_dir: str | Path,
    kernel_hash: str | None = None,
    nvcc: str | None = None,
    use_cache: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> CompileResult:
    """Compile one configuration to a cubin (or answer from the cache); never touches the GPU."""
    source = Path(kernel_path)
    kernel_hash = kernel_hash or kernel_source_hash(source)
    nvcc = nvcc or nvcc_version()
    key = cache_key(kernel_hash=kernel_hash, defines=defines, flags=flags, nvcc=nvcc, arch=arch)
    if use_cache and (hit := lookup(cache_dir=cache_dir, key=key)) is not None:
        return hit
    compiler = shutil.which("nvcc")
    if compiler is None:
        return CompileResult(
            key=key, status="build", cubin=None, compile_s=0.0, ptxas_log="", error="nvcc not found on PATH"
        )
    with tempfile.TemporaryDirectory(prefix="tunetable-nvcc-") as scratch:
        output = Path(scratch) / "kernel.cubin"
        # The include path is not part of the key: the kernel hash covers every header it resolves to.
        command = [
            compiler, "-cubin", gencode(arch), *flags, *include_flags(), "-Xptxas", "-v",
            *define_flags(defines), "-o", str(output), str(source),
        ]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            # A timeout says nothing reliable about the source: not cached.
            return CompileResult(
                key=key, status="build", cubin=None, compile_s=time.perf_counter() - started,
                ptxas_log="", error=f"nvcc timed out after {timeout_s:g} s",
            )
        elapsed = time.perf_counter() - started
        log = done.stderr + done.stdout
        if done.returncode != 0 or not output.is_file():
            result = CompileResult(
                key=key, status="build", cubin=None, compile_s=elapsed, ptxas_log=log, error=first_error_lines(log)
            )
            # Killed by a signal (e.g. out of memory) is not the source's fault: only real errors are cached.
            if done.returncode > 0:
                _store(cache_dir=Path(cache_dir), result=result, cubin_bytes=None)
            return result
        cubin_bytes = output.read_bytes()
    cubin, _ = cache_paths(cache_dir, key)
    result = CompileResult(key=key, status="ok", cubin=str(cubin), compile_s=elapsed, ptxas_log=log)
    _store(cache_dir=Path(cache_dir), result=result, cubin_bytes=cubin_bytes)
    return result


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
    source = Path(kernel_path)
    if not source.is_file():
        raise TuneTableError("kernel source not found", path=source)
    kernel_hash = kernel_source_hash(source)
    nvcc = nvcc_version()
    common = dict(
        kernel_path=str(source), flags=tuple(flags), arch=arch, cache_dir=str(cache_dir),
        kernel_hash=kernel_hash, nvcc=nvcc, use_cache=use_cache, timeout_s=timeout_s,
    )
    results: dict[str, CompileResult] = {}
    misses: list[KernelConfig] = []

    def finish(config: KernelConfig, result: CompileResult) -> None:
        """Record a configuration's compile result and pass it to ``on_result``."""
        results[config.id] = result
        if on_result is not None:
            on_result(config, result)

    for config in configs:
        key = cache_key(kernel_hash=kernel_hash, defines=config.defines(), flags=flags, nvcc=nvcc, arch=arch)
        hit = lookup(cache_dir=cache_dir, key=key) if use_cache else None
        if hit is not None:
            finish(config, hit)
        else:
            misses.append(config)
    if not misses:
        return results
    if workers <= 1 or len(misses) == 1:
        for config in misses:
            finish(config, compile_config(defines=config.defines(), **common))
        return results
    # The parallel workers are the nvcc processes themselves; a thread only waits on one, so threads
    # suffice (no pickling, no re-import of __main__, no fork of a process holding rich's thread).
    pool = ThreadPoolExecutor(max_workers=min(workers, len(misses)), thread_name_prefix="nvcc")
    try:
        futures = {pool.submit(compile_config, defines=config.defines(), **common): config for config in misses}
        for future in as_completed(futures):
            finish(futures[future], future.result())
    finally:
        # On Ctrl-C: drop the queued compiles; the running nvcc processes get the terminal's SIGINT.
        pool.shutdown(wait=True, cancel_futures=True)
    return results


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
