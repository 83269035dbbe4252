"""A task's large result lives on the node that made it: when that node dies, the object is
rebuilt by running its task again (within `max_retries`), or its `get` raises an
`ObjectLostError` (`ObjectReconstructionFailedError`) saying why, never hangs. An actor's large
result outlives the actor when it is killed, exits or loses its last handle. Nodes are
`cluster_utils.Cluster` nodes: raylets of their own on Ray, simulated hosts on fray_ray."""

from __future__ import annotations

import importlib
import shutil
import tempfile

import numpy as np
import pytest

from compat_tests._backend import BACKEND, ray

SIZE = 4 << 20  # far above the 100 KiB inline limit: stored on the producing node


@pytest.fixture
def cluster(shutdown_only, monkeypatch):
    root = tempfile.mkdtemp(prefix="ol-", dir="/tmp")  # Ray's unix sockets want a short path
    monkeypatch.setenv("RAY_TMPDIR", root)
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    cluster_utils = importlib.import_module(f"{BACKEND}.cluster_utils")
    made = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()
        shutil.rmtree(root, ignore_errors=True)


@ray.remote(resources={"producer": 1})
def _array(value):
    return np.full(SIZE, value, np.uint8)


def test_object_loss__result_of_a_dead_node_is_rebuilt_by_its_task(cluster):
    node = cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()
    ref = _array.options(max_retries=2).remote(5)
    ray.wait([ref], fetch_local=False)
    cluster.remove_node(node)
    cluster.add_node(num_cpus=1, resources={"producer": 1})  # somewhere for the task to run again
    assert int(ray.get(ref, timeout=120).sum()) == 5 * SIZE


def test_object_loss__without_retries_get_raises_object_lost(cluster):
    node = cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()
    ref = _array.options(max_retries=0).remote(6)
    ray.wait([ref], fetch_local=False)
    cluster.remove_node(node)
    with pytest.raises(ray.exceptions.ObjectLostError) as lost:
        ray.get(ref, timeout=120)
    assert isinstance(lost.value, ray.exceptions.ObjectReconstructionFailedError)
    assert "max_retries=0" in str(lost.value)


@ray.remote(resources={"producer": 0.1})
class _Producer:
    def array(self, value):
        return np.full(SIZE, value, np.uint8)

    def leave(self):
        ray.actor.exit_actor()


@ray.remote(resources={"producer": 1}, num_returns="streaming")
def _arrays(count):
    for value in range(count):
        yield np.full(SIZE, value, np.uint8)


def test_object_loss__items_of_a_streaming_task_on_a_dead_node_are_rebuilt(cluster):
    node = cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()
    refs = list(_arrays.options(max_retries=2).remote(3))
    ray.wait(refs, num_returns=len(refs), fetch_local=False)
    cluster.remove_node(node)
    cluster.add_node(num_cpus=1, resources={"producer": 1})  # somewhere for the task to run again
    assert [int(array[0]) for array in ray.get(refs, timeout=120)] == [0, 1, 2]


def test_object_loss__items_of_a_streaming_task_without_retries_are_lost(cluster):
    node = cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()
    refs = list(_arrays.options(max_retries=0).remote(2))
    ray.wait(refs, num_returns=len(refs), fetch_local=False)
    cluster.remove_node(node)
    with pytest.raises(ray.exceptions.ObjectLostError):
        ray.get(refs[1], timeout=120)


def test_object_loss__an_actors_result_outlives_ray_kill(cluster):
    cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()
    producer = _Producer.remote()
    ref = producer.array.remote(7)
    ray.wait([ref], fetch_local=False)
    ray.kill(producer)
    assert int(ray.get(ref, timeout=120).sum()) == 7 * SIZE


def test_object_loss__an_actors_result_outlives_exit_actor_and_its_handle(cluster):
    cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()
    leaving, dropped = _Producer.remote(), _Producer.remote()
    kept = leaving.array.remote(8)
    ray.wait([kept], fetch_local=False)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(leaving.leave.remote())
    orphan = dropped.array.remote(9)
    ray.wait([orphan], fetch_local=False)
    del dropped  # the actor ends with its last handle
    assert int(ray.get(kept, timeout=120).sum()) == 8 * SIZE
    assert int(ray.get(orphan, timeout=120).sum()) == 9 * SIZE
