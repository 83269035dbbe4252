"""Scheduling strategies: NodeAffinity (hard and soft), "SPREAD", "DEFAULT", infeasible work;
a queued task starts on the first CPU that frees up.

Covers ``ray.util.scheduling_strategies`` apart from placement groups (ray-api.md §1.2, §1.8).
"""

from __future__ import annotations

import pytest

from compat_tests._backend import exceptions, ray, scheduling_strategies
from compat_tests.helpers import SignalActor, wait_for_condition

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


@ray.remote
def _held(signal, value):
    """Holds its CPU until `signal` is sent. It waits in `ray.wait`: a task blocked in `ray.get`
    lends its CPU back, which would let the queued tasks run for another reason."""
    ray.wait([signal.wait.remote()])
    return value


@ray.remote
def _quick(value):
    return value


def test_scheduling__queued_task_starts_on_the_first_free_cpu(ray_start_2_cpus):
    """Two CPUs: one held by a blocker, the other running a task that will not end soon. A short
    task submitted between them must not wait for the long one: once the blocker ends it takes
    the blocker's CPU, whichever worker it was first meant for."""
    blocker_signal, long_signal = SignalActor.remote(), SignalActor.remote()
    blocker = _held.remote(blocker_signal, "blocker")
    wait_for_condition(lambda: ray.get(blocker_signal.num_waiters.remote()) == 1, timeout=120)
    short_1 = _quick.remote("short 1")
    long = _held.remote(long_signal, "long")
    short_2 = _quick.remote("short 2")
    wait_for_condition(lambda: ray.get(long_signal.num_waiters.remote()) == 1, timeout=120)
    ray.get(blocker_signal.send.remote())
    ready, not_ready = ray.wait([short_1, long, short_2], num_returns=2, timeout=90)
    assert sorted(ray.get(ready)) == ["short 1", "short 2"]
    assert not_ready == [long]
    assert ray.get(blocker) == "blocker"
    ray.get(long_signal.send.remote())
    assert ray.get(long, timeout=60) == "long"
