"""Async actors: one event loop per actor, concurrency, ``await`` of refs inside methods.

Mirrors Ray's test_asyncio.py (ray-api.md §1.4 "Async actors").
"""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import wait_for_condition


def test_asyncio__asyncio_actor(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Rendezvous:
        def __init__(self):
            self.event = asyncio.Event()
            self.waiting = 0

        async def wait(self, i):
            self.waiting += 1
            await self.event.wait()
            return i

        async def waiting_count(self):
            return self.waiting

        async def release(self):
            self.event.set()

    actor = Rendezvous.remote()
    refs = [actor.wait.remote(i) for i in range(5)]
    # All five coroutines are suspended in the actor at the same time.
    wait_for_condition(lambda: ray.get(actor.waiting_count.remote()) == 5)
    actor.release.remote()
    assert ray.get(refs, timeout=60) == [0, 1, 2, 3, 4]


def test_asyncio__asyncio_actor_concurrency(ray_start_regular_shared):
    @ray.remote(max_concurrency=1, num_cpus=0)
    class OneAtATime:
        def __init__(self):
            self.log = []

        async def step(self, i):
            self.log.append(("start", i))
            await asyncio.sleep(0.01)
            self.log.append(("end", i))

        async def history(self):
            return self.log

    actor = OneAtATime.remote()
    ray.get([actor.step.remote(i) for i in range(4)])
    history = ray.get(actor.history.remote())
    # Each call ends before the next one starts. (Async actors do not promise submission
    # order, so only the pairing is checked.)
    assert len(history) == 8
    pairs = [history[k : k + 2] for k in range(0, 8, 2)]
    assert all(p[0] == ("start", p[1][1]) and p[1][0] == "end" for p in pairs)
    assert sorted(p[0][1] for p in pairs) == [0, 1, 2, 3]


def test_asyncio__max_concurrency_caps_coroutines(ray_start_regular_shared):
    @ray.remote(max_concurrency=2, num_cpus=0)
    class Capped:
        def __init__(self):
            self.active = 0
            self.peak = 0
            self.arrived = 0
            self.both_in = asyncio.Event()

        async def work(self):
            self.active += 1
            self.arrived += 1
            self.peak = max(self.peak, self.active)
            if self.arrived == 2:
                self.both_in.set()
            # The first two calls meet here, proving two run at once.
            await asyncio.wait_for(self.both_in.wait(), timeout=60)
            await asyncio.sleep(0.005)
            self.active -= 1

        async def peak_seen(self):
            return self.peak

    actor = Capped.remote()
    ray.get([actor.work.remote() for _ in range(8)], timeout=90)
    assert ray.get(actor.peak_seen.remote()) == 2


def test_asyncio__asyncio_actor_same_thread(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Mixed:
        def sync_thread(self):
            return threading.get_ident()

        async def async_thread(self):
            return threading.get_ident()

    actor = Mixed.remote()
    idents = ray.get([actor.sync_thread.remote(), actor.async_thread.remote()] * 3)
    assert len(set(idents)) == 1


def test_asyncio__asyncio_actor_high_concurrency(ray_start_regular_shared):
    callers = sys.getrecursionlimit() + 100

    @ray.remote(max_concurrency=callers + 10, num_cpus=0)
    class Many:
        def __init__(self):
            self.event = asyncio.Event()
            self.waiting = 0

        async def wait(self):
            self.waiting += 1
            await self.event.wait()
            return 1

        async def waiting_count(self):
            return self.waiting

        async def release(self):
            self.event.set()

    actor = Many.remote()
    refs = [actor.wait.remote() for _ in range(callers)]
    wait_for_condition(lambda: ray.get(actor.waiting_count.remote()) == callers, timeout=60)
    actor.release.remote()
    assert sum(ray.get(refs, timeout=120)) == callers


def test_asyncio__asyncio_actor_async_get(ray_start_regular_shared):
    @ray.remote
    def square(x):
        return x * x

    @ray.remote(num_cpus=0)
    class Helper:
        async def double(self, x):
            return 2 * x

    @ray.remote(num_cpus=0)
    class Awaiter:
        def __init__(self, helper):
            self.helper = helper

        async def task_result(self, x):
            return await square.remote(x)

        async def actor_result(self, x):
            return await self.helper.double.remote(x)

        async def gathered(self):
            return await asyncio.gather(square.remote(2), self.helper.double.remote(5))

        async def passed_in(self, refs):
            return await refs[0]

    actor = Awaiter.remote(Helper.remote())
    assert ray.get(actor.task_result.remote(6)) == 36
    assert ray.get(actor.actor_result.remote(4)) == 8
    assert ray.get(actor.gathered.remote()) == [4, 10]
    assert ray.get(actor.passed_in.remote([ray.put("nested")])) == "nested"


def test_asyncio__async_actor_errors_are_dual_typed(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Failing:
        async def fail(self):
            await asyncio.sleep(0)
            raise ZeroDivisionError("async failure")

        async def ok(self):
            return "still alive"

    actor = Failing.remote()
    with pytest.raises(ZeroDivisionError):
        ray.get(actor.fail.remote())
    with pytest.raises(exceptions.RayTaskError):
        ray.get(actor.fail.remote())
    assert ray.get(actor.ok.remote()) == "still alive"


def test_asyncio__async_actor_keeps_state(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self):
            self.value = 0

        async def add(self, n):
            self.value += n
            return self.value

    counter = Counter.remote()
    # Async actors do not promise submission order, but every call sees the shared state.
    assert sorted(ray.get([counter.add.remote(1) for _ in range(5)])) == [1, 2, 3, 4, 5]
    assert ray.get(counter.add.remote(0)) == 5
