"""MkDocs hook (mkdocs.yml `hooks:`): the source tree mkdocstrings reads the API page from.

The distribution maps folders to import names (pyproject's package-dir: pipeline/ is `tunetable`, kernels/ is
`tunetable.kernels`), which griffe's static finder cannot follow. Before the build this lays out
`.cache/api-src/tunetable/` (git-ignored) as symlinks to pipeline/'s entries plus `kernels` -> kernels/, so
the API is read from the files without importing them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
API_SOURCE = REPO / ".cache" / "api-src"


def lay_out_api_source(*, root: Path = REPO, target: Path = API_SOURCE) -> Path:
    """``target/tunetable``: a symlink per entry of pipeline/, and ``kernels`` to kernels/; returns ``target``."""
    package = target / "tunetable"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in sorted((root / "pipeline").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "kernels").symlink_to(root / "kernels")
    return target


def on_startup(**_: Any) -> None:
    """MkDocs' first event: the tree is ready before mkdocstrings looks for a module."""
    lay_out_api_source()
