"""LocalClient: a Fray backend that runs jobs and actors inside this process.

It is the test double of the `Client` protocol and the engine of local mode. Compared with a
bare thread pool it keeps the promises the cluster backend keeps:

- Jobs. A callable job runs on one of `max_threads` pool threads, inside a copy of the
  submitter's `contextvars` context (so `set_current_client` and other context reach it; if no
  client was set, the job sees this client as `current_client()`, as a task on a cluster sees
  its cluster). A binary job runs as a subprocess in its own process group, with stdout and
  stderr going to a log file in a temp dir the client owns. Names are unique among unfinished
  jobs. `terminate()` kills a binary job's process group; a running callable cannot be killed
  and is only marked STOPPED. `JobRequest.timeout` stops a job the same way.
- Logs. Binary output is read back from its log file. For callable jobs, while any runs,
  `sys.stdout`/`sys.stderr` are wrapped by a proxy that copies text written from a job's
  context into that job's log (and still writes it to the real stream); threads the job
  starts itself do not inherit the context and are not captured.
- Actors. Each actor has its own `ThreadPoolExecutor` with `max_concurrency` workers: with
  the default of 1, calls run one at a time in submission order. Construction runs on that
  executor too, so `create_actor_group` returns at once and calls queue behind `__init__`.
- Registry. Live actors are registered on their LocalClient instance by endpoint name. A
  handle pickles to `(client_id, endpoint)`; unpickling in this process finds the client
  through the module-level `WeakValueDictionary` `_CLIENTS` (which never keeps a client alive)
  and the actor through that client's registry. In another process such a handle resolves to
  nothing, and its calls raise `ActorUnavailableError`.

Lock order: client lock, then a group's condition, then a job's or actor's condition. Code
holding a job or actor condition never takes another lock, and callbacks to the group and the
client run after it is released.
"""

from __future__ import annotations

import contextvars
import enum
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any, TextIO

from fray_ray.fray.actor import ActorContext, ActorUnavailableError, HostedActor, _reset_current_actor, _set_current_actor
from fray_ray.fray.client import FrayError, JobAlreadyExists
from fray_ray.fray._client_context import current_client_var as _current_client
from fray_ray.fray.hosts import HostInfo, this_machine
from fray_ray.fray.types import ActorConfig, EnvironmentConfig, JobRequest, JobStatus, ResourceConfig

__all__ = ["LocalActorGroup", "LocalActorHandle", "LocalActorMethod", "LocalClient", "LocalJobHandle"]

#: Lines of output kept per job.
LOG_LINES_KEPT = 10_000
#: Seconds a terminated binary job gets between SIGTERM and SIGKILL.
TERMINATE_GRACE = 3.0

# Every live LocalClient by client_id, so an unpickled actor handle can find its client. Weak
# values: the registry never keeps a client alive. Guarded by _CLIENTS_LOCK.
_CLIENTS: weakref.WeakValueDictionary[str, LocalClient] = weakref.WeakValueDictionary()
_CLIENTS_LOCK = threading.Lock()

# The owner token (a client's, or an actor) of the executor that started the current thread;
# lets shutdown skip joining the thread it is running on.
_thread_owner = threading.local()


def _mark_thread(owner: object) -> None:
    _thread_owner.value = owner


def _runs_on_thread_of(owner: object) -> bool:
    return getattr(_thread_owner, "value", None) is owner


def _context_for(client: LocalClient) -> contextvars.Context:
    """A copy of the caller's context in which `current_client()` is `client` unless one was set."""

    def adopt() -> None:
        if _current_client.get() is None:
            _current_client.set(client)

    context = contextvars.copy_context()
    context.run(adopt)
    return context


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
        raise ValueError(f"{what} must be a non-empty string without spaces, got {name!r}")
    return name


# ---------------------------------------------------------------------------------------------
# Logs


class _LogBuffer:
    """A job's output: a log file while a binary job runs, then (and for callables) kept lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards all fields
        self._lines: deque[str] = deque(maxlen=LOG_LINES_KEPT)
        self._partial = ""
        self._path: str | None = None

    def write(self, text: str) -> None:
        with self._lock:
            pieces = (self._partial + text).split("\n")
            self._partial = pieces.pop()
            self._lines.extend(piece.rstrip("\r") for piece in pieces)

    def end(self) -> None:
        """Keep an unterminated last line."""
        with self._lock:
            if self._partial:
                self._lines.append(self._partial.rstrip("\r"))
                self._partial = ""

    def follow_file(self, path: str) -> None:
        with self._lock:
            self._path = path

    def seal_file(self) -> None:
        """Keep the log file's last lines in memory and delete the file."""
        with self._lock:
            path, self._path = self._path, None
            if path is None:
                return
            self._lines.extend(_read_lines(path))
            try:
                os.unlink(path)
            except OSError:
                pass

    def tail(self, max_lines: int) -> tuple[str, ...]:
        with self._lock:
            lines = _read_lines(self._path) if self._path is not None else list(self._lines)
            if self._partial:
                lines.append(self._partial)
        return tuple(lines[-max_lines:] if max_lines > 0 else lines)


def _read_lines(path: str) -> list[str]:
    try:
        # Split on "\n" only, as callable output is; a progress line's "\r"s stay inside it.
        with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
            return [line.rstrip("\r\n") for line in deque(f, maxlen=LOG_LINES_KEPT)]
    except OSError:
        return []


# The log of the callable job whose context is running, if any.
_log_sink: contextvars.ContextVar[_LogBuffer | None] = contextvars.ContextVar("fray_local_log_sink", default=None)


class _RoutedStream:
    """Stands in for sys.stdout or sys.stderr: text written from a job's context is also
    added to that job's log; everything still reaches the stream it wraps."""

    def __init__(self, target: TextIO) -> None:
        self._target = target

    def write(self, text: str) -> int:
        sink = _log_sink.get()
        if sink is not None:
            sink.write(text)
        return self._target.write(text)

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class _StreamRouting:
    """Installs the `_RoutedStream` proxies when the first callable job runs.

    The proxies stay installed afterwards (they pass text straight through when no job's
    context is writing): swapping sys.stdout back while another thread is inside print() can
    free the stream under it, which crashes CPython 3.11. If something else replaces them
    (pytest's capture does), the next job wraps the new streams.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Make sure the current sys.stdout/sys.stderr are proxies (someone may have replaced ours)."""
        with self._lock:
            if sys.stdout is not None and not isinstance(sys.stdout, _RoutedStream):
                sys.stdout = _RoutedStream(sys.stdout)  # type: ignore[assignment]
            if sys.stderr is not None and not isinstance(sys.stderr, _RoutedStream):
                sys.stderr = _RoutedStream(sys.stderr)  # type: ignore[assignment]

    def release(self) -> None:
        """Nothing to undo (see the class docstring)."""


_routing = _StreamRouting()


# ---------------------------------------------------------------------------------------------
# Jobs


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, give it `grace` seconds, then SIGKILL it; reaps the leader."""
    if grace > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


class _LocalJob:
    """One job and its runner: the producer side behind a `LocalJobHandle`."""

    def __init__(self, client: LocalClient, request: JobRequest, context: contextvars.Context) -> None:
        self.request = request
        self.job_id = f"local-{request.name}-{uuid.uuid4().hex[:8]}"
        self.log = _LogBuffer()
        self.handle = LocalJobHandle(self)
        self._client = client
        self._context = context
        self._cond = threading.Condition()  # guards the fields below
        self._status = JobStatus.PENDING
        self._error: BaseException | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._future: Future[None] | None = None  # the pool's work item, cancelled if stopped while queued
        self._deadline: float | None = None  # monotonic time JobRequest.timeout runs out

    # -- reader side --------------------------------------------------------------------------

    def status(self) -> JobStatus:
        self._expire_if_due()
        with self._cond:
            return self._status

    def wait(self, timeout: float | None, raise_on_failure: bool) -> JobStatus:
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            self._expire_if_due()
            with self._cond:
                if self._status.finished():
                    status, error = self._status, self._error
                    break
                now = time.monotonic()
                if until is not None and now >= until:
                    raise TimeoutError(f"job {self.job_id} is still {self._status} after {timeout} s")
                wakes = [] if until is None else [until - now]
                if self._proc is None and self._deadline is not None:
                    wakes.append(self._deadline - now)  # a callable's timeout is noticed by its readers
                self._cond.wait(max(0.0, min(wakes)) if wakes else None)
        if status is JobStatus.FAILED and raise_on_failure:
            # The job's own exception (or CalledProcessError for a binary), not JobFailed.
            raise error if error is not None else FrayError(f"job {self.job_id} failed")
        return status

    def terminate(self, grace: float = TERMINATE_GRACE) -> None:
        with self._cond:
            if self._status.finished():
                return
            self._status = JobStatus.STOPPED
            proc, future = self._proc, self._future
            self._cond.notify_all()
        self._client._job_finished(self)
        if future is not None:
            future.cancel()
        if proc is not None:
            _kill_group(proc, grace)

    # -- producer side ------------------------------------------------------------------------

    def attach(self, future: Future[None]) -> None:
        with self._cond:
            self._future = future

    def _finish(self, status: JobStatus, error: BaseException | None = None) -> None:
        with self._cond:
            if self._status.finished():
                return  # stopped earlier; the late outcome is dropped
            self._status, self._error = status, error
            self._cond.notify_all()
        self._client._job_finished(self)

    def _start(self) -> bool:
        with self._cond:
            if self._status is not JobStatus.PENDING:
                return False
            self._status = JobStatus.RUNNING
            if self.request.timeout is not None:
                self._deadline = time.monotonic() + self.request.timeout
            self._cond.notify_all()
            return True

    def _expire_if_due(self) -> None:
        with self._cond:
            due = (
                self._status is JobStatus.RUNNING
                and self._proc is None  # binary jobs are timed out by their runner, which kills them
                and self._deadline is not None
                and time.monotonic() >= self._deadline
            )
        if due:
            self._finish(JobStatus.STOPPED)

    def run(self) -> None:
        """Pool-thread body."""
        if self.request.entrypoint.binary_entrypoint is not None:
            self._run_binary()
        else:
            self._run_callable()

    def _run_callable(self) -> None:
        if not self._start():
            return
        entry = self.request.entrypoint.callable_entrypoint
        assert entry is not None
        status, error = JobStatus.SUCCEEDED, None
        _routing.acquire()
        try:
            self._context.run(self._call, entry.callable, entry.args, entry.kwargs)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                status, error = JobStatus.FAILED, exc
        except BaseException as exc:  # the job's failure is its result, reported by wait()
            status, error = JobStatus.FAILED, exc
        finally:
            _routing.release()
            self.log.end()
        self._finish(status, error)

    def _call(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        token = _log_sink.set(self.log)
        try:
            fn(*args, **kwargs)
        finally:
            _log_sink.reset(token)

    def _run_binary(self) -> None:
        entry = self.request.entrypoint.binary_entrypoint
        assert entry is not None
        environment = self.request.environment
        env = dict(os.environ)
        if environment is not None:
            env.update(environment.env_vars)
        try:
            log_path = self._client._log_path()
        except FrayError:
            self._finish(JobStatus.STOPPED)  # the client shut down before the job could start
            return
        with self._cond:
            # Started under the condition so terminate() either prevents it or sees the process.
            if self._status is not JobStatus.PENDING:
                return
            try:
                with open(log_path, "wb") as out:
                    proc = subprocess.Popen(
                        list(entry.argv),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,  # own process group, so terminate() reaches its children
                    )
            except OSError as exc:
                start_error: OSError | None = exc
            else:
                start_error = None
                self._proc = proc
                self._status = JobStatus.RUNNING
                if self.request.timeout is not None:
                    self._deadline = time.monotonic() + self.request.timeout
                self.log.follow_file(log_path)
                self._cond.notify_all()
        if start_error is not None:
            self.log.write(f"cannot start {entry.command!r}: {start_error}\n")
            self._finish(JobStatus.FAILED, start_error)
            return
        timed_out = False
        try:
            returncode = proc.wait(self.request.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc, TERMINATE_GRACE)
            returncode = proc.wait()
        # A job is its process group: nothing it started outlives it.
        _kill_group(proc, 0)
        self.log.seal_file()
        if timed_out:
            self._finish(JobStatus.STOPPED)
        elif returncode == 0:
            self._finish(JobStatus.SUCCEEDED)
        else:
            self._finish(JobStatus.FAILED, subprocess.CalledProcessError(returncode, list(entry.argv)))

    def stop_for_shutdown(self) -> None:
        """Client shutdown: stop queued jobs and binary jobs; running callables finish."""
        with self._cond:
            stop = self._status is JobStatus.PENDING or self._proc is not None
        if stop:
            self.terminate()


class LocalJobHandle:
    """A `JobHandle` for a job of a `LocalClient`."""

    def __init__(self, job: _LocalJob) -> None:
        self._job = job

    @property
    def job_id(self) -> str:
        """`local-<name>-<8 hex digits>`."""
        return self._job.job_id

    def status(self) -> JobStatus:
        """PENDING while queued for a pool thread, RUNNING, then SUCCEEDED, FAILED or STOPPED."""
        return self._job.status()

    def wait(self, timeout: float | None = None, *, raise_on_failure: bool = True) -> JobStatus:
        """Block until the job finishes and return its status.

        With `raise_on_failure`, a FAILED callable job re-raises the exception the callable
        raised (not `JobFailed`), and a FAILED binary job raises `subprocess.CalledProcessError`.
        STOPPED is returned, not raised. Raises TimeoutError after `timeout` seconds.
        """
        return self._job.wait(timeout, raise_on_failure)

    def logs(self, max_lines: int = 0) -> tuple[str, ...]:
        """The job's last `max_lines` output lines (0: all kept, up to `LOG_LINES_KEPT`).

        Binary jobs: their stdout and stderr. Callable jobs: what the callable wrote to
        sys.stdout/sys.stderr from its own thread.
        """
        return self._job.log.tail(max_lines)

    def terminate(self) -> None:
        """Mark the job STOPPED; a binary job's process group is killed before this returns
        (SIGTERM, then SIGKILL after `TERMINATE_GRACE` s). A running callable keeps running
        in its thread, since threads cannot be killed; its outcome is ignored."""
        self._job.terminate()

    def __repr__(self) -> str:
        return f"LocalJobHandle({self.job_id!r}, {self.status()})"


# ---------------------------------------------------------------------------------------------
# Actors


class _ActorState(enum.Enum):
    STARTING = "starting"  # waiting for or running __init__ (first start or a restart)
    READY = "ready"  # constructed; serving calls
    FAILED = "failed"  # __init__ raised, or fail() was called with no restarts left
    STOPPED = "stopped"  # shut down, or its shutdown_event was set


class _StopSignal(threading.Event):
    """An actor's `shutdown_event`: setting it, from anywhere, stops (or restarts) the actor."""

    def __init__(self, on_set: Callable[[], None]) -> None:
        super().__init__()
        self._on_set = on_set

    def set(self) -> None:
        super().set()
        self._on_set()


def _fail_future(future: Future[Any], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass  # cancelled by its caller meanwhile


class _LocalActor:
    """One actor: its instance, its call executor and its lifecycle (the producer side)."""

    def __init__(
        self,
        *,
        client_id: str,
        endpoint: str,
        group_name: str,
        index: int,
        actor_class: type,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        config: ActorConfig,
        context: contextvars.Context,
        on_change: Callable[[], None],
    ) -> None:
        self.endpoint = endpoint
        self.index = index
        self.handle = LocalActorHandle(client_id, endpoint, self)
        self._group_name = group_name
        self._actor_class = actor_class
        self._args = args
        self._kwargs = kwargs
        self._context = context  # copied for __init__ and for every call
        self._on_change = on_change  # tells the group; called with no lock held
        self._cond = threading.Condition()  # guards the fields below
        self._state = _ActorState.STARTING
        self._constructing = False
        self._instance: Any = None
        self._error: BaseException | None = None
        self._ctx: ActorContext | None = None  # context of the current incarnation
        self._queued: set[Future[Any]] = set()  # submitted calls not yet started
        self._restarts_left = config.max_restarts or 0  # -1: unlimited
        self._threads: list[threading.Thread] = []
        self._executor = ThreadPoolExecutor(
            max_workers=config.max_concurrency,
            thread_name_prefix=f"fray-actor-{group_name}-{index}",
            initializer=self._register_thread,
        )

    def _register_thread(self) -> None:
        _mark_thread(self)
        with self._cond:
            self._threads.append(threading.current_thread())

    def start(self) -> None:
        with self._cond:
            self._executor.submit(self._ensure_ready)

    # -- queries ------------------------------------------------------------------------------

    @property
    def state(self) -> _ActorState:
        with self._cond:
            return self._state

    @property
    def error(self) -> BaseException | None:
        with self._cond:
            return self._error

    def check_method(self, name: str) -> None:
        """AttributeError unless `name` is callable on the actor's class (or, for attributes set
        in `__init__`, in the instance's `__dict__`). Never evaluates properties on the caller's thread."""
        attr = getattr(self._actor_class, name, _MISSING)
        if attr is _MISSING:
            with self._cond:
                instance = self._instance
            attr = getattr(instance, "__dict__", {}).get(name, _MISSING)
        if attr is _MISSING:
            raise AttributeError(f"actor {self.endpoint} ({self._actor_class.__name__}) has no method {name!r}")
        if not callable(attr):
            raise AttributeError(
                f"{self._actor_class.__name__}.{name} is not a method, so it cannot be called remotely"
            )

    def unavailable(self) -> ActorUnavailableError:
        with self._cond:
            state, error = self._state, self._error
        message = f"actor {self.endpoint} is {state.value}"
        if error is not None:
            message += f": {type(error).__name__}: {error}"
        exc = ActorUnavailableError(message)
        exc.__cause__ = error
        return exc

    def is_quiet(self) -> bool:
        with self._cond:
            return all(not t.is_alive() for t in self._threads)

    # -- construction -------------------------------------------------------------------------

    def _ensure_ready(self) -> bool:
        """Executor-thread helper: wait for construction, or construct if nobody is; True if READY."""
        with self._cond:
            while True:
                if self._state is _ActorState.READY:
                    return True
                if self._state is not _ActorState.STARTING:
                    return False
                if not self._constructing:
                    break
                self._cond.wait()
            self._constructing = True
            # The signal refers back to this incarnation's context, so a stale one is ignored.
            stop_signal = _StopSignal(lambda: self._on_stop_signal(ctx))
            ctx = ActorContext(self.handle, self.index, self._group_name, stop_signal)
            self._ctx = ctx
        instance, error = None, None
        try:
            instance = self._context.copy().run(self._construct, ctx)
        except BaseException as exc:  # a constructor failure is reported by wait_ready and calls
            error = exc
        with self._cond:
            self._constructing = False
            if self._state is _ActorState.STARTING and ctx is self._ctx:
                if error is not None:
                    self._state, self._error = _ActorState.FAILED, error
                    self._shutdown_executor_locked()
                else:
                    self._state, self._instance = _ActorState.READY, instance
            ready = self._state is _ActorState.READY
            self._cond.notify_all()
        self._on_change()
        if ready and ctx.shutdown_event is not None and ctx.shutdown_event.is_set():
            self._on_stop_signal(ctx)  # set during __init__: act on it now
        return ready

    def _construct(self, ctx: ActorContext) -> Any:
        token = _set_current_actor(ctx)
        try:
            return self._actor_class(*self._args, **self._kwargs)
        finally:
            _reset_current_actor(token)

    # -- calls --------------------------------------------------------------------------------

    def submit_call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._cond:
            if self._state in (_ActorState.FAILED, _ActorState.STOPPED):
                unavailable = True
            else:
                unavailable = False
                self._queued.add(future)
                self._executor.submit(self._run_call, future, method, args, kwargs)
        if unavailable:
            future.set_exception(self.unavailable())
        return future

    def _run_call(self, future: Future[Any], method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._ensure_ready()
        with self._cond:
            if future not in self._queued:
                return  # already failed by a stop
            self._queued.discard(future)
            instance = self._instance if self._state is _ActorState.READY else None
        if instance is None:
            _fail_future(future, self.unavailable())
            return
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = self._context.copy().run(_invoke, instance, method, args, kwargs)
        except BaseException as exc:  # delivered to the caller through the future
            future.set_exception(exc)
        else:
            future.set_result(result)

    # -- stopping -----------------------------------------------------------------------------

    def _on_stop_signal(self, ctx: ActorContext) -> None:
        """The incarnation `ctx` set its shutdown_event: restart after fail() if allowed, else stop."""
        with self._cond:
            if ctx is not self._ctx or self._state is not _ActorState.READY:
                return  # stale, still constructing (handled when __init__ returns), or already stopped
            errors = ctx.errors
            if errors and self._restarts_left != 0:
                if self._restarts_left > 0:
                    self._restarts_left -= 1
                self._state, self._instance = _ActorState.STARTING, None
                self._executor.submit(self._ensure_ready)
                pending: set[Future[Any]] = set()
            else:
                self._state = _ActorState.FAILED if errors else _ActorState.STOPPED
                self._error = errors[0] if errors else None
                pending = self._stop_locked()
            self._cond.notify_all()
        self._fail_pending(pending)
        self._on_change()

    def stop(self) -> None:
        """Stop the actor: queued calls fail with ActorUnavailableError, its shutdown_event is
        set, running calls finish on their own. Returns without waiting; see `join`."""
        with self._cond:
            if self._state is not _ActorState.FAILED:
                self._state = _ActorState.STOPPED
            pending = self._stop_locked()
            event = self._ctx.shutdown_event if self._ctx is not None else None
            self._cond.notify_all()
        if event is not None:
            event.set()  # lets actor code watching it wind down; our handler sees STOPPED
        self._fail_pending(pending)
        self._on_change()

    def _stop_locked(self) -> set[Future[Any]]:
        self._instance = None
        pending, self._queued = self._queued, set()
        self._shutdown_executor_locked()
        return pending

    def _shutdown_executor_locked(self) -> None:
        # Workers exit once the queue drains; queued runners find their call gone and return.
        self._executor.shutdown(wait=False)

    def _fail_pending(self, pending: set[Future[Any]]) -> None:
        if pending:
            error = self.unavailable()
            for future in pending:
                _fail_future(future, error)

    def join(self) -> None:
        """Wait for the actor's threads to exit (not the calling one, if it is one of them)."""
        if not _runs_on_thread_of(self):
            self._executor.shutdown(wait=True)


_MISSING = object()


def _invoke(instance: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return getattr(instance, method)(*args, **kwargs)


def _restore_actor_handle(client_id: str, endpoint: str) -> LocalActorHandle:
    return LocalActorHandle(client_id, endpoint)


class LocalActorHandle:
    """An `ActorHandle` to an actor of a `LocalClient`.

    Pickles to `(client_id, endpoint)`; an unpickled handle finds its client through
    `_CLIENTS` and the actor through that client's registry when first used, and raises
    `ActorUnavailableError` from its calls if either is gone (for instance in another process).
    """

    __slots__ = ("_client_id", "_endpoint", "_actor_ref")

    def __init__(self, client_id: str, endpoint: str, actor: _LocalActor | None = None) -> None:
        self._client_id = client_id
        self._endpoint = endpoint
        self._actor_ref = actor

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def _actor(self) -> _LocalActor | None:
        if self._actor_ref is None:
            client = _CLIENTS.get(self._client_id)
            self._actor_ref = client._find_actor(self._endpoint) if client is not None else None
        return self._actor_ref

    def __getattr__(self, method_name: str) -> LocalActorMethod:
        if method_name.startswith("_"):
            raise AttributeError(f"{method_name!r}: private attributes of an actor cannot be called remotely")
        actor = self._actor()
        if actor is not None:
            actor.check_method(method_name)
        return LocalActorMethod(self, method_name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_actor_handle, (self._client_id, self._endpoint))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LocalActorHandle):
            return NotImplemented
        return (self._client_id, self._endpoint) == (other._client_id, other._endpoint)

    def __hash__(self) -> int:
        return hash((self._client_id, self._endpoint))

    def __repr__(self) -> str:
        return f"LocalActorHandle({self._endpoint!r})"


class LocalActorMethod:
    """An `ActorMethod` of a local actor."""

    def __init__(self, handle: LocalActorHandle, name: str) -> None:
        self._handle = handle
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue the call on the actor; returns a `concurrent.futures.Future` at once.

        The future raises what the method raised, or `ActorUnavailableError` when the actor is
        gone or failed before the call started.
        """
        actor = self._handle._actor()
        if actor is None:
            future: Future[Any] = Future()
            future.set_exception(
                ActorUnavailableError(
                    f"no actor {self._handle.endpoint} in this process: it was shut down, or the handle "
                    "came from another process (local actors are reachable only in the process that created them)"
                )
            )
            return future
        return actor.submit_call(self._name, args, kwargs)

    def submit(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """The same as `remote` on this backend."""
        return self.remote(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call and block for the result (queued behind earlier calls like any other)."""
        return self.remote(*args, **kwargs).result()

    def __repr__(self) -> str:
        return f"LocalActorMethod({self._handle.endpoint!r}, {self._name!r})"


class LocalActorGroup:
    """An `ActorGroup` of a `LocalClient`: actors constructed on their own threads."""

    def __init__(self, client: LocalClient, name: str, job_id: str) -> None:
        self.name = name
        self.job_id = job_id
        self._client = client
        self._actors: list[_LocalActor] = []  # filled once by the client, then read-only
        self._cond = threading.Condition()  # guards _yielded and _shut_down; woken on actor changes
        self._yielded: set[int] = set()  # indexes handed out by wait_ready or discover_new
        self._shut_down = False

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    @property
    def handles(self) -> list[LocalActorHandle]:
        """Handles to every member by index, ready or not (local backend only): calls made
        before an actor is constructed wait for its `__init__`, or fail if it raises."""
        return [actor.handle for actor in self._actors]

    @property
    def ready_count(self) -> int:
        """Actors constructed and serving now."""
        return sum(actor.state is _ActorState.READY for actor in self._actors)

    def wait_ready(self, count: int | None = None, timeout: float | None = 300.0) -> list[LocalActorHandle]:
        """Block until `count` actors (default all) are ready; return the first `count` by index.

        Raises the constructor's exception once too many actors failed for `count` to be
        reached, TimeoutError after `timeout` seconds (None: no limit), ValueError for a
        `count` outside 0..size, and `ActorUnavailableError` once the group is shut down.
        """
        size = len(self._actors)
        need = size if count is None else count
        if not isinstance(need, int) or not 0 <= need <= size:
            raise ValueError(f"count must be between 0 and {size} for group {self.name!r}, got {count!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shut_down:
                    raise ActorUnavailableError(f"actor group {self.name!r} has been shut down")
                states = [(actor, actor.state) for actor in self._actors]
                ready = [actor for actor, state in states if state is _ActorState.READY]
                if len(ready) >= need:
                    chosen = ready[:need]
                    self._yielded.update(actor.index for actor in chosen)
                    return [actor.handle for actor in chosen]
                gone = [actor for actor, state in states if state in (_ActorState.FAILED, _ActorState.STOPPED)]
                if size - len(gone) < need:
                    failed = next((a for a in gone if a.error is not None), None)
                    if failed is not None:
                        raise failed.error  # type: ignore[misc]
                    raise gone[0].unavailable()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"only {len(ready)} of {need} actors of group {self.name!r} were ready after {timeout} s"
                    )
                self._cond.wait(remaining)

    def discover_new(self) -> list[LocalActorHandle]:
        """Handles of ready actors not yet returned by `wait_ready` or `discover_new`."""
        with self._cond:
            new = [a for a in self._actors if a.index not in self._yielded and a.state is _ActorState.READY]
            self._yielded.update(actor.index for actor in new)
            return [actor.handle for actor in new]

    def is_done(self) -> bool:
        """True once the group is shut down or none of its actors can serve again."""
        with self._cond:
            if self._shut_down:
                return True
        return all(actor.state in (_ActorState.FAILED, _ActorState.STOPPED) for actor in self._actors)

    def shutdown(self) -> None:
        """Stop every actor: queued calls and later calls raise `ActorUnavailableError`.

        Returns without waiting for running calls; `LocalClient.shutdown` joins the threads.
        """
        with self._cond:
            if self._shut_down:
                return
            self._shut_down = True
            self._cond.notify_all()
        for actor in self._actors:
            actor.stop()
        self._client._forget_group(self)

    def __repr__(self) -> str:
        return f"LocalActorGroup({self.name!r}, size={len(self._actors)}, ready={self.ready_count})"


# ---------------------------------------------------------------------------------------------
# The client


class _ClientState(enum.Enum):
    OPEN = "open"  # accepting jobs and actors
    CLOSED = "closed"  # shutdown() was called


class LocalClient:
    """A `Client` that runs everything in this process. A context manager; `shutdown()` stops
    what it started.

    >>> from fray_ray.fray.types import Entrypoint, JobRequest
    >>> with LocalClient(max_threads=2) as client:
    ...     job = client.submit(JobRequest(name="hello", entrypoint=Entrypoint.from_callable(print, args=("hi",))))
    ...     job.wait()
    hi
    <JobStatus.SUCCEEDED: 'succeeded'>
    """

    def __init__(self, max_threads: int = 8, *, host: HostInfo | None = None) -> None:
        if not isinstance(max_threads, int) or isinstance(max_threads, bool) or max_threads < 1:
            raise ValueError(f"max_threads must be a positive integer, got {max_threads!r}")
        self.client_id, self.max_threads = uuid.uuid4().hex, max_threads
        self._host = host or this_machine()  # what list_hosts() reports: this machine by default
        self._lock = threading.RLock()  # guards every field below
        self._state = _ClientState.OPEN
        self._jobs: dict[str, _LocalJob] = {}  # unfinished jobs by job_id
        self._names: dict[str, _LocalJob] = {}  # unfinished jobs by name
        self._actors: dict[str, _LocalActor] = {}  # live actors by endpoint: the registry
        self._groups: set[LocalActorGroup] = set()  # groups not shut down
        self._retired: list[_LocalActor] = []  # stopped actors whose threads may still be running
        self._log_dir: str | None = None  # temp dir for binary job logs, made on first use
        # Pool threads are marked with a token, not the client: a thread's frame keeps its
        # initializer arguments alive, and a dropped client must stay collectable.
        self._thread_token = object()
        self._executor = ThreadPoolExecutor(
            max_workers=max_threads,
            thread_name_prefix="fray-local-job",
            initializer=_mark_thread,
            initargs=(self._thread_token,),
        )
        with _CLIENTS_LOCK:
            _CLIENTS[self.client_id] = self

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"LocalClient(max_threads={self.max_threads}, id={self.client_id[:8]}, {self._state.value})"

    def list_hosts(self) -> list[HostInfo]:
        """The one host everything runs on: this machine, or the `host` given. Never blocks."""
        return [self._host]

    def _check_open_locked(self) -> None:
        if self._state is not _ClientState.OPEN:
            raise FrayError("this LocalClient has been shut down; create a new one")

    # -- jobs ---------------------------------------------------------------------------------

    def submit(self, request: JobRequest, adopt_existing: bool = True) -> LocalJobHandle:
        """Queue a job on the pool and return its handle at once.

        If an unfinished job has the same name, `adopt_existing=True` returns its handle and
        `False` raises `JobAlreadyExists` with that handle. `resources` and `replicas` are not
        enforced locally (one run per job); binary jobs get `environment.env_vars`. Raises
        FrayError after `shutdown()`.
        """
        if not isinstance(request, JobRequest):
            raise TypeError(f"submit() takes a JobRequest, got {type(request).__name__}")
        with self._lock:
            self._check_open_locked()
            existing = self._names.get(request.name)
            if existing is not None and not existing.status().finished():
                if adopt_existing:
                    return existing.handle
                raise JobAlreadyExists(request.name, existing.handle)
            job = _LocalJob(self, request, _context_for(self))
            self._jobs[job.job_id] = job
            self._names[request.name] = job
            job.attach(self._executor.submit(job.run))
        return job.handle

    def _job_finished(self, job: _LocalJob) -> None:
        with self._lock:
            self._jobs.pop(job.job_id, None)
            if self._names.get(job.request.name) is job:
                del self._names[job.request.name]

    def _log_path(self) -> str:
        """A new log file path in the client's temp dir; FrayError once the client is shut down."""
        with self._lock:
            self._check_open_locked()
            if self._log_dir is None:
                self._log_dir = tempfile.mkdtemp(prefix="fray-local-logs-")
            return os.path.join(self._log_dir, f"{uuid.uuid4().hex}.log")

    # -- actors -------------------------------------------------------------------------------

    def create_actor_group(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        count: int,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> LocalActorGroup:
        """Start `count` actors; returns at once while each constructs on its own thread.

        Endpoints are `local-<name>-<8 hex>/<name>-<index>`. `resources` and `environment` are
        accepted and not enforced locally. Raises ValueError/TypeError for bad arguments and
        FrayError after `shutdown()`.

        >>> class Counter:
        ...     def __init__(self, start=0):
        ...         self.n = start
        ...     def add(self, k):
        ...         self.n += k
        ...         return self.n
        >>> with LocalClient() as client:
        ...     group = client.create_actor_group(Counter, name="counters", count=2, start=10)
        ...     first, second = group.wait_ready()
        ...     first.add.remote(1).result(), second.add(5)
        (11, 15)
        """
        if not isinstance(actor_class, type):
            raise TypeError(f"actor_class must be a class, got {actor_class!r}")
        _check_name(name, "actor group name")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        if not isinstance(actor_config, ActorConfig):
            raise TypeError(f"actor_config must be an ActorConfig, got {actor_config!r}")
        job_id = f"local-{name}-{uuid.uuid4().hex[:8]}"
        group = LocalActorGroup(self, name, job_id)
        with self._lock:
            self._check_open_locked()
            context = _context_for(self)
            for index in range(count):
                actor = _LocalActor(
                    client_id=self.client_id,
                    endpoint=f"{job_id}/{name}-{index}",
                    group_name=name,
                    index=index,
                    actor_class=actor_class,
                    args=args,
                    kwargs=kwargs,
                    config=actor_config,
                    context=context,
                    on_change=group._changed,
                )
                group._actors.append(actor)
                self._actors[actor.endpoint] = actor
            self._groups.add(group)
            for actor in group._actors:
                actor.start()
        return group

    def create_actor(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> LocalActorHandle:
        """One actor, waited for: blocks until constructed and returns its handle.

        Raises whatever the constructor raised (the actor is then cleaned up).
        """
        group = self.create_actor_group(
            actor_class,
            *args,
            name=name,
            count=1,
            resources=resources,
            environment=environment,
            actor_config=actor_config,
            **kwargs,
        )
        try:
            return group.wait_ready(timeout=None)[0]
        except BaseException:
            group.shutdown()
            raise

    def host_actor(
        self, actor_class: type, *args: Any, name: str, actor_config: ActorConfig = ActorConfig(), **kwargs: Any
    ) -> HostedActor:
        """Construct and serve an actor in this process; blocks until constructed.

        Returns a `HostedActor` whose `shutdown()` stops it; raises what the constructor raised.
        """
        group = self.create_actor_group(actor_class, *args, name=name, count=1, actor_config=actor_config, **kwargs)
        try:
            handle = group.wait_ready(timeout=None)[0]
        except BaseException:
            group.shutdown()
            raise
        return HostedActor(handle, handle.endpoint, stop=group.shutdown)

    def _find_actor(self, endpoint: str) -> _LocalActor | None:
        with self._lock:
            return self._actors.get(endpoint)

    def _forget_group(self, group: LocalActorGroup) -> None:
        with self._lock:
            self._groups.discard(group)
            for actor in group._actors:
                self._actors.pop(actor.endpoint, None)
            # Keep stopped actors only while their threads may still run, so shutdown can join them.
            self._retired = [actor for actor in self._retired if not actor.is_quiet()]
            self._retired.extend(group._actors)

    # -- lifecycle ----------------------------------------------------------------------------

    def shutdown(self, wait: bool = True) -> None:
        """Stop everything this client started. Safe to call again (e.g. with `wait=True` after
        `wait=False`).

        Actor groups are shut down (queued calls fail with ActorUnavailableError), queued jobs
        are stopped, binary jobs' process groups are killed, and running callable jobs are left
        to finish. With `wait`, blocks until every pool and actor thread has exited (except the
        calling thread if it is one of them). Then the log temp dir is removed.
        """
        with self._lock:
            first_call = self._state is _ClientState.OPEN
            self._state = _ClientState.CLOSED
            groups = list(self._groups)
            jobs = list(self._jobs.values()) if first_call else []
        for group in groups:
            group.shutdown()
        for job in jobs:
            job.stop_for_shutdown()
        # A later shutdown(wait=True) still joins what an earlier shutdown(wait=False) left running.
        self._executor.shutdown(wait=wait and not _runs_on_thread_of(self._thread_token), cancel_futures=True)
        if wait:
            with self._lock:
                retired = list(self._retired)
            for actor in retired:
                actor.join()
        with self._lock:
            log_dir, self._log_dir = self._log_dir, None
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)
        with _CLIENTS_LOCK:
            if _CLIENTS.get(self.client_id) is self:
                del _CLIENTS[self.client_id]
