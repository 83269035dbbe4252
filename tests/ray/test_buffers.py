"""Large put buffers are reused once freed, never while an array from `get` still uses them."""

from __future__ import annotations

import numpy as np

import fray_ray as ray
from fray_ray._private import runtime_state
from fray_ray._private.buffers import MIN_POOLED, BufferPool


def test_a_block_is_reused_only_when_nothing_uses_it() -> None:
    pool = BufferPool()
    source = np.arange(MIN_POOLED, dtype=np.uint8)
    first = pool.copy(memoryview(source))
    in_use = np.frombuffer(memoryview(first)[:MIN_POOLED].toreadonly(), dtype=np.uint8)  # what get() hands out
    assert pool.give_back(first) is False  # still exported: left to the collector
    second = pool.copy(memoryview(np.zeros(MIN_POOLED, dtype=np.uint8)))
    assert in_use[:5].tolist() == [0, 1, 2, 3, 4]  # not overwritten: the block was not reused
    del in_use
    assert pool.give_back(second) is True
    third = pool.copy(memoryview(source))
    assert third is second and np.frombuffer(third, dtype=np.uint8)[:3].tolist() == [0, 1, 2]
    assert pool.kept == 0  # the free block was taken again


def test_the_pool_keeps_no_more_than_it_is_given_room_for() -> None:
    pool = BufferPool()
    block = pool.copy(memoryview(np.ones(MIN_POOLED, dtype=np.uint8)))
    assert pool.give_back(block, room=MIN_POOLED - 1) is False
    assert pool.give_back(block, room=MIN_POOLED) is True and pool.kept == MIN_POOLED
    pool.trim(0)
    assert pool.kept == 0


def test_small_buffers_are_plain_bytes() -> None:
    assert isinstance(BufferPool().copy(b"x" * 10), bytes)


def test_put_get_keeps_arrays_intact_while_buffers_are_reused() -> None:
    ray.init(local_mode=True, num_cpus=1)
    try:
        runtime = runtime_state.current()
        held = ray.get(ray.put(np.ones(1_000_000)))  # the ref is gone at once; the array lives on
        for value in range(5):
            ref = ray.put(np.full(1_000_000, float(value)))
            runtime.references.flush()
            assert ray.get(ref)[0] == value
            del ref
        runtime.references.flush()
        assert float(held.sum()) == 1_000_000.0 and held.flags.writeable is False
        assert runtime.objects.store.pool.kept > 0  # freed blocks came back to the pool
    finally:
        ray.shutdown()
