"""``ray.util.queue.Queue``: blocking and non-blocking put/get, batches, async, shutdown.

Mirrors Ray's test_queue.py public tests (ray-api.md §1.8).
"""

from __future__ import annotations

import asyncio
import queue as stdlib_queue

import pytest

from compat_tests._backend import exceptions, ray, util_queue
from compat_tests.helpers import wait_for_condition


def _queue(maxsize=0):
    return util_queue.Queue(maxsize=maxsize)


def test_queue__simple_usage(ray_start_regular_shared):
    q = _queue(maxsize=5)
    for item in range(5):
        q.put(item)
    assert [q.get() for _ in range(5)] == [0, 1, 2, 3, 4]  # FIFO


def test_queue__exceptions_subclass_stdlib(ray_start_regular_shared):
    assert issubclass(util_queue.Empty, stdlib_queue.Empty)
    assert issubclass(util_queue.Full, stdlib_queue.Full)


def test_queue__get(ray_start_regular_shared):
    q = _queue()
    with pytest.raises(util_queue.Empty):
        q.get_nowait()
    with pytest.raises(util_queue.Empty):
        q.get(block=False)
    with pytest.raises(util_queue.Empty):
        q.get(timeout=0.2)
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    q.put("item")
    assert q.get(timeout=60) == "item"
    q.put_nowait("again")
    assert q.get_nowait() == "again"


def test_queue__put(ray_start_regular_shared):
    q = _queue(maxsize=1)
    q.put(1)
    with pytest.raises(util_queue.Full):
        q.put_nowait(2)
    with pytest.raises(util_queue.Full):
        q.put(2, block=False)
    with pytest.raises(util_queue.Full):
        q.put(2, timeout=0.2)
    assert q.get() == 1
    q.put(3, timeout=60)
    assert q.get() == 3


def test_queue__get_async(ray_start_regular_shared):
    q = _queue()

    async def main():
        q.put("x")
        first = await q.get_async()
        with pytest.raises(util_queue.Empty):
            await q.get_async(timeout=0.2)
        with pytest.raises(util_queue.Empty):
            await q.get_async(block=False)
        return first

    assert asyncio.run(main()) == "x"


def test_queue__put_async(ray_start_regular_shared):
    q = _queue(maxsize=1)

    async def main():
        await q.put_async("a")
        with pytest.raises(util_queue.Full):
            await q.put_async("b", timeout=0.2)
        with pytest.raises(util_queue.Full):
            await q.put_async("b", block=False)
        return await q.get_async()

    assert asyncio.run(main()) == "a"


def test_queue__blocking_get_waits_for_a_producer(ray_start_regular_shared):
    q = _queue()

    @ray.remote
    def consume(queue):
        return queue.get(timeout=60)

    ref = consume.remote(q)
    assert ray.wait([ref], timeout=0.3)[0] == []  # still waiting
    q.put("delivered")
    assert ray.get(ref, timeout=60) == "delivered"


def test_queue__concurrent_get(ray_start_regular_shared):
    q = _queue()

    @ray.remote
    def consume(queue, n):
        return [queue.get(timeout=60) for _ in range(n)]

    consumers = [consume.remote(q, 5) for _ in range(2)]
    for item in range(10):
        q.put(item)
    results = ray.get(consumers, timeout=60)
    assert sorted(results[0] + results[1]) == list(range(10))
    assert all(r == sorted(r) for r in results)  # each consumer sees FIFO order


def test_queue__concurrent_put(ray_start_regular_shared):
    q = _queue()

    @ray.remote
    def produce(queue, items):
        for item in items:
            queue.put(item)

    ray.get([produce.remote(q, range(0, 5)), produce.remote(q, range(5, 10))])
    assert q.qsize() == 10
    assert sorted(q.get_nowait_batch(10)) == list(range(10))


def test_queue__batch(ray_start_regular_shared):
    q = _queue(maxsize=3)
    with pytest.raises(util_queue.Full):
        q.put_nowait_batch([1, 2, 3, 4])
    assert q.qsize() == 0  # all or nothing
    q.put_nowait_batch([1, 2, 3])
    with pytest.raises(util_queue.Empty):
        q.get_nowait_batch(4)
    assert q.qsize() == 3
    assert q.get_nowait_batch(2) == [1, 2]
    assert q.get_nowait_batch(1) == [3]


def test_queue__qsize(ray_start_regular_shared):
    q = _queue(maxsize=2)
    assert (q.qsize(), q.size(), q.empty(), q.full()) == (0, 0, True, False)
    q.put("a")
    assert (q.qsize(), q.empty(), q.full()) == (1, False, False)
    q.put("b")
    assert (q.qsize(), q.size(), q.empty(), q.full()) == (2, 2, False, True)
    q.get()
    assert q.qsize() == 1
    assert not _queue().full()  # maxsize=0 means unbounded


def test_queue__shutdown(ray_start_regular_shared):
    q = _queue()
    q.put(1)
    elsewhere = ray.get(ray.put([q]))[0]  # another handle to the same queue
    assert elsewhere.qsize() == 1
    q.shutdown()

    def dead():
        try:
            elsewhere.qsize()
        except exceptions.RayActorError:
            return True
        return False

    wait_for_condition(dead)
    with pytest.raises(exceptions.RayActorError):
        elsewhere.put(2)
    q.shutdown()  # a second shutdown is fine


def test_queue__shutdown_handle_methods_raise_attribute_error(ray_start_regular_shared):
    # The handle that shut the queue down drops its actor (`actor` is None), so each method
    # fails reaching for the actor's method: an AttributeError naming it, not a RayActorError.
    q = _queue(maxsize=2)
    q.put(1)
    q.shutdown()
    assert q.actor is None
    calls = {
        "put": lambda: q.put(2),
        "put_nowait": lambda: q.put_nowait(2),
        "put_nowait_batch": lambda: q.put_nowait_batch([2]),
        "get": lambda: q.get(timeout=1),
        "get_nowait": q.get_nowait,
        "get_nowait_batch": lambda: q.get_nowait_batch(1),
        "qsize": q.size,
        "empty": q.empty,
        "full": q.full,
    }
    for method, call in calls.items():
        with pytest.raises(AttributeError, match=f"'NoneType' object has no attribute '{method}'") as info:
            call()
        assert not isinstance(info.value, exceptions.RayActorError)
    with pytest.raises(AttributeError, match="'qsize'"):
        q.qsize()
    with pytest.raises(AttributeError, match="'qsize'"):
        len(q)
    with pytest.raises(AttributeError, match="'put'"):
        asyncio.run(q.put_async(1))
    with pytest.raises(AttributeError, match="'get'"):
        asyncio.run(q.get_async(timeout=1))


def test_queue__forced_shutdown_kills_the_actor(ray_start_regular_shared):
    q = _queue()
    q.put("x")
    elsewhere = ray.get(ray.put([q]))[0]
    q.shutdown(force=True, grace_period_s=1)
    assert q.actor is None

    def dead():
        try:
            elsewhere.get_nowait()
        except exceptions.RayActorError:
            return True
        return False

    wait_for_condition(dead)
    q.shutdown(force=True)  # again: nothing to do
