"""Scheduling strategies: NodeAffinity (hard and soft), "SPREAD", "DEFAULT", infeasible work.

Covers ``ray.util.scheduling_strategies`` apart from placement groups (ray-api.md §1.2, §1.8).
"""

from __future__ import annotations

import pytest

from compat_tests._backend import exceptions, ray, scheduling_strategies

# A well-formed node id that no node has.
_ABSENT_NODE = "ab" * 28


@ray.remote
def _node():
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0)
class _NodeActor:
    def node(self):
        return ray.get_runtime_context().get_node_id()


def _affinity(node_id, soft):
    return scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_scheduling__node_affinity_current_node(ray_start_regular_shared, soft):
    here = ray.get_runtime_context().get_node_id()
    assert ray.get(_node.options(scheduling_strategy=_affinity(here, soft)).remote()) == here
    actor = _NodeActor.options(scheduling_strategy=_affinity(here, soft)).remote()
    assert ray.get(actor.node.remote()) == here


def test_scheduling__node_affinity_soft_falls_back(ray_start_regular_shared):
    here = ray.get_runtime_context().get_node_id()
    ref = _node.options(scheduling_strategy=_affinity(_ABSENT_NODE, soft=True)).remote()
    assert ray.get(ref, timeout=60) == here


def test_scheduling__node_affinity_hard_to_missing_node_fails(ray_start_regular_shared):
    ref = _node.options(scheduling_strategy=_affinity(_ABSENT_NODE, soft=False)).remote()
    with pytest.raises(exceptions.TaskUnschedulableError):
        ray.get(ref, timeout=60)


@pytest.mark.parametrize("strategy", ["DEFAULT", "SPREAD", None])
def test_scheduling__named_strategies(ray_start_regular_shared, strategy):
    here = ray.get_runtime_context().get_node_id()
    assert ray.get(_node.options(scheduling_strategy=strategy).remote()) == here


@pytest.mark.known_difference(
    reason="a task that asks for more than the cluster will ever have fails at once with "
    "TaskUnschedulableError naming the resource; Ray leaves it pending forever with a warning"
)
def test_scheduling__infeasible_task_stays_pending(ray_start_regular_shared):
    ref = _node.options(num_cpus=1000).remote()
    with pytest.raises(exceptions.GetTimeoutError):
        ray.get(ref, timeout=1)
    ray.cancel(ref)
