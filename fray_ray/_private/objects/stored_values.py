"""How the driver holds one object's value: in its memory, or spilled to a file.

A `StoredValue` owns private copies of the value's buffers and hands out fresh read-only
views of them on every read, so the reference count of each buffer tells whether anything
outside the object table (an array returned by `get`, a frame being sent to a worker) still
uses it: such a value is *pinned* and is never spilled or recycled under its user.
A `SpilledValue` says where the value's bytes are in the session's spill directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.objects.shared_memory import SharedBlock
from fray_ray._private.stream.buffers import Block, BufferPool, in_use


def _owned_bytearray(buffer: object) -> bytearray | SharedBlock | None:
    """The bytearray (or shared block) behind a whole-buffer view of one (as frames arrive)."""
    if isinstance(buffer, memoryview) and isinstance(buffer.obj, (bytearray, SharedBlock)) and buffer.c_contiguous:
        if buffer.nbytes == len(buffer.obj):
            return buffer.obj
    return None


class StoredValue:
    """A value held in memory: the pickle stream and private buffers it alone references."""

    __slots__ = ("payload", "_buffers", "_sizes", "contained_refs", "is_error", "size")

    def __init__(
        self,
        payload: bytes,
        buffers: Sequence[bytes | Block],
        sizes: Sequence[int],
        contained_refs: tuple[bytes, ...],
        is_error: bool,
    ) -> None:
        self.payload = payload
        self._buffers = tuple(buffers)  # the one place each buffer is referenced from
        self._sizes = tuple(sizes)
        self.contained_refs = contained_refs
        self.is_error = is_error
        self.size = len(payload) + sum(self._sizes)

    @classmethod
    def copy_of(cls, value: SerializedValue, pool: BufferPool) -> StoredValue:
        """Copy every buffer (a put: the caller's memory must not be aliased)."""
        buffers = [pool.copy(b) for b in value.buffers]
        sizes = [memoryview(b).nbytes for b in value.buffers]
        return cls(bytes(value.payload), buffers, sizes, value.contained_refs, value.is_error)

    @classmethod
    def adopt(cls, value: SerializedValue, pool: BufferPool) -> StoredValue:
        """Take over buffers that arrived in frames (ours already); copy anything else."""
        if not value.buffers:
            return cls._without_buffers(value)
        buffers: list[bytes | Block] = []
        sizes: list[int] = []
        for buffer in value.buffers:
            owned = buffer if isinstance(buffer, bytes) else _owned_bytearray(buffer)
            buffers.append(owned if owned is not None else pool.copy(buffer))
            sizes.append(memoryview(buffer).nbytes)
        return cls(bytes(value.payload), buffers, sizes, value.contained_refs, value.is_error)

    @classmethod
    def _without_buffers(cls, value: SerializedValue) -> StoredValue:
        """The commonest value of all (small results): nothing to copy but the payload, and
        only if it is not `bytes` already (memory the sender may still change)."""
        payload = value.payload if type(value.payload) is bytes else bytes(value.payload)
        stored = cls.__new__(cls)
        stored.payload = payload
        stored._buffers = ()
        stored._sizes = ()
        stored.contained_refs = value.contained_refs
        stored.is_error = value.is_error
        stored.size = len(payload)
        return stored

    def serialized(self) -> SerializedValue:
        """The value to deserialize or send, on fresh read-only views of the buffers."""
        if not self._buffers:  # nothing to pin: made for this read, not kept (one object less per value)
            return SerializedValue(self.payload, (), self.contained_refs, self.is_error)
        views: list[bytes | memoryview] = []
        for buffer, size in zip(self._buffers, self._sizes):
            if isinstance(buffer, bytes):
                views.append(buffer)
            elif len(buffer) == size:
                views.append(memoryview(buffer).toreadonly())
            else:
                views.append(memoryview(buffer)[:size].toreadonly())
        return SerializedValue(self.payload, views, self.contained_refs, self.is_error)

    @property
    def has_buffers(self) -> bool:
        return bool(self._buffers)

    def pinned(self) -> bool:
        """True while anything outside the table still uses one of the buffers."""
        return any(in_use(self._buffers, index) for index in range(len(self._buffers)))

    def write_parts(self) -> list[memoryview]:
        """The payload and each buffer, for writing to a spill file (views: drop them after)."""
        parts = [memoryview(self.payload)]
        for buffer, size in zip(self._buffers, self._sizes):
            parts.append(memoryview(buffer)[:size])
        return parts

    def recycle(self, pool: BufferPool, room: int | None = None) -> None:
        """Give the buffers to `pool` (only call once unpinned and out of the table)."""
        buffers, self._buffers = self._buffers, ()
        for index in range(len(buffers)):  # no loop variable: it would hold a reference
            if not isinstance(buffers[index], bytes) and not in_use(buffers, index):
                pool.give_back(buffers[index], room)


@dataclass(frozen=True)
class SpilledValue:
    """A value written to a spill file: payload first, then each buffer at `offsets`."""

    path: str
    payload_size: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    contained_refs: tuple[bytes, ...]
    is_error: bool

    @property
    def size(self) -> int:
        return self.payload_size + sum(self.sizes)


HeldValue = StoredValue | SpilledValue
