"""Name resolution: actor and endpoint names → addresses.

A name starting with `/` is absolute. Any other name is relative to the namespace, the root
job `/<user>/<root-job>`, so every job in one hierarchy sees the same names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import EndpointInfo


def qualify_name(name: str, namespace: str | None) -> str:
    """The absolute endpoint name for `name` in `namespace`."""
    if name.startswith("/"):
        return name
    if not namespace:
        raise ValueError(f"relative name {name!r} needs a namespace (a root job such as /user/job)")
    return f"{namespace.rstrip('/')}/{name}"


class Resolver(Protocol):
    """Maps a name to the endpoints registered under it (possibly none)."""

    def resolve(self, name: str) -> list[EndpointInfo]:
        """Blocks for at most one lookup; returns [] when nothing is registered."""
        ...


class FixedResolver:
    """A static map from names to addresses, for tests and fixed deployments."""

    def __init__(self, addresses: Mapping[str, str | Sequence[str]]) -> None:
        self._addresses = {
            name: [value] if isinstance(value, str) else list(value) for name, value in addresses.items()
        }

    def resolve(self, name: str) -> list[EndpointInfo]:
        return [EndpointInfo(endpoint_id="", name=name, address=a) for a in self._addresses.get(name, [])]


class ControllerResolver:
    """Looks names up in a controller's endpoint registry (ListEndpoints, exact match)."""

    def __init__(self, controller: ControllerClient, namespace: str | None = None) -> None:
        self._controller = controller
        self.namespace = namespace

    def resolve(self, name: str) -> list[EndpointInfo]:
        return self._controller.list_endpoints(qualify_name(name, self.namespace), exact=True)
