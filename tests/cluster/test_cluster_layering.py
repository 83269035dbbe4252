"""fray_ray.cluster imports only fray_ray.iris, the standard library and declared dependencies."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import fray_ray.cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for import_graph
from import_graph import import_cycles  # noqa: E402

ALLOWED_THIRD_PARTY = {"google", "connectrpc", "cloudpickle", "msgpack", "uvicorn", "httptools", "rich", "zstandard", "uv"}


def test_cluster_imports_only_downward() -> None:
    package = Path(fray_ray.cluster.__file__).parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if name.startswith(("fray_ray.iris", "fray_ray.cluster")):
                    continue
                if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY:
                    continue
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_public_names_come_from_the_package() -> None:
    for name in fray_ray.cluster.__all__:
        obj = getattr(fray_ray.cluster, name)
        assert getattr(obj, "__module__", "fray_ray.cluster") == "fray_ray.cluster", name


def test_cluster_package_has_no_import_cycle() -> None:
    # Every import counts, also those inside functions and under TYPE_CHECKING; naming the
    # package (`from fray_ray.cluster import x`) depends on its __init__, which imports most modules.
    package = Path(fray_ray.cluster.__file__).parent
    assert import_cycles(package, "fray_ray.cluster") == []
