"""Gang calls on simulated TPU slices: every host at once, all or nothing, retried together."""

from __future__ import annotations

import os
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
    layout = ClusterConfig(workers=(cpu_worker(cpu=2), *tpu_slice("v5p-16", "slice-a"), *tpu_slice("v5p-16", "slice-b")))
    ray.init(cluster_config=layout)
    yield
    ray.shutdown()


@ray.remote
def host_view(tag: str) -> dict:
    return {
        "tag": tag,
        "pod": tpu.get_current_pod_name(),
        "worker": os.environ.get("TPU_WORKER_ID"),
        "hosts": tpu.get_current_pod_worker_count(),
        "chips": tpu.get_num_tpu_chips_on_node(),
        "slice": os.environ.get("MEGASCALE_SLICE_ID"),
        "slices": os.environ.get("MEGASCALE_NUM_SLICES"),
        "pid": os.getpid(),
    }


def test_a_gang_call_runs_on_every_host_of_the_slice_in_host_order() -> None:
    refs = host_view.options(tpu="v5p-16").remote("one-slice")
    assert isinstance(refs, list) and len(refs) == 2
    views = ray.get(refs, timeout=120)
    assert [v["worker"] for v in views] == ["0", "1"]
    assert views[0]["pod"] == views[1]["pod"] and views[0]["pod"] in ("slice-a", "slice-b")
    assert all(v["hosts"] == 2 and v["chips"] == 4 and v["tag"] == "one-slice" for v in views)
    assert views[0]["pid"] != views[1]["pid"]


def test_multislice_gangs_get_megascale_coordinates() -> None:
    views = ray.get(host_view.options(tpu="v5p-16", num_slices=2).remote("two"), timeout=120)
    assert len(views) == 4
    assert [v["slice"] for v in views] == ["0", "0", "1", "1"]
    assert {v["slices"] for v in views} == {"2"}
    assert {views[0]["pod"], views[2]["pod"]} == {"slice-a", "slice-b"}


def test_run_on_slice_and_a_reserved_slice() -> None:
    views = ray.get(tpu.run_on_slice(host_view, "run", topology="2x2x2", accelerator_version="v5p"), timeout=120)
    assert [v["worker"] for v in views] == ["0", "1"]
    reserved = tpu.slice_placement_group("2x2x2", "v5p")
    try:
        first = ray.get(tpu.run_on_slice(host_view, "a", tpu_slice=reserved), timeout=120)
        second = ray.get(tpu.run_on_slice(host_view, "b", tpu_slice=reserved), timeout=120)
        assert [v["pid"] for v in first] == [v["pid"] for v in second]  # the same reserved hosts
    finally:
        reserved.shutdown()


def test_a_gang_that_can_never_fit_fails_naming_the_resource() -> None:
    with pytest.raises(exceptions.TaskUnschedulableError, match="v5p-64"):
        ray.get(host_view.options(tpu="v5p-64").remote("too big"), timeout=120)


def test_a_gang_waits_for_a_whole_slice_and_never_starts_partially() -> None:
    holders = [tpu.slice_placement_group("2x2x2", "v5p") for _ in range(2)]  # both slices held
    try:
        pending = host_view.options(tpu="v5p-16").remote("waits")
        ready, _ = ray.wait(pending, num_returns=2, timeout=2)
        assert ready == []  # no host of the gang ran while no whole slice was free
        holders.pop().shutdown()
        views = ray.get(pending, timeout=120)
        assert [v["worker"] for v in views] == ["0", "1"]
    finally:
        for holder in holders:
            holder.shutdown()


@ray.remote(max_retries=2)
def fail_first_attempt_on_host_one(marker_dir: str) -> str:
    worker = os.environ["TPU_WORKER_ID"]
    marker = os.path.join(marker_dir, "host-1-died")
    if worker == "1" and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # one host of the gang dies
    return f"host {worker} ok"


def test_when_one_host_dies_the_whole_gang_is_retried(tmp_path) -> None:
    refs = fail_first_attempt_on_host_one.options(tpu="v5p-16").remote(str(tmp_path))
    assert ray.get(refs, timeout=180) == ["host 0 ok", "host 1 ok"]
    assert (tmp_path / "host-1-died").exists()


@ray.remote
class SliceHost:
    def __init__(self) -> None:
        self.calls = 0

    def where(self) -> tuple[str | None, str | None, int]:
        self.calls += 1
        return os.environ.get("TPU_WORKER_ID"), tpu.get_current_pod_name(), self.calls


def test_an_actor_class_with_a_tpu_option_is_one_actor_per_host() -> None:
    hosts = SliceHost.options(tpu="v5p-16").remote()
    assert isinstance(hosts, list) and len(hosts) == 2
    first = ray.get([h.where.remote() for h in hosts], timeout=120)
    second = ray.get([h.where.remote() for h in hosts], timeout=120)
    assert [w for w, _, _ in first] == ["0", "1"]
    assert first[0][1] == first[1][1]  # both on the same slice
    assert [c for _, _, c in second] == [2, 2]  # each host keeps its own state
    for host in hosts:
        ray.kill(host)


@ray.remote
def accelerator_manager_view() -> dict:
    # levanter's and Marin's TPU helpers read the host through Ray's private manager.
    from fray_ray._private.accelerators import TPUAcceleratorManager as manager

    return {
        "chips": manager.get_current_node_num_accelerators(),
        "pod_type": manager.get_current_node_tpu_pod_type(),
        "old_pod_type": manager._get_current_node_tpu_pod_type(),
        "name": manager.get_current_node_tpu_name(),
        "worker": manager.get_current_node_tpu_worker_id(),
        "old_worker": manager._get_current_node_tpu_worker_id(),
        "hosts": manager.get_num_workers_in_current_tpu_pod(),
        "type": manager.get_current_node_accelerator_type(),
        "extra": manager.get_current_node_additional_resources(),
        "labels": manager.get_current_node_accelerator_labels(),
    }


def test_the_tpu_accelerator_manager_answers_from_each_host_of_a_slice() -> None:
    views = ray.get(accelerator_manager_view.options(tpu="v5p-16").remote(), timeout=120)
    name = views[0]["name"]
    assert name in ("slice-a", "slice-b") and views[1]["name"] == name
    assert [v["worker"] for v in views] == [0, 1] and [v["old_worker"] for v in views] == [0, 1]
    assert all(v["chips"] == 4 and v["hosts"] == 2 and v["type"] == "TPU-V5P" for v in views)
    assert all(v["pod_type"] == v["old_pod_type"] == "v5p-16" for v in views)
    assert views[0]["extra"] == {name: 1.0, "TPU-v5p-16-head": 1.0} and views[1]["extra"] == {name: 1.0}
    assert views[1]["labels"]["ray.io/tpu-worker-id"] == "1" and views[1]["labels"]["ray.io/tpu-pod-type"] == "v5p-16"


@ray.remote(num_cpus=0)
def free_tpu_per_node() -> dict:
    from fray_ray._private import state

    return state.available_resources_per_node()


def test_available_resources_per_node_counts_each_hosts_chips() -> None:
    tpu_nodes = [node["NodeID"] for node in ray.nodes() if node["Resources"].get("TPU")]
    assert len(tpu_nodes) == 4
    for per_node in (ray._private.state.available_resources_per_node(), ray.get(free_tpu_per_node.remote())):
        assert all(per_node[node]["TPU"] == 4.0 for node in tpu_nodes)
