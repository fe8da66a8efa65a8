"""The import graph of broker/ and walfiles/ has no cycles, and only the entry point imports the
composition root. Imports under `if TYPE_CHECKING:` count too: a cycle that only the type
checker sees still ties the modules together for every reader and every refactoring."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "walfiles")
COMPOSITION_ROOT = "broker.broker"
ENTRY_POINTS = {"broker.cli", "broker.__main__"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


@functools.cache
def _import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # `from package import module` imports the module; `from module import name` the module
                targets = [
                    known(f"{base}.{alias.name}") if f"{base}.{alias.name}" in modules else known(base)
                    for alias in node.names
                ]
            else:
                continue
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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


def _by_top_level(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph with each subpackage of broker/ (diskless, replication, ...) as one node."""

    def group(name: str) -> str:
        return ".".join(name.split(".")[:2])

    grouped: dict[str, set[str]] = {}
    for name, targets in graph.items():
        grouped.setdefault(group(name), set()).update(group(t) for t in targets if group(t) != group(name))
    return grouped


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert _cycles(_import_graph()) == []


def test_no_cycles_between_the_brokers_packages() -> None:
    assert _cycles(_by_top_level(_import_graph())) == []


def test_only_the_entry_point_imports_the_composition_root() -> None:
    importers = {name for name, targets in _import_graph().items() if COMPOSITION_ROOT in targets}
    assert importers <= ENTRY_POINTS


def test_the_graph_sees_type_checking_imports_and_relative_ones() -> None:
    graph = _import_graph()
    assert "broker.context" in graph["broker.handlers.registry"]  # under `if TYPE_CHECKING:`
    assert "broker.protocol.errors" in graph["broker.log.coordinates"]  # `from ..protocol.errors import ...`
