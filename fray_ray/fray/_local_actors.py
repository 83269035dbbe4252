"""Local actors: each one's instance, call executor and lifecycle, and the groups they form.

Each actor has its own `ThreadPoolExecutor` with `max_concurrency` workers; construction runs
on it too, so a group returns at once and calls queue behind `__init__`. `GroupOwner` is what
a group asks of its client when it shuts down.
"""

from __future__ import annotations

import contextvars
import enum
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any, Protocol

from fray_ray.fray._local_calls import LocalActorHandle
from fray_ray.fray._local_registry import _mark_thread, _runs_on_thread_of
from fray_ray.fray.actor import ActorContext, ActorUnavailableError, _reset_current_actor, _set_current_actor
from fray_ray.fray.types import ActorConfig


class GroupOwner(Protocol):
    """What an actor group asks of the `LocalClient` that started it."""

    def _forget_group(self, group: LocalActorGroup) -> None: ...


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


class LocalActorGroup:
    """An `ActorGroup` of a `LocalClient`: actors constructed on their own threads."""

    def __init__(self, client: GroupOwner, name: str, job_id: str) -> None:
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
