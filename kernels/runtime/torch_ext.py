"""The ``tunetable::gemm`` operator's C++ kernel (``torch_fast.cpp``): built on first use, cached, loaded into torch.

The operator's hot path in Python costs a Python kernel under torch's dispatcher plus gemm()'s own host path
(about 16 µs a call on an H100 host); in C++ it is a cache lookup, the output's allocation and ``cuLaunchKernel``. The
first ``import tunetable.torch`` builds the source with the system's C++ compiler (``$CXX``, else ``c++``, else
``g++``; no ninja, no setuptools build, no CUDA toolkit) against the running torch's headers and libraries, and
keeps the library under ``$TUNETABLE_TORCH_EXT_CACHE``, else ``$XDG_CACHE_HOME/tunetable/torch_ext``
(``~/.cache/...``), in a folder named by ``cache_key`` (the source, torch's version and CUDA version, the Python
tag, the C++ ABI, the build command's format): a later process loads it without compiling. The build writes
into a temp folder beside the entry and renames the finished library into place, so a concurrent or interrupted
build never leaves half a file; it is bounded by ``BUILD_TIMEOUT_S``. No compiler, a failed build or a failed
load keeps the Python kernel and warns once (``TorchExtensionWarning``: why, and that the operator is slower).
The C++ kernel is on by default (its GPU tests and host figures: docs/pytorch.md, benchmarks/results/
runtime_gemm_host.md); ``TUNETABLE_TORCH_EXT=0`` (or false, no, off) keeps the Python kernel, builds nothing and
warns nothing. A torch built without CUDA builds nothing and
warns nothing either: the operator has no CUDA kernel to speed up there.

The argument sets the C++ kernel launches with are the Python prepared launch's (kernels/runtime/prepared.py),
packed into one byte string with each argument at a known offset (``pack_arguments``): the kernel copies the
set, writes C's address at its slot's offset and points ``kernelParams[i]`` at each offset.

Everything here but ``load`` is plain Python (no torch import), so the command, the key and the packing are
tested without torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_text
from tunetable.errors import TuneTableError

SOURCE = Path(__file__).with_name("torch_fast.cpp")
ENABLE_ENV = "TUNETABLE_TORCH_EXT"          # unset or "1": build and load the C++ kernel; "0": the Python kernel
OFF_VALUES = frozenset({"0", "false", "no", "off"})
CACHE_ENV = "TUNETABLE_TORCH_EXT_CACHE"
LIBRARY_FILE = "tunetable_torch_fast.so"
LOG_FILE = "build.log"
BUILD_TIMEOUT_S = 300.0
# Bump when the command line built here changes shape: old cache entries then miss.
BUILD_FORMAT = 1
LIBRARIES = ("c10", "torch_cpu", "torch_cuda")   # c10's stream interface; the dispatcher, at::mm; empty_cuda
ARGUMENT_ALIGNMENT = 64                        # a CUtensorMap's (the largest argument's) alignment


class TorchExtensionWarning(UserWarning):
    """The operator's C++ kernel could not be built or loaded: the Python kernel serves it, slower."""


@dataclass(frozen=True)
class ExtensionStatus:
    """Whether the C++ kernel is loaded, from where, how long its build took (None: cached), and why not."""

    loaded: bool
    reason: str = ""
    path: str | None = None
    build_s: float | None = None
    quiet: bool = False     # not loaded by choice or where it cannot help (switched off, torch without CUDA)

    def summary(self) -> str:
        """One line for logs: loaded (built in N s, or cached) or not, and why."""
        if self.loaded:
            how = "cached" if self.build_s is None else f"built in {self.build_s:.1f} s"
            return f"tunetable::gemm C++ kernel loaded ({how}): {self.path}"
        return f"tunetable::gemm C++ kernel not loaded: {self.reason}"


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """False only when ``TUNETABLE_TORCH_EXT`` says off (0, false, no, off): the C++ kernel is the default."""
    return environ.get(ENABLE_ENV, "").strip().lower() not in OFF_VALUES


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """``$TUNETABLE_TORCH_EXT_CACHE``, else ``$XDG_CACHE_HOME/tunetable/torch_ext`` (``~/.cache`` by default)."""
    explicit = environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "tunetable" / "torch_ext"


def cache_key(*, source: bytes, torch_version: str, cuda_version: str | None, python_tag: str,
              cxx11_abi: bool) -> str:
    """The cache folder's name: a hash of everything the built library depends on."""
    digest = hashlib.sha256()
    for part in (f"format={BUILD_FORMAT}", f"torch={torch_version}", f"cuda={cuda_version}", f"python={python_tag}",
                 f"cxx11_abi={int(cxx11_abi)}"):
        digest.update(part.encode() + b"\0")
    digest.update(source)
    return digest.hexdigest()[:20]


def find_compiler(environ: Mapping[str, str] = os.environ) -> str | None:
    """The C++ compiler to build with: ``$CXX``, else ``c++``, else ``g++`` on PATH (None: none)."""
    explicit = environ.get("CXX", "").strip()
    if explicit:
        return shutil.which(explicit) or None
    return shutil.which("c++") or shutil.which("g++")


def build_command(*, compiler: str, source: Path, output: Path, include_dirs: Sequence[str],
                  library_dirs: Sequence[str], cxx11_abi: bool, std: str = "c++17") -> list[str]:
    """The one compile-and-link command: a shared library linked to torch's libraries (rpath to their folders)."""
    command = [compiler, "-O2", "-fPIC", "-shared", f"-std={std}", f"-D_GLIBCXX_USE_CXX11_ABI={int(cxx11_abi)}",
               "-fvisibility=hidden", "-w"]
    command += [f"-I{folder}" for folder in include_dirs]
    command += [str(source), "-o", str(output)]
    command += [f"-L{folder}" for folder in library_dirs]
    command += [f"-Wl,-rpath,{folder}" for folder in library_dirs]
    command += [f"-l{name}" for name in LIBRARIES] + ["-ldl"]
    return command


def build(*, command: Sequence[str], output: Path, timeout_s: float = BUILD_TIMEOUT_S) -> str | None:
    """Run ``command`` (which writes ``output``'s temp twin) and rename the library into place; None on success,
    else one line saying why (the compiler's log is kept beside the entry as build.log)."""
    folder = output.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".build.", dir=folder))
    except OSError as exc:
        return f"cannot write the cache folder {folder} ({exc.strerror or exc})"
    try:
        temp_output = scratch / output.name
        argv = [str(temp_output) if item == str(output) else item for item in command]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return f"the compiler ran past {timeout_s:g} s"
        except OSError as exc:
            return f"the compiler could not run ({exc})"
        log = folder / LOG_FILE
        _write_log(log, " ".join(argv) + "\n\n" + done.stdout + done.stderr)
        if done.returncode != 0 or not temp_output.is_file():
            first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:200])
            return f"the compiler failed (exit {done.returncode}): {first.strip()} (full log: {log})"
        try:
            os.replace(temp_output, output)
        except OSError as exc:
            return f"cannot move the library into {folder} ({exc.strerror or exc})"
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_log(path: Path, text: str) -> None:
    """The build's log beside its entry, written atomically (a log that cannot be written is skipped)."""
    try:
        atomic_write_text(path, text)
    except TuneTableError:
        pass   # the log is a convenience; the build's result stands without it


def pack_arguments(parts: Sequence[bytes]) -> tuple[bytes, tuple[int, ...]]:
    """One argument set as a byte string and each argument's offset in it (each aligned to its size, at most 64)."""
    blob = bytearray()
    offsets = []
    for part in parts:
        alignment = min(ARGUMENT_ALIGNMENT, 1 << max(len(part) - 1, 0).bit_length())
        blob += bytes(-len(blob) % alignment)
        offsets.append(len(blob))
        blob += part
    return bytes(blob), tuple(offsets)


@dataclass(frozen=True)
class FastRoute:
    """A prepared launch as the C++ kernel keeps it: the function, geometry, context and argument layout."""

    function: int
    geometry: tuple[int, ...]   # grid (3), block (3), dynamic shared memory bytes
    context: int
    offsets: tuple[int, ...]    # each argument's offset in an argument set
    c_slot: int                 # the argument that is C's address
    size: int                   # bytes of one argument set


def fast_route(prepared: Any, argument_set: tuple[Any, Any]) -> tuple[FastRoute, bytes]:
    """The route and packed argument set of one of a ``PreparedLaunch``'s (A, B) sets (its ``sets`` values:
    the KernelArguments and C's slot in their storage, holding C_SENTINEL until the C++ kernel writes C)."""
    arguments, c_value = argument_set
    storage = arguments.storage
    blob, offsets = pack_arguments([bytes(item) for item in storage])
    c_slot = next(index for index, item in enumerate(storage) if item is c_value)
    plan = prepared.plan.plan
    function = plan.kernel.function
    function = int(getattr(function, "value", function) or 0)
    geometry = (*(int(item) for item in plan.grid), *(int(item) for item in plan.block), int(plan.smem_bytes))
    return FastRoute(function=function, geometry=geometry, context=int(prepared.context or 0), offsets=offsets,
                     c_slot=c_slot, size=len(blob)), blob


# --- loading into torch ------------------------------------------------------------------------------------

_status: dict[str, ExtensionStatus] = {}


def status() -> ExtensionStatus | None:
    """What ``load`` found (None: not tried in this process)."""
    return _status.get("status")


def load(torch: Any) -> ExtensionStatus:
    """Build (first use) and load the C++ kernel into ``torch``; never raises: a failure warns once and says why."""
    found = _status.get("status")
    if found is None:
        found = _status["status"] = _load(torch)
        if not found.loaded and not found.quiet:
            warnings.warn(f"tunetable::gemm runs its Python kernel (several µs a call slower): {found.reason}",
                          TorchExtensionWarning, stacklevel=3)
    return found


def _building(text: str) -> contextlib.AbstractContextManager:
    """A spinner on stderr while the one-time build runs (about 10 s), where stderr is a terminal; else nothing."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console   # only where it draws
    return Console(stderr=True).status(text)


def _load(torch: Any) -> ExtensionStatus:
    """The steps of ``load``: switched off, torch without CUDA, the cache, the compiler, the build, load_library."""
    if not enabled():
        return ExtensionStatus(loaded=False, reason=f"{ENABLE_ENV}={os.environ.get(ENABLE_ENV, '').strip()}",
                               quiet=True)
    if not getattr(torch.version, "cuda", None):
        return ExtensionStatus(loaded=False, reason=f"torch {torch.__version__} is built without CUDA", quiet=True)
    try:
        source = SOURCE.read_bytes()
    except OSError as exc:
        return ExtensionStatus(loaded=False, reason=f"cannot read {SOURCE} ({exc})")
    cxx11_abi = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    key = cache_key(source=source, torch_version=torch.__version__, cuda_version=getattr(torch.version, "cuda", None),
                    python_tag=sys.implementation.cache_tag or sys.version, cxx11_abi=cxx11_abi)
    output = cache_root() / key / LIBRARY_FILE
    build_s = None
    if not output.is_file():
        compiler = find_compiler()
        if compiler is None:
            return ExtensionStatus(loaded=False, reason="no C++ compiler ($CXX, c++ or g++) on PATH to build it")
        # torch's own headers and libraries only (no CUDA toolkit: torch_fast.cpp reads the stream through c10
        # and opens libcuda itself), where torch.utils.cpp_extension.include_paths() / library_paths() find them.
        root = Path(torch.__file__).resolve().parent
        include_dirs, library_dirs = [str(root / "include")], [str(root / "lib")]
        if not (root / "include" / "torch" / "library.h").is_file():
            return ExtensionStatus(loaded=False, reason=f"torch's C++ headers are missing under {root / 'include'}")
        command = build_command(compiler=compiler, source=SOURCE, output=output, include_dirs=include_dirs,
                                library_dirs=library_dirs, cxx11_abi=cxx11_abi)
        started = time.perf_counter()
        with _building(f"building the tunetable::gemm operator's C++ kernel (once; cached in {output.parent})"):
            failed = build(command=command, output=output)
        if failed is not None:
            return ExtensionStatus(loaded=False, reason=f"building {SOURCE.name} failed: {failed}")
        build_s = time.perf_counter() - started
    try:
        torch.ops.load_library(str(output))
    except (OSError, RuntimeError) as exc:
        return ExtensionStatus(loaded=False, reason=f"loading {output} failed ({exc})")
    return ExtensionStatus(loaded=True, path=str(output), build_s=build_s)
