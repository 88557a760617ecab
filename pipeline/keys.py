"""Content keys and fingerprints: a changed input can never be mistaken for an old result."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

# The include-following source hash is shared with the runtime's compile-on-first-use (re-exported).
from tunetable.kernels.jit import KEY_LENGTH, kernel_source_hash  # noqa: F401


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the one serialisation that gets hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    """Hex sha256 of UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    """The last line of ``nvcc --version`` (the build id), or 'nvcc-absent'."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "nvcc-absent"
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else "nvcc-unknown"


def git_revision(cwd: str | Path = ".") -> str:
    """Short HEAD revision, with '-dirty' when tracked files differ; 'unknown' outside git."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True,
            check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}-dirty" if dirty else rev


def results_key(
    *,
    table: str,
    config_ids: list[str],
    bench_settings: dict[str, Any],
    kernel_hash: str,
    toolchain: str,
    backend: str,
    device: str,
    recording_hash: str | None = None,
) -> str:
    """Content key of a table's raw results: bench settings, grid, kernel source, toolchain, backend, device."""
    payload = {
        "table": table,
        "configs": sorted(config_ids),
        "bench": {k: v for k, v in bench_settings.items() if k not in ("backend", "recording")},
        "kernel": kernel_hash,
        "toolchain": toolchain,
        "backend": backend,
        "device": device,
        "recording": recording_hash,
    }
    return sha256_text(canonical_json(payload))[:KEY_LENGTH]
