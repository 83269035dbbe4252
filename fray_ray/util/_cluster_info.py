"""What a process can learn about its place in the cluster (`ray.util`): named actors, node address."""

from __future__ import annotations

import os
from typing import Any, Final

from fray_ray._private.core import runtime_state

__all__ = ["get_node_instance_id", "get_node_ip_address", "list_named_actors"]

_EMBEDDED_NODE_IP: Final = "127.0.0.1"
"""The address of the one node of an embedded cluster (and of a driver outside any Iris task)."""


def list_named_actors(all_namespaces: bool = False) -> list[Any]:
    """The named actors that are alive. Blocks for one request to the cluster.

    By default, the names (str) of the actors in the current namespace; with
    `all_namespaces`, one `{"name": ..., "namespace": ...}` dict per named actor of any
    namespace. Starts a local session if none is running, as other calls do.

    Args:
        all_namespaces: list every namespace's named actors, not only the current one's.

    Returns:
        Names, or `{"name", "namespace"}` dicts with `all_namespaces`.

    >>> import fray_ray as ray
    >>> from fray_ray.util import list_named_actors
    >>> @ray.remote(num_cpus=0)
    ... class Service:
    ...     def ping(self):
    ...         return "pong"
    >>> service = Service.options(name="listed-service").remote()
    >>> "listed-service" in list_named_actors()
    True
    >>> ray.kill(service)
    """
    return runtime_state.current().list_named_actors(all_namespaces)


def get_node_ip_address(address: str | None = None) -> str:
    """This node's IP address as the cluster advertises it. Does not block.

    Inside an Iris task that is `IRIS_ADVERTISE_HOST`; on the embedded cluster (and on a
    driver outside Iris) it is 127.0.0.1. `address` is accepted for Ray compatibility (Ray
    uses it to choose a network route) and ignored.

    Args:
        address: ignored (Ray uses it to choose a route).

    Returns:
        The address other hosts reach this one at.

    >>> from fray_ray.util import get_node_ip_address
    >>> import ipaddress
    >>> bool(ipaddress.ip_address(get_node_ip_address()))
    True
    """
    return os.environ.get("IRIS_ADVERTISE_HOST") or _EMBEDDED_NODE_IP


def get_node_instance_id() -> str:
    """The cloud instance id of this node; "" because fray_ray does not know it.

    Ray also returns "" for a node not started by a cloud provider.

    >>> from fray_ray.util import get_node_instance_id
    >>> get_node_instance_id()
    ''
    """
    return ""
