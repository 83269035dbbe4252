"""`ray.cluster_utils`: a multi-node cluster on one machine, for tests.

`Cluster` runs one embedded cluster whose nodes are simulated hosts, each on a loopback
address of its own: `add_node(num_cpus=..., resources=...)` adds a host while the cluster runs,
`remove_node(node)` takes one away as a failure does (its tasks and actors die with it, and it
stays listed as dead in `ray.nodes()`), `connect()` starts a driver on it. Nodes are
`ClusterNode` values carrying Ray's `node_id`, `unique_id` and `node_ip_address`. Each node
but the head (the driver's host) has a shared-memory directory of its own, so large values
move between nodes as between machines.

>>> cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})  # doctest: +SKIP
>>> node = cluster.add_node(num_cpus=1, resources={"special": 1})  # doctest: +SKIP
>>> cluster.connect()  # doctest: +SKIP
>>> cluster.remove_node(node)  # doctest: +SKIP
>>> cluster.shutdown()  # doctest: +SKIP

`AutoscalingCluster` raises NotImplementedError: fray_ray has no Ray autoscaler.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["AutoscalingCluster", "Cluster", "ClusterNode"]

#: What a node gets when `add_node` is not told otherwise (Ray's defaults).
DEFAULT_NODE_ARGS: Mapping[str, Any] = {"num_cpus": 1, "num_gpus": 0}
#: Node arguments that size or label the simulated host.
_SIZING_ARGS = frozenset({"num_cpus", "num_gpus", "resources", "memory"})
#: Ray node arguments about its own daemons, ports and stores: accepted, and a warning says
#: they change nothing here (the object store, for one, is the driver's).
_RAY_ONLY_ARGS = frozenset({
    "object_store_memory", "_system_config", "dashboard_port", "include_dashboard", "dashboard_host",
    "min_worker_port", "max_worker_port", "node_manager_port", "redis_port", "redis_password", "redis_username",
    "gcs_server_port", "port", "node_ip_address", "ray_client_server_port", "plasma_directory", "temp_dir",
    "session_name", "cleanup", "enable_object_reconstruction", "dashboard_agent_listen_port", "labels",
    "object_manager_port", "include_log_monitor", "env_vars", "worker_port_list",
})


@dataclass(frozen=True, eq=False)
class ClusterNode:
    """One node of a `Cluster`: a simulated host of the embedded cluster."""

    worker_id: str
    node_ip_address: str
    address: str
    resources: Mapping[str, float] = field(default_factory=dict)
    head: bool = False

    @property
    def node_id(self) -> str:
        """The node id in hex, as `ray.nodes()` and `get_runtime_context().get_node_id()` show it."""
        from fray_ray._private.driver.nodes import node_id_for

        return node_id_for(self.worker_id).hex()

    @property
    def unique_id(self) -> str:
        return self.node_id

    @property
    def gcs_address(self) -> str:
        return self.address


class AutoscalingCluster:
    """Ray's local autoscaling test cluster: not provided (fray_ray has no Ray autoscaler)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "ray.cluster_utils.AutoscalingCluster is not supported by fray_ray: it has no Ray autoscaler (Iris "
            "scale groups add workers). Use ray.cluster_utils.Cluster and add_node()/remove_node() to change the "
            "cluster's nodes from the test."
        )


class Cluster:
    """A cluster of simulated nodes on this machine (see the module docstring).

    Blocking: `add_node` waits until the node serves (with `wait=True`), `shutdown` until every
    process of the cluster is gone. Raises RuntimeError for `connect=True` without a head.
    """

    def __init__(
        self,
        initialize_head: bool = False,
        connect: bool = False,
        head_node_args: Mapping[str, Any] | None = None,
        shutdown_at_exit: bool = True,
    ) -> None:
        if not initialize_head and connect:
            raise RuntimeError("Cannot connect to uninitialized cluster.")
        self.head_node: ClusterNode | None = None
        self.worker_nodes: set[ClusterNode] = set()
        self.connected = False
        self.webui_url = ""
        self._lock = threading.Lock()  # guards the embedded cluster and the node sets
        self._embedded: Any = None  # the EmbeddedCluster, once the head node is added
        self._address: str | None = None  # its address, kept for shutdown after it stopped
        self._removed: set[str] = set()  # worker ids of removed nodes
        self._ids = itertools.count()
        self._shutdown_at_exit = shutdown_at_exit
        if shutdown_at_exit:
            atexit.register(self.shutdown)
        if initialize_head:
            self.add_node(**dict(head_node_args or {}))
            if connect:
                self.connect()

    # ---- addresses ------------------------------------------------------------------------

    @property
    def address(self) -> str | None:
        """The controller's address (`init(address=cluster.address)`), or None before a head."""
        return None if self._embedded is None else self._address

    @property
    def gcs_address(self) -> str | None:
        return self.address

    # ---- nodes -----------------------------------------------------------------------------

    def add_node(self, wait: bool = True, **node_args: Any) -> ClusterNode:
        """Add a node: the first is the head (it starts the cluster), later ones join it.

        `num_cpus` (default 1), `num_gpus` (simulated GPUs), `resources` (custom resources) and
        `memory` size it. Raises TypeError for an argument Ray's nodes do not take either.
        """
        unknown = sorted(set(node_args) - _SIZING_ARGS - _RAY_ONLY_ARGS)
        if unknown:
            raise TypeError(f"add_node() got unexpected keyword arguments: {', '.join(unknown)}")
        ignored = sorted(set(node_args) & _RAY_ONLY_ARGS)
        if ignored:
            logger.warning("fray_ray's simulated nodes do not use %s (the object store is the driver's, and "
                           "nodes run no Ray daemons)", ", ".join(ignored))
        args = {**DEFAULT_NODE_ARGS, **{k: v for k, v in node_args.items() if k in _SIZING_ARGS}}
        with self._lock:
            head = self._embedded is None
            spec = self._host_spec("head" if head else f"node-{next(self._ids)}", args)
            if head:
                node = self._start_head(spec, _resources_of(args))
            else:
                status = self._embedded.add_worker(spec)
                node = ClusterNode(spec.worker_id, status.address, self._embedded.address,
                                   _resources_of(args))
                self.worker_nodes.add(node)
        if wait:
            self._wait_for_node(node)
            self._refresh_driver()
        return node

    def _host_spec(self, worker_id: str, args: Mapping[str, Any]) -> Any:
        from fray_ray._private.driver.nodes import resource_attributes
        from fray_ray.cluster import cpu_worker, gpu_host

        attributes = resource_attributes(args.get("resources"))
        cpu, gpus, memory = args.get("num_cpus"), int(args.get("num_gpus") or 0), args.get("memory")
        if gpus:
            host = cpu_worker(worker_id, cpu=cpu, memory=memory, attributes=attributes)
            return gpu_host("auto", gpus, worker_id=worker_id, cpu=host.cpu_millicores / 1000,
                            memory=host.memory_bytes, disk=host.disk_bytes, attributes=attributes)
        return cpu_worker(worker_id, cpu=cpu, memory=memory, attributes=attributes)

    def _start_head(self, spec: Any, resources: Mapping[str, float]) -> ClusterNode:
        from fray_ray._private.driver import cluster_address
        from fray_ray.cluster import ClusterConfig, EmbeddedCluster

        embedded = EmbeddedCluster(ClusterConfig(workers=(spec,))).start()
        self._embedded, self._address = embedded, embedded.address
        cluster_address.remember(embedded.address, embedded.token)
        try:  # as Ray's Cluster does: init(address="auto") on this machine finds it
            cluster_address.write(embedded.address, embedded.token)
        except OSError as exc:
            logger.warning("Cluster not recorded for init(address='auto'): %s", exc)
        head = embedded.workers()[0]
        self.head_node = ClusterNode(spec.worker_id, head.address, embedded.address, dict(resources), head=True)
        return self.head_node

    def remove_node(self, node: ClusterNode, allow_graceful: bool = True) -> None:
        """Take `node` away as a failure would: its tasks and actors are killed, it stays listed
        as dead. Blocks until its processes are gone. Raises ValueError for a node not in this cluster."""
        with self._lock:
            if node is not self.head_node and node not in self.worker_nodes:
                raise ValueError(f"{node.worker_id} is not a node of this cluster")
            if self._embedded is not None:
                self._embedded.kill_worker(node.worker_id)
            self._removed.add(node.worker_id)
            if node is self.head_node:
                self.head_node = None
            else:
                self.worker_nodes.discard(node)
        self._refresh_driver()

    def _refresh_driver(self) -> None:
        """Make this process's driver, if it runs on this cluster, see the nodes as they are now
        (as Ray's driver does once `add_node` returns), instead of at its next poll."""
        from fray_ray._private.core import runtime_state

        runtime = runtime_state.current_or_none()
        if runtime is not None and self._address is not None and _driver_address() == self._address:
            view = getattr(runtime, "view", None)  # a local-mode runtime has no cluster view
            if view is not None:
                view.refresh()

    def _wait_for_node(self, node: ClusterNode, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(w.spec.worker_id == node.worker_id and w.alive for w in self._workers()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node.worker_id} did not join within {timeout:g} s")
            time.sleep(0.05)

    def wait_for_nodes(self, timeout: float = 30) -> None:
        """Wait until the live nodes are exactly those added and not removed, as the cluster and
        (when connected) this driver see them. Raises TimeoutError past `timeout` seconds."""
        import fray_ray

        deadline = time.monotonic() + timeout
        while True:
            expected = {n.node_id for n in self.list_all_nodes()}
            from fray_ray._private.driver.nodes import node_id_for

            live = {node_id_for(w.spec.worker_id).hex() for w in self._workers() if w.alive}
            seen = live
            if live == expected and self.connected and fray_ray.is_initialized():
                seen = {entry["NodeID"] for entry in fray_ray.nodes() if entry["Alive"]}
            if live == expected and seen == expected:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("Timed out while waiting for nodes to join.")
            time.sleep(0.1)

    def list_all_nodes(self) -> list[ClusterNode]:
        """Every node added and not removed, the head first."""
        nodes = sorted(self.worker_nodes, key=lambda n: n.worker_id)
        return [self.head_node, *nodes] if self.head_node is not None else nodes

    def remaining_processes_alive(self) -> bool:
        """Whether every node added and not removed is still up."""
        alive = {w.spec.worker_id for w in self._workers() if w.alive}
        return all(n.worker_id in alive for n in self.list_all_nodes())

    def _workers(self) -> list[Any]:
        return [] if self._embedded is None else self._embedded.workers()

    # ---- drivers ---------------------------------------------------------------------------

    def connect(self, namespace: str | None = None) -> None:
        """Start this process's driver on the cluster (`ray.init(address=self.address)`)."""
        import fray_ray

        if self.address is None:
            raise RuntimeError("Cannot connect to uninitialized cluster.")
        if self.connected:
            raise RuntimeError("This cluster is already connected.")
        fray_ray.init(address=self.address, namespace=namespace, ignore_reinit_error=True)
        self.connected = True

    def shutdown(self) -> None:
        """Stop every node, and first this process's driver if it runs on this cluster (its
        connections would break anyway); idempotent."""
        import fray_ray
        from fray_ray._private.driver import cluster_address

        with self._lock:
            embedded, self._embedded = self._embedded, None
            address = self._address
            self.head_node, self.worker_nodes = None, set()
        if embedded is not None and fray_ray.is_initialized() and _driver_address() == address:
            fray_ray.shutdown()
        self.connected = False
        if embedded is not None and address is not None:
            cluster_address.remove(address)
            cluster_address.forget(address)
            embedded.stop()
        if self._shutdown_at_exit:
            atexit.unregister(self.shutdown)


def _resources_of(args: Mapping[str, Any]) -> dict[str, float]:
    resources = {"CPU": float(args.get("num_cpus") or 0)}
    if args.get("num_gpus"):
        resources["GPU"] = float(args["num_gpus"])
    resources.update({k: float(v) for k, v in (args.get("resources") or {}).items()})
    return resources


def _driver_address() -> str | None:
    """The controller address this process's driver uses, if it has one."""
    from fray_ray._private.core import runtime_state

    runtime = runtime_state.current_or_none()
    info = getattr(runtime, "address_info", None) or {}
    return info.get("address")
