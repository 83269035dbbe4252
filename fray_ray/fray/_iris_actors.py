"""Fray actor groups on Iris: discovery and readiness on the caller's side, `_host_actor` in the task.

An actor group is one Iris job with `replicas = count` and an `actor` port. Every replica runs
`_host_actor`: it builds the instance with its `ActorContext` current, serves it over
`iris.actor.ActorService` on the task's `actor` port, registers the endpoint
`<job_id>/<name>-<task_index>`, and blocks until the context's `shutdown_event` is set. A
clean stop exits 0 (the task SUCCEEDED); `ctx.fail(exc)` exits 1, so the job's retry budget
decides whether the replica comes back (as a new process, with fresh state).

Constructor failures travel back through the task's own output: before exiting 1, the replica
prints the traceback and then one line, `FRAY_ACTOR_ERROR {json}`, carrying the exception's
type, message and cloudpickle (base64). Iris keeps the tail of a failed attempt's output in the
task's `error` (the embedded cluster keeps its last lines, real Iris its last stderr line), and
the line is also in the task's logs, so `IrisActorGroup.wait_ready` finds it and raises the
constructor's own exception type once the requested number of actors can no longer be reached.

Groups pickle to `(name, count, job_id)` and resolve lazily through the client that made them,
or, once unpickled, the ambient one.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import cloudpickle

from fray_ray.fray._iris_calls import IrisActorHandle
from fray_ray.fray._iris_jobs import IrisJobHandle
from fray_ray.fray._iris_registry import IrisClientCore, ambient_client, bound_client
from fray_ray.fray.actor import (
    ActorContext,
    ActorUnavailableError,
    HostedActor,
    _reset_current_actor,
    _set_current_actor,
)
from fray_ray.iris.controller_client import Backoff
from fray_ray.iris.errors import IrisError, NotFound
from fray_ray.iris.job_info import JobInfo, get_job_info
from fray_ray.iris.transport import new_token
from fray_ray.iris.types import EndpointInfo, TaskInfo, TaskState

if TYPE_CHECKING:
    from fray_ray.iris.actor_server import ActorServer
    from fray_ray.iris.endpoints import EndpointRegistry

__all__ = ["DEFAULT_READY_TIMEOUT", "IrisActorGroup", "auth_metadata", "serve_hosted_actor"]

#: The line a replica prints last when its actor cannot run; followed by a JSON object.
ERROR_MARKER = "FRAY_ACTOR_ERROR "
#: Exit code of a replica whose constructor raised or whose actor called `fail()`.
FAILED_EXIT_CODE = 1
#: Seconds `wait_ready` waits by default (Fray's Iris default).
DEFAULT_READY_TIMEOUT = 900.0
# wait_ready polls the controller from this delay up to this cap.
_READY_POLL_FIRST = 0.01
_READY_POLL_MAX = 0.25
# Task output lines read when the failure is not in the task's `error` text.
_LOG_LINES_SCANNED = 200


def _parse_index(endpoint: str, prefix: str) -> int | None:
    suffix = endpoint[len(prefix) :] if endpoint.startswith(prefix) else ""
    return int(suffix) if suffix.isdigit() else None


class IrisActorGroup:
    """The `count` actors of one Iris job, found through the controller's endpoint registry.

    Picklable: it travels as `(name, count, job_id)` and resolves the controller lazily.
    Besides the `ActorGroup` protocol it offers `job_id`, `status()`, `logs()` and
    `terminate()` (= `shutdown()`), like a `JobHandle` for the job behind it.
    """

    def __init__(self, name: str, count: int, job_id: str, client: IrisClientCore | None = None) -> None:
        self.name = name
        self.count = count
        self.job_id = job_id
        self._client = client
        self._lock = threading.Lock()  # guards _yielded and _shut_down
        self._yielded: set[str] = set()  # endpoint names already handed out
        self._shut_down = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (IrisActorGroup, (self.name, self.count, self.job_id))

    def __repr__(self) -> str:
        return f"IrisActorGroup(name={self.name!r}, count={self.count}, job_id={self.job_id!r})"

    @property
    def _prefix(self) -> str:
        return f"{self.job_id}/{self.name}-"

    def _owner(self) -> IrisClientCore:
        self._client = bound_client(self._client)
        return self._client

    @property
    def job(self) -> IrisJobHandle:
        """The `JobHandle` of the job whose replicas host the actors."""
        return IrisJobHandle(self._owner(), self.job_id)

    def _ready(self) -> dict[int, EndpointInfo]:
        """Registered replicas by task index: one prefix ListEndpoints query."""
        client = self._owner()
        endpoints = client._call_controller(
            f"list the actors of group {self.name}", lambda c: c.list_endpoints(self._prefix)
        )
        ready = {}
        for endpoint in endpoints:
            index = _parse_index(endpoint.name, self._prefix)
            if index is not None and index < self.count:
                ready[index] = endpoint
        return ready

    def _handles(self, endpoints: Iterable[EndpointInfo]) -> list[IrisActorHandle]:
        client = self._owner()
        return [IrisActorHandle(endpoint.name, client) for endpoint in endpoints]

    @property
    def ready_count(self) -> int:
        """Actors registered and serving now (one controller query)."""
        if self._shut_down:
            return 0
        return len(self._ready())

    def discover_new(self) -> list[IrisActorHandle]:
        """Handles of ready actors not returned before (by this or `wait_ready`), by index.

        One prefix ListEndpoints query; never waits for actors that are not ready.
        """
        if self._shut_down:
            return []
        ready = self._ready()
        with self._lock:
            new = [ready[i] for i in sorted(ready) if ready[i].name not in self._yielded]
            self._yielded.update(endpoint.name for endpoint in new)
        return self._handles(new)

    def wait_ready(self, count: int | None = None, timeout: float = DEFAULT_READY_TIMEOUT) -> list[IrisActorHandle]:
        """Block until `count` actors (default: all) are ready; return handles to the first
        `count` of them by index.

        Polls the endpoint registry with backoff (10 ms up to 0.25 s). Raises:
        - the constructor's own exception (or what the actor passed to `fail()`) once so many
          replicas have failed for good that `count` cannot be reached, or the job ended;
        - ActorUnavailableError when the group was shut down or its job ended another way;
        - TimeoutError after `timeout` seconds, naming what the replicas still wait for;
        - ValueError for a `count` outside 1..`self.count`.
        """
        target = self.count if count is None else count
        if not isinstance(target, int) or isinstance(target, bool) or not 1 <= target <= self.count:
            raise ValueError(f"count must be between 1 and the group's size {self.count}, got {count!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(_READY_POLL_FIRST, _READY_POLL_MAX, 1.5)
        client = self._owner()
        while True:
            if self._shut_down:
                raise ActorUnavailableError(f"actor group {self.name} ({self.job_id}) was shut down")
            ready = self._ready()
            if len(ready) >= target:
                chosen = [ready[i] for i in sorted(ready)[:target]]
                with self._lock:
                    self._yielded.update(endpoint.name for endpoint in chosen)
                return self._handles(chosen)
            tasks = self._tasks(client)
            alive = [task for task in tasks if not task.state.finished]
            if len(alive) < target:
                raise self._failure(client, tasks, target)
            delay = backoff.next_delay()
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    waiting = sorted({t.pending_reason for t in alive if t.pending_reason}) or ["starting"]
                    raise TimeoutError(
                        f"actor group {self.name} ({self.job_id}): {len(ready)} of {target} actors ready after "
                        f"{timeout} s; pending replicas: {'; '.join(waiting)}"
                    )
                delay = min(delay, remaining)
            time.sleep(delay)

    def _tasks(self, client: IrisClientCore) -> list[TaskInfo]:
        try:
            return client._call_controller(
                f"list the tasks of {self.job_id}", lambda c: c.list_tasks(self.job_id), not_found=True
            )
        except NotFound:
            raise ActorUnavailableError(
                f"actor group {self.name}: its job {self.job_id} is unknown to the controller"
            ) from None

    def _failure(self, client: IrisClientCore, tasks: list[TaskInfo], target: int) -> BaseException:
        """The error explaining why `target` actors can no longer be ready."""
        failed = [t for t in tasks if t.state.finished and t.state != TaskState.SUCCEEDED]
        for task in failed:
            error = _error_from_text(self._task_text(task)) or _error_from_text(self._task_logs(client, task))
            if error is not None:
                where = f"actor {self._prefix}{task.index} (task {task.task_id})"
                error.add_note(f"raised by {where}; its traceback is in the job's logs")
                return error
        if failed and all(t.state == TaskState.KILLED for t in failed):
            return ActorUnavailableError(f"actor group {self.name} ({self.job_id}) was shut down or its job was killed")
        details = "; ".join(
            f"{t.task_id} {t.state.name}: {(t.error or 'no error text').splitlines()[0]}" for t in failed
        )
        return ActorUnavailableError(
            f"actor group {self.name} ({self.job_id}): only {len(tasks) - len(failed)} of {self.count} replicas "
            f"are left, fewer than the {target} awaited ({details or 'replicas ended'})"
        )

    @staticmethod
    def _task_text(task: TaskInfo) -> str:
        return "\n".join([task.error, *(attempt.error for attempt in task.attempts)])

    @staticmethod
    def _task_logs(client: IrisClientCore, task: TaskInfo) -> str:
        try:
            lines = client._controller.task_logs(task.task_id, max_lines=_LOG_LINES_SCANNED)
        except IrisError:
            return ""  # a controller serving no logs: the task's error text is all we have
        return "\n".join(line.data for line in lines)

    def is_done(self) -> bool:
        """True once the group was shut down or its job has ended (one controller query)."""
        if self._shut_down:
            return True
        client = self._owner()
        states = client._call_controller(f"read the state of {self.job_id}", lambda c: c.job_states([self.job_id]))
        state = states.get(self.job_id)
        return state is None or state.finished

    def shutdown(self) -> None:
        """Terminate the group's job (every replica) and wait until the controller reports it
        ended; later calls through its handles raise ActorUnavailableError. Idempotent."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        self.job.terminate()

    # JobHandle-style conveniences for the job behind the group.

    def terminate(self) -> None:
        """Same as `shutdown()`."""
        self.shutdown()

    def status(self) -> Any:
        """The Fray `JobStatus` of the group's job."""
        return self.job.status()

    def logs(self, max_lines: int = 0) -> tuple[str, ...]:
        """The last `max_lines` lines the replicas printed (0: all kept)."""
        return self.job.logs(max_lines)

    def error(self) -> str:
        """Why the group's job failed, as the controller tells it (see `IrisJobHandle.error`)."""
        return self.job.error()


def _error_from_text(text: str) -> BaseException | None:
    """The exception carried by the last FRAY_ACTOR_ERROR line in `text`, if any."""
    position = text.rfind(ERROR_MARKER)
    if position < 0:
        return None
    line = text[position + len(ERROR_MARKER) :].split("\n", 1)[0]
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if record.get("pickle"):
        try:
            exc = cloudpickle.loads(base64.b64decode(record["pickle"]))
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # noqa: BLE001 - e.g. its class cannot be imported here
            pass
    return ActorUnavailableError(
        f"actor failed ({record.get('kind', 'error')}): {record.get('type', 'Exception')}: {record.get('message', '')}"
    )


def _error_line(exc: BaseException, kind: str) -> str:
    try:
        payload = base64.b64encode(cloudpickle.dumps(exc)).decode()
    except Exception:  # noqa: BLE001 - type and message still travel
        payload = ""
    record = {"kind": kind, "type": type(exc).__qualname__, "message": str(exc), "pickle": payload}
    return ERROR_MARKER + json.dumps(record)


# ---------------------------------------------------------------------------------------------
# Inside the task


def _report_and_exit(exc: BaseException, kind: str) -> NoReturn:
    """Print the traceback and the FRAY_ACTOR_ERROR line (last), then end the process with 1."""
    traceback.print_exception(exc, file=sys.stderr)
    print(_error_line(exc, kind), file=sys.stderr, flush=True)
    end_replica_process(FAILED_EXIT_CODE)


def end_replica_process(code: int) -> NoReturn:
    """End an actor's process now: threads the actor started must not keep a finished replica
    alive. A clean end still runs the atexit handlers first, as a normal interpreter exit would."""
    if code == 0:
        import atexit

        try:
            atexit._run_exitfuncs()
        except Exception:  # noqa: BLE001 - a failing handler must not turn a clean exit into a crash
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def auth_metadata(token: str | None) -> dict[str, str]:
    """Endpoint metadata that makes callers authenticate to a token-protected actor server.

    Iris actor clients send an endpoint's metadata as request headers, so the bearer token
    rides along; only callers that can list endpoints see it.
    """
    return {"authorization": f"Bearer {token}"} if token else {}


def actor_secret(info: JobInfo) -> str:
    """The bearer token this task's actor server requires: the cluster's token, or, on a
    controller that runs without auth, a secret minted here (an actor server never serves
    without one, since its calls are unpickled)."""
    return info.token or new_token()


def _construct(actor_class: type, args: tuple[Any, ...], kwargs: dict[str, Any], context: ActorContext) -> object:
    """`actor_class(*args, **kwargs)` with `context` as `current_actor()` during `__init__`."""
    token = _set_current_actor(context)
    try:
        return actor_class(*args, **kwargs)
    finally:
        _reset_current_actor(token)


def _serve(
    client: IrisClientCore,
    info: JobInfo,
    endpoint: str,
    instance: object,
    max_concurrency: int,
    port: int,
    aliases: Sequence[str] = (),
) -> tuple[ActorServer, EndpointRegistry]:
    """Serve `instance` over ActorService on `port` (0: any) and register it as `endpoint`
    (and as each of `aliases`, the same actor under other names) for this task attempt;
    returns the server and registry, which the caller must close."""
    # Imported here: only processes that serve actors need the server stack (uvicorn).
    from fray_ray.iris.endpoints import EndpointRegistry

    secret = actor_secret(info)
    server = start_actor_server(info.bind_host, port, secret)
    server.register(endpoint, instance, max_concurrency=max_concurrency)
    for alias in aliases:
        server.add_alias(endpoint, alias)
    registry = EndpointRegistry(client._controller, info)
    try:
        address = server.address_for(info.advertise_host)
        for name in (endpoint, *aliases):
            registry.register(name, address, auth_metadata(secret))
    except BaseException:
        registry.close()
        server.stop()
        raise
    return server, registry


def _host_actor(
    actor_class: type,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: str,
    max_concurrency: int,
    alias_jobs: Sequence[str] = (),
) -> None:
    """Run in each replica of an actor group's job: build, serve, register, wait, exit.

    Replica i registers `<its job>/<name>-<i>`, and `<alias>/<name>-<i>` for each of
    `alias_jobs` (job names under which the group is also found). Never returns: the process
    exits 0 after a clean stop and 1 after a failed constructor or `ctx.fail()`, so the job's
    retry budget decides what happens next.
    """
    info = get_job_info()
    if info is None or not info.controller_address:
        raise RuntimeError("_host_actor runs inside an Iris task (IRIS_TASK_ID and IRIS_CONTROLLER_ADDRESS unset)")
    client = ambient_client()
    endpoint = f"{info.job_id.wire}/{name}-{info.task_index}"
    shutdown_event = threading.Event()
    handle = IrisActorHandle(endpoint, client)
    context = ActorContext(handle=handle, index=info.task_index, group_name=name, shutdown_event=shutdown_event)
    try:
        instance = _construct(actor_class, args, kwargs, context)
    except BaseException as exc:  # noqa: BLE001 - reported to wait_ready through the task's output
        _report_and_exit(exc, "constructor")
    try:
        aliases = [f"{alias}/{name}-{info.task_index}" for alias in alias_jobs]
        server, registry = _serve(client, info, endpoint, instance, max_concurrency, _actor_port(info), aliases)
    except BaseException as exc:  # noqa: BLE001 - e.g. the port is taken
        _report_and_exit(exc, "serve")
    shutdown_event.wait()
    registry.close()
    server.stop()
    if context.errors:
        _report_and_exit(context.errors[0], "fail")
    end_replica_process(0)


def start_actor_server(host: str, port: int, secret: str) -> ActorServer:
    """A started ActorServer on `port`, or on any free port if another process holds that one.

    Iris picks a task's ports by finding them free, and the task binds them a moment later;
    another process on the host (a task of a neighbouring worker, say) can take the port in
    between. Clients find the actor through the endpoint registry, which gets the port actually
    bound, so the actor serves on rather than dying of a port it does not need. Where only the
    allocated port is reachable from other hosts (a container with published ports), such an
    actor is reachable from its own host only, which the warning says."""
    from fray_ray.iris.actor_server import ActorServer

    server = ActorServer(host, port, token=secret)
    try:
        return server.start()
    except OSError as exc:
        server.stop()
        if port == 0 or exc.errno != errno.EADDRINUSE:
            raise
    server = ActorServer(host, 0, token=secret).start()
    print(
        f"fray_ray: port {port}, which Iris allocated for this actor, is taken on this host; "
        f"serving on port {server.port} instead (registered in the endpoint registry)",
        file=sys.stderr, flush=True,
    )
    return server


def _actor_port(info: JobInfo) -> int:
    try:
        return info.get_port("actor")
    except KeyError:
        return 0  # no port allocated (or "0", Kubernetes-style): bind any and register that


def serve_hosted_actor(
    client: IrisClientCore,
    info: JobInfo,
    actor_class: type,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: str,
    max_concurrency: int,
) -> HostedActor:
    """`FrayIrisClient.host_actor`: build the actor here, serve it on a free port, register
    `<job_id>/<name>-0`. Blocks until reachable; raises what the constructor raises.

    Setting the context's `shutdown_event` (or `ctx.fail()`) stops serving, as it ends a
    replica; so does the returned `HostedActor`'s `shutdown()`.
    """
    endpoint = f"{info.job_id.wire}/{name}-0"
    handle = IrisActorHandle(endpoint, client)
    shutdown_event = threading.Event()
    context = ActorContext(handle=handle, index=0, group_name=name, shutdown_event=shutdown_event)
    instance = _construct(actor_class, args, kwargs, context)
    server, registry = _serve(client, info, endpoint, instance, max_concurrency, 0)

    def stop() -> None:
        shutdown_event.set()
        registry.close()
        server.stop()
        if watcher is not threading.current_thread():
            watcher.join(timeout=5)

    hosted = HostedActor(handle, endpoint, stop=stop)  # its shutdown() runs `stop` once
    watcher = threading.Thread(
        target=lambda: shutdown_event.wait() and hosted.shutdown(), name=f"fray-hosted-{name}", daemon=True
    )
    watcher.start()
    return hosted
