"""The Ray layer's private package sits below the API it serves.

`fray_ray._private` never imports the public modules (`fray_ray._api`, `fray_ray.actor`,
`fray_ray.remote_function`, `fray_ray.util`): what it needs from them is handed to it (the
auto-init hook, the actor-handle factory). So no import cycle runs through those modules, and
the private package can be read, and imported, on its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import fray_ray

PACKAGE = Path(fray_ray.__file__).parent
#: The public modules the private package must not reach (`fray_ray._actor_handle` holds the
#: classes `fray_ray.actor` exports for calling actors).
API = ("fray_ray._api", "fray_ray._actor_handle", "fray_ray.actor", "fray_ray.remote_function", "fray_ray.util")
#: Layers below the Ray layer, with layering tests of their own.
LOWER_LAYERS = ("fray_ray.fray", "fray_ray.iris", "fray_ray.cluster")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: path for name, path in modules.items() if not name.startswith(LOWER_LAYERS)}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that runs (at import time or in a function), not those that
    only type checkers see."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _runtime_imports_of(child))
            continue
        yield from _runtime_imports_of(node)


def _runtime_imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _runtime_imports(node)


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The fray_ray modules an import statement loads: `from package import name` loads the
    package (its `__init__` runs), and the submodule too when `name` is one."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.startswith("fray_ray")]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    if not base.startswith("fray_ray"):
        return []
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return [base, *submodules]


def _graph() -> dict[str, set[str]]:
    """Module -> the fray_ray modules it imports at run time."""
    modules = _modules()
    everything = {_module_name(path) for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            graph[name].update(t for t in _targets(name, path, node, everything) if t != name)
    return graph


def _is_api(module: str) -> bool:
    return any(module == api or module.startswith(api + ".") for api in API)


def test_the_private_package_never_imports_the_api() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if module.startswith("fray_ray._private")
        for target in targets
        if _is_api(target) or target == "fray_ray"
    )
    assert offenders == []


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in graph:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def test_no_import_cycle_runs_through_the_api() -> None:
    through_api = [sorted(c) for c in _cycles(_graph()) if any(_is_api(m) for m in c)]
    assert through_api == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]


def test_naming_the_package_depends_on_its_init() -> None:
    # `from fray_ray import exceptions` runs fray_ray/__init__.py, which imports the API: in
    # an API module that is a cycle through the package, and the graph must show it.
    known = {"fray_ray", "fray_ray.exceptions", "fray_ray._api"}
    statement = ast.parse("from fray_ray import exceptions").body[0]
    assert isinstance(statement, ast.ImportFrom)
    targets = _targets("fray_ray._api", PACKAGE / "_api.py", statement, known)
    assert sorted(targets) == ["fray_ray", "fray_ray.exceptions"]
    graph = {"fray_ray": {"fray_ray._api"}, "fray_ray._api": set(targets), "fray_ray.exceptions": set()}
    assert _cycles(graph) == [{"fray_ray", "fray_ray._api"}]
