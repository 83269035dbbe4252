"""Fray actors: handles to stateful objects served by a backend, and the context an actor sees.

Calling convention, the same on every backend:
  `handle.method.remote(*a)` returns a future at once (`.result(timeout)` waits for the value);
  `handle.method.submit(*a)` is the same for long-running calls; `handle.method(*a)` blocks.

Inside an actor's `__init__`, `current_actor()` returns its `ActorContext` (handle, index in
its group, a shutdown event); the actor should keep it on `self` if it needs it later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from fray_ray.fray.errors import FrayError

__all__ = [
    "ActorContext",
    "ActorFuture",
    "ActorGroup",
    "ActorHandle",
    "ActorMethod",
    "ActorUnavailableError",
    "HostedActor",
    "current_actor",
]


class ActorUnavailableError(FrayError):
    """The actor is gone (shut down, failed, or its process died), restarting, or unreachable."""


@runtime_checkable
class ActorFuture(Protocol):
    """The pending result of one actor call. Backends may return richer objects (the local
    backend returns a `concurrent.futures.Future`), but only `result` is guaranteed."""

    def result(self, timeout: float | None = None) -> Any:
        """Block until the call finishes and return its value.

        Raises what the method raised, `ActorUnavailableError` if the actor could not run the
        call, and TimeoutError if `timeout` seconds pass first.
        """
        ...


@runtime_checkable
class ActorMethod(Protocol):
    """One method of an actor, reached as an attribute of its handle."""

    def remote(self, *args: Any, **kwargs: Any) -> ActorFuture:
        """Start the call and return its future immediately; errors surface from `result()`."""
        ...

    def submit(self, *args: Any, **kwargs: Any) -> ActorFuture:
        """Like `remote`, for calls that may run long (a backend may poll instead of holding a
        connection open). Returns immediately."""
        ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call and block for the value; raises what `result()` would."""
        ...


@runtime_checkable
class ActorHandle(Protocol):
    """A reference to one actor; picklable, so it can be passed to jobs and other actors.

    Attribute access gives an `ActorMethod`; names starting with `_` and attributes that are
    not methods raise AttributeError.
    """

    def __getattr__(self, method_name: str) -> ActorMethod: ...


@runtime_checkable
class ActorGroup(Protocol):
    """Actors started together by `Client.create_actor_group`."""

    @property
    def ready_count(self) -> int:
        """How many actors are constructed and serving now. Never blocks."""
        ...

    def wait_ready(self, count: int | None = None, timeout: float = 300.0) -> list[ActorHandle]:
        """Block until `count` actors (default: all) are ready and return handles to them.

        The returned list is a snapshot. Raises the constructor's exception when too many
        actors failed to construct for `count` to be reached, TimeoutError after `timeout`
        seconds, and `ActorUnavailableError` once the group is shut down.
        """
        ...

    def discover_new(self) -> list[ActorHandle]:
        """Handles of ready actors not returned before by this method or `wait_ready`. Never blocks."""
        ...

    def is_done(self) -> bool:
        """True once the group can serve no more calls (shut down, or every actor gone). Never blocks."""
        ...

    def shutdown(self) -> None:
        """Stop every actor of the group; later calls raise `ActorUnavailableError`. Idempotent."""
        ...


@dataclass(frozen=True)
class ActorContext:
    """What an actor knows about itself while it is being constructed."""

    handle: ActorHandle
    """A handle to this actor, e.g. to give to jobs it starts."""
    index: int
    """This actor's position in its group (0 for a lone actor)."""
    group_name: str
    """The `name` the group was created with."""
    shutdown_event: threading.Event | None = None
    """Set when the actor is asked to stop; setting it yourself stops the actor."""
    _errors: list[BaseException] = field(default_factory=list, repr=False, compare=False)

    def fail(self, exc: BaseException) -> None:
        """Report that the actor cannot go on: record `exc` and set `shutdown_event`.

        The backend then treats the actor as failed (restarting it if its `ActorConfig`
        allows). Returns immediately.
        """
        self._errors.append(exc)
        if self.shutdown_event is not None:
            self.shutdown_event.set()

    @property
    def errors(self) -> tuple[BaseException, ...]:
        """The errors passed to `fail`, oldest first."""
        return tuple(self._errors)


_current_actor: ContextVar[ActorContext | None] = ContextVar("fray_current_actor", default=None)


def current_actor() -> ActorContext:
    """The context of the actor being constructed; RuntimeError anywhere else.

    Backends set it only around the actor's `__init__`, so keep it on `self`.
    """
    ctx = _current_actor.get()
    if ctx is None:
        raise RuntimeError("current_actor() is only available inside an actor's __init__; store it on self there")
    return ctx


def _set_current_actor(ctx: ActorContext) -> Token[ActorContext | None]:
    """For backends: make `ctx` current; pass the token to `_reset_current_actor` in `finally`."""
    return _current_actor.set(ctx)


def _reset_current_actor(token: Token[ActorContext | None]) -> None:
    """For backends: undo the `_set_current_actor` call that returned `token`."""
    _current_actor.reset(token)


class HostedActor:
    """An actor served from the caller's own process (`Client.host_actor`).

    The caller owns it: `shutdown()` stops serving (idempotent). It is also a context manager.
    """

    def __init__(self, handle: ActorHandle, endpoint: str, stop: Callable[[], None] | None = None) -> None:
        self.handle = handle
        self.endpoint = endpoint
        self._stop = stop
        self._lock = threading.Lock()

    def shutdown(self) -> None:
        """Stop serving the actor; blocks until the backend's `stop` returns. Safe to call twice."""
        with self._lock:
            stop, self._stop = self._stop, None
        if stop is not None:
            stop()

    def __enter__(self) -> HostedActor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"HostedActor(endpoint={self.endpoint!r})"
