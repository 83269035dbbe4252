"""The TPU identity of a node, as the environment variables Ray's TPU helpers read.

A process the driver places on a TPU host (by a slice's name, a head resource or TPU chips)
carries this identity to its worker (`fray_ray/_private/core/host_identity.py`), which adopts
the variables its host did not set: Iris's workers give `TPU_*` variables only to tasks that
hold the TPU device, while Ray's TPU code (levanter's `run_on_pod`, `ray.util.accelerators.tpu`)
reads them in any process of a TPU host. They are derived from the node's labels, which come
from Iris's worker attributes (`tpu_nodes.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from fray_ray._private.driver.nodes import Node
from fray_ray._private.driver.tpu_nodes import POD_TYPE_LABEL, SLICE_NAME_LABEL, TOPOLOGY_LABEL, WORKER_ID_LABEL

#: A host's chip grid by its chip count, as libtpu reads it (`TPU_CHIPS_PER_HOST_BOUNDS`).
_CHIPS_PER_HOST_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}


def _worker_index(node: Node) -> int | None:
    value = node.labels.get(WORKER_ID_LABEL, "")
    return int(value) if value.isdigit() else None


def _slice_hostnames(name: str, nodes: Iterable[Node]) -> str | None:
    """The addresses of slice `name`'s hosts in worker order, when every index from 0 up is
    a live node; None while some are missing (a partial list would miscount the slice)."""
    by_index = {
        index: node.address for node in nodes
        if node.alive and node.labels.get(SLICE_NAME_LABEL) == name and (index := _worker_index(node)) is not None
    }
    if not by_index or sorted(by_index) != list(range(len(by_index))):
        return None
    return ",".join(by_index[i] for i in range(len(by_index)))


def tpu_identity(node: Node, nodes: Iterable[Node]) -> dict[str, str]:
    """The `TPU_*` variables that say which slice and host `node` is (empty for a node that
    is no host of a named slice). `nodes` are the cluster's nodes, for the slice's hosts.

    >>> labels = {SLICE_NAME_LABEL: "s", WORKER_ID_LABEL: "1", POD_TYPE_LABEL: "v5p-16", TOPOLOGY_LABEL: "2x2x2"}
    >>> host = Node(b"n", "h1", "10.0.0.3", "", True, {"TPU": 4.0}, labels)
    >>> other = Node(b"m", "h0", "10.0.0.2", "", True, {"TPU": 4.0}, {**labels, WORKER_ID_LABEL: "0"})
    >>> sorted(tpu_identity(host, [host, other]).items())  # doctest: +NORMALIZE_WHITESPACE
    [('TPU_ACCELERATOR_TYPE', 'v5p-16'), ('TPU_CHIPS_PER_HOST_BOUNDS', '2,2,1'), ('TPU_NAME', 's'),
     ('TPU_TOPOLOGY', '2x2x2'), ('TPU_WORKER_HOSTNAMES', '10.0.0.2,10.0.0.3'), ('TPU_WORKER_ID', '1')]
    """
    name, index = node.labels.get(SLICE_NAME_LABEL), _worker_index(node)
    if not name or index is None:
        return {}
    identity = {"TPU_NAME": name, "TPU_WORKER_ID": str(index)}
    pod_type = node.labels.get(POD_TYPE_LABEL)
    if pod_type:
        identity["TPU_ACCELERATOR_TYPE"] = pod_type
    topology = node.labels.get(TOPOLOGY_LABEL)
    if topology:
        identity["TPU_TOPOLOGY"] = topology
    bounds = _CHIPS_PER_HOST_BOUNDS.get(int(node.resources.get("TPU", 0)))
    if bounds:
        identity["TPU_CHIPS_PER_HOST_BOUNDS"] = bounds
    hostnames = _slice_hostnames(name, nodes)
    if hostnames:
        identity["TPU_WORKER_HOSTNAMES"] = hostnames
    return identity
