"""The parts of `ray.util` fray_ray does not provide: they import, and fail when called.

Code that merely imports Ray's client, debugger or collective helpers keeps importing;
calling any of them raises `NotImplementedError` naming the feature and what to use instead.
`import fray_ray.util.collective` works through a finder placed at the end of
`sys.meta_path`: it only answers for the names below, and only when no real module of that
name exists, so a module added to the package later takes precedence.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Final, NoReturn

__all__ = ["UNSUPPORTED_MODULES", "connect", "disconnect", "install_module_finder"]

PACKAGE: Final = "fray_ray.util"

UNSUPPORTED_MODULES: Final[dict[str, str]] = {
    "collective": "Use torch.distributed or jax.distributed directly inside the actors.",
    "pdb": "In local mode (fray_ray.init(local_mode=True)) tasks run in-process: use breakpoint().",
    "rpdb": "In local mode (fray_ray.init(local_mode=True)) tasks run in-process: use breakpoint().",
    "debugpy": "In local mode (fray_ray.init(local_mode=True)) tasks run in-process: attach debugpy to the driver.",
    "ray_debugpy": "In local mode (fray_ray.init(local_mode=True)) tasks run in-process: attach debugpy to the driver.",
    "client": "Connect with fray_ray.init('iris://host:port') instead of Ray Client.",
    "client_connect": "Connect with fray_ray.init('iris://host:port') instead of Ray Client.",
    "iter": "Use fray_ray.util.as_completed or map_unordered.",
    "dask": "Run Dask's own scheduler.",
    "spark": "Run Spark's own cluster manager.",
}
"""Submodule name -> what to do instead."""


def unsupported(feature: str, hint: str) -> Any:
    """A callable standing for `feature`: calling it raises NotImplementedError with `hint`."""

    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{feature} is not supported by fray_ray. {hint}")

    fail.__name__ = feature.rpartition(".")[2]
    fail.__qualname__ = fail.__name__
    fail.__doc__ = f"Not supported by fray_ray: raises NotImplementedError. {hint}"
    return fail


connect = unsupported(f"{PACKAGE}.connect (Ray Client)", UNSUPPORTED_MODULES["client"])
disconnect = unsupported(f"{PACKAGE}.disconnect (Ray Client)", UNSUPPORTED_MODULES["client"])


class UnsupportedModule(types.ModuleType):
    """A stand-in module: every public attribute is a callable that raises NotImplementedError."""

    def __init__(self, name: str, hint: str) -> None:
        super().__init__(name, f"Not supported by fray_ray. {hint}")
        self._hint = hint  # what to use instead, quoted in every error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # private and dunder probes (import machinery, pickle, inspect)
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return unsupported(f"{self.__name__}.{name}", self._hint)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `fray_ray.util.<unsupported>` (and anything below it) as an UnsupportedModule."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if len(parts) < 3 or ".".join(parts[:2]) != PACKAGE or parts[2] not in UNSUPPORTED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return UnsupportedModule(spec.name, UNSUPPORTED_MODULES[spec.name.split(".")[2]])

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install_module_finder() -> None:
    """Put the finder at the end of `sys.meta_path`, once per process."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
