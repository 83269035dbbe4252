"""Tests of fray_ray.util.queue: blocking and non-blocking put/get, batches, async, sharing, shutdown.

Expectations marked "observed" were checked against Ray 2.60.0.
"""

from __future__ import annotations

import asyncio
import doctest
import inspect
import pickle
import queue as stdlib_queue

import pytest

import fray_ray as ray
from fray_ray.util import queue as util_queue
from fray_ray.util.queue import Empty, Full, Queue


@pytest.fixture(scope="module", autouse=True)
def session():
    ray.init(local_mode=True, num_cpus=4)
    yield
    ray.shutdown()


@ray.remote
def consume(q, count=1):
    return [q.get(timeout=30) for _ in range(count)]


@ray.remote
def produce(q, items):
    for item in items:
        q.put(item, timeout=30)
    return len(items)


@ray.remote(num_cpus=0)
class Holder:
    def __init__(self, q):
        self.q = q

    def put(self, item):
        self.q.put(item)

    async def get(self):
        return await self.q.get_async(timeout=30)


def test_signatures_match_ray():
    # Observed with inspect.signature on Ray 2.60.0 (names and defaults).
    empty = inspect.Parameter.empty
    expected = {
        "__init__": [("maxsize", 0), ("actor_options", None)],
        "put": [("item", empty), ("block", True), ("timeout", None)],
        "put_async": [("item", empty), ("block", True), ("timeout", None)],
        "get": [("block", True), ("timeout", None)],
        "get_async": [("block", True), ("timeout", None)],
        "put_nowait": [("item", empty)],
        "get_nowait": [],
        "put_nowait_batch": [("items", empty)],
        "get_nowait_batch": [("num_items", empty)],
        "qsize": [],
        "size": [],
        "empty": [],
        "full": [],
        "shutdown": [("force", False), ("grace_period_s", 5)],
    }
    for name, parameters in expected.items():
        signature = inspect.signature(getattr(Queue, name))
        assert [(p.name, p.default) for p in signature.parameters.values()][1:] == parameters, name
    assert inspect.iscoroutinefunction(Queue.get_async) and inspect.iscoroutinefunction(Queue.put_async)


def test_fifo_and_sizes():
    q = Queue(maxsize=3)
    assert (q.qsize(), q.size(), len(q), q.empty(), q.full()) == (0, 0, 0, True, False)
    q.put("a")
    q.put_nowait("b")
    q.put("c", block=False)
    assert (q.qsize(), q.empty(), q.full()) == (3, False, True)
    assert [q.get(), q.get_nowait(), q.get(block=False)] == ["a", "b", "c"]
    assert q.empty()


def test_errors_are_the_stdlib_kinds_and_raised_plainly():
    assert issubclass(Empty, stdlib_queue.Empty) and issubclass(Full, stdlib_queue.Full)
    q = Queue(maxsize=1)
    with pytest.raises(stdlib_queue.Empty) as empty:
        q.get_nowait()
    assert type(empty.value) is Empty  # not a task error wrapping it
    q.put(1)
    with pytest.raises(stdlib_queue.Full) as full:
        q.put_nowait(2)
    assert type(full.value) is Full


def test_timeouts():
    q = Queue(maxsize=1)
    with pytest.raises(Empty):
        q.get(timeout=0.05)
    with pytest.raises(Empty):
        q.get(timeout=0)
    q.put("x", timeout=0)  # room: a zero timeout still succeeds (Ray raises Full here)
    with pytest.raises(Full):
        q.put("y", timeout=0.05)
    assert q.get(timeout=0) == "x"


def test_negative_timeout_is_rejected_only_when_blocking():
    # Observed: ValueError when blocking; without blocking the timeout is ignored.
    q = Queue()
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    with pytest.raises(ValueError):
        q.put(1, timeout=-1)
    with pytest.raises(Empty):
        q.get(block=False, timeout=-1)
    q.put(1, block=False, timeout=-1)
    assert q.qsize() == 1


def test_blocking_get_waits_for_a_producer():
    q = Queue()
    waiting = consume.remote(q)
    assert ray.wait([waiting], timeout=0.05)[0] == []
    q.put("delivered")
    assert ray.get(waiting, timeout=30) == ["delivered"]


def test_blocking_put_waits_for_room():
    q = Queue(maxsize=1)
    q.put(0)
    producing = produce.remote(q, [1])
    assert ray.wait([producing], timeout=0.05)[0] == []
    assert q.get() == 0
    assert ray.get(producing, timeout=30) == 1
    assert q.get() == 1


def test_many_producers_and_consumers():
    q = Queue(maxsize=4)
    consumers = [consume.remote(q, 10) for _ in range(2)]
    producers = [produce.remote(q, range(start, start + 10)) for start in (0, 10)]
    assert ray.get(producers, timeout=30) == [10, 10]
    got = ray.get(consumers, timeout=30)
    assert sorted(got[0] + got[1]) == list(range(20))
    for items in got:  # each producer's items reach each consumer in order
        assert [i for i in items if i < 10] == sorted(i for i in items if i < 10)


def test_put_nowait_batch_is_all_or_nothing():
    q = Queue(maxsize=3)
    q.put("first")
    with pytest.raises(Full):
        q.put_nowait_batch([1, 2, 3])
    assert q.qsize() == 1
    q.put_nowait_batch(iter([1, 2]))  # any iterable (Ray needs a sized one)
    q.put_nowait_batch([])
    assert q.get_nowait_batch(3) == ["first", 1, 2]
    with pytest.raises(TypeError):
        q.put_nowait_batch(5)


def test_get_nowait_batch_needs_enough_items():
    # Observed: asking for more than is queued raises Empty and removes nothing.
    q = Queue()
    q.put_nowait_batch(["a", "b"])
    with pytest.raises(Empty):
        q.get_nowait_batch(3)
    assert q.qsize() == 2
    assert q.get_nowait_batch(0) == []
    with pytest.raises(ValueError):
        q.get_nowait_batch(-1)
    for bad in (1.0, True, "1"):
        with pytest.raises(TypeError):
            q.get_nowait_batch(bad)
    assert q.get_nowait_batch(2) == ["a", "b"]


@pytest.mark.parametrize("maxsize", [0, -1])
def test_non_positive_maxsize_is_unbounded(maxsize):
    q = Queue(maxsize=maxsize)
    q.put_nowait_batch(range(100))
    assert q.qsize() == 100 and not q.full()


def test_async_put_and_get():
    q = Queue(maxsize=1)

    async def main():
        waiting = asyncio.ensure_future(q.get_async(timeout=30))
        await q.put_async("x")
        first = await waiting
        await q.put_async("y")
        with pytest.raises(Full):
            await q.put_async("z", block=False)
        with pytest.raises(Full):
            await q.put_async("z", timeout=0.05)
        with pytest.raises(ValueError):
            await q.get_async(timeout=-1)
        second = await q.get_async()
        with pytest.raises(Empty):
            await q.get_async(block=False)
        with pytest.raises(Empty):
            await q.get_async(timeout=0.05)
        return first, second

    assert asyncio.run(main()) == ("x", "y")


def test_queue_is_shared_with_tasks_and_actors():
    q = Queue()
    copy = pickle.loads(pickle.dumps(q))
    copy.put(1)
    assert q.get() == 1
    holder = Holder.remote(q)
    ray.get(holder.put.remote("from actor"))
    assert q.get() == "from actor"
    q.put("to actor")
    assert ray.get(holder.get.remote(), timeout=30) == "to actor"


def test_object_ref_item_is_stored_as_its_value():
    # Observed: a top-level ObjectRef is resolved like any actor-call argument.
    q = Queue()
    q.put(ray.put(5))
    assert q.get() == 5
    q.put_nowait(ray.put(6))
    assert q.get_nowait() == 6


def test_nested_object_ref_item_stays_a_ref():
    # Observed: a ref inside the item is passed through as a ref, and stays usable.
    q = Queue()
    for value in range(20):
        q.put([ray.put(value)])
        (nested,) = q.get()
        assert ray.get(nested, timeout=30) == value


def test_actor_options():
    before = ray.available_resources().get("CPU", 0)
    free = Queue()
    free.put(1)  # the actor exists once a call went through
    assert ray.available_resources().get("CPU", 0) == before  # num_cpus=0 by default
    named = Queue(actor_options={"name": "util-queue-test", "num_cpus": 1})
    named.put(1)
    assert ray.available_resources().get("CPU", 0) == before - 1
    assert ray.get_actor("util-queue-test") == named.actor
    free.shutdown()
    named.shutdown()


@pytest.mark.parametrize("force", [False, True])
def test_shutdown(force):
    q = Queue()
    q.put(1)
    elsewhere = ray.get(ray.put([q]))[0]  # a copy made before the shutdown
    q.shutdown(force=force, grace_period_s=5)
    assert q.actor is None
    # Observed: this handle's methods fail on its None actor (AttributeError), a copy's on the dead actor.
    for name, call in (("qsize", q.qsize), ("put", lambda: q.put(2)), ("get_nowait", q.get_nowait),
                       ("get_nowait_batch", lambda: q.get_nowait_batch(1))):
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            call()
    with pytest.raises(AttributeError, match="'get'"):
        asyncio.run(q.get_async())
    with pytest.raises(ray.exceptions.RayActorError):
        elsewhere.qsize()  # the actor is dead for every copy
    q.shutdown()  # a second shutdown does nothing
    elsewhere.shutdown()


# Known runtime bug: killing an async actor with a call pending leaves that coroutine on the
# stopped loop; when it is collected (at the latest at interpreter exit) Python prints "Task was
# destroyed but it is pending!" and a ValueError from a ContextVar reset. Noise only: it does not
# make this test or any other fail.
def test_shutdown_releases_a_blocked_consumer():
    q = Queue()
    waiting = consume.remote(q)
    assert ray.wait([waiting], timeout=0.05)[0] == []
    q.shutdown(force=True)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(waiting, timeout=30)


def test_docstring_examples_run():
    result = doctest.testmod(util_queue, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
