"""`ray.cluster_utils.Cluster`: a multi-node cluster on one machine, as users' own tests use it.

Add a node with a custom resource, schedule on it, remove it to inject a failure. On Ray each
node is a raylet of its own; on fray_ray a simulated host of one embedded cluster. Each test
keeps the address file of Ray's `Cluster` in a private temp root (`RAY_TMPDIR`), so drivers of
other sessions on this machine never find these clusters.
"""

from __future__ import annotations

import importlib
import tempfile

import pytest

from compat_tests._backend import BACKEND, ray
from compat_tests.helpers import SignalActor, wait_for_condition


def _cluster_utils():
    return importlib.import_module(f"{BACKEND}.cluster_utils")


@pytest.fixture
def cluster(shutdown_only, monkeypatch):
    """A Cluster with a 1-CPU head; the driver connects in the test. Torn down afterwards."""
    root = tempfile.mkdtemp(prefix="cu-", dir="/tmp")  # Ray's unix sockets want a short path
    monkeypatch.setenv("RAY_TMPDIR", root)
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    made = _cluster_utils().Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}})
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def _alive_node_ids():
    return {entry["NodeID"] for entry in ray.nodes() if entry["Alive"]}


@ray.remote(resources={"special": 1})
def _where():
    return ray.get_runtime_context().get_node_id()


@ray.remote(resources={"special": 1}, max_retries=3)
def _wait_then_where(signal):
    ray.get(signal.wait.remote())
    return ray.get_runtime_context().get_node_id()


@ray.remote(resources={"special": 1}, num_cpus=0)
class _Pinned:
    def where(self):
        return ray.get_runtime_context().get_node_id()


def test_cluster_utils__connect_without_head_is_refused():
    with pytest.raises(RuntimeError):
        _cluster_utils().Cluster(initialize_head=False, connect=True)


def test_cluster_utils__nodes_added_join_the_cluster(cluster):
    first = cluster.add_node(num_cpus=2)
    second = cluster.add_node(num_cpus=1, resources={"special": 2})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    assert {cluster.head_node.node_id, first.node_id, second.node_id} <= _alive_node_ids()
    wait_for_condition(lambda: ray.cluster_resources().get("CPU") == 4 and ray.cluster_resources().get("special") == 2)
    assert len(cluster.list_all_nodes()) == 3


def test_cluster_utils__task_runs_on_the_node_with_its_resource(cluster):
    special = cluster.add_node(num_cpus=1, resources={"special": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    assert set(ray.get([_where.remote() for _ in range(3)])) == {special.node_id}
    actor = _Pinned.remote()
    assert ray.get(actor.where.remote()) == special.node_id


def test_cluster_utils__removed_node_is_dead_and_its_actor_dies(cluster):
    special = cluster.add_node(num_cpus=1, resources={"special": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    actor = _Pinned.remote()
    assert ray.get(actor.where.remote()) == special.node_id
    cluster.remove_node(special)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.where.remote(), timeout=120)
    wait_for_condition(
        lambda: any(e["NodeID"] == special.node_id and not e["Alive"] for e in ray.nodes()), timeout=120
    )
    assert special not in cluster.list_all_nodes()


def test_cluster_utils__task_on_a_removed_node_is_retried_on_a_new_one(cluster):
    first = cluster.add_node(num_cpus=1, resources={"special": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    signal = SignalActor.options(resources={"head": 0.01}).remote()  # kept off the node that goes away
    ref = _wait_then_where.remote(signal)
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 1, timeout=120)
    cluster.remove_node(first)  # the task's worker dies with its node
    replacement = cluster.add_node(num_cpus=1, resources={"special": 1})
    cluster.wait_for_nodes()
    # The retry may start before or after the send (a wait of the dead attempt can still be
    # counted by the signal, so its waiter count proves nothing); it can run only on the new node.
    ray.get(signal.send.remote())
    assert ray.get(ref, timeout=120) == replacement.node_id
