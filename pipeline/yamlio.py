"""The one YAML loader of the project: safe, strict and bounded (params.yaml, manifests, kbench YAML).

Every YAML read in tunetable goes through ``load_yaml`` / ``load_yaml_file``:

- safe only: PyYAML's safe constructor (plain data, no Python tags), with libyaml's C parser when
  PyYAML was built with it (``CSafeLoader``, several times faster on large manifests);
- a key written twice in one mapping is an error naming both lines (PyYAML keeps the last one
  silently: a second ``select:`` block would win); merge keys (``<<: *defaults``) still override;
- aliases are bounded: a document whose aliases expand past ``alias_limit(nodes)`` nodes (an
  "alias bomb"), or that refers to itself, is refused before it is built;
- a file that cannot be read, or is not UTF-8, is one error line.

A leaf module: it imports PyYAML and ``tunetable.errors`` only, so the build, the runtime and the
tools can all use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tunetable.errors import TuneTableError

try:
    _BaseLoader: type = yaml.CSafeLoader
    HAS_LIBYAML = True
except AttributeError:  # PyYAML built without libyaml: the pure-Python parser, same results
    _BaseLoader = yaml.SafeLoader
    HAS_LIBYAML = False

# A document may grow through its aliases to at most ALIAS_FACTOR times its own node count plus
# ALIAS_SLACK nodes (a 10,000-entry manifest that merges one `defaults` mapping into every entry
# stays far below; nine levels of nine aliases, the classic bomb, would be 387 million).
ALIAS_FACTOR = 10
ALIAS_SLACK = 100_000
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"
INT_TAG = "tag:yaml.org,2002:int"
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")   # what int() reads exactly as YAML 1.1 does (no sign, base, _)


def alias_limit(nodes: int) -> int:
    """The most nodes a document of ``nodes`` distinct nodes may hold once its aliases are expanded."""
    return ALIAS_FACTOR * nodes + ALIAS_SLACK


class _Refused(Exception):
    """Internal: a document refused before construction (line, message)."""

    def __init__(self, message: str, *, line: int | None = None):
        super().__init__(message)
        self.line = line


def _collections(node: Node) -> tuple[int, list[Node]]:
    """(scalar children, collection children) of a node: scalars count one each and are never shared."""
    if isinstance(node, MappingNode):
        children = [child for pair in node.value for child in pair]
    elif isinstance(node, SequenceNode):
        children = node.value
    else:
        return 0, []
    nested = [child for child in children if type(child) is not ScalarNode]
    return len(children) - len(nested), nested


def expanded_size(root: Node) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded) of a composed document; a cycle is refused."""
    if type(root) is ScalarNode:
        return 1, 1
    sizes: dict[int, int] = {}          # collection node -> its expanded size
    distinct = 0
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        scalars, nested = _collections(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + scalars + sum(sizes[id(child)] for child in nested)
            continue
        if key in sizes:
            continue
        on_path.add(key)
        distinct += 1 + scalars  # shared scalars (an alias to a scalar) count once per use: still bounded
        stack.append((node, True))
        for child in nested:
            if id(child) in on_path:
                raise _Refused("an alias refers to a node that contains it (a recursive document)",
                               line=child.start_mark.line + 1)
            if id(child) not in sizes:
                stack.append((child, False))
    return distinct, sizes[id(root)]


def check_alias_expansion(node: Node) -> None:
    """Refuse a composed document whose aliases expand it past ``alias_limit`` of its distinct nodes."""
    distinct, expanded = expanded_size(node)
    if expanded > alias_limit(distinct):
        raise _Refused(f"aliases expand the document to {expanded} nodes (limit {alias_limit(distinct)}: "
                       f"{ALIAS_FACTOR} x its {distinct} nodes + {ALIAS_SLACK}); an alias bomb?")


def check_duplicate_keys(node: MappingNode, *, construct: Callable[[Node], Any]) -> None:
    """Keys of one mapping as written (merge keys included) must differ; the error names both lines."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        line = key_node.start_mark.line + 1
        if key_node.tag == MERGE_TAG:
            key: Any = ("<<",)
            shown = "<<"
        elif isinstance(key_node, ScalarNode):
            key = construct(key_node)
            shown = key_node.value
        else:
            continue  # a complex key: PyYAML refuses unhashable keys itself
        try:
            first = seen.get(key)
        except TypeError:
            continue
        if first is not None:
            raise _Refused(f"duplicate key '{shown}' (first at line {first}); YAML would keep only the last",
                           line=line)
        seen[key] = line


def strict_loader(base: type) -> type:
    """``base`` (a PyYAML safe loader class) with duplicate keys refused and alias expansion bounded."""

    class Strict(base):  # type: ignore[misc, valid-type]
        """PyYAML's safe loader with duplicate keys refused and alias expansion bounded."""

        def __init__(self, stream: Any):
            super().__init__(stream)
            self._checked: set[int] = set()
            self._plain_tags: dict[str, str] = {}

        def resolve(self, kind: type, value: Any, implicit: Any) -> Any:
            """PyYAML's resolution, memoised per plain scalar's text: with no path resolvers (a safe loader
            has none) a plain scalar's tag depends on its text alone, and a large manifest repeats its keys
            and values thousands of times."""
            if kind is ScalarNode and implicit[0] and not self.yaml_path_resolvers:
                tag = self._plain_tags.get(value)
                if tag is None:
                    tag = self._plain_tags[value] = super().resolve(kind, value, implicit)
                return tag
            return super().resolve(kind, value, implicit)

        def get_single_data(self) -> Any:
            """Compose the document, bound its alias expansion, then construct it (PyYAML's order otherwise)."""
            node = self.get_single_node()
            if node is None:
                return None
            check_alias_expansion(node)
            return self.construct_document(node)

        def construct_object(self, node: Node, deep: bool = False) -> Any:
            """PyYAML's construction, with a value error (a 5000-digit int, a bad date) naming the node's line.

            A str scalar and a plain decimal int (most of a manifest) are built here directly: the values
            PyYAML's constructors give, without their bookkeeping per node.
            """
            if type(node) is ScalarNode:
                if node.tag == STR_TAG:
                    return node.value
                if node.tag == INT_TAG and _DECIMAL.fullmatch(node.value):
                    return int(node.value)
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, OverflowError) as exc:
                detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
                raise _Refused(f"malformed YAML: {detail}", line=node.start_mark.line + 1) from None

        def flatten_mapping(self, node: MappingNode) -> None:
            """Refuse a key written twice in one mapping (before merge keys are folded in), then flatten."""
            if id(node) not in self._checked:
                self._checked.add(id(node))
                self._check_duplicates(node)
            super().flatten_mapping(node)

        def _check_duplicates(self, node: MappingNode) -> None:
            """Keys of one mapping as written (merge keys included) must differ; the error names both lines."""
            check_duplicate_keys(node, construct=self.construct_object)

    Strict.__name__ = Strict.__qualname__ = f"Strict{base.__name__}"
    return Strict


StrictSafeLoader = strict_loader(_BaseLoader)


def _mark_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a PyYAML error points at, when it says."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def load_yaml(text: str, *, path: str | Path | None = None, loader: type | None = None) -> Any:
    """Parse YAML text strictly (see the module docstring); any problem is one TuneTableError naming the line."""
    try:
        return yaml.load(text, Loader=loader or StrictSafeLoader)  # noqa: S506 - a safe loader (SafeConstructor)
    except _Refused as exc:
        raise TuneTableError(str(exc), path=path, where=f"line {exc.line}" if exc.line else None) from None
    except yaml.YAMLError as exc:
        line = _mark_line(exc)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TuneTableError(f"malformed YAML: {problem}", path=path, where=f"line {line}" if line else None) from None
    except RecursionError:
        raise TuneTableError("malformed YAML: nested too deeply", path=path) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar PyYAML cannot build (a 5000-digit int, 2024-13-45)
        detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise TuneTableError(f"malformed YAML: {detail}", path=path) from None


def decode_utf8(data: bytes, *, path: str | Path | None) -> str:
    """Bytes as UTF-8 text; anything else is one error naming the line and byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TuneTableError(f"not UTF-8 text (byte {exc.start})", path=path, where=f"line {line}") from None


def read_bytes(path: str | Path) -> bytes:
    """A file's bytes; a missing, unreadable or folder path is one error line."""
    source = Path(path)
    try:
        return source.read_bytes()
    except FileNotFoundError:
        raise TuneTableError("no such file", path=source) from None
    except IsADirectoryError:
        raise TuneTableError("is a directory, expected a file", path=source) from None
    except OSError as exc:
        raise TuneTableError(f"cannot read: {exc.strerror or exc}", path=source) from None


def read_text(path: str | Path) -> str:
    """A UTF-8 text file (universal newlines, as ``Path.read_text``); unreadable or not UTF-8 is one error line."""
    text = decode_utf8(read_bytes(path), path=path)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load_yaml_file(path: str | Path) -> Any:
    """Read and parse a YAML file strictly; every problem is one error line naming the file."""
    return load_yaml(read_text(path), path=path)
