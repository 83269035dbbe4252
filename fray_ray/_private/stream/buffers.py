"""Reusing the memory of large buffers, so a put or a received frame does not page-fault in
fresh memory.

Copying 100 MB into newly allocated memory costs more in page faults than in copying (the
allocator returns large blocks to the system when they are freed): on this project's test
machine a socket fills a fresh 100 MB buffer at about 1 GB/s and a reused one at about 3 GB/s.
The driver copies large put buffers into blocks from a `BufferPool`, and a block comes back to
the pool when its object is freed, but only once nothing (an array returned by `get`) still
uses it. The driver's blocks are files in shared memory when it has a shared-memory directory
(`shared_memory`), so workers on its host can read them in place. A worker process reads large
frame buffers (a 100 MB argument from a driver on another host) into blocks of its
`ReceivedBlocks`, which finds the free ones by their reference counts.

Whether something still uses a block is read from its reference count: the object store
holds each block in exactly one place and hands out fresh views of it, and every view (and
every array built on one) keeps a reference to the block for as long as it lives.
"""

from __future__ import annotations

import mmap
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

#: A pool block: a bytearray, or a shared-memory block (`shared_memory.SharedBlock`, an mmap).
Block = bytearray | mmap.mmap

#: Buffers smaller than this are plain `bytes` (cheap to allocate, not worth pooling).
MIN_POOLED = 1 << 20
#: At most this many bytes of free blocks are kept.
MAX_KEPT = 1 << 30


def _references_held(holder: Sequence[object], index: int) -> int:
    return sys.getrefcount(holder[index])


#: What `_references_held` reports for an object held by one tuple slot and nothing else.
_ALONE = _references_held((bytearray(1),), 0)


def in_use(holder: Sequence[object], index: int) -> bool:
    """True if the object in `holder[index]` (a tuple's or a list's slot) is referenced from
    anywhere but that slot."""
    return _references_held(holder, index) > _ALONE


class BufferPool:
    """Private copies of buffers, backed by reusable bytearrays. Thread-safe."""

    def __init__(self, max_kept: int = MAX_KEPT, allocate: Callable[[int], Block] = bytearray) -> None:
        """`allocate(size)` makes a new block (the driver's come from shared memory)."""
        self._lock = threading.Lock()  # guards _free and _kept
        self._free: list[Block] = []
        self._kept = 0
        self.max_kept = max_kept
        self._allocate = allocate

    @property
    def kept(self) -> int:
        """Bytes held in free blocks."""
        return self._kept

    def copy(self, source: bytes | bytearray | memoryview) -> bytes | Block:
        """A private copy of `source`: `bytes` when small, else a block at least as long."""
        view = memoryview(source)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        size = view.nbytes
        if size < MIN_POOLED:
            return bytes(view)
        block = self._take(size)
        with memoryview(block) as target:  # a plain memcpy (slice assignment on the bytearray is slower)
            target[:size] = view
        return block

    def _take(self, size: int) -> Block:
        with self._lock:
            fitting = [b for b in self._free if size <= len(b) <= 2 * size]
            if fitting:
                block = min(fitting, key=len)
                self._free.remove(block)
                self._kept -= len(block)
                return block
        return self._allocate(size)

    def give_back(self, block: Block, room: int | None = None) -> bool:
        """Keep `block` for reuse, within `room` bytes of free blocks (and `max_kept`).

        The caller must hold no view of it (its reference count says so). A bytearray that
        anything still exports cannot be resized, so for one a one-byte resize proves it; a
        block marked `tainted` is never kept. Returns True if the block was kept.
        """
        if len(block) < MIN_POOLED or getattr(block, "tainted", False):
            return False
        if isinstance(block, bytearray):
            try:
                last = block[-1]
                del block[-1:]  # BufferError while any view of the block is alive
            except BufferError:
                return False
            block.append(last)
        limit = self.max_kept if room is None else min(self.max_kept, room)
        with self._lock:
            if self._kept + len(block) > limit:
                return False
            self._free.append(block)
            self._kept += len(block)
        return True

    def trim(self, keep: int) -> None:
        """Drop free blocks until at most `keep` bytes are kept."""
        with self._lock:
            while self._free and self._kept > max(keep, 0):
                block = self._free.pop()
                self._kept -= len(block)


class Arrivals(Protocol):
    """Where a connection reads large frame buffers into (`ReceivedBlocks`, or a worker's
    shared blocks for values it fetches from holders: `shared_memory.SharedArrivals`)."""

    def take(self, size: int) -> Block | None:
        """A block of exactly `size` bytes to read into, or None to read into new memory."""

    def keep(self, block: bytearray) -> None:
        """`block`, newly read into because `take` had none, may be reused later."""


#: At most this many bytes of received blocks a worker process keeps (in use or free).
RECEIVED_KEPT = 256 << 20


class ReceivedBlocks:
    """Blocks a worker process reads large frame buffers into, reused once nothing uses them.

    A worker cannot tell when a task drops a fetched argument, so every block handed out stays
    listed here (up to `max_kept` bytes in all), and one is free again when this list is the only
    thing referencing it: the arrays built on a received buffer, and the views of it in the
    worker's object cache, each hold a reference to the block. Only worker processes use this:
    the driver's object store counts references to the buffers it adopts (see `stored_values`),
    which a listing here would pin. Thread-safe.
    """

    def __init__(self, max_kept: int = RECEIVED_KEPT) -> None:
        self._lock = threading.Lock()  # guards _blocks and _kept
        self._blocks: list[bytearray] = []
        self._kept = 0
        self.max_kept = max_kept

    @property
    def kept(self) -> int:
        """Bytes held in listed blocks, in use or not."""
        return self._kept

    def take(self, size: int) -> bytearray | None:
        """A free block of exactly `size` bytes (a longer free one, at most twice as long, is
        cut to size), or None. Its contents are stale: the caller overwrites all of it."""
        if size < MIN_POOLED:
            return None
        with self._lock:
            best, best_length = -1, 0
            for index in range(len(self._blocks)):  # no loop variable: it would hold a reference
                length = len(self._blocks[index])
                if size <= length <= 2 * size and (best < 0 or length < best_length) and not in_use(self._blocks, index):
                    best, best_length = index, length
            if best < 0:
                return None
            block = self._blocks[best]
            if best_length > size:
                del block[size:]
                self._kept -= best_length - size
        return block

    def keep(self, block: bytearray) -> None:
        """List a newly allocated block for reuse, making room by dropping free ones (oldest
        first) if the listing would exceed `max_kept`; a block that still does not fit is
        left to the collector."""
        size = len(block)
        if size < MIN_POOLED or size > self.max_kept:
            return
        with self._lock:
            index = 0
            while self._kept + size > self.max_kept and index < len(self._blocks):
                if not in_use(self._blocks, index):
                    self._kept -= len(self._blocks.pop(index))
                else:
                    index += 1
            if self._kept + size <= self.max_kept:
                self._blocks.append(block)
                self._kept += size


#: This worker process's blocks, shared by its sessions (a lent executor's blocks serve the actor
#: it becomes). Nothing is allocated until a worker's connection reads a large buffer.
WORKER_BLOCKS = ReceivedBlocks()
