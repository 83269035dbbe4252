"""What a driver ships to its workers when no `working_dir` names it: its project, or only the
modules it imported from its directory.

Workers run on hosts that need not share the driver's disk, so the driver's code travels with
its jobs. Shipping the whole current directory made a driver started from a home or scratch
directory pack (and be refused for) everything there. Instead:

- a driver inside a project (a directory with `pyproject.toml`, `setup.py`, `setup.cfg` or
  `.git`, found upwards from the driver's directory) ships that project, less what its
  `.gitignore` files and `runtime_env` `excludes` leave out;
- any other driver ships only what it imported from its own directory (top-level modules and
  packages) and its script, as they stand at `init()`;
- a driver that runs as an Iris job (`fray-ray submit`) ships the job's workspace, which the
  controller already holds.

The driver's directory is its script's, or the current directory for `python -c`, `python -m`
and interactive sessions (where `sys.path` starts with it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

#: Files whose directory is a project's root.
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
#: Never shipped (.gitignore syntax, added to every job's excludes): a copy of fray_ray itself,
#: as in the fray_ray checkout. A worker runs the fray_ray installed in its own Python, as Ray's
#: workers run their own ray; a shipped copy would shadow it and be compiled by every new host.
NEVER_SHIPPED: tuple[str, ...] = ("/fray_ray/",)


@dataclass(frozen=True)
class DefaultCode:
    """The workspace a driver ships by default: `root`, or only its top-level entries named
    in `only` (None: all of it); `what` names it for people."""

    root: str
    only: tuple[str, ...] | None
    what: str


def default_code(main: ModuleType | None = None, modules: Mapping[str, ModuleType] | None = None) -> DefaultCode:
    """The project holding the driver, or only the modules it imported from its directory.
    `main` and `modules` default to this process's `__main__` and `sys.modules`."""
    main = sys.modules.get("__main__") if main is None else main
    directory = driver_directory(main)
    workdir = os.environ.get("IRIS_WORKDIR")
    if workdir and _within(directory, os.path.realpath(workdir)):  # a driver shipped as an Iris job
        return DefaultCode(os.path.realpath(workdir), None, f"this job's workspace {workdir}")
    project = project_root(directory)
    if project is not None:
        return DefaultCode(project, None, f"the project {project}")
    entries = imported_entries(directory, dict(sys.modules if modules is None else modules))
    script = getattr(main, "__file__", None)
    if isinstance(script, str) and os.path.dirname(os.path.realpath(script)) == directory:
        entries.add(os.path.basename(script))
    only = tuple(sorted(entries))
    shown = ", ".join(only) or "nothing"
    return DefaultCode(directory, only, f"{shown} from {directory} (not a project: only what the driver imported)")


def driver_directory(main: ModuleType | None) -> str:
    """The script's directory, or the current one for `-c`, `-m` and interactive drivers."""
    script = getattr(main, "__file__", None)
    if isinstance(script, str) and getattr(main, "__spec__", None) is None and os.path.isfile(script):
        return os.path.dirname(os.path.realpath(script))
    return os.path.realpath(os.getcwd())


def project_root(directory: str) -> str | None:
    """The nearest directory at or above `directory` holding one of `PROJECT_MARKERS`."""
    current = os.path.realpath(directory)
    while True:
        if any(os.path.exists(os.path.join(current, marker)) for marker in PROJECT_MARKERS):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def imported_entries(directory: str, modules: Mapping[str, ModuleType]) -> set[str]:
    """The top-level entries of `directory` that loaded modules came from: `name.py` for a
    module, `name` for a package (all of it, so its lazily imported submodules come too).
    Installed code (virtualenvs, site-packages) is not the driver's to ship."""
    entries: set[str] = set()
    prefix = os.path.realpath(directory) + os.sep
    installed = _installed_prefixes()
    real_dirs: dict[str, str] = {}  # hundreds of modules share a few dozen directories
    for module in list(modules.values()):
        for path in _module_paths(module):
            real = _real_path(path, real_dirs)
            if not real.startswith(prefix) or real.startswith(installed) or _under_site_packages(real):
                continue
            entries.add(real[len(prefix):].partition(os.sep)[0])
    return entries


def _real_path(path: str, real_dirs: dict[str, str]) -> str:
    """`os.path.realpath(path)`, resolving each directory once (`real_dirs` remembers them)."""
    directory, name = os.path.split(os.path.abspath(path))
    real_dir = real_dirs.get(directory)
    if real_dir is None:
        real_dir = real_dirs[directory] = os.path.realpath(directory)
    joined = os.path.join(real_dir, name)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _module_paths(module: ModuleType) -> list[str]:
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        return [file]
    try:  # a namespace package: no file, only directories
        return [p for p in getattr(module, "__path__", None) or () if isinstance(p, str)]
    except Exception:  # a module object whose __path__ misbehaves is skipped, not fatal
        return []


def _installed_prefixes() -> tuple[str, ...]:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(os.path.realpath(p) + os.sep for p in prefixes)


def _under_site_packages(path: str) -> bool:
    parts = path.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts
