"""How the runtime makes an actor's handle to itself without importing the API that defines
handles: `fray_ray.actor` registers its constructor here when it is imported."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: (actor id, class name, method table, is async) -> a handle that does not keep the actor alive.
OwnHandleFactory = Callable[[bytes, str, Mapping[str, Any], bool], Any]

_own_handle_factory: OwnHandleFactory | None = None


def set_own_handle_factory(factory: OwnHandleFactory) -> None:
    """Register how an actor's own handle (`get_runtime_context().current_actor`) is made."""
    global _own_handle_factory
    _own_handle_factory = factory


def own_handle(actor_id: bytes, class_name: str, methods: Mapping[str, Any], is_async: bool) -> Any:
    """The handle an actor holds to itself; it does not count as a reference to the actor."""
    if _own_handle_factory is None:
        raise RuntimeError("fray_ray.actor has not been imported: no actor handle can be made")
    return _own_handle_factory(actor_id, class_name, methods, is_async)
