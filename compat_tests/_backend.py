"""The one place that decides which Ray implementation the compatibility suite runs against.

Every test module gets the API under test from here::

    from compat_tests._backend import ray, exceptions, util_queue

``ray`` is the top-level module of the selected backend (``fray_ray`` or the real ``ray``),
imported on first use. The backend is chosen by ``pytest --backend=fray_ray|ray`` (see
``_plugin.py``), which stores the choice in the environment variable named by ``ENV_VAR`` before
any test module is imported; only the selected backend is ever imported.
The variable is inherited by Ray's worker processes too, so a worker that imports a test module
(to unpickle a module-level remote function) imports the same backend as the driver.

Submodules that users import explicitly (``ray.util.queue``, ``ray.util.placement_group``, ...)
are reached through ``LazyModule`` objects: the import happens on first attribute access, so a
submodule that the backend does not provide yet fails the tests that use it, not the collection
of the whole file.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

ENV_VAR = "FRAY_RAY_COMPAT_BACKEND"
BACKENDS = ("fray_ray", "ray")
DEFAULT_BACKEND = "fray_ray"

# The namespace every cluster fixture passes to ``init`` (as Ray's own fixtures do).
TEST_NAMESPACE = "default_test_namespace"

# ``init`` arguments of ``ray_start_regular_shared`` unless a module sets ``SHARED_CLUSTER``.
# Four logical CPUs leave room for blocked tasks and placement groups; one custom resource
# lets tests check resource accounting.
DEFAULT_SHARED_CLUSTER = {"num_cpus": 4, "resources": {"custom": 3}}


def selected_backend() -> str:
    """The backend named by the environment (set by ``pytest --backend``)."""
    backend = os.environ.get(ENV_VAR, DEFAULT_BACKEND)
    if backend not in BACKENDS:
        raise RuntimeError(f"{ENV_VAR}={backend!r}; expected one of {BACKENDS}")
    return backend


_loaded: ModuleType | None = None


def load() -> ModuleType:
    """Import (once) and return the selected backend's top-level module."""
    global _loaded
    if _loaded is None:
        _loaded = importlib.import_module(selected_backend())
    return _loaded


def loaded_backend() -> str | None:
    """The name of the backend already imported through this module, or None."""
    return None if _loaded is None else _loaded.__name__


def __getattr__(name: str) -> Any:
    # ``ray``, ``BACKEND`` and ``IS_RAY`` are resolved on first use (PEP 562), so importing the
    # constants above (as the pytest plugin does before ``--backend`` is known) imports no
    # backend at all.
    if name == "ray":
        return load()
    if name == "BACKEND":
        return load().__name__
    if name == "IS_RAY":
        return load().__name__ == "ray"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LazyModule:
    """A submodule of the backend, imported on first attribute access.

    Pickles as the real module (by name), so it may be referenced from remote functions.
    """

    def __init__(self, relative_name: str) -> None:
        self._relative_name = relative_name
        self._module: ModuleType | None = None

    @property
    def full_name(self) -> str:
        return f"{load().__name__}.{self._relative_name}"

    def load(self) -> ModuleType:
        if self._module is None:
            self._module = importlib.import_module(self.full_name)
        return self._module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __reduce__(self):
        return (importlib.import_module, (self.full_name,))

    def __repr__(self) -> str:
        return f"<LazyModule {self.full_name}>"


exceptions = LazyModule("exceptions")
actor_module = LazyModule("actor")
remote_function_module = LazyModule("remote_function")
util = LazyModule("util")
util_queue = LazyModule("util.queue")
util_actor_pool = LazyModule("util.actor_pool")
util_placement_group = LazyModule("util.placement_group")
scheduling_strategies = LazyModule("util.scheduling_strategies")

__all__ = [
    "BACKEND",
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DEFAULT_SHARED_CLUSTER",
    "ENV_VAR",
    "IS_RAY",
    "LazyModule",
    "TEST_NAMESPACE",
    "load",
    "loaded_backend",
    "selected_backend",
    "actor_module",
    "exceptions",
    "ray",
    "remote_function_module",
    "scheduling_strategies",
    "util",
    "util_actor_pool",
    "util_placement_group",
    "util_queue",
]
