"""dvc.yaml's code deps against the import graph: every module a stage's commands can import is a dep.

A stage's commands are the Snakefile's parse (the modules it imports: tunetable.workflow) and the CLI subcommands its
rules run (plus the bench worker the bench starts as a subprocess, and the backends it loads by
name). Their import closure (ast: module-level and function-level imports alike) must be covered
by the stage's deps (a listed file, or a listed folder above it); so must the non-Python files
they read. A stage must not import another stage's out (the generated tables): that would be a
cycle DVC cannot run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[2]
STAGE_ENTRIES = {
    "measure": ("Snakefile", "tunetable.cli", "tunetable.commands.grid", "tunetable.commands.compile",
                "tunetable.commands.bench", "tunetable.commands.record", "tunetable.bench.worker"),
    "select": ("Snakefile", "tunetable.cli", "tunetable.commands.rank", "tunetable.commands.select",
               "tunetable.commands.metrics"),
    "codegen": ("Snakefile", "tunetable.cli", "tunetable.commands.codegen"),
}
# What the stages read besides Python modules; every stage runs snakemake, which parses the Snakefile,
# its rules and the schema it validates params.yaml against.
SNAKEMAKE = ("Snakefile", "pipeline/rules/measure.smk", "pipeline/rules/tables.smk", "pipeline/schemas")
FAMILY_FILES = sorted((REPO / "kernels" / "families").glob("*/*.*"))
STAGE_FILES = {
    "measure": (*SNAKEMAKE, "pipeline/bench/harness.cu", "kernels/runtime/spin.cu", "kernels/common",
                "data/recordings", *(str(path.relative_to(REPO)) for path in FAMILY_FILES if path.suffix == ".cu")),
    "select": SNAKEMAKE,
    "codegen": (*SNAKEMAKE, "kernels/snippets",
                *(str(path.relative_to(REPO)) for path in FAMILY_FILES if path.suffix == ".snippet")),
}
# Modules a module imports by name at run time (importlib), which ast cannot see.
DYNAMIC = {"tunetable.kernels.families": tuple(f"tunetable.kernels.families.{path.parent.name}.family"
                                               for path in sorted((REPO / "kernels" / "families").glob("*/family.py"))),
           "tunetable.bench.backend": ("tunetable.bench.cuda_backend", "tunetable.bench.cpu_backend")}


def module_file(name: str) -> Path | None:
    """The file of a tunetable module (pipeline/ is tunetable, kernels/ is tunetable.kernels), or None."""
    if name == "tunetable.kernels" or name.startswith("tunetable.kernels."):
        base, rest = REPO / "kernels", name.split(".")[2:]
    elif name == "tunetable" or name.startswith("tunetable."):
        base, rest = REPO / "pipeline", name.split(".")[1:]
    else:
        return None
    for candidate in (base.joinpath(*rest).with_suffix(".py"), base.joinpath(*rest, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def imports(path: Path) -> set[str]:
    """Every tunetable module a file imports (``from X import Y`` counts X.Y where that is a module)."""
    return source_imports(path.read_text(), filename=str(path))


def snakefile_imports() -> set[str]:
    """The tunetable modules the Snakefile's parse imports (its import lines are Python; its rules are not)."""
    lines = [line for line in (REPO / "Snakefile").read_text().splitlines() if line.startswith(("import ", "from "))]
    return source_imports("\n".join(lines), filename="Snakefile")


def source_imports(text: str, *, filename: str) -> set[str]:
    """Every tunetable module a Python source imports (``from X import Y`` counts X.Y where that is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text, filename=filename)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if module_file(f"{node.module}.{alias.name}") is not None}
    return {name for name in found if module_file(name) is not None}


def closure(entries: tuple[str, ...]) -> set[Path]:
    """The files of every module ``entries`` can import (``Snakefile``: its parse's), and of their packages."""
    seen: set[Path] = set()
    pending = [name for entry in entries for name in (sorted(snakefile_imports()) if entry == "Snakefile" else [entry])]
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):   # importing a.b.c runs a/__init__ and a/b/__init__ first
            path = module_file(".".join(parts[:depth]))
            if path is not None and path not in seen:
                seen.add(path)
                pending += sorted(imports(path)) + list(DYNAMIC.get(".".join(parts[:depth]), ()))
    return seen


def stage_deps(stage: str) -> list[Path]:
    """The deps dvc.yaml lists for a stage, as paths."""
    return [REPO / dep for dep in load_yaml_file(REPO / "dvc.yaml")["stages"][stage]["deps"]]


def covered(path: Path, deps: list[Path]) -> bool:
    """True when ``path`` is a dep or lies under a dep folder."""
    return any(path == dep or path.is_relative_to(dep) for dep in deps)


@pytest.mark.parametrize("stage", sorted(STAGE_ENTRIES))
def test_every_module_a_stage_imports_is_a_dep(stage: str) -> None:
    deps = stage_deps(stage)
    needed = sorted(closure(STAGE_ENTRIES[stage]) | {REPO / name for name in STAGE_FILES[stage]})
    assert all(path.exists() for path in needed)
    missing = [str(path.relative_to(REPO)) for path in needed if not covered(path, deps)]
    assert not missing, f"dvc.yaml stage {stage} lacks deps: {', '.join(missing)}"


@pytest.mark.parametrize("stage", ["measure", "select"])
def test_no_stage_imports_the_generated_tables(stage: str) -> None:
    """kernels/tuning_configs.py is the codegen stage's out: an earlier stage importing it would be a cycle."""
    assert REPO / "kernels" / "tuning_configs.py" not in closure(STAGE_ENTRIES[stage])


def exact_deps(stage: str) -> list[str]:
    """The deps a stage needs: its closure and files, each folder whose every file is needed named once."""
    needed = closure(STAGE_ENTRIES[stage]) | {REPO / name for name in STAGE_FILES[stage]}
    files = {path for path in needed if path.is_file()}
    # The families folder is listed whole, so that adding a family is adding a folder (docs/families.md).
    folders = {path for path in needed if path.is_dir()} | {REPO / "kernels" / "families"}

    def whole(folder: Path) -> bool:
        """Every file DVC would hash in ``folder`` (its .py, .cu, .cuh, .snippet, .smk) is needed."""
        members = [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        return bool(members) and all(p in files or any(p.is_relative_to(f) for f in folders) for p in members)

    chosen: set[Path] = set(folders)
    for path in sorted(files):
        folder = next((parent for parent in reversed(path.relative_to(REPO).parents)
                       if parent != Path(".") and whole(REPO / parent)), None)
        chosen.add(REPO / folder if folder is not None else path)
    chosen = {path for path in chosen if not any(path != other and path.is_relative_to(other) for other in chosen)}
    return sorted(str(path.relative_to(REPO)) for path in chosen)


@pytest.mark.parametrize("stage", sorted(STAGE_ENTRIES))
def test_no_stage_lists_a_dep_its_commands_do_not_read(stage: str) -> None:
    listed = [dep for dep in load_yaml_file(REPO / "dvc.yaml")["stages"][stage]["deps"]]
    # kernels/data/: the shape selectors' fitted data files (data deps of codegen, like the manifests), not code
    code = [dep for dep in listed if dep.startswith(("pipeline", "kernels", "Snakefile"))
            and not dep.startswith("kernels/data/")]
    assert sorted(code) == [dep for dep in exact_deps(stage)
                            if dep.startswith(("pipeline", "kernels", "Snakefile"))], (
        f"dvc.yaml stage {stage}: the code deps are exactly {exact_deps(stage)}")
