"""What the local backend's modules share: the registry of live `LocalClient`s and thread marks.

An unpickled `LocalActorHandle` finds its client here by `client_id` (`_local_calls`), and the
client and its actors mark the threads their executors start, so that shutdown can skip
joining the thread it runs on. `ActorRegistry` and `CallTarget` are what a handle needs of a
client and of an actor, so that `_local_calls` imports neither.
"""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Future
from typing import Any, Protocol


class CallTarget(Protocol):
    """What a handle calls on a live local actor (`_local_actors._LocalActor`)."""

    def check_method(self, name: str) -> None: ...

    def submit_call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]: ...


class ActorRegistry(Protocol):
    """What a handle asks of its `LocalClient`: the live actor registered under an endpoint."""

    def _find_actor(self, endpoint: str) -> CallTarget | None: ...


# Every live LocalClient by client_id, so an unpickled actor handle can find its client. Weak
# values: the registry never keeps a client alive. Guarded by _CLIENTS_LOCK.
_CLIENTS: weakref.WeakValueDictionary[str, ActorRegistry] = weakref.WeakValueDictionary()
_CLIENTS_LOCK = threading.Lock()

# The owner token (a client's, or an actor) of the executor that started the current thread;
# lets shutdown skip joining the thread it is running on.
_thread_owner = threading.local()


def _mark_thread(owner: object) -> None:
    _thread_owner.value = owner


def _runs_on_thread_of(owner: object) -> bool:
    return getattr(_thread_owner, "value", None) is owner

