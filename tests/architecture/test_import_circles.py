"""No import circles among the project's modules (pipeline/ and kernels/): two modules that import each other,
directly or through others, are one concern in two files, or need their shared types moved where both can
import them. Every import counts, as in test_import_rules (module top, function bodies, TYPE_CHECKING blocks);
a package's ``__init__`` running before its children is Python's import order, not an edge.
"""

from __future__ import annotations

from test_import_rules import MODULES, REPO, imports_of

KNOWN_CIRCLES: set[frozenset[str]] = set()   # none: every circle is a failure


def import_graph() -> dict[str, set[str]]:
    """Each module -> the project modules it imports (itself left out)."""
    return {name: {target for _, target in imports_of(path) if target in MODULES and target != name}
            for name, path in MODULES.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle_through_three_modules_and_ignores_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_itself_back() -> None:
    found = [component for component in circles(import_graph()) if frozenset(component) not in KNOWN_CIRCLES]
    shown = "; ".join(" <-> ".join(str(MODULES[name].relative_to(REPO)) for name in component) for component in found)
    assert not found, f"import circles: {shown}"
