"""Direct actor calls between simulated nodes of `fray_ray.cluster_utils.Cluster`: a task and an
actor on node B call an actor on node A, and the driver (this test's process) sees none of it.
The nodes are the `hosts` fixture's (`conftest.py`): host "a" and host "b"."""

from __future__ import annotations

import os
from typing import Any

import fray_ray
from fray_ray._private.core import runtime_slot
from fray_ray.cluster_utils import Cluster


@fray_ray.remote(num_cpus=0, resources={"a": 0.01})
class Counter:
    def __init__(self) -> None:
        self.count = 0

    def incr(self) -> int:
        self.count += 1
        return self.count

    def where(self) -> tuple[str, int]:
        return fray_ray.get_runtime_context().get_node_id(), os.getpid()


@fray_ray.remote(num_cpus=0, resources={"b": 0.01})
def calls_from_node_b(counter: Any, count: int) -> tuple[str, list[int]]:
    return fray_ray.get_runtime_context().get_node_id(), [fray_ray.get(counter.incr.remote()) for _ in range(count)]


@fray_ray.remote(num_cpus=0, resources={"b": 0.01})
class Caller:
    def __init__(self, target: Any) -> None:
        self.target = target

    def calls(self, count: int) -> list[int]:
        return fray_ray.get([self.target.incr.remote() for _ in range(count)])


def test_calls_between_simulated_nodes_skip_the_driver(hosts: Cluster) -> None:
    actors = runtime_slot.current().actors
    seen: list[bytes] = []
    original = actors.submit_call
    actors.submit_call = lambda call: (seen.append(call.call_id), original(call))[1]
    try:
        counter = Counter.remote()
        actor_node, _ = fray_ray.get(counter.where.remote())
        caller = Caller.remote(counter)
        fray_ray.get(caller.calls.remote(0))
        seen.clear()
        task_node, from_task = fray_ray.get(calls_from_node_b.remote(counter, 50))
        from_actor = fray_ray.get(caller.calls.remote(50))
    finally:
        del actors.submit_call
    assert task_node != actor_node
    assert from_task == list(range(1, 51))
    assert from_actor == list(range(51, 101))
    assert len(seen) == 1  # the driver's own call to `calls`
