"""The registry of open `FrayIrisClient`s, through which unpickled Iris handles find a client.

Handles, groups and job handles (`_iris_calls`, `_iris_actors`, `_iris_jobs`) that travelled
by pickle, or whose client has shut down, reach the controller through the ambient client:
inside an Iris task the task's own client, elsewhere the newest open client of this process.
This module keeps that registry apart from `iris_backend.py`, which imports the handle
modules, so that the handles find a client without importing the backend that makes them.
`IrisClientCore` is the part of `FrayIrisClient` they use; the task's own client is built by
the factory the package installs with `set_task_client_factory` (see `fray_ray/fray/__init__.py`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fray_ray.fray.actor import ActorUnavailableError
from fray_ray.iris.job_info import JobInfo, get_job_info

if TYPE_CHECKING:
    from fray_ray.iris.actor_client import ActorClient
    from fray_ray.iris.controller_client import ControllerClient

__all__ = [
    "IrisClientCore",
    "ambient_client",
    "bound_client",
    "forget_client",
    "register_open_client",
    "set_task_client_factory",
    "task_client",
]

T = TypeVar("T")
C = TypeVar("C", bound="IrisClientCore")


class CallRunner(Protocol):
    """Runs calls on background threads (`_iris_calls.CallThreads`)."""

    def submit(self, call: Callable[[], None]) -> None: ...


class IrisClientCore(Protocol):
    """What handles, groups and job handles use of the `FrayIrisClient` that made them."""

    @property
    def address(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    _controller: ControllerClient
    _calls: CallRunner

    def _call_controller(self, action: str, call: Callable[[ControllerClient], T], *, not_found: bool = False) -> T: ...

    def _actor_client(self, endpoint: str) -> ActorClient: ...

    def _wait_finished(self, job_ids: list[str], timeout: float) -> None: ...

    def shutdown(self, wait: bool = True, *, terminate: bool = True) -> None: ...


# Every open FrayIrisClient, oldest first, so an unpickled handle outside a task can find one
# (weak: never keeps a client alive); and the ambient client of each task attempt. Both are
# guarded by _REGISTRY_LOCK.
_REGISTRY_LOCK = threading.Lock()
_OPEN_CLIENTS: list[weakref.ref[Any]] = []
_AMBIENT: dict[tuple[str, str, str | None], Any] = {}
# Builds the current task's own client (`FrayIrisClient.from_job_info`); installed by the package.
_task_client_factory: Callable[[JobInfo], IrisClientCore] | None = None


def set_task_client_factory(factory: Callable[[JobInfo], IrisClientCore]) -> None:
    """Install the function that builds the ambient client inside an Iris task."""
    global _task_client_factory
    _task_client_factory = factory


def register_open_client(client: IrisClientCore) -> None:
    """Record a newly opened client as the newest one (weakly)."""
    with _REGISTRY_LOCK:
        _OPEN_CLIENTS[:] = [ref for ref in _OPEN_CLIENTS if ref() is not None]
        _OPEN_CLIENTS.append(weakref.ref(client))


def forget_client(client: IrisClientCore) -> None:
    """Drop a client that shut down, as an open client and as any task's ambient client."""
    with _REGISTRY_LOCK:
        _OPEN_CLIENTS[:] = [ref for ref in _OPEN_CLIENTS if ref() not in (None, client)]
        for key, ambient in list(_AMBIENT.items()):
            if ambient is client:
                del _AMBIENT[key]


def task_client(key: tuple[str, str, str | None], make: Callable[[], C]) -> C:
    """The open client kept for a task attempt under `key`, else the one `make()` builds,
    kept from now on. When two threads race, one client wins and the other is shut down."""
    with _REGISTRY_LOCK:
        client = _AMBIENT.get(key)
        if client is not None and not client.closed:
            return client  # type: ignore[no-any-return]
    client = make()
    with _REGISTRY_LOCK:
        existing = _AMBIENT.get(key)
        if existing is not None and not existing.closed:  # another thread won the race
            winner = existing
        else:
            _AMBIENT[key] = winner = client
    if winner is not client:
        client.shutdown()
    return winner  # type: ignore[no-any-return]


def ambient_client() -> IrisClientCore:
    """The client that unpickled handles and groups use: inside an Iris task, the task's own
    (`FrayIrisClient.from_job_info()`); elsewhere the newest open `FrayIrisClient` of this
    process. ActorUnavailableError when there is neither."""
    info = get_job_info()
    if info is not None and info.controller_address:
        if _task_client_factory is None:
            raise RuntimeError("fray_ray.fray did not install its task client factory")
        return _task_client_factory(info)
    with _REGISTRY_LOCK:
        for ref in reversed(_OPEN_CLIENTS):
            client = ref()
            if client is not None and not client.closed:
                return client  # type: ignore[no-any-return]
    raise ActorUnavailableError(
        "an Iris handle was used outside an Iris task and no FrayIrisClient is open in this process; "
        "create one (FrayIrisClient(address, token=...)) to reach the controller"
    )


def bound_client(client: IrisClientCore | None) -> IrisClientCore:
    """`client` while it is open, else the ambient client (for objects made by a client that
    has since shut down, or unpickled without one)."""
    return client if client is not None and not client.closed else ambient_client()
