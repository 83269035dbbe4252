"""Reusing the memory of large stored values, so a put does not page-fault in fresh memory.

Copying 100 MB into newly allocated memory costs more in page faults than in copying (the
allocator returns large blocks to the system when they are freed). The driver copies large
put buffers into blocks from this pool instead, and a block comes back to the pool when its
object is freed, but only if nothing (an array returned by `get`) still uses it.
"""

from __future__ import annotations

import threading

#: Buffers smaller than this are plain `bytes` (cheap to allocate, not worth pooling).
MIN_POOLED = 1 << 20
#: At most this many bytes of free blocks are kept.
MAX_KEPT = 1 << 30


class BufferPool:
    """Hands out read-only copies of buffers backed by reusable bytearrays. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _free, _kept and _owned
        self._free: list[bytearray] = []
        self._kept = 0
        #: id(read-only view) -> (block, writable view); the read-only view itself is only
        #: referenced by the stored value, so its reference count tells whether it is in use
        self._owned: dict[int, tuple[bytearray, memoryview]] = {}

    def copy(self, source: bytes | bytearray | memoryview) -> bytes | memoryview:
        """A read-only snapshot of `source`."""
        view = memoryview(source).cast("B") if not isinstance(source, bytes) else memoryview(source)
        size = view.nbytes
        if size < MIN_POOLED:
            return bytes(view)
        block = self._take(size)
        writable = memoryview(block)[:size]
        writable[:] = view
        readonly = writable.toreadonly()
        with self._lock:
            self._owned[id(readonly)] = (block, writable)
        return readonly

    def _take(self, size: int) -> bytearray:
        with self._lock:
            fitting = [b for b in self._free if size <= len(b) <= 2 * size]
            if fitting:
                block = min(fitting, key=len)
                self._free.remove(block)
                self._kept -= len(block)
                return block
        return bytearray(size)

    def reclaim(self, buffers: list[object]) -> None:
        """Take back the blocks of a freed value's `buffers`, except those still in use.

        Arrays that `get` returned are built on views sharing our views' buffer, and keep the
        block exported while they live; a bytearray that is exported cannot be resized, so a
        one-byte resize tells whether anything still uses the block (it is left to the
        collector then).
        """
        for index in range(len(buffers)):
            with self._lock:
                entry = self._owned.pop(id(buffers[index]), None)
            if entry is None:
                continue
            block, writable = entry
            buffers[index].release()
            writable.release()
            try:
                del block[-1:]  # BufferError while any view of the block is alive
            except BufferError:
                continue
            block.append(0)
            with self._lock:
                if self._kept + len(block) <= MAX_KEPT:
                    self._free.append(block)
                    self._kept += len(block)
