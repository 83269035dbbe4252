"""Large put buffers, and the large buffers a worker receives, are reused once freed, never
while an array built on them still uses them."""

from __future__ import annotations

import os
import socket
import threading

import numpy as np

import fray_ray as ray
from fray_ray._private.core import runtime_state
from fray_ray._private.objects.shared_memory import SHARED_MEMORY_DIR_ENV
from fray_ray._private.stream.buffers import MIN_POOLED, BufferPool, ReceivedBlocks
from fray_ray._private.stream.protocol import Connection


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


def test_a_received_block_is_taken_again_only_once_nothing_references_it() -> None:
    blocks = ReceivedBlocks()
    assert blocks.take(MIN_POOLED) is None  # nothing listed yet
    block = bytearray(MIN_POOLED)
    blocks.keep(block)
    array = np.frombuffer(memoryview(block).toreadonly(), dtype=np.uint8)  # a task's argument
    del block
    assert blocks.take(MIN_POOLED) is None  # the array still reads it
    del array
    again = blocks.take(MIN_POOLED)
    assert again is not None and len(again) == MIN_POOLED
    assert blocks.take(MIN_POOLED) is None  # `again` is in use now
    assert blocks.take(MIN_POOLED - 1) is None  # below the pooled size: never from blocks


def test_a_longer_free_block_is_cut_to_size_and_a_much_longer_one_is_not_used() -> None:
    blocks = ReceivedBlocks()
    blocks.keep(bytearray(3 * MIN_POOLED))
    assert blocks.take(MIN_POOLED) is None  # more than twice as long
    cut = blocks.take(2 * MIN_POOLED)
    assert cut is not None and len(cut) == 2 * MIN_POOLED and blocks.kept == 2 * MIN_POOLED


def test_received_blocks_stay_within_their_limit_dropping_free_ones_first() -> None:
    blocks = ReceivedBlocks(max_kept=2 * MIN_POOLED)
    held = bytearray(MIN_POOLED)
    blocks.keep(held)
    blocks.keep(bytearray(MIN_POOLED))  # free at once: nothing else references it
    assert blocks.kept == 2 * MIN_POOLED
    newest = bytearray(MIN_POOLED)
    blocks.keep(newest)  # the free block makes room; the held one stays
    assert blocks.kept == 2 * MIN_POOLED
    blocks.keep(bytearray(MIN_POOLED))  # no free block left to drop: not listed
    assert blocks.kept == 2 * MIN_POOLED
    blocks.keep(bytearray(3 * MIN_POOLED))  # larger than the whole limit
    assert blocks.kept == 2 * MIN_POOLED
    del newest
    assert blocks.take(MIN_POOLED) is not None


def test_a_connection_reads_large_buffers_into_free_blocks_and_never_into_used_ones(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = tcp_pair
    blocks = ReceivedBlocks()
    received: list[bytearray] = []
    arrived = threading.Semaphore(0)

    def on_value(connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        received.append(buffers[0])
        arrived.release()

    sender = Connection(ours, name="sender")
    reader = Connection(theirs, name="reader", received_blocks=blocks).start({"value": on_value})
    try:
        first_bytes = np.full(2 * MIN_POOLED, 1, dtype=np.uint8)
        sender.notify("value", None, [first_bytes])
        assert arrived.acquire(timeout=30)
        first = np.frombuffer(received.pop(), dtype=np.uint8)  # still used below
        sender.notify("value", None, [np.full(2 * MIN_POOLED, 2, dtype=np.uint8)])
        assert arrived.acquire(timeout=30)
        second = received.pop()
        assert second is not first.base and blocks.kept == 4 * MIN_POOLED  # a new block
        assert int(first.sum()) == 2 * MIN_POOLED  # the first argument is intact
        second_id = id(second)
        del second  # free again
        sender.notify("value", None, [np.full(2 * MIN_POOLED, 3, dtype=np.uint8)])
        assert arrived.acquire(timeout=30)
        third = received.pop()
        assert id(third) == second_id and blocks.kept == 4 * MIN_POOLED  # the freed block, reused
        assert np.frombuffer(third, dtype=np.uint8).max() == 3 and int(first.sum()) == 2 * MIN_POOLED
    finally:
        sender.close()
        reader.close()


def test_a_worker_reuses_the_block_of_an_argument_it_has_dropped(cluster_session: object) -> None:
    """8 MB arguments in turn to one actor's process: the second lands in the first one's block,
    while an argument the actor keeps is never overwritten by a later one."""
    size = 8 << 20

    @ray.remote(runtime_env={"env_vars": {SHARED_MEMORY_DIR_ENV: ""}})  # arguments over its stream
    class Receiver:
        def __init__(self) -> None:
            self.kept: np.ndarray | None = None

        def take(self, array: np.ndarray, keep: bool) -> tuple[int, int, bool, int]:
            from fray_ray._private.stream.buffers import WORKER_BLOCKS as blocks

            block = array.base
            while isinstance(block, np.ndarray):
                block = block.base
            block = block.obj  # the received bytearray behind the read-only view
            listed = any(b is block for b in blocks._blocks)
            if keep:
                self.kept = array
            kept_total = int(self.kept.sum()) if self.kept is not None else 0
            return blocks.kept, id(block), listed, kept_total

    receiver = Receiver.remote()
    kept_before, first_id, listed, _ = ray.get(receiver.take.remote(np.ones(size, np.uint8), False))
    assert listed and kept_before >= size
    kept_again, second_id, listed, _ = ray.get(receiver.take.remote(np.full(size, 2, np.uint8), True))
    assert listed and kept_again == kept_before and second_id == first_id  # reused, not allocated
    kept_third, third_id, listed, kept_total = ray.get(receiver.take.remote(np.full(size, 3, np.uint8), False))
    assert listed and third_id != first_id and kept_third == kept_before + size  # the kept one is in use
    assert kept_total == 2 * size  # the argument the actor kept was not overwritten by the third
    ray.kill(receiver)


def test_an_executor_reads_each_task_argument_into_the_block_the_last_one_freed(cluster_session: object) -> None:
    """Tasks in turn, each passed a new 8 MB array: one block serves them all (the executor drops
    a task's arguments before it reports the result), and every task sums its own argument."""
    size = 8 << 20

    # Shared memory turned off: the arguments come down the executor's stream (another host's way).
    @ray.remote(runtime_env={"env_vars": {SHARED_MEMORY_DIR_ENV: ""}})
    def summed(array: np.ndarray) -> tuple[int, int, int]:
        from fray_ray._private.stream.buffers import WORKER_BLOCKS

        return os.getpid(), WORKER_BLOCKS.kept, int(array.sum())

    answers = [ray.get(summed.remote(np.full(size, value, np.uint8))) for value in range(1, 5)]
    assert len({pid for pid, _, _ in answers}) == 1  # one executor ran them all
    assert [kept for _, kept, _ in answers] == [size] * 4
    assert [total for _, _, total in answers] == [value * size for value in range(1, 5)]
