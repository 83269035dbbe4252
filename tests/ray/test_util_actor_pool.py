"""Tests of fray_ray.util.actor_pool: ordering, queueing, timeouts, failures, push/pop.

Expectations marked "observed" were checked against Ray 2.60.0. A `Gate` actor holds calls
back until the test opens it, so "slow" and "fast" calls are ordered without sleeping.
"""

from __future__ import annotations

import asyncio
import doctest
import inspect

import pytest

import fray_ray as ray
from fray_ray.util import actor_pool
from fray_ray.util.actor_pool import ActorPool


@pytest.fixture(scope="module", autouse=True)
def session():
    ray.init(local_mode=True, num_cpus=4)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Gate:
    """Calls to `wait` block until `open` is called."""

    def __init__(self):
        self.opened = asyncio.Event()

    async def wait(self):
        await self.opened.wait()

    async def open(self):
        self.opened.set()


@ray.remote(num_cpus=0)
class Worker:
    def double(self, value):
        return 2 * value

    def pair(self, value):
        return value, value + 1

    def after(self, gate, value):
        ray.get(gate.wait.remote())
        return value

    def fail(self, value):
        raise ValueError(f"bad value {value}")

    def exit(self, value):
        ray.actor.exit_actor()

    def ask(self, other, value):
        return ray.get(other.double.remote(value))


def double(actor, value):
    return actor.double.remote(value)


def gated(gate):
    return lambda actor, value: actor.after.remote(gate, value)


@pytest.fixture
def gate():
    gate = Gate.remote()
    yield gate
    ray.get(gate.open.remote())  # release whatever a test left blocked


def test_signatures_match_ray():
    # Observed with inspect.signature on Ray 2.60.0 (names and defaults).
    expected = {
        "__init__": [("actors", inspect.Parameter.empty)],
        "submit": [("fn", inspect.Parameter.empty), ("value", inspect.Parameter.empty)],
        "get_next": [("timeout", None), ("ignore_if_timedout", False)],
        "get_next_unordered": [("timeout", None), ("ignore_if_timedout", False)],
        "map": [("fn", inspect.Parameter.empty), ("values", inspect.Parameter.empty)],
        "map_unordered": [("fn", inspect.Parameter.empty), ("values", inspect.Parameter.empty)],
        "has_next": [],
        "has_free": [],
        "pop_idle": [],
        "push": [("actor", inspect.Parameter.empty)],
    }
    for name, parameters in expected.items():
        signature = inspect.signature(getattr(ActorPool, name))
        assert [(p.name, p.default) for p in signature.parameters.values()][1:] == parameters, name


def test_get_next_returns_results_in_submission_order(gate):
    pool = ActorPool([Worker.remote(), Worker.remote()])
    pool.submit(gated(gate), "slow")
    pool.submit(double, 2)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.05)  # the oldest call is held back, and it comes first
    ray.get(gate.open.remote())
    assert [pool.get_next(), pool.get_next()] == ["slow", 4]
    assert not pool.has_next()


def test_get_next_unordered_returns_the_first_finished(gate):
    pool = ActorPool([Worker.remote(), Worker.remote()])
    pool.submit(gated(gate), "slow")
    pool.submit(double, 2)
    assert pool.get_next_unordered() == 4
    ray.get(gate.open.remote())
    assert pool.get_next_unordered() == "slow"
    assert not pool.has_next()


def test_nothing_outstanding_raises_stop_iteration():
    # Observed: StopIteration from both, with or without a timeout.
    pool = ActorPool([Worker.remote()])
    for take in (pool.get_next, pool.get_next_unordered):
        with pytest.raises(StopIteration):
            take()
        with pytest.raises(StopIteration):
            take(timeout=0.01)


def test_more_work_than_actors_queues_in_the_pool():
    pool = ActorPool([Worker.remote(), Worker.remote()])
    assert pool.has_free()
    for value in range(5):
        pool.submit(double, value)
    assert not pool.has_free()
    assert [pool.get_next() for _ in range(5)] == [0, 2, 4, 6, 8]
    assert pool.has_free() and not pool.has_next()


def test_map_keeps_order_and_pool_is_reusable():
    pool = ActorPool([Worker.remote(), Worker.remote()])
    assert list(pool.map(double, range(8))) == [2 * v for v in range(8)]
    assert sorted(pool.map_unordered(double, range(8))) == [2 * v for v in range(8)]
    assert list(pool.map(double, [])) == []
    assert list(pool.map(double, iter([5]))) == [10]


def test_map_submits_before_iterating():
    # Observed: map starts the calls it has actors for when called, not when iterated.
    pool = ActorPool([Worker.remote(), Worker.remote()])
    started = []

    def record(actor, value):
        started.append(value)
        return actor.double.remote(value)

    results = pool.map(record, [1, 2, 3])
    assert started == [1, 2]  # the third waits for a free actor
    assert list(results) == [2, 4, 6]
    assert started == [1, 2, 3]


@pytest.mark.parametrize("method", ["map", "map_unordered"])
def test_map_drops_results_of_earlier_submissions(method, gate):
    # Observed: results not taken before map() never show up in its output.
    pool = ActorPool([Worker.remote(), Worker.remote()])
    pool.submit(double, 100)
    pool.submit(gated(gate), "still running")
    results = getattr(pool, method)(double, [1, 2])
    ray.get(gate.open.remote())
    assert sorted(results) == [2, 4]
    assert not pool.has_next()


def test_multiple_returns_come_back_as_a_list():
    pool = ActorPool([Worker.remote()])

    def pair(actor, value):
        return actor.pair.options(num_returns=2).remote(value)

    assert list(pool.map(pair, [1, 2])) == [[1, 2], [2, 3]]
    pool.submit(pair, 5)
    assert pool.get_next(timeout=30) == [5, 6]
    pool.submit(pair, 7)
    assert pool.get_next_unordered(timeout=30) == [7, 8]


@pytest.mark.parametrize("take", ["get_next", "get_next_unordered"])
def test_timeout_keeps_the_call(take, gate):
    pool = ActorPool([Worker.remote()])
    pool.submit(gated(gate), "late")
    with pytest.raises(TimeoutError):
        getattr(pool, take)(timeout=0.05)
    assert pool.has_next() and not pool.has_free()
    ray.get(gate.open.remote())
    assert getattr(pool, take)(timeout=30) == "late"


@pytest.mark.parametrize("take", ["get_next", "get_next_unordered"])
def test_ignore_if_timedout_drops_the_call_and_frees_its_actor(take, gate):
    # Observed (get_next): the result is dropped and the actor is idle again at once; work
    # submitted next runs on it after the dropped call. Ray's get_next_unordered fails here
    # with UnboundLocalError; fray_ray treats it as get_next does.
    pool = ActorPool([Worker.remote()])
    pool.submit(gated(gate), "dropped")
    with pytest.raises(TimeoutError, match="dropped"):
        getattr(pool, take)(timeout=0.05, ignore_if_timedout=True)
    assert not pool.has_next() and pool.has_free()
    pool.submit(double, 4)
    ray.get(gate.open.remote())
    assert pool.get_next(timeout=30) == 8


def test_task_error_raises_and_keeps_the_actor():
    pool = ActorPool([Worker.remote()])
    pool.submit(lambda actor, value: actor.fail.remote(value), 7)
    with pytest.raises(ValueError, match="bad value 7"):
        pool.get_next()
    assert pool.has_free()
    assert list(pool.map(double, [1, 2])) == [2, 4]


def test_dead_actor_leaves_the_pool():
    # Observed: after ActorDiedError the actor is not idle again.
    survivor = Worker.remote()
    pool = ActorPool([Worker.remote()])
    pool.submit(lambda actor, value: actor.exit.remote(value), None)
    with pytest.raises(ray.exceptions.ActorDiedError):
        pool.get_next_unordered()
    assert pool.pop_idle() is None and not pool.has_next()
    pool.push(survivor)
    assert list(pool.map(double, [3])) == [6]


def test_method_that_calls_a_dead_actor_keeps_its_actor():
    # The error is the method's own (a RayTaskError wrapping ActorDiedError): the pool's
    # actor is alive and stays in the pool.
    dead = Worker.remote()
    ray.kill(dead)
    pool = ActorPool([Worker.remote()])
    pool.submit(lambda actor, value: actor.ask.remote(dead, value), 1)
    with pytest.raises(ray.exceptions.RayTaskError):
        pool.get_next()
    assert pool.has_free()


def test_push_and_pop_idle():
    first, second = Worker.remote(), Worker.remote()
    pool = ActorPool([first])
    pool.push(second)
    with pytest.raises(ValueError):
        pool.push(second)  # already idle in the pool
    popped = {pool.pop_idle(), pool.pop_idle()}
    assert popped == {first, second}
    assert pool.pop_idle() is None and not pool.has_free()
    pool.push(first)
    assert pool.has_free()


def test_push_rejects_a_busy_actor_and_serves_waiting_work(gate):
    worker = Worker.remote()
    pool = ActorPool([])
    pool.submit(double, 21)  # observed: waits, and has_next() is False until an actor comes
    assert not pool.has_next() and not pool.has_free()
    pool.push(worker)
    assert pool.has_next()
    with pytest.raises(ValueError):
        pool.push(worker)  # busy with the call it just started
    assert pool.get_next(timeout=30) == 42


def test_pop_idle_skips_busy_actors(gate):
    busy, idle = Worker.remote(), Worker.remote()
    pool = ActorPool([idle, busy])
    pool.submit(gated(gate), "x")  # takes the last actor of the list
    assert pool.pop_idle() == idle
    assert pool.pop_idle() is None


def test_get_next_after_get_next_unordered_returns_the_oldest_left(gate):
    # Ray raises ValueError or skips results when the two are mixed; fray_ray's get_next
    # always returns the oldest result not yet taken.
    pool = ActorPool([Worker.remote(), Worker.remote(), Worker.remote()])
    pool.submit(gated(gate), "first")
    pool.submit(double, 1)
    pool.submit(double, 2)
    assert pool.get_next_unordered() in (2, 4)
    ray.get(gate.open.remote())
    assert pool.get_next() == "first"
    assert pool.get_next() in (2, 4)
    assert not pool.has_next()


def test_fn_that_raises_or_returns_no_ref_leaves_the_actor_idle():
    pool = ActorPool([Worker.remote()])

    def broken(actor, value):
        raise RuntimeError("before any call")

    with pytest.raises(RuntimeError):
        pool.submit(broken, 1)
    with pytest.raises(TypeError, match="ObjectRef"):
        pool.submit(lambda actor, value: value, 1)
    assert pool.has_free() and not pool.has_next()
    assert list(pool.map(double, [1])) == [2]


def test_docstring_examples_run():
    setup = {"Doubler": Worker, "double": double}
    result = doctest.testmod(actor_pool, extraglobs=setup, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
