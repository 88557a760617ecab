"""Compile kernel configurations to cubins with nvcc: content-addressed, cached, GPU-blind.

The one leaf (standard library plus tunetable's atomic writes) that both the build
(``tunetable compile``, content keys) and the runtime (compile on first use, ``warm_cache``)
compile through, so both resolve ``#include "..."`` as nvcc does (the including file's folder
first, then ``INCLUDE_DIRS``: kernels/, which holds common/*.cuh), hash a source the same way and
find each other's cubins.

Cache layout: ``<key>.cubin`` plus a ``<key>.json`` sidecar holding the status, the full ptxas log
and the original compile time, so that a cache hit reports the same resources without running
anything. The key hashes the kernel source (with its local headers), the defines, the flags,
``nvcc --version`` and the arch; a changed input therefore misses exactly the entries it affects.
Every cache file is written through a temp file and a rename, so two processes compiling the
same configuration leave one complete entry, never a torn one.
"""

from __future__ import annotations

import hashlib
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
from functools import lru_cache
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_bytes, atomic_write_text
from tunetable.errors import TuneTableError

KEY_LENGTH = 16
KERNELS_DIR = Path(__file__).resolve().parent
INCLUDE_DIRS: tuple[Path, ...] = (KERNELS_DIR,)
# Bump when the nvcc command line built here changes shape: old cache entries then miss.
CACHE_FORMAT = 1
DEFAULT_TIMEOUT_S = 600.0
ERROR_LINES = 8
CACHE_DIR_ENV = "TUNETABLE_CUBIN_CACHE"

Define = int | bool | str
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_ARCH = re.compile(r"^sm_(\d+)([a-z]?)$")


# --- hashing -----------------------------------------------------------------------------------

def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the one serialisation that gets hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    """Hex sha256 of UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def include_flags(include_dirs: Sequence[Path] = INCLUDE_DIRS) -> list[str]:
    """``-I<dir>`` for every include folder, in search order."""
    return [f"-I{folder}" for folder in include_dirs]


def resolve_include(name: str, *, including: Path, include_dirs: Sequence[Path] = INCLUDE_DIRS) -> Path | None:
    """Where nvcc finds ``#include "name"`` of file ``including``: its folder, then the include dirs."""
    for folder in (including.parent, *include_dirs):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def kernel_source_hash(path: str | Path, *, include_dirs: Sequence[Path] = INCLUDE_DIRS) -> str:
    """Hash of a kernel source and every local header it includes (recursively), by base name and content.

    Only base names and bytes enter the hash, never folders: moving a source (or its headers)
    without changing a byte keeps its hash, and so the content keys of its measurements.
    """
    seen: set[Path] = set()
    digest = hashlib.sha256()

    def visit(file: Path) -> None:
        """Add a file and, recursively, the local headers it includes to the digest (each file once)."""
        resolved = file.resolve()
        if resolved in seen or not resolved.is_file():
            return
        seen.add(resolved)
        text = resolved.read_bytes()
        digest.update(file.name.encode() + b"\0" + text + b"\0")
        for name in _INCLUDE.findall(text.decode("utf-8", errors="replace")):
            found = resolve_include(name, including=resolved, include_dirs=include_dirs)
            if found is not None:
                visit(found)

    visit(Path(path))
    return digest.hexdigest()[:KEY_LENGTH]


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    """The last line of ``nvcc --version`` (the build id), or 'nvcc-absent'."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "nvcc-absent"
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else "nvcc-unknown"


# --- the nvcc command line and the cache -------------------------------------------------------

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


def gencode(arch: str) -> str:
    """``sm_90a`` -> ``-gencode=arch=compute_90a,code=sm_90a``."""
    match = _ARCH.match(arch)
    if match is None:
        raise TuneTableError(f"arch '{arch}' is not of the form sm_NN or sm_NNa", where="arch")
    number, suffix = match.groups()
    return f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"


def render_define(value: Define) -> str:
    """A -D value as C sees it: booleans as 1/0, everything else as its text."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def define_flags(defines: Mapping[str, Define]) -> list[str]:
    """``-DNAME=value`` for every define, in the given order."""
    return [f"-D{name}={render_define(value)}" for name, value in defines.items()]


def cache_key(*, kernel_hash: str, defines: Mapping[str, Define], flags: Sequence[str], nvcc: str, arch: str) -> str:
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


def default_cache_dir() -> Path:
    """The runtime's cubin cache: $TUNETABLE_CUBIN_CACHE, else $XDG_CACHE_HOME/tunetable/cubins.

    Point it at a project's ``.cache/cubins`` to reuse the cubins ``tunetable compile`` made (same keys).
    """
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "tunetable" / "cubins"


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
    defines: Mapping[str, Define],
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


def compile_many(
    defines_by_id: Iterable[tuple[str, Mapping[str, Define]]],
    *,
    kernel_path: str | Path,
    flags: Sequence[str],
    arch: str,
    cache_dir: str | Path,
    workers: int,
    use_cache: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_result: Callable[[str, CompileResult], None] | None = None,
) -> dict[str, CompileResult]:
    """Compile every (id, defines): cache hits here, misses as ``workers`` parallel nvcc runs; results by id."""
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
    misses: list[tuple[str, Mapping[str, Define]]] = []

    def finish(item_id: str, result: CompileResult) -> None:
        """Record one compile result and pass it to ``on_result``."""
        results[item_id] = result
        if on_result is not None:
            on_result(item_id, result)

    for item_id, defines in defines_by_id:
        key = cache_key(kernel_hash=kernel_hash, defines=defines, flags=flags, nvcc=nvcc, arch=arch)
        hit = lookup(cache_dir=cache_dir, key=key) if use_cache else None
        if hit is not None:
            finish(item_id, hit)
        else:
            misses.append((item_id, defines))
    if not misses:
        return results
    if workers <= 1 or len(misses) == 1:
        for item_id, defines in misses:
            finish(item_id, compile_config(defines=defines, **common))
        return results
    # The parallel workers are the nvcc processes themselves; a thread only waits on one, so threads
    # suffice (no pickling, no re-import of __main__, no fork of a process holding rich's thread).
    pool = ThreadPoolExecutor(max_workers=min(workers, len(misses)), thread_name_prefix="nvcc")
    try:
        futures = {pool.submit(compile_config, defines=defines, **common): item_id for item_id, defines in misses}
        for future in as_completed(futures):
            finish(futures[future], future.result())
    finally:
        # On Ctrl-C: drop the queued compiles; the running nvcc processes get the terminal's SIGINT.
        pool.shutdown(wait=True, cancel_futures=True)
    return results
