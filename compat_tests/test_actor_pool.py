"""``ray.util.ActorPool``: submit/get_next, map, unordered variants, timeouts, push/pop_idle.

Mirrors Ray's test_actor_pool.py (ray-api.md §1.8).
"""

from __future__ import annotations

import pytest

from compat_tests._backend import ray, util, util_actor_pool
from compat_tests.helpers import SignalActor


@ray.remote(num_cpus=0)
class Worker:
    def double(self, value):
        return 2 * value

    def pair(self, value):
        return value, value + 1

    def wait_for(self, signal, value):
        ray.get(signal.wait.remote())
        return value

    def fail(self, value):
        raise ValueError(f"bad value {value}")


@pytest.fixture
def pool(ray_start_regular_shared):
    return util.ActorPool([Worker.remote(), Worker.remote()])


def _double(actor, value):
    return actor.double.remote(value)


def test_actor_pool__importable(ray_start_regular_shared):
    assert util.ActorPool is util_actor_pool.ActorPool


def test_actor_pool__get_next(pool):
    for value in range(6):
        pool.submit(_double, value)
    assert [pool.get_next() for _ in range(6)] == [0, 2, 4, 6, 8, 10]
    assert not pool.has_next()


def test_actor_pool__get_next_unordered(pool):
    for value in range(6):
        pool.submit(_double, value)
    results = []
    while pool.has_next():
        results.append(pool.get_next_unordered())
    assert sorted(results) == [0, 2, 4, 6, 8, 10]


def test_actor_pool__nothing_submitted_raises_stop_iteration(pool):
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    with pytest.raises(StopIteration):
        pool.get_next_unordered()


def test_actor_pool__map(pool):
    assert list(pool.map(_double, range(10))) == [2 * v for v in range(10)]
    # The pool is reusable afterwards.
    assert list(pool.map(_double, [5])) == [10]


def test_actor_pool__map_unordered(pool):
    assert sorted(pool.map_unordered(_double, range(10))) == [2 * v for v in range(10)]


def test_actor_pool__more_work_than_actors(pool):
    for value in range(5):
        pool.submit(_double, value)
    assert not pool.has_free()  # both actors busy, the rest waits in the pool
    assert [pool.get_next() for _ in range(5)] == [0, 2, 4, 6, 8]
    assert pool.has_free()


def test_actor_pool__multiple_returns(pool):
    def pair(actor, value):
        return actor.pair.options(num_returns=2).remote(value)

    assert list(pool.map(pair, [1, 2, 3])) == [[1, 2], [2, 3], [3, 4]]


def test_actor_pool__get_next_timeout(ray_start_regular_shared):
    signal = SignalActor.remote()
    pool = util.ActorPool([Worker.remote()])
    pool.submit(lambda actor, value: actor.wait_for.remote(signal, value), "late")
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.2)
    assert pool.has_next()  # the result is still pending, not lost
    signal.send.remote()
    assert pool.get_next(timeout=60) == "late"


def test_actor_pool__get_next_unordered_timeout(ray_start_regular_shared):
    signal = SignalActor.remote()
    pool = util.ActorPool([Worker.remote()])
    pool.submit(lambda actor, value: actor.wait_for.remote(signal, value), "late")
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.2)
    signal.send.remote()
    assert pool.get_next_unordered(timeout=60) == "late"


def test_actor_pool__get_next_ignore_if_timedout(ray_start_regular_shared):
    signal = SignalActor.remote()
    pool = util.ActorPool([Worker.remote()])
    pool.submit(lambda actor, value: actor.wait_for.remote(signal, value), "ignored")
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.2, ignore_if_timedout=True)
    assert not pool.has_next()  # the timed-out result was dropped
    signal.send.remote()
    pool.submit(_double, 4)
    assert pool.get_next(timeout=60) == 8


def test_actor_pool__push_and_pop_idle(ray_start_regular_shared):
    first, second = Worker.remote(), Worker.remote()
    pool = util.ActorPool([first])
    pool.push(second)
    with pytest.raises(ValueError):
        pool.push(second)  # already in the pool
    popped = [pool.pop_idle(), pool.pop_idle()]
    assert all(p is not None for p in popped)
    assert pool.pop_idle() is None
    assert not pool.has_free()
    pool.push(popped[0])
    assert pool.has_free()
    assert list(pool.map(_double, [1, 2])) == [2, 4]


def test_actor_pool__push_serves_pending_work(ray_start_regular_shared):
    pool = util.ActorPool([])
    pool.submit(_double, 21)  # no actor yet: waits in the pool
    assert not pool.has_free()
    pool.push(Worker.remote())  # the waiting submission starts on the new actor
    assert pool.get_next(timeout=60) == 42


def test_actor_pool__task_error_propagates(pool):
    pool.submit(lambda actor, value: actor.fail.remote(value), 7)
    with pytest.raises(ValueError, match="bad value 7"):
        pool.get_next()
    # The actor went back to the pool.
    assert list(pool.map(_double, range(4))) == [0, 2, 4, 6]
