"""What actors hold for their lifetime, and what waits when the cluster is full.

Covers the actor part of ray-api.md §1.6 (resources and ``available_resources``): an actor that
asks for resources holds them until it dies, so the next one that does not fit stays pending,
and so do tasks; an actor given no resource holds no CPU (Ray 2.60: 1 CPU to place it, 0 while
alive), so it starts even on a cluster whose every CPU is held; given any other resource
(``num_gpus=0`` included) it holds 1 CPU.
"""

from __future__ import annotations

import pytest

from compat_tests._backend import ray
from compat_tests.helpers import wait_for_condition

CPUS = 2
CLUSTER = {"num_cpus": CPUS, "resources": {"custom": 1}}


@ray.remote
class _Holder:
    def ping(self):
        return "pong"


@ray.remote
def _one():
    return 1


def _cpus_free():
    return ray.available_resources().get("CPU", 0)


@pytest.mark.parametrize("ray_start_regular", [CLUSTER], indirect=True)
def test_actor_resources__an_actor_holding_every_cpu_leaves_the_next_one_pending(ray_start_regular):
    everything = _Holder.options(num_cpus=CPUS).remote()
    assert ray.get(everything.ping.remote()) == "pong"
    wait_for_condition(lambda: _cpus_free() == 0)
    pending = _Holder.options(num_cpus=1).remote()
    call = pending.ping.remote()
    ready, _ = ray.wait([call], timeout=3)
    assert ready == []  # it has not started: its call waits
    ray.kill(everything)
    assert ray.get(call, timeout=60) == "pong"
    wait_for_condition(lambda: _cpus_free() == CPUS - 1)


@pytest.mark.parametrize("ray_start_regular", [CLUSTER], indirect=True)
def test_actor_resources__tasks_wait_while_actors_hold_every_cpu(ray_start_regular):
    everything = _Holder.options(num_cpus=CPUS).remote()
    ray.get(everything.ping.remote())
    task = _one.remote()
    ready, _ = ray.wait([task], timeout=3)
    assert ready == []
    ray.kill(everything)
    assert ray.get(task, timeout=60) == 1


@pytest.mark.parametrize("ray_start_regular", [CLUSTER], indirect=True)
def test_actor_resources__available_drops_while_an_actor_holds_cpus(ray_start_regular):
    wait_for_condition(lambda: _cpus_free() == CPUS)
    holder = _Holder.options(num_cpus=1).remote()
    ray.get(holder.ping.remote())
    wait_for_condition(lambda: _cpus_free() == CPUS - 1)
    ray.kill(holder)
    wait_for_condition(lambda: _cpus_free() == CPUS)


@pytest.mark.parametrize("ray_start_regular", [CLUSTER], indirect=True)
@pytest.mark.parametrize("options", [{}, {"memory": 10**6}, {"num_cpus": 0}], ids=["default", "memory", "zero"])
def test_actor_resources__an_actor_holding_no_cpu_starts_on_a_full_cluster(ray_start_regular, options):
    everything = _Holder.options(num_cpus=CPUS).remote()
    ray.get(everything.ping.remote())
    free = _Holder.options(**options).remote()
    assert ray.get(free.ping.remote(), timeout=60) == "pong"
    wait_for_condition(lambda: _cpus_free() == 0)  # Ray's count lags behind its actors


@pytest.mark.parametrize("ray_start_regular", [CLUSTER], indirect=True)
@pytest.mark.parametrize("options", [{"num_gpus": 0}, {"resources": {"custom": 1}}], ids=["num_gpus_0", "custom"])
def test_actor_resources__an_actor_given_any_resource_holds_one_cpu(ray_start_regular, options):
    wait_for_condition(lambda: _cpus_free() == CPUS)
    holder = _Holder.options(**options).remote()
    assert ray.get(holder.ping.remote(), timeout=60) == "pong"
    wait_for_condition(lambda: _cpus_free() == CPUS - 1)
    ray.kill(holder)
    wait_for_condition(lambda: _cpus_free() == CPUS)


@ray.remote
class _GpuReporter:
    def devices(self):
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids()


@pytest.mark.parametrize("ray_start_regular", [{"num_cpus": 2, "num_gpus": 1}], indirect=True)
def test_actor_resources__a_whole_gpu_actor_sees_its_device(ray_start_regular):
    actor = _GpuReporter.options(num_gpus=1).remote()
    assert ray.get(actor.devices.remote()) == ("0", [0])


@pytest.mark.known_difference(
    reason="Iris gives a task whole GPU devices, so a fractional num_gpus holder gets no device "
    "and no CUDA_VISIBLE_DEVICES; giving it a whole device would stop two 0.5-GPU actors from "
    "sharing one GPU as Ray lets them"
)
@pytest.mark.parametrize("ray_start_regular", [{"num_cpus": 2, "num_gpus": 1}], indirect=True)
def test_actor_resources__a_fractional_gpu_actor_sees_its_device(ray_start_regular):
    actor = _GpuReporter.options(num_gpus=0.5).remote()
    assert ray.get(actor.devices.remote()) == ("0", [0])
