"""The frames of the stream protocol (`protocol`): their prefix, kinds and limits, and batch
frames, built and split.

A frame is `<u32 header length><u32 buffer count>` then the msgpack header, then for each
out-of-band buffer `<u64 length><bytes>`. The header is `[kind, message id, method, body]`:
kind REQUEST expects a REPLY (or ERROR) with the same id; NOTIFY expects nothing.

A BATCH frame carries several notifications of one method: its header is
`[BATCH, 0, method, [counts, body, body, ...]]`, where `counts` says how many of the frame's
buffers belong to each body, in order. Each body is packed by its sender as it is queued
(`Batch`), and the header is written by hand around them: a msgpack array is its length and
then its items. One body alone travels as a plain NOTIFY frame, byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import msgpack

REQUEST, REPLY, ERROR, NOTIFY, BATCH = 0, 1, 2, 3, 4

#: `<u32 header length><u32 buffer count>`, the start of every frame.
FRAME_PREFIX = struct.Struct("<II")
#: `<u64 length>`, before each out-of-band buffer.
BUFFER_LENGTH = struct.Struct("<Q")
#: Largest msgpack header a frame may announce (small values travel inside it).
MAX_HEADER_BYTES = 64 * 1024 * 1024
#: Most out-of-band buffers one frame may carry.
MAX_BUFFERS_PER_FRAME = 1 << 20
#: Largest single out-of-band buffer.
MAX_BUFFER_BYTES = 64 * 1024 * 1024 * 1024
#: Most notifications, header bytes and buffers one batch frame carries.
BATCH_ITEMS = 4096
_BATCH_HEADER_BYTES = 1 << 20
_BATCH_BUFFERS = 1 << 16


class ConnectionClosed(ConnectionError):
    """The peer went away (or we closed the connection) before a reply arrived."""


class FrameTooLarge(ConnectionClosed):
    """A peer announced more than a frame may carry; the connection is closed."""


class MessageTooLarge(ValueError):
    """A message this side was about to send is more than a frame may carry. Nothing was sent
    and the connection stays open: the sender tells its caller, naming the limit."""


def check_frame(method: str, header_bytes: int, buffers: Sequence[bytes | memoryview]) -> None:
    """MessageTooLarge unless a frame of `method` with a header of `header_bytes` and these
    buffers is within the limits every reader enforces (read at each call, so one place sets them)."""
    if header_bytes <= MAX_HEADER_BYTES and len(buffers) <= MAX_BUFFERS_PER_FRAME and (
            not buffers or max(map(len, buffers)) <= MAX_BUFFER_BYTES):
        return
    what = f"the {method!r} message" if method else "a reply"
    if header_bytes > MAX_HEADER_BYTES:
        raise MessageTooLarge(f"{what} is too large to send: its frame header of {header_bytes} bytes exceeds "
                              f"the stream's limit of {MAX_HEADER_BYTES} bytes (MAX_HEADER_BYTES)")
    if len(buffers) > MAX_BUFFERS_PER_FRAME:
        raise MessageTooLarge(f"{what} is too large to send: its {len(buffers)} out-of-band buffers exceed "
                              f"the stream's limit of {MAX_BUFFERS_PER_FRAME} per frame (MAX_BUFFERS_PER_FRAME)")
    for buffer in buffers:
        if len(buffer) > MAX_BUFFER_BYTES:
            raise MessageTooLarge(f"{what} is too large to send: a buffer of {len(buffer)} bytes exceeds "
                                  f"the stream's limit of {MAX_BUFFER_BYTES} bytes (MAX_BUFFER_BYTES)")


def frame_of(header: bytes, buffers: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """The parts of a frame whose msgpack header is packed already: prefix, header, and each
    buffer after its length."""
    parts: list[bytes | memoryview] = [FRAME_PREFIX.pack(len(header), len(buffers)), header]
    for buffer in buffers:
        parts.append(BUFFER_LENGTH.pack(len(buffer)))
        parts.append(buffer)
    return parts


def _array_header(length: int) -> bytes:
    """The msgpack header of an array of `length` items."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


class Batch:
    """Deferred notifications of one method, queued to leave as one frame. Each body is packed
    on its sender's thread; the frame is put together when it is written."""

    __slots__ = ("method", "bodies", "counts", "buffers", "header_bytes", "size")

    def __init__(self, method: str) -> None:
        self.method = method
        self.bodies: list[bytes] = []  # each packed
        self.counts: list[int] = []  # how many of `buffers` belong to each body
        self.buffers: list[bytes] = []
        self.header_bytes = 0
        self.size = 0  # bytes of bodies and buffers

    def has_room(self, packed_body: bytes, buffer_count: int) -> bool:
        return (len(self.bodies) < BATCH_ITEMS and self.header_bytes + len(packed_body) <= _BATCH_HEADER_BYTES
                and len(self.buffers) + buffer_count <= _BATCH_BUFFERS)

    def add(self, packed_body: bytes, buffers: Sequence[bytes]) -> None:
        self.bodies.append(packed_body)
        self.counts.append(len(buffers))
        self.buffers.extend(buffers)
        self.header_bytes += len(packed_body)
        self.size += len(packed_body)
        if buffers:
            self.size += sum(len(b) for b in buffers)

    def parts(self) -> list[bytes | memoryview]:
        """The frame: msgpack arrays are a length and their items, so the header is written by
        hand around the bodies packed already."""
        method = msgpack.packb(self.method)
        if len(self.bodies) == 1:
            header = b"".join((_NOTIFY_HEAD, method, self.bodies[0]))
        else:
            header = b"".join((_BATCH_HEAD, method, _array_header(len(self.bodies) + 1),
                               msgpack.packb(self.counts), *self.bodies))
        return frame_of(header, self.buffers)


def frame_bytes(frame: list[bytes | memoryview] | Batch) -> int:
    return frame.size if type(frame) is Batch else sum(len(part) for part in frame)


def frame_parts(frame: list[bytes | memoryview] | Batch) -> list[bytes | memoryview]:
    """What to write for a queued frame: its parts, or a batch's put together now."""
    return frame.parts() if type(frame) is Batch else frame


#: The start of a header `[NOTIFY, 0, ...]` / `[BATCH, 0, ...]`: a 4-item array, the kind, the id 0.
_NOTIFY_HEAD = bytes((0x94, NOTIFY, 0))
_BATCH_HEAD = bytes((0x94, BATCH, 0))


def split_batch(body: Any, buffers: list[bytearray]) -> list[tuple[Any, list[bytearray]]]:
    """A batch frame's notifications as (body, buffers); ValueError if the frame is malformed."""
    if not isinstance(body, list) or len(body) < 2 or not isinstance(body[0], list):
        raise ValueError("a malformed batch frame")
    counts = body[0]
    if len(counts) != len(body) - 1 or not all(type(c) is int and c >= 0 for c in counts) or sum(counts) != len(buffers):
        raise ValueError("a batch frame's buffer counts do not match its bodies and buffers")
    items = []
    offset = 0
    for item_body, count in zip(body[1:], counts):
        items.append((item_body, buffers[offset : offset + count]))
        offset += count
    return items
