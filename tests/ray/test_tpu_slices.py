"""TPU slices as Ray's TPU users see them: each host's resources and labels, the head task on
host 0 of a slice (`TPU-<pod type>-head`), and one task per host through the slice's name."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

import fray_ray as ray
from fray_ray import exceptions
from fray_ray.cluster import ClusterConfig, cpu_worker, tpu_slice
from fray_ray.util import tpu


@pytest.fixture(scope="module", autouse=True)
def slices_session() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    layout = ClusterConfig(workers=(cpu_worker(cpu=2), *tpu_slice("v5p-16", "slice-a"), *tpu_slice("v5p-32", "slice-b")))
    ray.init(cluster_config=layout)
    yield
    ray.shutdown()


def test_every_slice_host_has_the_slice_as_a_resource_and_host_0_the_head() -> None:
    totals = ray.cluster_resources()
    assert totals["slice-a"] == 2 and totals["slice-b"] == 4
    assert totals["TPU-v5p-16-head"] == 1 and totals["TPU-v5p-32-head"] == 1
    assert totals["TPU"] == 24 and totals["accelerator_type:TPU-V5P"] == 6
    hosts = [n for n in ray.nodes() if n["Resources"].get("TPU")]
    assert len(hosts) == 6
    for node in hosts:
        labels, resources = node["Labels"], node["Resources"]
        name = labels["ray.io/tpu-slice-name"]
        assert resources[name] == 1 and resources["TPU"] == 4
        assert labels["ray.io/accelerator-type"] == "TPU-V5P"
        assert labels["ray.io/tpu-topology"] == ("2x2x2" if name == "slice-a" else "2x2x4")
        assert labels["ray.io/tpu-pod-type"] == ("v5p-16" if name == "slice-a" else "v5p-32")
        is_head = labels["ray.io/tpu-worker-id"] == "0"
        assert (f"TPU-{labels['ray.io/tpu-pod-type']}-head" in resources) == is_head
    assert len({n["NodeManagerAddress"] for n in hosts}) == 6  # each host has an address of its own


@ray.remote
def host_view() -> dict:
    from fray_ray._private.accelerators import TPUAcceleratorManager as manager

    return {
        "pod": tpu.get_current_pod_name(),
        "hosts": tpu.get_current_pod_worker_count(),
        "chips": tpu.get_num_tpu_chips_on_node(),
        "worker": manager.get_current_node_tpu_worker_id(),
        "extra": manager.get_current_node_additional_resources(),
        "node": ray.get_runtime_context().get_node_id(),
        "jax": os.environ.get("JAX_PLATFORMS"),
    }


def test_a_head_task_is_one_task_on_host_0_of_a_slice() -> None:
    ref = host_view.options(resources={"TPU-v5p-32-head": 1, "TPU": 4}).remote()
    assert isinstance(ref, ray.ObjectRef)  # one call, not a gang
    view = ray.get(ref, timeout=120)
    assert view["pod"] == "slice-b" and view["worker"] == 0 and view["hosts"] == 4 and view["chips"] == 4
    assert view["extra"] == {"slice-b": 1.0, "TPU-v5p-32-head": 1.0}
    head = next(n for n in ray.nodes() if n["Resources"].get("TPU-v5p-32-head"))
    assert view["node"] == head["NodeID"]
    assert view["jax"] != "tpu"  # it holds chips, not the host's device: no JAX platform forced on it


@ray.remote
class Barrier:
    """Counts arrivals, so tasks can wait until all of them run at once."""

    def __init__(self) -> None:
        self.arrived = 0

    def arrive(self) -> None:
        self.arrived += 1

    def count(self) -> int:
        return self.arrived


@ray.remote
def on_host(barrier: ray.actor.ActorHandle, expected: int) -> dict:
    barrier.arrive.remote()
    deadline = time.monotonic() + 120
    while ray.get(barrier.count.remote()) < expected:  # all hosts' tasks run together, as a pod's must
        if time.monotonic() > deadline:
            raise TimeoutError("not every host's task started")
        time.sleep(0.05)
    return {"pod": tpu.get_current_pod_name(), "worker": os.environ.get("TPU_WORKER_ID"),
            "node": ray.get_runtime_context().get_node_id()}


def test_the_slice_resource_runs_one_task_on_each_host_of_that_slice() -> None:
    name, count = ray.get(pod_of_head.options(resources={"TPU-v5p-32-head": 1}).remote(), timeout=120)
    barrier = Barrier.remote()
    views = ray.get([on_host.options(resources={name: 1, "TPU": 4}).remote(barrier, count) for _ in range(count)],
                    timeout=180)
    assert {v["pod"] for v in views} == {name}
    assert sorted(v["worker"] for v in views) == ["0", "1", "2", "3"]
    assert len({v["node"] for v in views}) == 4
    ray.kill(barrier)


@ray.remote
def pod_of_head() -> tuple[str | None, int | None]:
    return tpu.get_current_pod_name(), tpu.get_current_pod_worker_count()


@ray.remote(resources={"TPU-v5p-16-head": 1})
class SliceCoordinator:
    """Levanter's slice actor: one actor holding a slice's head resource."""

    def where(self) -> tuple[str | None, str | None]:
        return tpu.get_current_pod_name(), os.environ.get("TPU_WORKER_ID")


def test_an_actor_holding_the_head_resource_is_one_actor_on_host_0() -> None:
    actor = SliceCoordinator.remote()
    assert not isinstance(actor, list)
    assert ray.get(actor.where.remote(), timeout=120) == ("slice-a", "0")
    ray.kill(actor)


def test_the_slice_helpers_find_each_slices_hosts() -> None:
    nodes = tpu.get_tpu_nodes_for_slice("slice-b")
    assert len(nodes) == 4 and {tpu.get_tpu_slice_name_from_node(n) for n in nodes} == {"slice-b"}
    assert tpu.get_tpu_nodes_for_slice("no-such-slice") == []
    assert tpu.get_num_tpu_slices("2x2x2", "v5p") == 1 and tpu.get_num_tpu_slices("2x2x4", "TPU-V5P") == 1
    assert tpu.get_num_tpu_slices("4x4x4", "v5p") == 0
    assert tpu.get_num_ready_tpu_slices("2x2x2", "v5p") == 1
    cpu_node = next(n for n in ray.nodes() if not n["Resources"].get("TPU"))
    assert tpu.get_tpu_slice_name_from_node(cpu_node) is None


def test_a_head_of_a_pod_type_no_slice_has_is_unschedulable() -> None:
    with pytest.raises(exceptions.TaskUnschedulableError, match="TPU-v5p-64-head"):
        ray.get(host_view.options(resources={"TPU-v5p-64-head": 1}).remote(), timeout=120)


def test_the_gang_option_still_runs_on_every_host() -> None:
    views = ray.get(host_view.options(tpu="v5p-16").remote(), timeout=120)
    assert [v["worker"] for v in views] == [0, 1] and {v["pod"] for v in views} == {"slice-a"}


@ray.remote
class HostActor:
    """levanter's per-host actor: one per host of a slice, through the slice's resource."""

    def where(self) -> tuple[str | None, str | None]:
        return tpu.get_current_pod_name(), os.environ.get("TPU_WORKER_ID")


def test_actors_holding_the_slice_resource_are_one_per_host() -> None:
    actors = [HostActor.options(resources={"slice-b": 1, "TPU": 4}).remote() for _ in range(4)]
    places = ray.get([actor.where.remote() for actor in actors], timeout=180)
    assert sorted(places) == [("slice-b", "0"), ("slice-b", "1"), ("slice-b", "2"), ("slice-b", "3")]
    for actor in actors:
        ray.kill(actor)
