"""The import rules of docs/architecture.md, checked on every module's real imports (ast, all of them).

Layers, lowest first: leaves, families, tables, runtime, build, tools. A module may import its own
layer and the ones below, never one above; the runtime therefore never imports the build. Imports
inside functions count like module-level ones (hiding an import in a function does not change the
graph). The bench never imports the search (the search drives a runner, not the other way round).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("leaves", "families", "tables", "runtime", "build", "tools")
LEAVES = {"tunetable.errors", "tunetable.atomic", "tunetable.kernels.jit", "tunetable.kernels.driver",
          "tunetable.kernels.tma"}
TOOLS = {"tunetable.cli", "tunetable.__main__", "tunetable.workflow"}
# Runtime modules outside kernels/: `tunetable.torch` is the user-facing name of the runtime's PyTorch
# front end (kernels/runtime/torch_ops.py); it sits at the package top for users, but it is runtime, so
# it may import only the runtime and below, never the build.
RUNTIME_FACADES = {"tunetable.torch"}


def module_name(path: Path) -> str:
    """The import name of a file of pipeline/ (tunetable) or kernels/ (tunetable.kernels)."""
    for folder, package in (("kernels", "tunetable.kernels"), ("pipeline", "tunetable")):
        root = REPO / folder
        if path.is_relative_to(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    raise ValueError(path)


MODULES = {module_name(path): path for folder in ("pipeline", "kernels") for path in (REPO / folder).rglob("*.py")}


def layer(name: str) -> str:
    """The layer of a module (docs/architecture.md)."""
    if name in LEAVES:
        return "leaves"
    if name == "tunetable.kernels.families" or name.startswith("tunetable.kernels.families."):
        return "families"
    if name == "tunetable.kernels.tuning_configs":
        return "tables"
    if name.startswith("tunetable.kernels") or name in RUNTIME_FACADES:
        return "runtime"
    if name in TOOLS or name.startswith(("tunetable.commands", "tunetable.workflow.")):
        return "tools"
    return "build"


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a tunetable module in a file, the names of ``from X import Y``
    resolved to the module X.Y where that is one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.append((node.lineno, child if child in MODULES else node.module))
    wanted = [(line, name) for line, name in found if name == "tunetable" or name.startswith("tunetable.")]
    return sorted(set(wanted))


def test_every_module_has_a_layer_and_the_layers_are_populated() -> None:
    assert {layer(name) for name in MODULES} == set(LAYERS)
    assert all(name in MODULES for name in LEAVES | TOOLS | RUNTIME_FACADES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_upward(name: str) -> None:
    own = LAYERS.index(layer(name))
    upward = [f"line {line}: {target} ({layer(target)})" for line, target in imports_of(MODULES[name])
              if target != "tunetable" and LAYERS.index(layer(target)) > own]
    assert not upward, f"{MODULES[name].relative_to(REPO)} ({layer(name)}) imports upward: {'; '.join(upward)}"


def test_the_runtime_never_imports_the_build() -> None:
    """The runtime's whole import closure (what `from tunetable import gemm` can reach) holds no build module."""
    seen: set[str] = set()
    pending = [name for name in MODULES if layer(name) == "runtime"]
    while pending:
        name = pending.pop()
        if name in seen or name not in MODULES:
            continue
        seen.add(name)
        pending += [target for _, target in imports_of(MODULES[name])]
    assert {name for name in seen if layer(name) in ("build", "tools")} == set()
    assert "tunetable.kernels.runtime.launch" in seen and "tunetable.kernels.jit" in seen


def test_the_bench_never_imports_the_search() -> None:
    bench = [name for name in MODULES if name.startswith("tunetable.bench")]
    found = [f"{name}: line {line}: {target}" for name in bench for line, target in imports_of(MODULES[name])
             if target.startswith("tunetable.search")]
    assert not found, "; ".join(found)


def test_imports_inside_functions_are_the_lazy_ones_and_say_why() -> None:
    """Imports live at module top; the few kept inside functions (pycuda, dvc, matplotlib, ...) carry a comment."""
    silent = []
    for name, path in sorted(MODULES.items()):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)) and inner is not node:
                    line, above = lines[inner.lineno - 1], lines[inner.lineno - 2].strip()
                    if "#" not in line and not above.startswith("#") and not above.startswith(("import ", "from ")):
                        silent.append(f"{path.relative_to(REPO)}:{inner.lineno}: {line.strip()}")
    assert not silent, "imports inside functions without a reason (move them to the top, or say why): " + "; ".join(
        silent)


# What the GPU host runs (its image has no polars, snakemake or dvc: docs/architecture.md, the device notes).
GPU_HOST_COMMANDS = ("tunetable.commands.bench", "tunetable.commands.compile", "tunetable.commands.grid",
                     "tunetable.commands.record", "tunetable.kernels.runtime.launch",
                     "tunetable.kernels.runtime.online")


def test_what_the_gpu_host_runs_imports_no_polars_snakemake_or_dvc() -> None:
    """Each module imports in a fresh interpreter where polars, snakemake and dvc cannot be imported."""
    blocker = ("import importlib, importlib.abc, sys\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name.split('.')[0] in ('polars', 'snakemake', 'dvc'):\n"
               "            raise ImportError('the GPU host has no ' + name)\n"
               "sys.meta_path.insert(0, Block())\n"
               "importlib.import_module(sys.argv[1])\n")
    failed = {}
    for name in GPU_HOST_COMMANDS:
        done = subprocess.run([sys.executable, "-c", blocker, name], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            failed[name] = (done.stderr.strip().splitlines() or ["?"])[-1]
    assert not failed, failed
