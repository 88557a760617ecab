"""The overlap check of codegen: entries of one (N, K) whose [M, M_END) ranges intersect (first match wins).

Modular's manifests may write M and M_END as integer expressions (``"4096 * 2"``): they are evaluated
through an ast whitelist (int literals, + - * // and signs), never eval; an entry that cannot be
evaluated is noted and skipped, never an error.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Longest M / M_END expression the overlap check will evaluate (bounds the work on odd input).
MAX_EXPRESSION_CHARS = 200


@dataclass(frozen=True)
class Overlap:
    """Two entries of one (N, K) whose [M, M_END) ranges intersect: the later one is shadowed."""

    first: int
    second: int
    n: Any
    k: Any
    first_range: tuple[int, int]
    second_range: tuple[int, int]

    def message(self) -> str:
        """One line naming both entries, the shape and the shadowed M interval."""
        lo = max(self.first_range[0], self.second_range[0])
        hi = min(self.first_range[1], self.second_range[1])
        return (
            f"params[{self.second}] [M, M_END) = [{self.second_range[0]}, {self.second_range[1]}) "
            f"overlaps params[{self.first}] [{self.first_range[0]}, {self.first_range[1]}) "
            f"for N={self.n}, K={self.k}; with first-match lookup params[{self.second}] is "
            f"shadowed for M in [{lo}, {hi})"
        )


@dataclass(frozen=True)
class OverlapReport:
    """Result of the overlap check: the overlaps found and entries that could not be checked."""

    overlaps: tuple[Overlap, ...] = ()
    notes: tuple[str, ...] = ()


_INT_BINOPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}
_INT_UNARYOPS = {ast.USub: int.__neg__, ast.UAdd: int.__pos__}


def _int_node(node: ast.AST) -> int:
    """The value of an expression node of int literals, + - * // and unary signs; ValueError otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_BINOPS:
        return _INT_BINOPS[type(node.op)](_int_node(node.left), _int_node(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _INT_UNARYOPS:
        return _INT_UNARYOPS[type(node.op)](_int_node(node.operand))
    raise ValueError(f"unsupported syntax {type(node).__name__}")


def int_value(value: Any) -> int | None:
    """An int, or a string of int literals with + - * // and parentheses (ast whitelist, never eval)."""
    if type(value) is int:
        return value
    if not isinstance(value, str) or len(value) > MAX_EXPRESSION_CHARS:
        return None
    try:
        return _int_node(ast.parse(value.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _unevaluable(index: int, key: str, value: Any) -> str:
    """The note for an entry value that is not an integer expression (skipped in the overlap check)."""
    return f"params[{index}]: {key} {value!r} is not an integer expression; skipped in the overlap check"


def _entry_range(entry: Mapping[str, Any], index: int) -> tuple[tuple[int, int] | None, str | None]:
    """An entry's [M, M_END) range (M_END absent: exactly M), or a note why it cannot be checked."""
    if "M" not in entry:
        return None, None
    m = int_value(entry["M"])
    if m is None:
        return None, _unevaluable(index, "M", entry["M"])
    if entry.get("M_END") is None:
        return (m, m + 1), None
    m_end = int_value(entry["M_END"])
    if m_end is None:
        return None, _unevaluable(index, "M_END", entry["M_END"])
    return (m, m_end), None


def find_overlaps(parameters: Sequence[Mapping[str, Any]]) -> OverlapReport:
    """Entries with equal N and K whose [M, M_END) ranges intersect, in manifest order."""
    overlaps: list[Overlap] = []
    notes: list[str] = []
    seen: dict[tuple[str, str], list[tuple[int, tuple[int, int]]]] = {}
    for index, entry in enumerate(parameters):
        if "N" not in entry or "K" not in entry:
            continue
        span, note = _entry_range(entry, index)
        if note:
            notes.append(note)
        if span is None or span[0] >= span[1]:
            continue
        shape = (repr(entry["N"]), repr(entry["K"]))
        for earlier, earlier_span in seen.get(shape, []):
            if span[0] < earlier_span[1] and earlier_span[0] < span[1]:
                overlaps.append(
                    Overlap(
                        first=earlier, second=index, n=entry["N"], k=entry["K"],
                        first_range=earlier_span, second_range=span,
                    )
                )
        seen.setdefault(shape, []).append((index, span))
    return OverlapReport(overlaps=tuple(overlaps), notes=tuple(notes))
