"""The Ray layer reaches Iris only through the Fray layer, and asks the Fray `Client` what it
needs (`in_process`, `parent_job`, `find_actor`, ...) instead of probing which backend it has."""

from __future__ import annotations

import ast
from pathlib import Path

import fray_ray

PACKAGE = Path(fray_ray.__file__).parent
# The command line is an application on top of every layer (it also runs the embedded
# cluster and reads a controller's jobs without a session), not part of the Ray API.
NOT_THE_RAY_LAYER = {"cli.py"}
BACKEND_CLASSES = {"LocalClient", "FrayIrisClient"}


def _ray_layer_modules() -> list[Path]:
    top = [path for path in PACKAGE.glob("*.py") if path.name not in NOT_THE_RAY_LAYER]
    return sorted([*top, *(PACKAGE / "_private").rglob("*.py"), *(PACKAGE / "util").rglob("*.py")])


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _probes(tree: ast.AST) -> list[str]:
    """`isinstance(x, LocalClient)`, and `getattr`/`hasattr` on anything called a client."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2):
            continue
        what = node.args[1]
        if node.func.id == "isinstance":
            named = {n.id for n in ast.walk(what) if isinstance(n, ast.Name)}
            named |= {n.attr for n in ast.walk(what) if isinstance(n, ast.Attribute)}
            if named & BACKEND_CLASSES:
                found.append(f"line {node.lineno}: isinstance(..., {sorted(named & BACKEND_CLASSES)})")
        elif node.func.id in ("getattr", "hasattr") and "client" in ast.unparse(node.args[0]).lower():
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_ray_layer_does_not_import_the_iris_client() -> None:
    offenders = []
    for path in _ray_layer_modules():
        for name in _imports(ast.parse(path.read_text(), str(path))):
            if name == "fray_ray.iris" or name.startswith("fray_ray.iris."):
                offenders.append(f"{path.relative_to(PACKAGE)}: {name}")
    assert offenders == []


def test_the_ray_layer_asks_the_client_instead_of_probing_it() -> None:
    offenders = []
    for path in _ray_layer_modules():
        offenders += [f"{path.relative_to(PACKAGE)} {probe}" for probe in _probes(ast.parse(path.read_text()))]
    assert offenders == []


def test_the_probe_check_sees_probes() -> None:
    source = (
        "def f(self, client, job):\n"
        "    if isinstance(client, fray.LocalClient): pass\n"
        "    hasattr(job, 'terminate')\n"  # not a client: fine
        "    return getattr(self._client, 'find_actor', None) or getattr(client, 'parent_job', None)\n"
    )
    assert len(_probes(ast.parse(source))) == 3
