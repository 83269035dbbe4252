"""Ray's `runtime_env` on Iris: the keys fray_ray honours, their checks, and how they merge.

Honoured: `working_dir` and `py_modules` (local paths, shipped as the job's Iris workspace
bundle), `excludes`, `pip` and `uv` (installed by the job's setup script on the worker),
`env_vars`, `config` (`setup_timeout_seconds`, `eager_install`), and, in `init()` only,
`worker_process_setup_hook` (a function, cloudpickled to ship to every worker, or a
"module.function" name; each worker process runs it once before any task or actor). Every other
key raises ValueError naming it, at decoration, `.options()` or `init()`: nothing is dropped
silently.

Merging follows Ray: a task or actor inherits the runtime env of whoever submits it (the job's
in the driver, the worker's own inside a task or actor); each field it sets replaces the
inherited one, except `env_vars`, which are merged key by key (the child's value wins).
"""

from __future__ import annotations

import importlib
import json
import os
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import cloudpickle

from fray_ray._private.core.cached_hash import CachedHash

__all__ = ["PipSpec", "RuntimeEnv", "SetupHook", "merge_runtime_envs", "parse_runtime_env"]

_SUPPORTED = ("working_dir", "py_modules", "excludes", "pip", "uv", "env_vars", "config", "worker_process_setup_hook")
# Keys Ray knows that fray_ray cannot honour, and what to do instead.
_UNSUPPORTED = {
    "conda": "workers run the Python of their image; list the packages under 'pip' (or 'uv'), or build "
    "them into the worker image",
    "container": "a task's image is its Iris job's task image: build one image for the cluster's workers "
    "(see docs/iris.md, 'Give the workers fray_ray')",
    "image_uri": "a task's image is its Iris job's task image: build one image for the cluster's workers "
    "(see docs/iris.md, 'Give the workers fray_ray')",
    "py_executable": "tasks run with the worker's Python ($IRIS_PYTHON); use 'pip' or 'uv' packages instead "
    "of a uv project or another interpreter",
    "java_jars": "fray_ray runs Python only",
    "nsight": "profile through Fray's NSYS settings in env_vars instead",
    "mpi": "use a TPU or GPU gang (tpu=..., gpu=... with num_hosts) instead",
}
_PIP_FIELDS = ("packages", "pip_check", "pip_install_options", "pip_version")
_UV_FIELDS = ("packages", "uv_check", "uv_pip_install_options", "uv_version")
_CONFIG_FIELDS = ("setup_timeout_seconds", "eager_install")


@dataclass(frozen=True)
class PipSpec:
    """Packages to install on the worker before the job's command runs."""

    packages: tuple[str, ...]
    check: bool = False
    install_options: tuple[str, ...] = ()
    tool: str = "pip"  # "pip" or "uv": the runtime_env key they came from


@dataclass(frozen=True)
class SetupHook:
    """`worker_process_setup_hook`: its name (a "module.function" string, or the function's
    qualified name) and, for a function, the function cloudpickled (workers share no disk)."""

    name: str
    pickled: bytes | None = None

    def load(self) -> Callable[[], Any]:
        """The hook as a callable, in the worker: unpickled, or imported by its name."""
        if self.pickled is not None:
            function: Callable[[], Any] = cloudpickle.loads(self.pickled)
            return function
        module_name, _, attribute = self.name.rpartition(".")
        if not module_name:
            raise ValueError(f"worker_process_setup_hook {self.name!r} is not of the form 'module.function'")
        loaded: Callable[[], Any] = getattr(importlib.import_module(module_name), attribute)
        return loaded


@dataclass(frozen=True, eq=False)
class RuntimeEnv(CachedHash):
    """A parsed, checked runtime_env. Paths are absolute; `given` names the fields set."""

    working_dir: str | None = None
    py_modules: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    pip: PipSpec | None = None
    env_vars: tuple[tuple[str, str], ...] = ()
    setup_timeout_s: float | None = None
    eager_install: bool | None = None
    setup_hook: SetupHook | None = None
    given: frozenset[str] = field(default_factory=frozenset)

    @property
    def env_vars_dict(self) -> dict[str, str]:
        return dict(self.env_vars)

    @property
    def packages_to_install(self) -> PipSpec | None:
        """The `pip`/`uv` packages a worker installs before it runs; None when there are none
        (`{"pip": []}` asks for nothing, as in Ray)."""
        return self.pip if self.pip is not None and self.pip.packages else None

    @property
    def ships_code(self) -> bool:
        """True when it names a working_dir or py_modules of its own."""
        return self.working_dir is not None or bool(self.py_modules)

    def as_dict(self) -> dict[str, Any]:
        """The fields set, as a runtime_env dict (what `get_runtime_env_string` shows)."""
        out: dict[str, Any] = {}
        if self.working_dir is not None:
            out["working_dir"] = self.working_dir
        if self.py_modules:
            out["py_modules"] = list(self.py_modules)
        if self.excludes:
            out["excludes"] = list(self.excludes)
        if self.pip is not None:
            packages: dict[str, Any] = {"packages": list(self.pip.packages)}
            if self.pip.tool == "uv":
                packages.update(uv_check=self.pip.check, uv_pip_install_options=list(self.pip.install_options))
            else:
                packages.update(pip_check=self.pip.check, pip_install_options=list(self.pip.install_options))
            out[self.pip.tool] = packages
        if self.env_vars:
            out["env_vars"] = dict(self.env_vars)
        config: dict[str, Any] = {}
        if self.setup_timeout_s is not None:
            config["setup_timeout_seconds"] = int(self.setup_timeout_s)
        if self.eager_install is not None:
            config["eager_install"] = self.eager_install
        if config:
            out["config"] = config
        if self.setup_hook is not None:
            out["worker_process_setup_hook"] = self.setup_hook.name
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


def merge_runtime_envs(parent: RuntimeEnv, child: RuntimeEnv) -> RuntimeEnv:
    """`child` on top of `parent`, as Ray merges them: fields the child sets win, env_vars merge."""
    if not child.given:
        return parent
    merged = replace(
        parent,
        working_dir=child.working_dir if "working_dir" in child.given else parent.working_dir,
        py_modules=child.py_modules if "py_modules" in child.given else parent.py_modules,
        excludes=child.excludes if "excludes" in child.given else parent.excludes,
        pip=child.pip if child.given & {"pip", "uv"} else parent.pip,
        setup_timeout_s=child.setup_timeout_s if child.setup_timeout_s is not None else parent.setup_timeout_s,
        eager_install=child.eager_install if child.eager_install is not None else parent.eager_install,
        env_vars=tuple(sorted({**dict(parent.env_vars), **dict(child.env_vars)}.items())),
        given=parent.given | child.given,
    )
    return merged


def parse_runtime_env(value: Mapping[str, Any] | None, *, check_paths: bool = True, job: bool = False) -> RuntimeEnv:
    """Check a runtime_env dict as Ray does and return it parsed.

    Raises TypeError/ValueError with Ray's messages for malformed known fields, and ValueError
    naming the key for keys fray_ray cannot honour. With `check_paths`, local paths must exist
    (they are read on this machine) and become absolute. `job`: the env is `init()`'s, the
    only place a `worker_process_setup_hook` is honoured.
    """
    if value is None:
        return RuntimeEnv()
    if not isinstance(value, Mapping):
        raise TypeError(f"runtime_env must be a dict, got {type(value)}")
    for key in value:
        if key in _UNSUPPORTED:
            raise ValueError(f"runtime_env[{key!r}] is not supported by fray_ray: {_UNSUPPORTED[key]}.")
        if key not in _SUPPORTED:
            raise ValueError(
                f"runtime_env[{key!r}] is not a runtime_env field fray_ray knows; it supports "
                f"{', '.join(_SUPPORTED)}."
            )
    given = frozenset(k for k, v in value.items() if v is not None)
    if "pip" in given and "uv" in given:
        raise ValueError("The 'pip' field, 'uv' field, and 'conda' field of runtime_env cannot be specified at the same time.")
    env = RuntimeEnv(given=given)
    if value.get("working_dir") is not None:
        env = replace(env, working_dir=_working_dir(value["working_dir"], check_paths))
    if value.get("py_modules") is not None:
        env = replace(env, py_modules=_py_modules(value["py_modules"], check_paths))
    if value.get("excludes") is not None:
        env = replace(env, excludes=_excludes(value["excludes"]))
    if value.get("pip") is not None:
        env = replace(env, pip=_pip(value["pip"], "pip", check_paths))
    if value.get("uv") is not None:
        env = replace(env, pip=_pip(value["uv"], "uv", check_paths))
    if value.get("env_vars") is not None:
        env = replace(env, env_vars=_env_vars(value["env_vars"]))
    if value.get("config") is not None:
        timeout, eager = _config(value["config"])
        env = replace(env, setup_timeout_s=timeout, eager_install=eager)
    if value.get("worker_process_setup_hook") is not None:
        env = replace(env, setup_hook=_setup_hook(value["worker_process_setup_hook"], job))
    return env


def _setup_hook(value: Any, job: bool) -> SetupHook:
    if not callable(value) and not isinstance(value, str):
        raise TypeError(f"worker_process_setup_hook must be a function, got {type(value)}.")
    if not job:
        if callable(value):  # Ray's words: a task's runtime_env must be JSON
            raise TypeError(
                f"Object of type {type(value).__name__} is not JSON serializable: a worker_process_setup_hook "
                "function is only accepted in init(runtime_env=...)"
            )
        raise ValueError(
            "runtime_env['worker_process_setup_hook'] is honoured only in init(runtime_env=...): a task's or "
            "actor's own runtime_env cannot set it (Ray 2.60 ignores it there)"
        )
    if isinstance(value, str):
        return SetupHook(value)
    name = f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__name__)}"
    return SetupHook(name, cloudpickle.dumps(value))


def _local_path(path: str, what: str) -> None:
    if "://" in path:
        raise ValueError(
            f"runtime_env[{what!r}] {path!r} is a remote URI: fray_ray ships local directories only "
            "(as the job's Iris workspace bundle); download it first and give its local path."
        )


def _working_dir(value: Any, check: bool) -> str:
    if not isinstance(value, str):
        raise TypeError(f"`working_dir` must be a string, got {type(value)}.")
    _local_path(value, "working_dir")
    if not check:
        return value
    if not os.path.exists(value):
        raise ValueError(f"{value} is not a valid path.")
    if not os.path.isdir(value):
        raise ValueError(
            f"runtime_env['working_dir'] {value} is not a directory: fray_ray ships a local directory (unpack "
            "an archive first)."
        )
    return os.path.abspath(value)


def _py_modules(value: Any, check: bool) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"`py_modules` must be a list of strings, got {type(value)}.")
    paths = []
    for module in value:
        if isinstance(module, types.ModuleType):
            location = list(getattr(module, "__path__", []) or [])[:1] or [getattr(module, "__file__", None)]
            if not location[0]:
                raise ValueError(f"py_modules: module {module.__name__} has no files to ship.")
            module = location[0]
        if not isinstance(module, str):
            raise TypeError(f"`py_module` must be a string, got {type(module)}.")
        _local_path(module, "py_modules")
        if module.endswith(".whl"):
            raise ValueError(
                f"py_modules entry {module} is a wheel: list it under runtime_env['pip'] instead "
                "(a path inside the working_dir, like './wheels/x.whl', installs on every worker)."
            )
        if check:
            if not os.path.exists(module):
                raise ValueError(f"{module} is not a valid path.")
            module = os.path.abspath(module)
        paths.append(module)
    return tuple(paths)


def _excludes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"runtime_env['excludes'] must be of type List[str], got {type(value)}")
    return tuple(value)


def _env_vars(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        raise TypeError(f"runtime_env['env_vars'] must be of type Dict[str, str], got {type(value)}")
    for name, setting in value.items():
        if not isinstance(name, str):
            raise TypeError(
                f"runtime_env['env_vars'] must be of type Dict[str, str], but the key {name} is of type {type(name)}"
            )
        if not isinstance(setting, str):
            raise TypeError(
                f"runtime_env['env_vars'] must be of type Dict[str, str], but the value {setting} is of type "
                f"{type(setting)}"
            )
    return tuple(sorted(value.items()))


def _pip(value: Any, tool: str, check: bool) -> PipSpec:
    fields = _PIP_FIELDS if tool == "pip" else _UV_FIELDS
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in fields]
        if unknown:
            raise ValueError(
                f"runtime_env['{tool}'] can only have these fields: {', '.join(fields[:-1])} and {fields[-1]}, "
                f"but got: {list(value)}"
            )
        version_key = f"{tool}_version"
        if value.get(version_key):
            raise ValueError(
                f"runtime_env['{tool}']['{version_key}'] is not supported by fray_ray: packages install with "
                "the worker image's own installer."
            )
        packages = value.get("packages")
        if packages is None:
            raise ValueError(f"runtime_env['{tool}'] must name its 'packages'.")
        options = value.get("pip_install_options" if tool == "pip" else "uv_pip_install_options") or ()
        if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
            raise TypeError(f"runtime_env['{tool}'] install options must be a list of strings, got {options!r}")
        check_after = value.get("pip_check" if tool == "pip" else "uv_check") or False
        if not isinstance(check_after, bool):
            raise TypeError(f"runtime_env['{tool}'] check must be a bool, got {check_after!r}")
        return PipSpec(_packages(packages, tool, check), bool(check_after), tuple(options), tool)
    return PipSpec(_packages(value, tool, check), tool=tool)


def _packages(value: Any, tool: str, check: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        if not check:
            return (value,)
        if not os.path.isfile(value):
            raise ValueError(f"{value} is not a valid file")
        with open(value, encoding="utf-8") as f:  # a requirements file, read here as Ray does
            lines = [line.split("#", 1)[0].strip() for line in f]
        return tuple(line for line in lines if line)
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        if tool == "uv":
            raise TypeError(f"runtime_env['uv'] must be of type List[str], or dict, got {type(value)}")
        raise TypeError(f"runtime_env['pip'] must be of type str or List[str], got {type(value)}")
    return tuple(value)


def _config(value: Any) -> tuple[float | None, bool | None]:
    if not isinstance(value, Mapping):
        raise TypeError(f"runtime_env['config'] must be of type dict or RuntimeEnvConfig, got: {type(value)}")
    # An empty `log_files` (RuntimeEnvConfig's default) asks for nothing.
    unknown = [k for k in value if k not in _CONFIG_FIELDS and not (k == "log_files" and not value[k])]
    if unknown:
        raise ValueError(
            f"runtime_env['config'] fields {unknown} are not supported by fray_ray (it honours "
            f"{', '.join(_CONFIG_FIELDS)})."
        )
    timeout = value.get("setup_timeout_seconds")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)):
        raise TypeError(f"setup_timeout_seconds must be of type int, got: {type(timeout)}")
    eager = value.get("eager_install")
    if eager is not None and not isinstance(eager, bool):
        raise TypeError(f"eager_install must be a boolean. got {type(eager)}")
    return (None if timeout is None or timeout < 0 else float(timeout)), eager


# The runtime env this worker process was started with (see `worker_start`); a driver's is
# its runtime's job env instead. Set once, before the worker's runtime exists.
_process_runtime_env = RuntimeEnv()


def set_process_runtime_env(env: RuntimeEnv) -> None:
    global _process_runtime_env
    _process_runtime_env = env


def process_runtime_env() -> RuntimeEnv:
    """What a worker runtime created in this process passes on to what it submits."""
    return _process_runtime_env


def is_path_like(requirement: str) -> bool:
    """A pip requirement naming a file, directory or URL rather than a distribution."""
    return requirement.startswith((".", "/", "~")) or "://" in requirement or requirement.endswith((".whl", ".zip", ".tar.gz"))
