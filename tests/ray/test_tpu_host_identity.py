"""A process placed on a TPU host by its TPU resources knows which slice and host it is on,
also where the host gives its TPU identity (`TPU_*` variables) only to processes holding the
device, as Iris's workers do: the driver derives it from the host's worker attributes and the
worker adopts each variable the host did not set. The slices here are such hosts: their
workers carry Iris's TPU attributes and give tasks no (or only some) `TPU_*` variables."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator

import pytest

import fray_ray as ray
from fray_ray.cluster import ClusterConfig, cpu_worker, tpu_slice
from fray_ray.util import tpu


def silent_slice(variant: str, name: str, env: dict[str, str] | None = None) -> list:
    """A simulated slice whose hosts give their tasks only `env` of the TPU environment."""
    return [dataclasses.replace(w, device_env=dict(env or {})) for w in tpu_slice(variant, name)]


@pytest.fixture(scope="module", autouse=True)
def silent_slices() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    layout = ClusterConfig(workers=(cpu_worker(cpu=2), *silent_slice("v5p-16", "bare"),
                                    *silent_slice("v4-8", "own", {"TPU_NAME": "named-by-its-host"})))
    ray.init(cluster_config=layout)
    yield
    ray.shutdown()


def view() -> dict:
    from fray_ray._private.accelerators import TPUAcceleratorManager as manager

    return {
        "pod": tpu.get_current_pod_name(),
        "worker": manager.get_current_node_tpu_worker_id(),
        "hosts": tpu.get_current_pod_worker_count(),
        "chips": tpu.get_num_tpu_chips_on_node(),
        "pod_type": manager.get_current_node_tpu_pod_type(),
        "topology": manager.get_current_node_tpu_topology(),
        "extra": manager.get_current_node_additional_resources(),
        "node": ray.get_runtime_context().get_node_id(),
    }


@ray.remote
def task_view() -> dict:
    return view()


@ray.remote
class Barrier:
    def __init__(self) -> None:
        self.arrived = 0

    def arrive(self) -> None:
        self.arrived += 1

    def count(self) -> int:
        return self.arrived


@ray.remote
def host_view(barrier: ray.actor.ActorHandle, expected: int) -> dict:
    barrier.arrive.remote()
    deadline = time.monotonic() + 120
    while ray.get(barrier.count.remote()) < expected:  # every host's task runs at once: one per host
        if time.monotonic() > deadline:
            raise TimeoutError("not every host's task started")
        time.sleep(0.05)
    return view()


@ray.remote
class ActorView:
    def view(self) -> dict:
        return view()


def node_of(resource: str) -> str:
    return next(n["NodeID"] for n in ray.nodes() if n["Resources"].get(resource))


def test_the_head_task_learns_its_slice_from_the_driver() -> None:
    head = ray.get(task_view.options(resources={"TPU-v5p-16-head": 1}).remote(), timeout=120)
    assert head == {"pod": "bare", "worker": 0, "hosts": 2, "chips": 4, "pod_type": "v5p-16", "topology": "2x2x2",
                    "extra": {"bare": 1.0, "TPU-v5p-16-head": 1.0}, "node": node_of("TPU-v5p-16-head")}


def test_each_per_host_task_learns_its_own_host() -> None:
    barrier = Barrier.remote()
    views = ray.get([host_view.options(resources={"bare": 1, "TPU": 4}).remote(barrier, 2) for _ in range(2)],
                    timeout=180)
    assert sorted(v["worker"] for v in views) == [0, 1] and {v["pod"] for v in views} == {"bare"}
    head = next(v for v in views if v["worker"] == 0)
    assert head["node"] == node_of("TPU-v5p-16-head") and len({v["node"] for v in views}) == 2
    ray.kill(barrier)


def test_an_actor_on_a_slice_host_learns_its_host() -> None:
    actor = ActorView.options(resources={"TPU-v5p-16-head": 1}).remote()
    seen = ray.get(actor.view.remote(), timeout=120)
    assert (seen["pod"], seen["worker"], seen["node"]) == ("bare", 0, node_of("TPU-v5p-16-head"))
    ray.kill(actor)


def test_what_the_host_sets_itself_wins() -> None:
    @ray.remote(resources={"TPU-v4-8-head": 1})
    def names() -> tuple[str | None, str | None, str | None]:
        return os.environ.get("TPU_NAME"), os.environ.get("TPU_WORKER_ID"), os.environ.get("TPU_ACCELERATOR_TYPE")

    assert ray.get(names.remote(), timeout=120) == ("named-by-its-host", "0", "v4-8")
