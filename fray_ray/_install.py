"""`fray_ray.install()`: make `import ray` (and `ray.util`, `ray.exceptions`, ...) give fray_ray.

An import hook maps every `ray[.sub]` import to `fray_ray[.sub]`, so unmodified Ray code runs
on fray_ray. Modules fray_ray does not have (`ray.dag`, `ray.data`, `ray._private`, ...)
fail to import with a message saying why and what to use instead (`fray_ray._module_map`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: ray module → fray_ray module, where the names differ.
_RENAMED = {"ray.util.accelerators.tpu": "fray_ray.util.tpu"}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self._target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # the fray_ray module is already executed


class _RayAliasFinder(importlib.abc.MetaPathFinder):
    """Answers imports of `ray` and `ray.*` with the matching fray_ray module."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        target_name = _RENAMED.get(fullname) or "fray_ray" + fullname[len("ray") :]
        try:
            found = None if _is_runtime_internal(fullname) else importlib.util.find_spec(target_name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            from fray_ray._module_map import import_error_message

            raise ModuleNotFoundError(import_error_message(fullname), name=fullname)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name), is_package=found.submodule_search_locations is not None)


def _is_runtime_internal(fullname: str) -> bool:
    """`ray._private.<name>` where fray_ray's module of that name is its own runtime, not one
    of Ray's private names it provides (`fray_ray._private.RAY_PRIVATE_MODULES`)."""
    parts = fullname.split(".")
    if len(parts) < 3 or parts[1] != "_private":
        return False
    from fray_ray._private import RAY_PRIVATE_MODULES

    return parts[2] not in RAY_PRIVATE_MODULES


_FINDER = _RayAliasFinder()


def install() -> None:
    """Make `import ray` resolve to fray_ray in this process (idempotent).

    >>> import fray_ray
    >>> fray_ray.install()
    >>> import ray
    >>> ray is fray_ray
    True
    """
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    for name in list(sys.modules):
        if (name == "ray" or name.startswith("ray.")) and not getattr(sys.modules[name], "__name__", "").startswith("fray_ray"):
            del sys.modules[name]  # a real Ray imported earlier would shadow the alias
    sys.modules["ray"] = sys.modules["fray_ray"]  # loaded: this module is part of it


def uninstall() -> None:
    """Undo install(): `import ray` finds the real Ray again (if installed)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in list(sys.modules):
        if name == "ray" or name.startswith("ray."):
            if getattr(sys.modules[name], "__name__", "").startswith("fray_ray"):
                del sys.modules[name]
