"""Reusing the memory of large stored values, so a put does not page-fault in fresh memory.

Copying 100 MB into newly allocated memory costs more in page faults than in copying (the
allocator returns large blocks to the system when they are freed). The driver copies large
put buffers into blocks from this pool instead, and a block comes back to the pool when its
object is freed, but only once nothing (an array returned by `get`) still uses it.

Whether something still uses a block is read from its reference count: the object store
holds each block in exactly one place and hands out fresh views of it, and every view (and
every array built on one) keeps a reference to the block for as long as it lives.
"""

from __future__ import annotations

import sys
import threading

#: Buffers smaller than this are plain `bytes` (cheap to allocate, not worth pooling).
MIN_POOLED = 1 << 20
#: At most this many bytes of free blocks are kept.
MAX_KEPT = 1 << 30


def _references_held(holder: tuple, index: int) -> int:
    return sys.getrefcount(holder[index])


#: What `_references_held` reports for an object held by one tuple slot and nothing else.
_ALONE = _references_held((bytearray(1),), 0)


def in_use(holder: tuple, index: int) -> bool:
    """True if the object in `holder[index]` is referenced from anywhere but that slot."""
    return _references_held(holder, index) > _ALONE


class BufferPool:
    """Private copies of buffers, backed by reusable bytearrays. Thread-safe."""

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self._lock = threading.Lock()  # guards _free and _kept
        self._free: list[bytearray] = []
        self._kept = 0
        self.max_kept = max_kept

    @property
    def kept(self) -> int:
        """Bytes held in free blocks."""
        return self._kept

    def copy(self, source: bytes | bytearray | memoryview) -> bytes | bytearray:
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

    def _take(self, size: int) -> bytearray:
        with self._lock:
            fitting = [b for b in self._free if size <= len(b) <= 2 * size]
            if fitting:
                block = min(fitting, key=len)
                self._free.remove(block)
                self._kept -= len(block)
                return block
        return bytearray(size)

    def give_back(self, block: bytearray, room: int | None = None) -> bool:
        """Keep `block` for reuse, within `room` bytes of free blocks (and `max_kept`).

        The caller must hold no view of it. A bytearray that anything still exports cannot be
        resized, so a one-byte resize proves nothing uses it; otherwise it is left to the
        collector. Returns True if the block was kept.
        """
        if len(block) < MIN_POOLED:
            return False
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
