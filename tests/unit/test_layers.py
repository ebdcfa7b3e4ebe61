"""The house's shape holds: each room imports only the rooms below it, and no two modules
import each other, directly or round a longer loop (issue 19).

Rooms, from the bottom: ``learn`` (runtime statistics), ``core`` (records, the state
fold, the journal), ``config`` and ``bootstrap``, ``providers``, the policies
``budget``, ``deadline``, ``offers`` and ``categories`` (side by side: none imports
another), ``report``, ``run`` (the drivers), ``service``, ``cli``. Every import
counts, inside functions and under ``TYPE_CHECKING`` too: a deferred import is still a
dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.package_dirs import modules, package_dirs

RANK = {
    "learn": 0,
    "core": 1,
    "config": 2,
    "bootstrap": 2,
    "providers": 3,
    "budget": 4,
    "deadline": 4,
    "offers": 4,
    "categories": 3,  # below the policies that use it
    "report": 5,
    "run": 6,
    "service": 7,
    "cli": 8,
}


def absolute_imports(path: Path) -> set[str]:
    """The modules (or packages) ``path`` imports by absolute name, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def imports(path: Path) -> set[str]:
    """The ``autoscaler`` modules (or packages) ``path`` imports, anywhere in it."""
    return {name for name in absolute_imports(path) if name.startswith("autoscaler.")}


def room(module: str) -> str:
    return module.split(".")[1]


def graph() -> dict[str, set[str]]:
    """Module to the modules it imports (an import of a package counts as its __init__)."""
    known = dict(modules())
    out: dict[str, set[str]] = {}
    for name, path in known.items():
        edges = set()
        for target in imports(path):
            if target in known:
                edges.add(target)
            elif f"{target}.__init__" in known:
                edges.add(f"{target}.__init__")
        out[name] = edges - {name}
    return out


def test_no_module_imports_a_folder_by_its_own_name() -> None:
    """A run from the checkout finds providers/, bootstrap/ and config/ as top-level
    ``providers``, ... too; installed, only ``autoscaler.providers`` is there (and a
    ``config`` may be another distribution or a user's config.py)."""
    folders = {path.name for name, path in package_dirs().items() if name != "autoscaler"}
    assert folders == {"providers", "bootstrap", "config"}
    bare = sorted(
        f"{module} imports {target}"
        for module, path in modules()
        for target in absolute_imports(path)
        if target.split(".")[0] in folders
    )
    assert not bare, bare


def test_every_room_is_ranked() -> None:
    rooms = {room(m) for m, _ in modules() if m.count(".") > 1}
    assert rooms <= set(RANK), f"rooms without a place in the house: {rooms - set(RANK)}"


@pytest.mark.parametrize("module", [m for m, _ in modules() if m.count(".") > 1])
def test_a_room_imports_only_rooms_below_it(module: str) -> None:
    path = dict(modules())[module]
    upward = sorted(
        target
        for target in imports(path)
        if room(target) != room(module) and RANK.get(room(target), -1) >= RANK[room(module)]
    )
    assert not upward, f"{module} imports {upward}: not below {room(module)}"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other() -> None:
    assert cycles(graph()) == []


def test_the_cycle_check_sees_a_loop() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
