"""Capacity from the cluster, on embedded clusters of simulated hosts of different sizes:
`cluster_resources()`, `available_resources()` and `nodes()` are the workers'; feasibility is
per worker; processes ask the cluster for their CPU, so it spreads them; actors hold their
resources for life and wait for room; the view follows workers that leave and come back."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import cloudpickle
import pytest

import fray_ray as ray
from fray_ray import exceptions
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker, cpu_workers, gpu_host, tpu_slice
from fray_ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

# This module's functions travel by value: the workers' bundle is this checkout, not importable by name.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

DEADLINE = 120.0


def wait_for(predicate, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    """Three hosts of different sizes (one with GPUs and a custom resource) and a TPU slice of two."""
    workers = (
        cpu_worker("small", cpu=2, memory="4g", disk="10g", attributes={"ray-resource:slots": "2"}),
        cpu_worker("large", cpu=4, memory="8g", disk="10g"),
        gpu_host("A100", 2, worker_id="gpu", cpu=3, memory="16g", disk="10g"),
        *tpu_slice("v5p-16", "slice", cpu=1, memory="2g", disk="10g"),
    )
    with EmbeddedCluster(ClusterConfig(workers=workers)) as started:
        yield started


@pytest.fixture(scope="module")
def session(cluster: EmbeddedCluster) -> Iterator[EmbeddedCluster]:
    if ray.is_initialized():
        ray.shutdown()
    os.environ["FRAY_RAY_TOKEN"] = cluster.token
    try:
        ray.init(cluster.address, namespace="capacity")
        yield cluster
    finally:
        ray.shutdown()
        os.environ.pop("FRAY_RAY_TOKEN", None)


def idle_cpus() -> float:
    return wait_for(lambda: ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"] and 1,
                    "every CPU to be free") and ray.available_resources()["CPU"]


@ray.remote
class Holder:
    def where(self) -> tuple[str | None, str]:
        return os.environ.get("IRIS_WORKER_ID"), ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0.5)
def where() -> tuple[str | None, str | None, str]:
    return os.environ.get("IRIS_WORKER_ID"), os.environ.get("IRIS_ADVERTISE_HOST"), ray.get_runtime_context().get_node_id()


# ---- what the cluster has ----------------------------------------------------------------------


def test_cluster_resources_are_the_sum_of_the_workers(session: EmbeddedCluster) -> None:
    with session.client() as controller:
        workers = controller.list_workers()
    resources = ray.cluster_resources()
    assert resources["CPU"] == sum(w.cpu_count for w in workers) == 2 + 4 + 3 + 1 + 1
    assert resources["memory"] == sum(w.memory_bytes for w in workers)
    assert resources["GPU"] == 2 and resources["accelerator_type:A100"] == 1
    assert resources["TPU"] == 8 and resources["TPU-v5p-16-head"] == 1  # one head per slice
    assert resources["slots"] == 2  # a custom resource, from the worker attribute ray-resource:slots
    hosts = {w.address.split(":")[0] for w in workers}
    assert {k for k in resources if k.startswith("node:") and k != "node:__internal_head__"} == {
        f"node:{h}" for h in hosts
    }
    assert resources["node:__internal_head__"] == 1 and resources["object_store_memory"] > 0
    assert ray.available_resources().get("slots") == 2


def test_nodes_lists_each_worker(session: EmbeddedCluster) -> None:
    with session.client() as controller:
        workers = {w.worker_id: w for w in controller.list_workers()}
    nodes = ray.nodes()
    assert len(nodes) == len(workers) == 5
    by_address = {node["NodeManagerAddress"]: node for node in nodes}
    assert set(by_address) == {w.address.split(":")[0] for w in workers.values()}
    assert all(node["Alive"] and node["alive"] for node in nodes)
    assert len({node["NodeID"] for node in nodes}) == 5
    large = by_address[workers["large"].address.split(":")[0]]
    assert large["Resources"]["CPU"] == 4 and large["Resources"]["memory"] == 8 << 30
    assert large["Labels"]["ray.io/node-id"] == large["NodeID"] and large["Labels"]["device-type"] == "cpu"
    # A task reports the node of the worker it ran on.
    host, address, node_id = ray.get(where.remote(), timeout=DEADLINE)
    assert host in workers and by_address[address]["NodeID"] == node_id


def test_actors_hold_their_resources_for_life_and_default_ones_hold_nothing(session: EmbeddedCluster) -> None:
    total = idle_cpus()
    default = Holder.remote()
    ray.get(default.where.remote(), timeout=DEADLINE)
    assert ray.available_resources()["CPU"] == total  # num_cpus unset: no CPU for its lifetime
    holder = Holder.options(num_cpus=2, resources={"slots": 1}).remote()
    ray.get(holder.where.remote(), timeout=DEADLINE)
    assert ray.available_resources()["CPU"] == total - 2 and ray.available_resources()["slots"] == 1
    gpu_holder = Holder.options(num_gpus=1).remote()  # any resource given: 1 CPU by default too
    assert ray.get(gpu_holder.where.remote(), timeout=DEADLINE)[0] == "gpu"
    assert ray.available_resources()["GPU"] == 1 and ray.available_resources()["CPU"] == total - 3
    for actor in (default, holder, gpu_holder):
        ray.kill(actor)
    wait_for(lambda: ray.available_resources().get("CPU") == total and ray.available_resources().get("slots") == 2,
             "the killed actors' resources to come back")


@pytest.mark.parametrize(
    ("options", "resource", "largest"),
    [({"num_cpus": 5}, "CPU", "large, has 4"), ({"resources": {"slots": 3}}, "slots", "small, has 2"),
     ({"num_gpus": 3}, "GPU", "gpu, has 2"), ({"memory": 20 << 30}, "memory", "gpu, has")],
)
def test_what_no_worker_can_hold_fails_fast_naming_the_resource_and_the_largest_worker(
    session: EmbeddedCluster, options: dict, resource: str, largest: str
) -> None:
    actor = Holder.options(**options).remote()
    with pytest.raises(exceptions.ActorUnschedulableError) as actor_error:
        ray.get(actor.where.remote(), timeout=DEADLINE)
    with pytest.raises(exceptions.TaskUnschedulableError) as task_error:
        ray.get(where.options(**options).remote(), timeout=DEADLINE)
    for error in (actor_error.value, task_error.value):
        assert f"asks for {resource} (requested" in str(error) and f"the largest worker, {largest}" in str(error)


def test_resources_no_single_worker_has_together_fail_fast(session: EmbeddedCluster) -> None:
    # 4 CPUs exist only on "large", GPUs only on "gpu" (3 CPUs): the cluster has both, no worker has both.
    with pytest.raises(exceptions.TaskUnschedulableError, match="no single worker has them all"):
        ray.get(where.options(num_cpus=4, num_gpus=1).remote(), timeout=DEADLINE)


def test_a_demand_that_fits_one_worker_waits_while_it_is_busy(session: EmbeddedCluster) -> None:
    first = Holder.options(num_cpus=4).remote()  # only "large" has 4 CPUs
    assert ray.get(first.where.remote(), timeout=DEADLINE)[0] == "large"
    second = Holder.options(num_cpus=4).remote()
    waiting = second.where.remote()
    assert ray.wait([waiting], timeout=2)[0] == []  # the cluster has 7 CPUs free, no worker has 4
    ray.kill(first)
    assert ray.get(waiting, timeout=DEADLINE)[0] == "large"
    ray.kill(second)


def test_a_strict_spread_placement_group_gets_one_worker_per_bundle(session: EmbeddedCluster) -> None:
    group = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    try:
        assert group.wait(timeout_seconds=DEADLINE)
        placed = placement_group_table(group)["bundles_to_node_id"]
        assert len(set(placed.values())) == 3 and set(placed.values()) <= {n["NodeID"] for n in ray.nodes()}
        with pytest.raises(Exception):
            ray.get(placement_group([{"CPU": 1}] * 6, strategy="STRICT_SPREAD").ready(), timeout=2)
    finally:
        remove_placement_group(group)


def test_the_view_follows_workers_that_leave_and_come_back(session: EmbeddedCluster) -> None:
    total = ray.cluster_resources()["CPU"]
    session.kill_worker("large")
    try:
        wait_for(lambda: ray.cluster_resources()["CPU"] == total - 4, "the lost worker's CPUs to be gone")
        lost = [n for n in ray.nodes() if not n["Alive"]]
        assert len(lost) == 1 and lost[0]["Resources"] == {}
        # What only the lost worker could hold waits for a worker like it, instead of failing.
        waiting = where.options(num_cpus=4).remote()
        assert ray.wait([waiting], timeout=0)[0] == []
    finally:
        session.revive_worker("large")
    wait_for(lambda: ray.cluster_resources()["CPU"] == total, "the worker's CPUs to come back")
    assert ray.get(waiting, timeout=DEADLINE)[0] == "large"
    assert ray.get(where.options(num_cpus=4).remote(), timeout=DEADLINE)[0] == "large"


# ---- spreading and waiting, each on a cluster of its own --------------------------------------


@pytest.fixture
def own_session(fresh_shutdown: None) -> Iterator[None]:
    yield


@ray.remote
class Gate:
    """Counts arrivals, so tasks can wait until all of them run at once."""

    def __init__(self) -> None:
        self.arrived = 0

    def arrive(self) -> int:
        self.arrived += 1
        return self.arrived

    def count(self) -> int:
        return self.arrived


def without_blocking(ref):
    """The value of `ref`, polled with `ray.wait(timeout=0)`, so the task never counts as
    blocked: a `get` or `wait` that blocks on an actor's answer for over 10 ms lends the task's
    CPU to others, as Ray's do, and another task could then take its worker."""
    while not ray.wait([ref], timeout=0)[0]:
        time.sleep(0.01)
    return ray.get(ref)


@ray.remote(num_cpus=2)
def where_together(gate, count: int) -> str | None:
    without_blocking(gate.arrive.remote())
    while without_blocking(gate.count.remote()) < count:
        time.sleep(0.05)
    return os.environ.get("IRIS_WORKER_ID")


def test_executors_with_two_cpus_on_two_cpu_hosts_land_on_different_hosts(own_session: None) -> None:
    ray.init(cluster_config=ClusterConfig(workers=cpu_workers(3, cpu=2, memory="4g", disk="10g")))
    gate = Gate.remote()
    hosts = ray.get([where_together.remote(gate, 3) for _ in range(3)], timeout=DEADLINE)
    assert sorted(hosts) == ["cpu-0", "cpu-1", "cpu-2"]


def test_a_sixth_one_cpu_actor_on_five_cpus_waits_until_one_is_killed(own_session: None) -> None:
    workers = (cpu_worker("a", cpu=2, memory="4g", disk="10g"), cpu_worker("b", cpu=3, memory="4g", disk="10g"))
    ray.init(cluster_config=ClusterConfig(workers=workers))
    actors = [Holder.options(num_cpus=1).remote() for _ in range(5)]
    placed = sorted(host for host, _ in ray.get([a.where.remote() for a in actors], timeout=DEADLINE))
    assert placed == ["a", "a", "b", "b", "b"] and "CPU" not in ray.available_resources()
    sixth = Holder.options(num_cpus=1).remote()
    calls = [sixth.where.remote() for _ in range(3)]  # they queue while it waits
    assert ray.wait(calls, num_returns=1, timeout=2)[0] == []
    ray.kill(actors[0])
    assert len({host for host, _ in ray.get(calls, timeout=DEADLINE)}) == 1


def test_tasks_and_actors_share_the_per_worker_accounting(own_session: None) -> None:
    ray.init(cluster_config=ClusterConfig(workers=cpu_workers(3, cpu=2, memory="4g", disk="10g")))
    holders = [Holder.options(num_cpus=2).remote() for _ in range(2)]
    held = {host for host, _ in ray.get([h.where.remote() for h in holders], timeout=DEADLINE)}
    assert len(held) == 2
    gate = Gate.remote()
    first = where_together.remote(gate, 2)  # runs on the one free worker, then waits for a second
    wait_for(lambda: ray.get(gate.count.remote()) == 1, "the first task to run")
    # Another pool (its own environment), so it is not queued on the first task's executor.
    second = where_together.options(runtime_env={"env_vars": {"SECOND": "1"}}).remote(gate, 2)
    assert ray.wait([second], timeout=2)[0] == []  # no worker has 2 CPUs free
    ray.kill(holders[0])
    assert len({*ray.get([first, second], timeout=DEADLINE)}) == 2


# ---- init's sizes --------------------------------------------------------------------------


def test_sizes_against_an_existing_cluster_raise_as_in_ray(own_session: None, cluster: EmbeddedCluster,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAY_RAY_TOKEN", cluster.token)
    with pytest.raises(ValueError, match="^When connecting to an existing cluster, num_cpus and num_gpus must not"):
        ray.init(cluster.address, num_cpus=2)
    with pytest.raises(ValueError, match="^When connecting to an existing cluster, resources must not be provided"):
        ray.init(cluster.address, resources={"slots": 1})
    with pytest.raises(ValueError, match="cluster_config lays out the cluster's hosts"):
        ray.init(num_cpus=2, cluster_config=ClusterConfig(workers=(cpu_worker(cpu=1),)))
    assert not ray.is_initialized()


def test_init_sizes_the_embedded_clusters_one_host(own_session: None) -> None:
    ray.init(num_cpus=3, num_gpus=1, resources={"custom": 2})
    resources = ray.cluster_resources()
    assert (resources["CPU"], resources["GPU"], resources["custom"]) == (3, 1, 2)
    (node,) = ray.nodes()
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()  # the driver's machine is the node
    assert ray.get(where.remote(), timeout=DEADLINE)[2] == node["NodeID"]


def test_local_mode_reports_this_machine_sized_by_init(own_session: None) -> None:
    ray.init(local_mode=True, num_cpus=3, resources={"custom": 2})
    resources = ray.cluster_resources()
    assert (resources["CPU"], resources["custom"], resources["node:127.0.0.1"]) == (3, 2, 1)
    assert resources["memory"] > 0 and len(ray.nodes()) == 1
