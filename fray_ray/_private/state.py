"""`ray._private.state`: Ray's view of the cluster's global state, as launchers read it.

verl and vLLM check what each node has free before they place workers
(`available_resources_per_node()`) and read where a placement group's bundles landed
(`state.placement_group_table(pg.id)["bundles_to_node_id"]`). These answer from the session,
like the public API: the module's functions and the `state` object's methods of the same names.
Ray's accessors of its GCS tables (workers, profiling events, debugger ports, the cluster
config) have no counterpart.
"""

from __future__ import annotations

from typing import Any

from fray_ray._private.core import runtime_state
from fray_ray.util import get_node_ip_address

#: The head node's marker resource, not a node's name.
_HEAD_NODE_RESOURCE = "node:__internal_head__"

__all__ = [
    "GlobalState",
    "available_resources",
    "available_resources_per_node",
    "cluster_resources",
    "current_node_id",
    "node_ids",
    "nodes",
    "state",
    "timeline",
    "total_resources_per_node",
]


class GlobalState:
    """The cluster's resources, nodes and placement groups, read from the session when asked."""

    def cluster_resources(self) -> dict[str, float]:
        return runtime_state.current().cluster_resources()

    def available_resources(self) -> dict[str, float]:
        return runtime_state.current().available_resources()

    def available_resources_per_node(self) -> dict[str, dict[str, float]]:
        """What each live node has free, keyed by node id hex."""
        return runtime_state.current().available_resources_per_node()

    def total_resources_per_node(self) -> dict[str, dict[str, float]]:
        """Each live node's resources, keyed by node id hex."""
        return {node["NodeID"]: dict(node["Resources"]) for node in self.node_table() if node["Alive"]}

    def node_table(self) -> list[dict[str, Any]]:
        """`ray.nodes()`: one entry per node, lost ones with Alive=False."""
        return runtime_state.current().nodes()

    def placement_group_table(self, placement_group_id: Any = None) -> dict[str, Any]:
        """One group's row (`bundles`, `bundles_to_node_id`, `state`, ...) given its id (a
        `PlacementGroupID`, as `pg.id`), or every group's row keyed by id hex."""
        group_id = None if placement_group_id is None else bytes.fromhex(placement_group_id.hex())
        return runtime_state.current().placement_group_table(group_id)


#: The one accessor, as Ray's module holds it.
state = GlobalState()


def cluster_resources() -> dict[str, float]:
    return state.cluster_resources()


def available_resources() -> dict[str, float]:
    return state.available_resources()


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """What each live node has free, keyed by node id hex."""
    return state.available_resources_per_node()


def total_resources_per_node() -> dict[str, dict[str, float]]:
    """Each live node's resources, keyed by node id hex."""
    return state.total_resources_per_node()


def nodes() -> list[dict[str, Any]]:
    """`ray.nodes()`."""
    return state.node_table()


def node_ids() -> list[str]:
    """Each live node's `node:<address>` resource (Ray's "node ids" here are those names, which
    place work on a node: `{node_id: 0.001}`)."""
    return [
        name
        for resources in state.total_resources_per_node().values()
        for name in resources
        if name.startswith("node:") and name != _HEAD_NODE_RESOURCE
    ]


def current_node_id() -> str:
    """`node:<this node's address>`: the resource that places work on this node."""
    return f"node:{get_node_ip_address()}"


def timeline(filename: str | None = None) -> list[dict[str, Any]] | None:
    """`ray.timeline()`."""
    from fray_ray._api import timeline as api_timeline  # noqa: PLC0415 - the API, above this shim

    return api_timeline(filename)
