"""Ray nodes from the cluster's hosts: one node per host, with Ray's resource names.

A host (an Iris worker, as the Fray client reports it) becomes a node with `CPU`, `memory`,
`GPU`, `accelerator_type:<gpu>`, a TPU host's resources and labels as Ray gives them (`TPU`,
its slice's name, `TPU-<pod type>-head` on host 0: `tpu_nodes.py`), `node:<address>`, and the
custom resources its attributes declare:
an attribute `ray-resource:<name>` with a numeric value is the resource `<name>` (Iris has no
custom resources of its own; operators set such attributes on a scale group's workers). Node
ids are derived from host ids, so every process of a session names a host's node the same way.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fray_ray._private.driver.tpu_nodes import (
    ATTR_TPU_NAME,
    is_tpu_resource,
    needs_tpu_host,
    tpu_labels,
    tpu_placement,
    tpu_resources,
)
from fray_ray.fray.hosts import AttributeValue, HostInfo

logger = logging.getLogger(__name__)

#: Worker attributes named `ray-resource:<name>` declare the custom resource `<name>`.
RESOURCE_ATTRIBUTE_PREFIX = "ray-resource:"
#: The resource Ray puts on the head node only.
HEAD_RESOURCE = "node:__internal_head__"
#: Resource names that are Ray's own: a resource attribute cannot redefine them.
_BUILT_IN = frozenset({"CPU", "GPU", "TPU", "memory", "object_store_memory"})


def node_id_for(host_id: str) -> bytes:
    """The 28-byte node id of a host (the same in every process, for the same host id).

    >>> len(node_id_for("cpu-0")), node_id_for("cpu-0") == node_id_for("cpu-0")
    (28, True)
    """
    return hashlib.blake2b(b"fray-ray-node:" + host_id.encode("utf-8", "surrogatepass"), digest_size=28).digest()


def resource_attributes(resources: Mapping[str, float] | None) -> dict[str, AttributeValue]:
    """The worker attributes that declare `resources` (for sizing an embedded cluster's host).

    >>> resource_attributes({"custom": 3})
    {'ray-resource:custom': 3.0}
    """
    return {f"{RESOURCE_ATTRIBUTE_PREFIX}{name}": float(amount) for name, amount in (resources or {}).items()}


def placement_needs(custom: Iterable[tuple[str, float]]) -> tuple[str, ...]:
    """The custom resources that decide which nodes a process may run on: those hosts declare
    (`ray-resource:<name>`) and a TPU slice's (its name, `TPU-<pod type>-head`); names a node
    derives from its address or device type (`node:...`, `accelerator_type:...`) are the
    driver's to account, not a placement rule.

    >>> placement_needs([("special", 1.0), ("node:10.0.0.2", 0.01), ("TPU-v5p-16-head", 1.0)])
    ('special', 'TPU-v5p-16-head')
    """
    return tuple(
        name
        for name, amount in custom
        if amount > 0 and name not in _BUILT_IN and not name.startswith(("node:", "accelerator_type:"))
    )


def required_attributes(custom: Iterable[tuple[str, float]], slices: Collection[str] = ()) -> tuple[str, ...]:
    """The worker attributes a process needing these custom resources must run where: each
    declared resource's attribute, and a slice name for TPU resources (`slices` are the names
    of the cluster's TPU slices, which are resources of their hosts, not declared ones).

    >>> required_attributes([("special", 1.0), ("node:10.0.0.2", 0.01)])
    ('ray-resource:special',)
    >>> required_attributes([("TPU", 4.0), ("slice-a", 1.0)], {"slice-a"})
    ('tpu-name',)
    """
    custom = tuple(custom)
    declared = [f"{RESOURCE_ATTRIBUTE_PREFIX}{name}" for name in placement_needs(custom)
                if not is_tpu_resource(name, slices)]
    return (*declared, ATTR_TPU_NAME) if needs_tpu_host(custom, slices) else tuple(declared)


def required_attribute_values(
    custom: Iterable[tuple[str, float]], slices: Collection[str] = ()
) -> tuple[tuple[str, str | int], ...]:
    """The worker attribute values a process needing these resources must run where (a TPU
    slice's name, or host 0 of a slice for `TPU-<pod type>-head`)."""
    return tpu_placement(custom, slices)


@dataclass(frozen=True)
class Node:
    """One node: a host with its Ray resources (totals) and labels."""

    node_id: bytes
    host_id: str
    address: str
    hostname: str
    alive: bool
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def node_id_hex(self) -> str:
        return self.node_id.hex()

    @property
    def is_head(self) -> bool:
        return HEAD_RESOURCE in self.resources

    def ray_entry(self) -> dict[str, Any]:
        """This node as one entry of `ray.nodes()`."""
        return {
            "NodeID": self.node_id_hex,
            "Alive": self.alive,
            "alive": self.alive,
            "NodeManagerAddress": self.address,
            "NodeManagerHostname": self.hostname or self.address,
            "NodeName": self.address,
            "NodeManagerPort": 0,
            "ObjectManagerPort": 0,
            "ObjectStoreSocketName": "",
            "RayletSocketName": "",
            "MetricsExportPort": 0,
            "Resources": dict(self.resources) if self.alive else {},
            "Labels": dict(self.labels),
            "DeathReason": 0 if self.alive else 1,
            "DeathReasonMessage": "" if self.alive else "the cluster reports this worker lost",
        }


def node_from_host(host: HostInfo, *, head: bool = False, head_resources: Mapping[str, float] | None = None) -> Node:
    """The node of `host`; the head node also gets Ray's head marker and `head_resources`."""
    resources: dict[str, float] = {"CPU": float(host.cpu), "memory": float(host.memory_bytes)}
    if host.gpus:
        resources["GPU"] = float(host.gpus)
        if host.gpu_variant and host.gpu_variant.lower() != "auto":
            resources[f"accelerator_type:{host.gpu_variant}"] = 1.0
    resources.update(tpu_resources(host))
    for key, value in host.attributes.items():
        if key.startswith(RESOURCE_ATTRIBUTE_PREFIX):
            name, amount = key[len(RESOURCE_ATTRIBUTE_PREFIX):], _number(value)
            if not name or name in _BUILT_IN or name.startswith("node:") or amount is None or amount < 0:
                logger.warning("ignoring worker attribute %s=%r of %s: not a custom resource amount", key, value,
                               host.host_id)
                continue
            resources[name] = resources.get(name, 0.0) + amount
    resources[f"node:{host.address}"] = 1.0
    if head:
        resources[HEAD_RESOURCE] = 1.0
        resources.update(head_resources or {})
    node_id = node_id_for(host.host_id)
    labels = {"ray.io/node-id": node_id.hex()}
    labels.update(
        {key: str(value) for key, value in host.attributes.items() if not key.startswith(RESOURCE_ATTRIBUTE_PREFIX)}
    )
    labels.update(tpu_labels(host))
    return Node(
        node_id=node_id,
        host_id=host.host_id,
        address=host.address,
        hostname=host.hostname,
        alive=host.alive,
        resources={key: amount for key, amount in resources.items() if amount > 0},
        labels=labels,
    )


def nodes_from_hosts(
    hosts: list[HostInfo], *, head_host: str | None, head_resources: Mapping[str, float] | None = None
) -> list[Node]:
    """Every host as a node. The head is `head_host` when it is one of them (the driver runs
    there), else the first live host."""
    live = [h.host_id for h in hosts if h.alive]
    head = head_host if head_host in live else (live[0] if live else None)
    return [node_from_host(h, head=h.host_id == head, head_resources=head_resources) for h in hosts]


def _number(value: AttributeValue) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None
