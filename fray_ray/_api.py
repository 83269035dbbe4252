"""The top-level functions: init and shutdown, get, put, wait, remote, kill, cancel, ...

Each is a few lines handing off to the process's runtime (`fray_ray._private.runtime_state`).
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import textwrap
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from fray_ray._private import options as options_model
from fray_ray._private import runtime_state
from fray_ray._private.generators import ObjectRefGenerator
from fray_ray._private.options import rendering as options_text
from fray_ray._private.object_ref import ObjectRef
from fray_ray._private.task_context import current_task
from fray_ray._version import __version__
from fray_ray.actor import ActorClass, ActorHandle
from fray_ray.exceptions import RaySystemError
from fray_ray.remote_function import RemoteFunction

logger = logging.getLogger(__name__)

_init_lock = threading.RLock()  # serialises init/shutdown


# ---- init and shutdown ---------------------------------------------------------------------

_INIT_KEYWORDS = {
    "labels", "object_store_memory", "include_dashboard", "dashboard_host", "dashboard_port", "job_config",
    "configure_logging", "logging_level", "logging_format", "logging_config", "enable_resource_isolation",
    "cgroup_path", "system_reserved_cpu", "system_reserved_memory", "proxy_server_url",
}


class RayContext(Mapping):
    """What init() returns: address information, usable as a dict and a context manager."""

    def __init__(self, address_info: Mapping[str, Any]) -> None:
        self.address_info = dict(address_info)
        self.dashboard_url = ""
        self.python_version = platform.python_version()
        self.ray_version = __version__
        self.ray_commit = "fray_ray"

    def __getitem__(self, key: str) -> Any:
        return self.address_info[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.address_info)

    def __len__(self) -> int:
        return len(self.address_info)

    def __enter__(self) -> RayContext:
        return self

    def __exit__(self, *exc_info: object) -> None:
        shutdown()

    def disconnect(self) -> None:
        shutdown()

    def __repr__(self) -> str:
        return f"RayContext({self.address_info!r})"


_context: RayContext | None = None


def is_initialized() -> bool:
    """True between init() (or auto-init) and shutdown()."""
    runtime = runtime_state.current_or_none()
    return runtime is not None


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: Mapping[str, float] | None = None,
    namespace: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    ignore_reinit_error: bool = False,
    local_mode: bool = False,
    log_to_driver: bool | None = None,
    cluster_config: Any = None,
    **kwargs: Any,
) -> RayContext:
    """Start or connect to a session and return its context.

    - no address (and no RAY_ADDRESS/FRAY_RAY_ADDRESS): start an embedded Iris-compatible
      cluster in this process: one host sized from the machine or from num_cpus/num_gpus/
      resources (custom resources become its `ray-resource:<name>` attributes);
    - `"local"`: always start a new embedded cluster;
    - `"iris://host:port"`, `"http://host:port"` or `"host:port"`: use that Iris controller;
    - `"auto"`: RAY_ADDRESS/FRAY_RAY_ADDRESS, else the surrounding Iris task's controller;
    - inside an Iris task with no address: attach to the task's job;
    - `local_mode=True` (or FRAY_RAY_LOCAL_MODE=1): run everything in this process on threads,
      for debuggers.

    `cluster_config` (fray_ray's own; a `fray_ray.cluster.ClusterConfig` or the path of a
    JSON/TOML layout, also read from FRAY_RAY_CLUSTER_CONFIG) describes the embedded cluster's
    hosts, e.g. simulated TPU slices or GPU hosts.

    `runtime_env` is the job's: its `working_dir` (default: this directory) and `py_modules`
    are captured now and shipped to every worker as an Iris workspace bundle; `pip`, `env_vars`
    and `excludes` apply to every task and actor (see the README's "Running on an Iris
    cluster"). `_node_ip_address` (or FRAY_RAY_NODE_IP_ADDRESS) is the address of this machine
    that workers on other hosts connect to; inside an Iris task it is IRIS_ADVERTISE_HOST.

    A running cluster's size is its workers': with an address (or inside a task) num_cpus,
    num_gpus and resources raise ValueError, as Ray's do for an existing cluster, and so they
    do beside a `cluster_config` that lists hosts.

    Raises RuntimeError when called twice without ignore_reinit_error=True, or for an
    unknown keyword argument.

    >>> ctx = fray_ray.init(num_cpus=2)  # doctest: +SKIP
    """
    global _context
    unknown = [k for k in kwargs if not k.startswith("_") and k not in _INIT_KEYWORDS]
    if unknown:
        raise RuntimeError(f"Unknown keyword argument(s): {', '.join(unknown)}")
    with _init_lock:
        if runtime_state.current_or_none() is not None:
            if ignore_reinit_error:
                logger.info("Calling ray.init() again after it has already been called.")
                return _context or RayContext({})
            raise RuntimeError(
                "Maybe you called ray.init twice by accident? This error can be suppressed by passing in "
                "'ignore_reinit_error=True' or by calling 'ray.shutdown()' prior to 'ray.init()'."
            )
        from fray_ray._private.bootstrap import start_driver  # the driver and cluster load on first init

        if kwargs.get("logging_config") is not None:
            logger.warning(
                "fray_ray does not apply init(logging_config=...) to its workers; configure logging in the "
                "task or actor (a worker's root logger is at WARNING, as in Ray)"
            )

        local_mode = local_mode or os.environ.get("FRAY_RAY_LOCAL_MODE", "") not in ("", "0")

        runtime = start_driver(
            address=address,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            resources=resources,
            namespace=namespace or os.environ.get("RAY_NAMESPACE") or str(uuid.uuid4()),
            runtime_env=runtime_env,
            local_mode=local_mode,
            log_to_driver=True if log_to_driver is None else log_to_driver,
            cluster_config=cluster_config,
            object_store_memory=kwargs.get("object_store_memory"),
            system_config=kwargs.get("_system_config"),
            node_ip_address=kwargs.get("_node_ip_address"),
        )
        runtime_state.install(runtime)
        _context = RayContext(runtime.address_info)
        # As Ray does: a driver that ends without shutdown() still ends its session cleanly.
        # Registered last, so it runs before the exit hook of an embedded cluster it started.
        atexit.unregister(_shutdown_at_exit)
        atexit.register(_shutdown_at_exit)
        return _context


def _auto_init() -> Any:
    with _init_lock:
        runtime = runtime_state.current_or_none()
        if runtime is None:
            if os.environ.get("RAY_ENABLE_AUTO_CONNECT", "1") == "0":
                raise RuntimeError("Ray has not been started yet. You can start Ray with 'ray.init()'.")
            init()
            runtime = runtime_state.current_or_none()
        return runtime


runtime_state.set_auto_init(_auto_init)


def shutdown(*, wait_for_processes: bool = False, _exiting_interpreter: bool = False) -> None:
    """Stop the session: workers, actors (except detached ones) and the embedded cluster.

    Idempotent; afterwards is_initialized() is False.
    """
    global _context
    with _init_lock:
        runtime = runtime_state.current_or_none()
        if runtime is None or not runtime.is_driver:
            return
        runtime_state.uninstall(runtime)
        _context = None
        atexit.unregister(_shutdown_at_exit)
        runtime.shutdown()


def _shutdown_at_exit() -> None:
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - the interpreter is exiting; nothing left to tell
        logger.debug("shutdown at exit failed", exc_info=True)


# ---- objects -------------------------------------------------------------------------------


def put(value: Any, *, _owner: Any = None, _tensor_transport: Any = None) -> ObjectRef:
    """Store a snapshot of `value` in the session; returns a ref to it.

    >>> fray_ray.get(fray_ray.put([1, 2]))  # doctest: +SKIP
    [1, 2]
    """
    return runtime_state.current().put(value)


def get(object_refs: Any, *, timeout: float | None = None, _use_object_store: bool = False) -> Any:
    """Block until the values are ready and return them (a list for a list of refs).

    Raises the task's error as soon as one is found, GetTimeoutError after `timeout` seconds,
    ValueError/TypeError for arguments that are not refs.
    """
    if isinstance(object_refs, ObjectRef):
        return runtime_state.current().get([object_refs], timeout)[0]
    if isinstance(object_refs, ObjectRefGenerator):
        raise TypeError("ray.get() does not accept an ObjectRefGenerator; iterate it and get each ref instead.")
    if not isinstance(object_refs, list):
        raise ValueError(
            f"Invalid type of object refs, {type(object_refs)}, is given. 'object_refs' must either be an "
            "ObjectRef or a list of ObjectRefs. "
        )
    for ref in object_refs:
        if not isinstance(ref, ObjectRef):
            raise TypeError(
                f"Attempting to call `get` on the value {ref}, which is not an ray.ObjectRef."
            )
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number, got %r" % timeout)
    if not object_refs:
        return []
    return runtime_state.current().get(object_refs, timeout)


def wait(
    ray_waitables: Any, *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """Block until `num_returns` of the refs are ready or `timeout` passes.

    Returns (ready, not_ready), each in input order.
    """
    if isinstance(ray_waitables, (ObjectRef, ObjectRefGenerator)) or not isinstance(ray_waitables, list):
        raise TypeError(
            f"wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got {type(ray_waitables)}"
        )
    for ref in ray_waitables:
        if not isinstance(ref, (ObjectRef, ObjectRefGenerator)):
            raise TypeError(
                f"wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got list containing {type(ref)}"
            )
    if timeout is not None and timeout < 0:
        raise ValueError(f"The 'timeout' argument must be nonnegative. Received {timeout}")
    if len(ray_waitables) != len(set(ray_waitables)):
        raise ValueError("Wait requires a list of unique ray_waitables.")
    if num_returns <= 0:
        raise ValueError("Invalid number of objects to return %d." % num_returns)
    if not ray_waitables:
        return [], []
    if num_returns > len(ray_waitables):
        raise ValueError(
            f"num_returns cannot be greater than the number of ray_waitables provided: {num_returns} > {len(ray_waitables)}"
        )
    return runtime_state.current().wait(ray_waitables, num_returns, timeout, fetch_local)


# ---- remote --------------------------------------------------------------------------------


def remote(*args: Any, **kwargs: Any) -> Any:
    """Make a function a remote task or a class an actor, optionally with options.

    >>> @fray_ray.remote(num_cpus=2)  # doctest: +SKIP
    ... def f(): ...
    """
    def make(target: Any, options: Mapping[str, Any]) -> Any:
        if options_model.check_remote_target(target) == "class":
            return ActorClass(target, options)
        return RemoteFunction(target, options)

    target, options = options_model.split_remote_args(args, kwargs)
    if target is not options_model.UNSET:
        return make(target, {})
    options_model.check_decorator_options(options)
    return lambda target: make(target, options)


# `help(fray_ray.remote)` lists every option with its default, generated from the options table.
remote.__doc__ = f"{remote.__doc__}\n{textwrap.indent(options_text.remote_options_text(), '    ')}"


# ---- actors and tasks ----------------------------------------------------------------------


def kill(actor: Any, *, no_restart: bool = True) -> None:
    """Kill an actor at once (no atexit handlers run); later calls raise ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). Got: {type(actor)}.")
    runtime_state.current().kill_actor(actor._actor_id, no_restart)


def cancel(ray_waitable: Any, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task that produces this ref (queued: at once; running: interrupted)."""
    if not isinstance(ray_waitable, (ObjectRef, ObjectRefGenerator)):
        raise TypeError(f"ray.cancel() only supported for object refs. For actors, try ray.kill(). Got: {type(ray_waitable)}.")
    runtime_state.current().cancel(ray_waitable, force, recursive)


def get_actor(name: str, namespace: str | None = None) -> Any:
    """The handle of the live actor named `name`; ValueError if there is none."""
    if not isinstance(name, str) or not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    info = runtime_state.current().get_named_actor(name, namespace)
    return ActorHandle(info["actor_id"], info["class_name"], info["methods"], info["is_async"])


# ---- cluster -------------------------------------------------------------------------------


def _initialized_runtime() -> Any:
    """The runtime, for functions that, as in Ray, do not start a session themselves."""
    runtime = runtime_state.current_or_none()
    if runtime is None:
        raise RaySystemError("Ray has not been started yet. You can start Ray with 'ray.init()'.")
    return runtime


def cluster_resources() -> dict[str, float]:
    """The summed resources of the cluster's live workers, as read from the controller at most a
    second ago (blocks for that read); RaySystemError before init."""
    return _initialized_runtime().cluster_resources()


def available_resources() -> dict[str, float]:
    """What this session's tasks and actors leave free on the live workers; resources with nothing
    free are left out (RaySystemError before init)."""
    return _initialized_runtime().available_resources()


def nodes() -> list[dict[str, Any]]:
    """One entry per worker of the cluster (lost ones with `Alive: False`), shaped like Ray's."""
    return runtime_state.current().nodes()


def get_gpu_ids() -> list[int]:
    """The GPUs assigned to the current task or actor."""
    if current_task.get() is None:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(g) for g in visible.split(",") if g.strip().isdigit()]


def timeline(filename: str | None = None) -> list[Any]:
    """Task timeline; fray_ray records none, so this is empty (written to `filename` if given)."""
    if filename:
        with open(filename, "w") as f:
            f.write("[]")
    return []
