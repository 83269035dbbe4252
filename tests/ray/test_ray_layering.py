"""The Ray layer's runtime (`fray_ray._private`) is a stack of packages, read from the bottom up.

- `stream` (every process): the stream protocol: frames, outbox, connection, read lending,
  spinning waits, the authenticating front door.
- `objects` (every process): ids, serialization, reference counts, the object table, its
  store, shared memory and spilling.
- `core` (every process): what the API hands out and what a call carries: refs, generators,
  placement group handles, runtime envs, task specs and context, the `CoreRuntime` interface
  and the process's runtime.
- `options` (every process): Ray's options: one table, checked keywords, typed values.
- `messages` (every process): what a driver and its workers say to each other on the stream.
- `observe` (every process): what a run records for people to see: task events, metrics,
  worker logs, folded output, progress bars.
- `driver` (the driver only): session service, scheduler, executor pools, actors, gangs,
  placement groups, launcher, lease, cluster view and ledger, the state API's sources.
- `workers` (a worker only): executors, actor hosts, the worker runtime, worker start-up.
- `bootstrap` (a module; the driver): builds the driver for `init()`, handing it the
  workers' entry points.

Beside them stand the modules of Ray's own private names that public code imports
(`ray._private.services`, `state`, `accelerators`; `fray_ray._private.RAY_PRIVATE_MODULES`):
they sit on the public API, above the runtime, and no runtime package imports them.

Each package imports only those named for it in `MAY_IMPORT`; the driver and the workers never
import each other. Every import counts: at module level, inside functions and under
`TYPE_CHECKING`. No import cycle runs anywhere through the Ray layer (the runtime, the API and
`fray_ray.exceptions`), and the runtime never imports the public API modules: what it needs
from them is handed to it (the auto-init hook, the actor-handle factory).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import fray_ray
from fray_ray._private import RAY_PRIVATE_MODULES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for import_graph
from import_graph import import_cycles, import_graph, module_names  # noqa: E402

PACKAGE = Path(fray_ray.__file__).parent
RUNTIME = "fray_ray._private"
#: Runtime package -> the runtime packages it may import (besides itself).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "stream": frozenset(),
    "objects": frozenset({"stream"}),
    "core": frozenset({"stream", "objects"}),
    "options": frozenset({"stream", "objects", "core"}),
    "messages": frozenset({"stream", "objects", "core"}),
    "observe": frozenset({"stream", "objects", "core", "messages"}),
    "driver": frozenset({"stream", "objects", "core", "options", "messages", "observe"}),
    "workers": frozenset({"stream", "objects", "core", "options", "messages", "observe"}),
    "bootstrap": frozenset({"stream", "objects", "core", "options", "messages", "observe", "driver", "workers"}),
}
RUNTIME_PACKAGES = frozenset(MAY_IMPORT)
#: Ray's private names stand on everything: the API and the runtime alike.
MAY_IMPORT.update({name: RUNTIME_PACKAGES | RAY_PRIVATE_MODULES for name in RAY_PRIVATE_MODULES})
#: Packages that may import the layers below the Ray layer (the Fray client, the embedded
#: cluster, Iris); the others know no cluster. `options` checks a TPU variant against Fray's
#: table of TPU topologies.
CLUSTER_AWARE = frozenset({"driver", "workers", "bootstrap", "options", *RAY_PRIVATE_MODULES})
CLUSTER = ("fray_ray.fray", "fray_ray.cluster", "fray_ray.iris")
#: The public modules the runtime must not reach (`fray_ray._actor_handle` holds the classes
#: `fray_ray.actor` exports for calling actors).
API = ("fray_ray._api", "fray_ray._actor_handle", "fray_ray.actor", "fray_ray.remote_function", "fray_ray.util")
#: Layers below the Ray layer, with layering tests of their own.
LOWER_LAYERS = ("fray_ray.fray", "fray_ray.iris", "fray_ray.cluster")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def runtime_package(module: str) -> str | None:
    """The runtime package a module belongs to (`driver` for `fray_ray._private.driver.actors`);
    None outside the runtime and for `fray_ray._private` itself."""
    if not module.startswith(RUNTIME + "."):
        return None
    return module[len(RUNTIME) + 1 :].split(".")[0]


def _graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE, "fray_ray")


def layer_violations(graph: dict[str, set[str]], may_import: dict[str, frozenset[str]]) -> list[str]:
    """Imports from one runtime package into another it may not import."""
    found = []
    for module, targets in graph.items():
        source = runtime_package(module)
        if source is None:
            continue
        for target in targets:
            package = runtime_package(target)
            if package is not None and package != source and package not in may_import.get(source, frozenset()):
                found.append(f"{module} imports {target}")
    return sorted(found)


def test_every_runtime_module_is_in_a_known_package() -> None:
    # A new package must say where it stands before it can hold code.
    packages = {runtime_package(name) for name in module_names(PACKAGE, "fray_ray")} - {None}
    assert packages == set(MAY_IMPORT)


def test_runtime_packages_import_only_the_packages_below_them() -> None:
    assert layer_violations(_graph(), MAY_IMPORT) == []


def test_no_runtime_package_imports_rays_private_names() -> None:
    assert all(not (allowed & RAY_PRIVATE_MODULES) for package, allowed in MAY_IMPORT.items() if package in RUNTIME_PACKAGES)
    for name in RAY_PRIVATE_MODULES:  # each is a real module, loaded on first use
        assert getattr(fray_ray._private, name).__name__ == f"{RUNTIME}.{name}"


def test_the_driver_and_the_workers_never_import_each_other() -> None:
    assert "workers" not in MAY_IMPORT["driver"] and "driver" not in MAY_IMPORT["workers"]
    graph = _graph()
    crossing = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if {runtime_package(module), runtime_package(target)} == {"driver", "workers"}
    )
    assert crossing == []


def test_only_the_driver_and_the_workers_reach_the_cluster() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if runtime_package(module) not in (None, *CLUSTER_AWARE)
        for target in targets
        if any(_within(target, layer) for layer in CLUSTER)
    )
    assert offenders == []


def test_package_inits_import_nothing_but_their_own_modules() -> None:
    # Importing one module of a package must not load its siblings or other packages: a
    # package's __init__ may only gather its own modules (options and messages do, as their
    # public face); the others hold a docstring alone.
    offenders = []
    for name, path in module_names(PACKAGE / "_private", RUNTIME).items():
        if path.name != "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fray_ray"):
                if not _within(node.module, name) or node.module == name:
                    offenders.append(f"{name} imports {node.module}")
    assert offenders == []


def test_the_runtime_never_imports_the_api() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if _within(module, RUNTIME) and runtime_package(module) not in RAY_PRIVATE_MODULES
        for target in targets
        if target == "fray_ray" or any(_within(target, api) for api in API)
    )
    assert offenders == []


def test_exceptions_reach_into_the_runtime_only_for_traceback_text() -> None:
    # The runtime raises fray_ray.exceptions everywhere; the exceptions format a task's
    # traceback with `core.user_tracebacks`, which imports nothing of fray_ray.
    graph = _graph()
    runtime_targets = {t for t in graph["fray_ray.exceptions"] if _within(t, RUNTIME)}
    assert runtime_targets <= {RUNTIME, f"{RUNTIME}.core", f"{RUNTIME}.core.user_tracebacks"}
    assert not graph[f"{RUNTIME}.core.user_tracebacks"]


def test_no_import_cycle_in_the_ray_layer() -> None:
    # Module-level, function-level and TYPE_CHECKING imports alike, across the runtime, the
    # public API and fray_ray.exceptions (the layers below have tests of their own).
    cycles = [c for c in import_cycles(PACKAGE, "fray_ray") if not any(_within(m, low) for low in LOWER_LAYERS for m in c)]
    assert cycles == []


def test_the_layer_rule_finds_a_violation() -> None:
    graph = {
        f"{RUNTIME}.stream.protocol": {f"{RUNTIME}.objects.serialization"},  # upward
        f"{RUNTIME}.driver.scheduler": {f"{RUNTIME}.workers.executor", f"{RUNTIME}.core.task_spec"},
        f"{RUNTIME}.core.task_spec": {f"{RUNTIME}.objects.serialization", "fray_ray.exceptions"},
    }
    assert layer_violations(graph, MAY_IMPORT) == [
        f"{RUNTIME}.driver.scheduler imports {RUNTIME}.workers.executor",
        f"{RUNTIME}.stream.protocol imports {RUNTIME}.objects.serialization",
    ]


def test_the_graph_counts_function_and_type_checking_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n")
    assert import_graph(package, "pkg") == {"pkg": set(), "pkg.a": {"pkg", "pkg.b"}, "pkg.b": {"pkg.a"}}
    assert import_cycles(package, "pkg") == [["pkg.a", "pkg.b"]]


def test_naming_the_package_depends_on_its_init(tmp_path: Path) -> None:
    # `from fray_ray import exceptions` runs fray_ray/__init__.py, which imports the API: in
    # an API module that is a cycle through the package, and the graph must show it.
    package = tmp_path / "top"
    package.mkdir()
    (package / "__init__.py").write_text("from top import api\n")
    (package / "api.py").write_text("from top import errors\n")
    (package / "errors.py").write_text("")
    assert import_graph(package, "top")["top.api"] == {"top", "top.errors"}
    assert import_cycles(package, "top") == [["top", "top.api"]]
