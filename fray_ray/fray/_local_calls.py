"""Calling local actors: `LocalActorHandle` and `LocalActorMethod`.

A handle pickles to `(client_id, endpoint)`; an unpickled one finds its client in the registry
(`_local_registry._CLIENTS`) and the actor through that client when first used.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from fray_ray.fray._local_registry import _CLIENTS, CallTarget
from fray_ray.fray.actor import ActorUnavailableError


def _restore_actor_handle(client_id: str, endpoint: str) -> LocalActorHandle:
    return LocalActorHandle(client_id, endpoint)


class LocalActorHandle:
    """An `ActorHandle` to an actor of a `LocalClient`.

    Pickles to `(client_id, endpoint)`; an unpickled handle finds its client through
    `_CLIENTS` and the actor through that client's registry when first used, and raises
    `ActorUnavailableError` from its calls if either is gone (for instance in another process).
    """

    __slots__ = ("_client_id", "_endpoint", "_actor_ref")

    def __init__(self, client_id: str, endpoint: str, actor: CallTarget | None = None) -> None:
        self._client_id = client_id
        self._endpoint = endpoint
        self._actor_ref = actor

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def _actor(self) -> CallTarget | None:
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
