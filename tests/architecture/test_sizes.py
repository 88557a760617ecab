"""The size rules of issue 48, kept from regressing: no module of pipeline/ or kernels/ over 600 lines (the
generated kernels/tuning_configs.py aside), no function or method over 60 lines.

A function's length is its ``def`` line to its last line (decorators not counted, its docstring and any
nested functions counted), as ``ast`` reports them. A file over a limit is split by concern, a function
into smaller pure ones; raising a limit here is a decision for the issue tracker, not a fix.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
GENERATED = {Path("kernels/tuning_configs.py")}   # codegen's marker regions: literals, as long as the tables are
SOURCES = sorted(path.relative_to(REPO) for folder in ("pipeline", "kernels") for path in (REPO / folder).rglob("*.py"))


def long_functions(source: str, *, filename: str, limit: int) -> list[str]:
    """'name (line N): L lines' for every function or method of ``source`` longer than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{node.name} (line {node.lineno}): {length} lines")
    return sorted(found)


def test_the_rules_see_the_project() -> None:
    assert Path("kernels/autotune.py") in SOURCES and Path("pipeline/grid.py") in SOURCES
    assert GENERATED <= set(SOURCES)


def test_a_function_one_line_over_the_limit_is_caught_and_one_at_it_is_not() -> None:
    at_limit = "def fits():\n" + "".join(f"    x{i} = {i}\n" for i in range(59))             # 1 + 59 = 60 lines
    over = "class C:\n    def grows(self):\n" + "".join(f"        x{i} = {i}\n" for i in range(60))  # 61 lines
    assert long_functions(at_limit, filename="<at>", limit=MAX_FUNCTION_LINES) == []
    assert long_functions(over, filename="<over>", limit=MAX_FUNCTION_LINES) == ["grows (line 2): 61 lines"]


@pytest.mark.parametrize("relative", [path for path in SOURCES if path not in GENERATED], ids=str)
def test_no_module_is_over_the_line_limit(relative: Path) -> None:
    lines = len((REPO / relative).read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, (
        f"{relative} has {lines} lines (limit {MAX_MODULE_LINES}): split it by concern, re-exporting moved names"
    )


@pytest.mark.parametrize("relative", SOURCES, ids=str)
def test_no_function_is_over_the_line_limit(relative: Path) -> None:
    found = long_functions((REPO / relative).read_text(), filename=str(relative), limit=MAX_FUNCTION_LINES)
    assert not found, f"{relative}: over {MAX_FUNCTION_LINES} lines: {'; '.join(found)}"
