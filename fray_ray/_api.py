"""The top-level functions: init and shutdown, get, put, wait, remote, kill, cancel, ...

Each is a few lines handing off to the process's runtime (`fray_ray._private.core.runtime_state`).
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

from fray_ray._private import options as options_model
from fray_ray._private.core import excepthook, runtime_state
from fray_ray._private.core.generators import ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.task_context import current_task
from fray_ray._private.driver import interpreter_exit
from fray_ray._private.driver.exit_drain import let_started_work_print
from fray_ray._private.options import rendering as options_text
from fray_ray._version import __version__
from fray_ray.actor import ActorClass, ActorHandle, ActorProxy
from fray_ray.exceptions import RaySystemError
from fray_ray.remote_function import RemoteFunction

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
Waitable = TypeVar("Waitable", bound="ObjectRef[Any] | ObjectRefGenerator")

_init_lock = threading.RLock()  # serialises init/shutdown


# ---- init and shutdown ---------------------------------------------------------------------

_INIT_KEYWORDS = {
    "labels", "object_store_memory", "include_dashboard", "dashboard_host", "dashboard_port", "job_config",
    "configure_logging", "logging_level", "logging_format", "logging_config", "enable_resource_isolation",
    "cgroup_path", "system_reserved_cpu", "system_reserved_memory", "proxy_server_url",
}


class RayContext(Mapping[str, Any]):
    """What init() returns: address information, usable as a dict and a context manager.

    Leaving a `with fray_ray.init():` block shuts the session down, as Ray's context does.

    Args:
        address_info: the session's addresses (`address`, `node_id`, `session_dir`, ...).
    """

    def __init__(self, address_info: Mapping[str, Any]) -> None:
        self.address_info = dict(address_info)
        self.dashboard_url = str(self.address_info.get("webui_url") or "")
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
        """Shut the session down (Ray's name for it on a context)."""
        shutdown()

    def __repr__(self) -> str:
        return f"RayContext({self.address_info!r})"


_context: RayContext | None = None


def is_initialized() -> bool:
    """Tell whether a session is up, e.g. before calling functions that need one.

    Returns:
        True between `init()` (or the first call that starts a session) and `shutdown()`.
    """
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
    token: str | None = None,
    **kwargs: Any,
) -> RayContext:
    """Start or connect to a session and return its context.

    - no address (and no RAY_ADDRESS/FRAY_RAY_ADDRESS): start an embedded Iris-compatible
      cluster in this process: one host sized from the machine or from num_cpus/num_gpus/
      resources (custom resources become its `ray-resource:<name>` attributes);
    - `"local"`: always start a new embedded cluster;
    - `"iris://host:port"`, `"http://host:port"` or `"host:port"`: use that Iris controller;
    - `"auto"`: RAY_ADDRESS/FRAY_RAY_ADDRESS, else the surrounding Iris task's controller, else
      (in a script run by `fray-ray run`) the run's own cluster, else the cluster `fray-ray
      start` recorded last on this machine (in `_temp_dir`, or FRAY_RAY_TEMP_DIR, or a per-user
      temp dir); ConnectionError when there is none;
    - inside an Iris task with no address: attach to the task's job;
    - `local_mode=True` (or FRAY_RAY_LOCAL_MODE=1): run everything in this process on threads,
      for debuggers.

    `cluster_config` (fray_ray's own; a `fray_ray.cluster.ClusterConfig` or the path of a
    JSON/TOML layout, also read from FRAY_RAY_CLUSTER_CONFIG) describes the embedded cluster's
    hosts, e.g. simulated TPU slices or GPU hosts.

    `runtime_env` is the job's: its `working_dir` (default: this directory) and `py_modules`
    are captured now and shipped to every worker as an Iris workspace bundle; `pip`, `env_vars`
    and `excludes` apply to every task and actor (see docs/iris.md, "Your code travels with
    the job"). `_node_ip_address` (or FRAY_RAY_NODE_IP_ADDRESS) is the address of this machine
    that workers on other hosts connect to; inside an Iris task it is IRIS_ADVERTISE_HOST.

    `token` (fray_ray's own) is the bearer token of the controller at `address`; without it
    init uses FRAY_RAY_TOKEN, else IRIS_AUTH_TOKEN, else the token `fray-ray start` recorded for
    that address. A controller that refuses the token raises ConnectionError saying so.

    Ray's dashboard options: the controller serves a dashboard at its address
    (docs/dashboard.md). `include_dashboard=True` prints its token link for the cluster init starts
    and shows this session there too (it launches a small session job to register under);
    False serves none; `dashboard_host`/`dashboard_port` set where that cluster's controller,
    and so its dashboard, listens (a running cluster's stays where it is: a warning says so).

    A running cluster's size is its workers': with an address (or inside a task) num_cpus,
    num_gpus and resources raise ValueError, as Ray's do for an existing cluster, and so they
    do beside a `cluster_config` that lists hosts.

    Args:
        address: where the cluster is (see above); None for the embedded cluster.
        num_cpus: CPUs of the embedded cluster's host (default: the machine's).
        num_gpus: GPUs of the embedded cluster's host.
        resources: custom resources of the embedded cluster's host.
        namespace: the namespace named actors live in (default: a fresh one).
        runtime_env: the job's runtime environment.
        ignore_reinit_error: return the current context instead of raising when a session is up.
        local_mode: run every task and actor in this process, on threads.
        log_to_driver: print workers' output here (default True).
        cluster_config: fray_ray's description of the embedded cluster's hosts.
        token: the bearer token of the controller at `address` (fray_ray's own).
        **kwargs: Ray's other `init` keywords, accepted and (where fray_ray has no
            equivalent) ignored; `_node_ip_address`, `_system_config`, `object_store_memory`.

    Returns:
        The session's context.

    Raises:
        RuntimeError: a session is already up (without `ignore_reinit_error=True`), or a
            keyword argument is unknown.
        ValueError: sizes were given for a cluster that already exists, or a token without a
            cluster address.
        ConnectionError: the controller at `address` refused the token (or wanted one).

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
        excepthook.install_excepthook()  # uncaught errors, init's own too, print without fray_ray's frames

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
            temp_dir=kwargs.get("_temp_dir"),  # where init(address="auto") looks for the address file
            token=token,
            include_dashboard=kwargs.get("include_dashboard"),
            dashboard_host=kwargs.get("dashboard_host"),
            dashboard_port=kwargs.get("dashboard_port"),
        )
        runtime_state.install(runtime)
        _context = RayContext(runtime.address_info)
        # As Ray does: a driver that ends without shutdown() still ends its session cleanly.
        # Registered last, so it runs before the exit hook of an embedded cluster it started.
        atexit.unregister(_shutdown_at_exit)
        atexit.register(_shutdown_at_exit)
        # Local mode's executors and actors are threads Python joins before atexit runs.
        interpreter_exit.before_thread_join(_shutdown_at_exit if local_mode else None)
        interpreter_exit.note_interrupts_at_exit()  # Ctrl-C as the script ends stops its work quietly
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

    Idempotent, so cleanup code may call it unconditionally; afterwards `is_initialized()` is
    False. Inside a task or actor it does nothing (the driver owns the session).

    Args:
        wait_for_processes: accepted for Ray's signature; fray_ray always waits.
    """
    global _context
    with _init_lock:
        runtime = runtime_state.current_or_none()
        if runtime is None or not runtime.is_driver:
            return
        runtime_state.uninstall(runtime)
        _context = None
        atexit.unregister(_shutdown_at_exit)
        interpreter_exit.before_thread_join(None)
        runtime.shutdown()


def _shutdown_at_exit(interrupted: bool = False) -> None:
    """End the session as the interpreter (or `fray-ray run`'s script) exits, after letting
    started tasks print unless `interrupted` (`exit_drain`); Ctrl-C during shutdown is ignored."""
    try:
        let_started_work_print(runtime_state.current_or_none(), interrupted)
        with interpreter_exit.sigint_ignored():
            shutdown()
    except Exception:  # noqa: BLE001 - the interpreter is exiting; nothing left to tell
        logger.debug("shutdown at exit failed", exc_info=True)


# ---- objects -------------------------------------------------------------------------------


def put(value: T, *, _owner: Any = None, _tensor_transport: Any = None) -> ObjectRef[T]:
    """Store a snapshot of `value` in the session, to pass one large value to many tasks once.

    Args:
        value: any picklable value; later changes to it are not seen through the ref.

    Returns:
        A ref to the stored value, typed like it.

    Raises:
        TypeError: `value` cannot be pickled.

    >>> fray_ray.get(fray_ray.put([1, 2]))  # doctest: +SKIP
    [1, 2]
    """
    ref: ObjectRef[T] = runtime_state.current().put(value)
    return ref


@overload
def get(object_refs: ObjectRef[T], *, timeout: float | None = None, _use_object_store: bool = False) -> T: ...
@overload
def get(
    object_refs: list[ObjectRef[T]], *, timeout: float | None = None, _use_object_store: bool = False
) -> list[T]: ...
@overload
def get(
    object_refs: list[ObjectRef[Any]], *, timeout: float | None = None, _use_object_store: bool = False
) -> list[Any]: ...
def get(object_refs: Any, *, timeout: float | None = None, _use_object_store: bool = False) -> Any:
    """Block until the values are ready and return them.

    Args:
        object_refs: one ref, or a list of refs.
        timeout: seconds to wait at most; None waits as long as it takes.

    Returns:
        The value for one ref; a list of values, in order, for a list.

    Raises:
        RayTaskError: a task failed; raised as soon as one failure is found, as the task's
            own exception type too (it subclasses both).
        GetTimeoutError: `timeout` passed first.
        ValueError: `object_refs` is neither a ref nor a list, or `timeout` is negative.
        TypeError: a list item is not a ref, or an ObjectRefGenerator was passed.
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
        raise ValueError(f"'timeout' must be a non-negative number, got {timeout!r}")
    if not object_refs:
        return []
    return runtime_state.current().get(object_refs, timeout)


def wait(
    ray_waitables: list[Waitable], *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
) -> tuple[list[Waitable], list[Waitable]]:
    """Block until `num_returns` of the refs are ready or `timeout` passes, to handle results
    as they come rather than in submission order.

    Args:
        ray_waitables: distinct refs (or ObjectRefGenerators) to watch.
        num_returns: how many must be ready to return early.
        timeout: seconds to wait at most; None waits for `num_returns`.
        fetch_local: accepted for Ray's signature (values are fetched when read).

    Returns:
        (ready, not_ready): the refs split, each list in input order.

    Raises:
        TypeError: `ray_waitables` is not a list of refs.
        ValueError: duplicates, a negative timeout, or `num_returns` not in 1..len(refs).
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
        raise ValueError(f"Invalid number of objects to return {num_returns:d}.")
    if not ray_waitables:
        return [], []
    if num_returns > len(ray_waitables):
        raise ValueError(
            f"num_returns cannot be greater than the number of ray_waitables provided: {num_returns} > {len(ray_waitables)}"
        )
    split = runtime_state.current().wait(ray_waitables, num_returns, timeout, fetch_local)  # type: ignore[arg-type]
    return cast("tuple[list[Waitable], list[Waitable]]", split)


# ---- remote --------------------------------------------------------------------------------


class RemoteDecorator(Protocol):
    """What `remote(**options)` returns: a decorator that keeps its target's types."""

    @overload
    def __call__(self, target: type[T], /) -> ActorClass[T]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, target: Callable[P, R], /) -> RemoteFunction[P, R]: ...


# A class is also a callable; the first overload that fits wins, so classes become actors.
@overload
def remote(target: type[T], /) -> ActorClass[T]: ...  # type: ignore[overload-overlap]
@overload
def remote(target: Callable[P, R], /) -> RemoteFunction[P, R]: ...
@overload
def remote(**options: Any) -> RemoteDecorator: ...
def remote(*args: Any, **kwargs: Any) -> Any:
    """Make a function a remote task or a class an actor, optionally with options.

    `@remote` and `@remote(...)` keep the target's types: `f.remote(...)` is an `ObjectRef`
    to what `f` returns, and `ray.get` of it has that type. Actor methods are typed when
    decorated with `@fray_ray.method` (bare or with options), as in Ray.

    Args:
        *args: the function or class, when used bare (`@remote`).
        **kwargs: options, when used as `@remote(...)`.

    Returns:
        A `RemoteFunction` for a function, an `ActorClass` for a class, or, given options,
        a decorator that makes one of them.

    Raises:
        TypeError: the target is neither a Python function nor a class.
        ValueError: the target is an `async def` function, or an option is unknown, has a bad
            value or does not fit the target.
        AssertionError: `@remote()` with no options, or a target and options together (as Ray).

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


def kill(actor: ActorProxy[Any], *, no_restart: bool = True) -> None:
    """Kill an actor at once, e.g. one that hangs; no atexit handlers run in it.

    Pending and later calls raise ActorDiedError.

    Args:
        actor: the actor's handle.
        no_restart: True ends it for good; False lets it restart if it has `max_restarts` left.

    Raises:
        ValueError: `actor` is not an actor handle.
    """
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). Got: {type(actor)}.")
    runtime_state.current().kill_actor(actor._id_bytes, no_restart)


def cancel(ray_waitable: ObjectRef[Any] | ObjectRefGenerator, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task that produces this ref: a queued one at once, a running one interrupted.

    `get` of the ref then raises TaskCancelledError.

    Args:
        ray_waitable: a ref (or generator) returned by a task or an actor call.
        force: kill the worker running the task instead of interrupting it.
        recursive: cancel the tasks it submitted too.

    Raises:
        TypeError: `ray_waitable` is not a ref.
    """
    if not isinstance(ray_waitable, (ObjectRef, ObjectRefGenerator)):
        raise TypeError(f"ray.cancel() only supported for object refs. For actors, try ray.kill(). Got: {type(ray_waitable)}.")
    runtime_state.current().cancel(ray_waitable, force, recursive)


def get_actor(name: str, namespace: str | None = None) -> ActorHandle[Any]:
    """Look up a named actor, e.g. one another driver created.

    Args:
        name: the actor's name.
        namespace: its namespace (default: this session's).

    Returns:
        A handle to the live actor; its class is unknown here, so methods are untyped.

    Raises:
        ValueError: no live actor has that name, or `name` is empty.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    info = runtime_state.current().get_named_actor(name, namespace)
    handle: ActorHandle[Any] = ActorHandle(info["actor_id"], info["class_name"], info["methods"], info["is_async"])
    return handle


# ---- cluster -------------------------------------------------------------------------------


def _initialized_runtime() -> Any:
    """The runtime, for functions that, as in Ray, do not start a session themselves."""
    runtime = runtime_state.current_or_none()
    if runtime is None:
        raise RaySystemError("Ray has not been started yet. You can start Ray with 'ray.init()'.")
    return runtime


def cluster_resources() -> dict[str, float]:
    """Sum the resources of the cluster's live workers, to size work to the cluster.

    Returns:
        Resource name to amount, as read from the controller at most a second ago (blocks for
        that read).

    Raises:
        RaySystemError: no session is up.
    """
    resources: dict[str, float] = _initialized_runtime().cluster_resources()
    return resources


def available_resources() -> dict[str, float]:
    """Say what this session's tasks and actors leave free on the live workers.

    Returns:
        Resource name to free amount; resources with nothing free are left out.

    Raises:
        RaySystemError: no session is up.
    """
    resources: dict[str, float] = _initialized_runtime().available_resources()
    return resources


def nodes() -> list[dict[str, Any]]:
    """Describe the cluster's workers, shaped like Ray's node entries.

    Returns:
        One dict per worker (`NodeID`, `Alive`, `Resources`, ...); lost ones have `Alive: False`.
    """
    return runtime_state.current().nodes()


def get_gpu_ids() -> list[int]:
    """Say which GPUs the current task or actor was given.

    Returns:
        The GPU indices from CUDA_VISIBLE_DEVICES inside a task or actor; [] on the driver.
    """
    if current_task.get() is None:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(g) for g in visible.split(",") if g.strip().isdigit()]


def timeline(filename: str | None = None) -> list[Any] | None:
    """Return the session's tasks, actor calls and actor creations as Chrome trace events.

    One complete event (`ph` "X", `ts`/`dur` in microseconds, `pid` the node, `tid` the
    worker, `cat` `task::<name>`, `args` with the task id and state) per attempt that has
    ended, from the driver's records (`fray_ray.util.state` reads the same). Load the file in
    chrome://tracing or https://ui.perfetto.dev. Call it from the driver.

    Args:
        filename: where to write the events as JSON; when given, nothing is returned.

    Returns:
        The list of events, or None when `filename` is given (as Ray does).

    >>> import fray_ray as ray
    >>> ray.timeline("/tmp/trace.json")  # doctest: +SKIP
    """
    from fray_ray._private.driver import timeline as chrome

    runtime = runtime_state.current()
    if not runtime.is_driver:
        raise RuntimeError("ray.timeline() reads the driver's records: call it from the driver.")
    trace = chrome.chrome_trace(runtime)  # type: ignore[arg-type]
    if filename is not None:
        chrome.write_trace(trace, filename)
        return None
    return trace
