"""Which Fray `Client` the current code should use.

This lives apart from `client.py` so that the protocol module never imports a backend.
`current_client()` resolves, in order:

1. a client made current with `set_current_client` (a ContextVar, so it follows threads that
   copy the context, such as `LocalClient` jobs and actors);
2. inside an Iris task (`fray_ray.iris.job_info.get_job_info()` is not None, i.e. `IRIS_TASK_ID`
   is set): `FrayIrisClient.from_job_info(info)`;
3. otherwise a new `LocalClient()` on every call (not cached; the caller owns it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fray_ray.fray._client_context import current_client_var as _current_client
from fray_ray.fray.types import ActorConfig
from fray_ray.iris.job_info import get_job_info

if TYPE_CHECKING:
    from fray_ray.fray.actor import HostedActor
    from fray_ray.fray.client import Client

__all__ = ["current_client", "host_actor", "set_current_client"]


def current_client() -> Client:
    """The client to use here, resolved as the module docstring says. Never blocks on I/O
    for the local case; raises ImportError only if the Iris backend is missing inside an Iris task.
    """
    client = _current_client.get()
    if client is not None:
        return client
    info = get_job_info()
    if info is not None:
        # Imported here: the Iris backend pulls in the RPC stack, which local use never needs.
        from fray_ray.fray.iris_backend import FrayIrisClient

        return FrayIrisClient.from_job_info(info)
    from fray_ray.fray.local_backend import LocalClient

    return LocalClient()


@contextmanager
def set_current_client(client: Client) -> Iterator[Client]:
    """Make `client` current inside the `with` block and yield it.

    The previous client is restored on exit, also when the block raises. The caller keeps
    ownership of `client` (this does not shut it down).

    >>> from fray_ray.fray.local_backend import LocalClient
    >>> with LocalClient() as local, set_current_client(local):
    ...     current_client() is local
    True
    """
    token = _current_client.set(client)
    try:
        yield client
    finally:
        _current_client.reset(token)


def host_actor(
    actor_class: type, *args: Any, name: str, actor_config: ActorConfig = ActorConfig(), **kwargs: Any
) -> HostedActor:
    """Serve `actor_class(*args, **kwargs)` from this process through `current_client()`.

    Inside an Iris task that registers it as `<job_id>/<name>-0` for other tasks to find; with
    a LocalClient it is hosted in process. Blocks until it is serving; raises what the
    constructor raises. The caller owns the returned `HostedActor` and must `shutdown()` it.
    """
    return current_client().host_actor(actor_class, *args, name=name, actor_config=actor_config, **kwargs)
