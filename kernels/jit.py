"""Kernel sources as nvcc sees them: the include search path and the content hash of a source.

A leaf module (standard library only), shared by the build (tunetable.compile, content keys) and
the runtime (compile on first use), so both resolve ``#include "..."`` the same way nvcc does: the
including file's own folder first, then ``INCLUDE_DIRS`` (kernels/, which holds common/*.cuh).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

KEY_LENGTH = 16
KERNELS_DIR = Path(__file__).resolve().parent
INCLUDE_DIRS: tuple[Path, ...] = (KERNELS_DIR,)
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


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
