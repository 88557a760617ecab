"""Content keys and fingerprints: a changed input can never be mistaken for an old result."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

# The hashing primitives, the include-following source hash and the nvcc build id are shared with
# the runtime's compile on first use (tunetable.kernels.jit); re-exported for the build.
from tunetable.kernels.jit import (  # noqa: F401
    KEY_LENGTH,
    canonical_json,
    kernel_source_hash,
    nvcc_version,
    sha256_text,
)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
