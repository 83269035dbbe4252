"""The import graph of one package, read from its source, for the layering tests.

Every import counts: at module level, inside functions and under `TYPE_CHECKING`, because an
import hidden inside a function still ties the two modules together. `from pkg import name`
depends on `pkg` (its `__init__` runs) and, when `name` is a submodule, on that module too.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Every module of the package (`pkg` for its `__init__`, `pkg.sub.mod` for the rest)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def import_graph(package_dir: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = module_names(package_dir, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base]) if base else ".".join(anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def import_cycles(package_dir: Path, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = import_graph(package_dir, package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles
