"""Concurrency groups: per-group threads (sync actors) and event loops (async actors).

Mirrors Ray's test_concurrency_group.py (ray-api.md §1.4).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from compat_tests._backend import ray
from compat_tests.helpers import wait_for_condition


@ray.remote(num_cpus=0, concurrency_groups={"io": 2, "compute": 1})
class Grouped:
    def __init__(self):
        self.release = threading.Event()
        self.barrier = threading.Barrier(2)
        self.blocked = 0

    @ray.method(concurrency_group="io")
    def io_thread(self):
        return threading.get_ident()

    @ray.method(concurrency_group="compute")
    def compute_thread(self):
        return threading.get_ident()

    def default_thread(self):
        return threading.get_ident()

    @ray.method(concurrency_group="io")
    def meet_in_io(self, i):
        # Returns only when two "io" calls run at the same time.
        self.barrier.wait(timeout=60)
        return i

    @ray.method(concurrency_group="compute")
    def block_compute(self):
        self.blocked += 1
        return self.release.wait(timeout=60)

    @ray.method(concurrency_group="io")
    def blocked_count(self):
        return self.blocked

    @ray.method(concurrency_group="io")
    def unblock(self):
        self.release.set()


def test_concurrency_group__basic(ray_start_regular_shared):
    actor = Grouped.remote()
    io = set(ray.get([actor.io_thread.remote() for _ in range(4)]))
    compute = set(ray.get([actor.compute_thread.remote() for _ in range(4)]))
    default = set(ray.get([actor.default_thread.remote() for _ in range(4)]))
    assert len(compute) == 1 and len(default) == 1
    assert 1 <= len(io) <= 2
    assert io.isdisjoint(compute) and io.isdisjoint(default) and compute.isdisjoint(default)
    # The "io" group runs two calls at once.
    assert sorted(ray.get([actor.meet_in_io.remote(i) for i in range(2)], timeout=90)) == [0, 1]


def test_concurrency_group__no_blocking_across_groups(ray_start_regular_shared):
    actor = Grouped.remote()
    blocked = actor.block_compute.remote()
    wait_for_condition(lambda: ray.get(actor.blocked_count.remote()) == 1)
    # The compute group is busy; the default and io groups still answer.
    assert isinstance(ray.get(actor.default_thread.remote(), timeout=60), int)
    assert ray.wait([blocked], timeout=0)[0] == []
    actor.unblock.remote()
    assert ray.get(blocked, timeout=60) is True


def test_concurrency_group__options_override(ray_start_regular_shared):
    actor = Grouped.remote()
    io_thread = ray.get(actor.io_thread.remote())
    compute_threads = set(ray.get([actor.compute_thread.remote() for _ in range(2)]))
    # A method can be sent to another group for one call.
    moved = ray.get(actor.default_thread.options(concurrency_group="compute").remote())
    assert moved in compute_threads
    moved_io = ray.get(actor.compute_thread.options(concurrency_group="io").remote())
    assert moved_io not in compute_threads
    assert isinstance(io_thread, int)


def test_concurrency_group__declared_in_decorator_only(ray_start_regular_shared):
    class Plain:
        def __init__(self):
            self.barrier = threading.Barrier(3)

        def meet(self, i):
            self.barrier.wait(timeout=60)
            return i

    # Groups are part of the class definition (functional decorator form here); a method with
    # no group of its own is sent to one per call through .options().
    actor = ray.remote(num_cpus=0, concurrency_groups={"wide": 3})(Plain).remote()
    refs = [actor.meet.options(concurrency_group="wide").remote(i) for i in range(3)]
    assert sorted(ray.get(refs, timeout=90)) == [0, 1, 2]
    # They cannot be changed when the actor is created.
    with pytest.raises(ValueError):
        ray.remote(Plain).options(concurrency_groups={"wide": 3})


def test_concurrency_group__async_actor_groups(ray_start_regular_shared):
    @ray.remote(num_cpus=0, concurrency_groups={"slow": 1, "fast": 1})
    class AsyncGrouped:
        def __init__(self):
            self.gate = threading.Event()
            self.entered = 0

        @ray.method(concurrency_group="slow")
        async def hold_the_loop(self):
            self.entered += 1
            # Blocks this group's event loop thread (deliberately not awaiting).
            return self.gate.wait(timeout=60)

        @ray.method(concurrency_group="fast")
        async def entered_count(self):
            await asyncio.sleep(0)
            return self.entered

        @ray.method(concurrency_group="fast")
        async def open_gate(self):
            self.gate.set()
            return threading.get_ident()

        async def default_loop_thread(self):
            return threading.get_ident()

    actor = AsyncGrouped.remote()
    held = actor.hold_the_loop.remote()
    wait_for_condition(lambda: ray.get(actor.entered_count.remote()) == 1)
    default_thread = ray.get(actor.default_loop_thread.remote(), timeout=60)
    fast_thread = ray.get(actor.open_gate.remote(), timeout=60)
    assert ray.get(held, timeout=60) is True
    assert fast_thread != default_thread
