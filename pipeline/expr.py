"""Safe expressions for grid rules, derived values and queries: ``ast`` + whitelist, never eval.

An expression is parsed once into a tree of small closures and then evaluated many times
against a mapping of names to values. Allowed: int/float/bool/str literals, the names given
by the caller, ``+ - * / // % **``, unary ``- + not``, comparisons (chained, ``in`` over a
literal tuple or list), ``and``/``or``, parentheses and ``a if c else b``. Everything else
(calls, attributes, subscripts, lambdas, comprehensions, ...) is rejected with an error that
names the file, the place and the expression.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.inputs import check_expression_text

Env = Mapping[str, Any]
Evaluator = Callable[[Env], Any]

# Bounds on the work an expression can ask for, whatever its text: a typo such as ``2 ** 2 ** 64``,
# a tower of powers or ``"x" * 10**15`` is an error naming the expression, never a hang or a MemoryError.
# Every intermediate value is checked, and an operation whose result would break a bound is refused
# before it is computed.
MAX_EXPONENT = 64
MAX_INT_BITS = 128          # integers: tunables and derived values are int64 defines; room for products
MAX_STR_CHARS = 4096        # strings
MAX_SOURCE_CHARS = 4096     # the expression's own text

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
# Human names for rejected node types: the error says what was found.
_REJECTED_NAMES: dict[type[ast.AST], str] = {
    ast.Call: "call",
    ast.Attribute: "attribute access",
    ast.Subscript: "subscript",
    ast.Lambda: "lambda",
    ast.ListComp: "comprehension",
    ast.SetComp: "comprehension",
    ast.DictComp: "comprehension",
    ast.GeneratorExp: "comprehension",
    ast.NamedExpr: "assignment expression",
    ast.Starred: "starred expression",
    ast.JoinedStr: "f-string",
    ast.Dict: "dict literal",
    ast.Set: "set literal",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Slice: "slice",
}


class _Reject(Exception):
    """Internal: carries the reason a node is not allowed up to ``parse_expression``."""


@dataclass(frozen=True)
class Expression:
    """A parsed, whitelisted expression: evaluate it with ``expr(env)`` or ``expr.evaluate(env)``."""

    source: str
    names: frozenset[str]
    kind: str = "expression"
    path: str | None = None
    where: str | None = None
    _evaluate: Evaluator = field(default=lambda env: None, repr=False, compare=False)

    def evaluate(self, env: Env) -> Any:
        """Value of the expression for ``env``; arithmetic errors name the expression and the values."""
        try:
            return self._evaluate(env)
        except TuneTableError:
            raise
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
            shown = ", ".join(f"{name}={env[name]!r}" for name in sorted(self.names) if name in env)
            raise TuneTableError(
                f"cannot evaluate {self.kind} '{self.source}' with {shown or 'no names'}: {exc}",
                path=self.path,
                where=self.where,
            ) from None

    __call__ = evaluate


def parse_eval(text: str) -> ast.Expression:
    """``text`` parsed as one Python expression; what Python only warns about ('1and') is a SyntaxError here."""
    with warnings.catch_warnings():  # a warning would print a stray line beside the one clear error, or none at all
        warnings.simplefilter("error", SyntaxWarning)
        return ast.parse(text, mode="eval")


def parse_expression(
    source: str,
    *,
    allowed_names: Iterable[str],
    kind: str = "expression",
    path: str | Path | None = None,
    where: str | None = None,
) -> Expression:
    """Parse ``source`` against the whitelist; an error names ``path``, ``where`` and the text."""
    allowed = frozenset(allowed_names)
    path_text = str(path) if path is not None else None
    if not isinstance(source, str) or not source.strip():
        raise TuneTableError(f"empty {kind}", path=path_text, where=where)
    if len(source) > MAX_SOURCE_CHARS:
        raise TuneTableError(f"{kind} of {len(source)} characters (at most {MAX_SOURCE_CHARS})", path=path_text,
                             where=where)
    try:
        tree = parse_eval(source.strip())
    except SyntaxError as exc:
        raise TuneTableError(
            f"syntax error in {kind} '{source}': {exc.msg}", path=path_text, where=where
        ) from None
    except (RecursionError, MemoryError):
        raise TuneTableError(f"{kind} nested too deeply", path=path_text, where=where) from None
    used: set[str] = set()
    try:
        evaluator = _build(tree.body, allowed=allowed, used=used)
    except RecursionError:
        raise TuneTableError(f"{kind} nested too deeply", path=path_text, where=where) from None
    except _Reject as exc:
        raise TuneTableError(f"{exc} in {kind} '{source}'", path=path_text, where=where) from None
    return Expression(
        source=source, names=frozenset(used), kind=kind, path=path_text, where=where, _evaluate=evaluator
    )


def _build(node: ast.AST, *, allowed: frozenset[str], used: set[str]) -> Evaluator:
    """Turn one whitelisted node into a closure; anything else raises _Reject."""
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.Name):
        return _name(node.id, allowed=allowed, used=used)
    if isinstance(node, ast.BinOp):
        return _binary(node, allowed=allowed, used=used)
    if isinstance(node, ast.UnaryOp):
        return _unary(node, allowed=allowed, used=used)
    if isinstance(node, ast.BoolOp):
        return _boolean(node, allowed=allowed, used=used)
    if isinstance(node, ast.Compare):
        return _compare(node, allowed=allowed, used=used)
    if isinstance(node, ast.IfExp):
        test = _build(node.test, allowed=allowed, used=used)
        then = _build(node.body, allowed=allowed, used=used)
        other = _build(node.orelse, allowed=allowed, used=used)
        return lambda env: then(env) if test(env) else other(env)
    if isinstance(node, (ast.Tuple, ast.List)):
        raise _Reject("a tuple or list is only allowed on the right of 'in'")
    raise _Reject(f"{_REJECTED_NAMES.get(type(node), type(node).__name__)} not allowed")


def _constant(value: Any) -> Evaluator:
    """A literal: int, float, bool or str only (no bytes, None, Ellipsis, complex), within the size bounds."""
    if not isinstance(value, (int, float, str)):
        raise _Reject(f"literal {value!r} not allowed")
    try:
        bounded(value)
    except ValueError as exc:
        raise _Reject(f"literal: {exc}") from None
    return lambda env: value


def _name(name: str, *, allowed: frozenset[str], used: set[str]) -> Evaluator:
    """A name from the allowed set (``True``/``False`` parse as constants already)."""
    if name not in allowed:
        known = ", ".join(sorted(allowed)) or "none"
        raise _Reject(f"unknown name '{name}' (allowed: {known})")
    used.add(name)

    def lookup(env: Env) -> Any:
        """The name's value in the environment; ValueError when it has none."""
        try:
            return bounded(env[name])
        except KeyError:
            raise ValueError(f"'{name}' has no value here") from None

    return lookup


def _bits(value: Any) -> int:
    """Bits of an integer (0 for anything else)."""
    return value.bit_length() if isinstance(value, int) else 0


def bounded(value: Any) -> Any:
    """``value`` when it is within the size bounds (MAX_INT_BITS, MAX_STR_CHARS); ValueError otherwise."""
    if _bits(value) > MAX_INT_BITS:
        raise ValueError(f"an intermediate integer of {_bits(value)} bits (at most {MAX_INT_BITS})")
    if isinstance(value, str) and len(value) > MAX_STR_CHARS:
        raise ValueError(f"an intermediate string of {len(value)} characters (at most {MAX_STR_CHARS})")
    return value


def _guard(op: Callable[[Any, Any], Any], left: Any, right: Any) -> None:
    """Refuse, before computing it, an operation whose result would break the size bounds."""
    if op is operator.mul:
        if isinstance(left, str) or isinstance(right, str):
            text, count = (left, right) if isinstance(left, str) else (right, left)
            if isinstance(count, int) and len(text) * max(count, 0) > MAX_STR_CHARS:
                raise ValueError(f"a string of {len(text)} x {count} characters (at most {MAX_STR_CHARS})")
        elif _bits(left) + _bits(right) > MAX_INT_BITS + 1:
            raise ValueError(f"a product of {_bits(left)}-bit and {_bits(right)}-bit integers "
                             f"(at most {MAX_INT_BITS} bits)")
    elif op is operator.add and isinstance(left, str) and isinstance(right, str):
        if len(left) + len(right) > MAX_STR_CHARS:
            raise ValueError(f"a string of {len(left) + len(right)} characters (at most {MAX_STR_CHARS})")
    elif op is operator.mod and isinstance(left, str):
        raise ValueError("'%' on a string (string formatting) is not allowed")


def _apply(op: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    """``op(left, right)`` within the size bounds (checked before and after)."""
    _guard(op, left, right)
    return bounded(op(left, right))


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` with a bounded exponent and a bounded result (refused before it is computed)."""
    if isinstance(exponent, (int, float)) and abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} exceeds {MAX_EXPONENT}")
    growing = isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1
    if growing and exponent * math.log2(abs(base)) > MAX_INT_BITS:
        raise ValueError(f"{_bits(base)}-bit integer to the power {exponent} (at most {MAX_INT_BITS} bits)")
    return bounded(base**exponent)


def _binary(node: ast.BinOp, *, allowed: frozenset[str], used: set[str]) -> Evaluator:
    """Arithmetic: + - * / // % **."""
    if isinstance(node.op, ast.Pow):
        op = _power
    elif type(node.op) in _BINARY:
        op = _BINARY[type(node.op)]
    else:
        raise _Reject(f"operator {type(node.op).__name__} not allowed")
    left = _build(node.left, allowed=allowed, used=used)
    right = _build(node.right, allowed=allowed, used=used)
    if op is _power:
        return lambda env: _power(left(env), right(env))
    return lambda env: _apply(op, left(env), right(env))


def _unary(node: ast.UnaryOp, *, allowed: frozenset[str], used: set[str]) -> Evaluator:
    """Unary minus, plus and ``not`` (no bitwise invert)."""
    operand = _build(node.operand, allowed=allowed, used=used)
    if isinstance(node.op, ast.USub):
        return lambda env: bounded(-operand(env))
    if isinstance(node.op, ast.UAdd):
        return lambda env: +operand(env)
    if isinstance(node.op, ast.Not):
        return lambda env: not operand(env)
    raise _Reject(f"operator {type(node.op).__name__} not allowed")


def _boolean(node: ast.BoolOp, *, allowed: frozenset[str], used: set[str]) -> Evaluator:
    """``and`` / ``or`` with Python's short-circuit semantics."""
    parts = tuple(_build(value, allowed=allowed, used=used) for value in node.values)
    if isinstance(node.op, ast.And):

        def conjunction(env: Env) -> Any:
            """The first falsy part's value, else the last part's (Python ``and``)."""
            result: Any = True
            for part in parts:
                result = part(env)
                if not result:
                    return result
            return result

        return conjunction

    def disjunction(env: Env) -> Any:
        """The first truthy part's value, else the last part's (Python ``or``)."""
        result: Any = False
        for part in parts:
            result = part(env)
            if result:
                return result
        return result

    return disjunction


def _compare(node: ast.Compare, *, allowed: frozenset[str], used: set[str]) -> Evaluator:
    """Chained comparisons; ``in``/``not in`` take a literal tuple or list on the right."""
    left = _build(node.left, allowed=allowed, used=used)
    steps: list[tuple[Callable[[Any, Any], bool], Evaluator]] = []
    for op, comparator in zip(node.ops, node.comparators):
        if type(op) not in _COMPARE:
            raise _Reject(f"comparison {type(op).__name__} not allowed")
        if isinstance(op, (ast.In, ast.NotIn)):
            if not isinstance(comparator, (ast.Tuple, ast.List)):
                raise _Reject("'in' needs a literal tuple or list on its right")
            items = tuple(_build(item, allowed=allowed, used=used) for item in comparator.elts)
            steps.append((_COMPARE[type(op)], lambda env, items=items: tuple(item(env) for item in items)))
        else:
            steps.append((_COMPARE[type(op)], _build(comparator, allowed=allowed, used=used)))

    def chain(env: Env) -> bool:
        """True when every comparison of the chain holds (Python chained comparison)."""
        current = left(env)
        for compare, right in steps:
            value = right(env)
            if not compare(current, value):
                return False
            current = value
        return True

    return chain


# -- pandas query syntax (``tunetable profile --query``) --------------------------------------------------
# DataFrame.query's default parser reads ``&`` / ``|`` as ``and`` / ``or`` (boolean precedence, not bitwise)
# and ``~`` as negation; it allows ``==`` / ``!=`` against a list (membership), the Series methods
# ``.between(lo, hi, inclusive=...)`` and ``.isin([...])``, and backtick-quoted column names. Each form
# is rewritten into the whitelisted grammar above before anything is built: no new evaluation path.
QUERY_METHODS = ("between", "isin")
_BETWEEN_OPS: dict[str, tuple[ast.cmpop, ast.cmpop]] = {
    "both": (ast.LtE(), ast.LtE()), "neither": (ast.Lt(), ast.Lt()),
    "left": (ast.LtE(), ast.Lt()), "right": (ast.Lt(), ast.LtE()),
}
_BACKTICK_PREFIX = "_tunetable_quoted_"


def parse_query(
    source: str,
    *,
    allowed_names: Iterable[str],
    path: str | Path | None = None,
    where: str | None = None,
) -> Expression:
    """Parse a pandas ``DataFrame.query`` string (``M > 64 & (K < 1024 | ~FLAG)``, ``N.between(1, 8)``)."""
    allowed = frozenset(allowed_names)
    path_text = str(path) if path is not None else None
    if not isinstance(source, str) or not source.strip():
        raise TuneTableError("empty query", path=path_text, where=where)
    # The rule parser's guard: a bounded length and bracket depth, and a parser stack overflow is one line.
    check_expression_text(source, what="query", where=where, limit=MAX_SOURCE_CHARS)
    try:
        text, quoted = _pandas_text(source.strip())
        tree = parse_eval(text)
    except (RecursionError, MemoryError):
        raise TuneTableError("query nested too deeply", path=path_text, where=where) from None
    except _Reject as exc:
        raise TuneTableError(f"{exc} in query '{source}'", path=path_text, where=where) from None
    except SyntaxError as exc:
        hint = " (local variables, @name, are not supported)" if "@" in source else ""
        raise TuneTableError(f"syntax error in query '{source}': {exc.msg}{hint}", path=path_text,
                             where=where) from None
    used: set[str] = set()
    try:
        body = _QueryRewriter(quoted).visit(tree.body)
        evaluator = _build(body, allowed=allowed, used=used)
    except RecursionError:
        raise TuneTableError("query nested too deeply", path=path_text, where=where) from None
    except _Reject as exc:
        raise TuneTableError(f"{exc} in query '{source}'", path=path_text, where=where) from None
    return Expression(source=source, names=frozenset(used), kind="query", path=path_text, where=where,
                      _evaluate=evaluator)


def _pandas_text(source: str) -> tuple[str, dict[str, str]]:
    """``&``/``|`` outside string literals as ``and``/``or``; each `quoted name` as a placeholder name."""
    out: list[str] = []
    quoted: dict[str, str] = {}
    index = 0
    while index < len(source):
        char = source[index]
        if char in "'\"":
            end = index + 1
            while end < len(source) and source[end] != char:
                end += 2 if source[end] == "\\" else 1
            out.append(source[index:end + 1])
            index = end + 1
            continue
        if char == "`":
            end = source.find("`", index + 1)
            if end < 0:
                raise _Reject("unclosed backtick")
            placeholder = f"{_BACKTICK_PREFIX}{len(quoted)}"
            quoted[placeholder] = source[index + 1:end]
            out.append(placeholder)
            index = end + 1
            continue
        out.append({"&": " and ", "|": " or "}.get(char, char))
        index += 1
    return "".join(out), quoted


class _QueryRewriter(ast.NodeTransformer):
    """pandas-only forms as the base grammar's nodes: ``~`` -> not, ``== [..]`` -> in, methods -> comparisons."""

    def __init__(self, quoted: Mapping[str, str]):
        self.quoted = quoted

    def visit_Name(self, node: ast.Name) -> ast.AST:
        """A backtick-quoted name back to its real text (any characters)."""
        return ast.Name(id=self.quoted.get(node.id, node.id), ctx=node.ctx)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        """``~condition`` is ``not condition``."""
        operand = self.visit(node.operand)
        return ast.UnaryOp(op=ast.Not() if isinstance(node.op, ast.Invert) else node.op, operand=operand)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        """``x == [a, b]`` / ``x != [a, b]`` are membership tests, as in pandas."""
        self.generic_visit(node)
        ops = [ast.In() if isinstance(op, ast.Eq) and isinstance(right, (ast.List, ast.Tuple))
               else ast.NotIn() if isinstance(op, ast.NotEq) and isinstance(right, (ast.List, ast.Tuple))
               else op for op, right in zip(node.ops, node.comparators)]
        return ast.Compare(left=node.left, ops=ops, comparators=node.comparators)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        """``x.between(lo, hi[, inclusive=...])`` and ``x.isin([...])``; any other call is refused."""
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if method not in QUERY_METHODS:
            shown = ast.unparse(node.func)
            raise _Reject(f"call {shown}() not allowed (queries allow .between() and .isin())")
        subject = self.visit(node.func.value)
        args = [self.visit(arg) for arg in node.args]
        keywords = {k.arg: k.value for k in node.keywords}
        if method == "isin":
            if len(args) != 1 or keywords or not isinstance(args[0], (ast.List, ast.Tuple)):
                raise _Reject(".isin() takes one literal list")
            return ast.Compare(left=subject, ops=[ast.In()], comparators=[args[0]])
        if len(args) != 2 or set(keywords) - {"inclusive"}:
            raise _Reject(".between() takes two bounds and optionally inclusive=")
        inclusive = keywords.get("inclusive", ast.Constant("both"))
        if not (isinstance(inclusive, ast.Constant) and inclusive.value in _BETWEEN_OPS):
            raise _Reject(f"inclusive= must be one of {', '.join(repr(k) for k in _BETWEEN_OPS)}")
        low_op, high_op = _BETWEEN_OPS[inclusive.value]
        return ast.Compare(left=args[0], ops=[low_op, high_op], comparators=[subject, args[1]])
