"""Values on the wire and in the object table: cloudpickle protocol 5 with out-of-band buffers.

Large binary data (numpy arrays, PickleBuffers) stays out of the pickle stream, so storing a
value costs one copy and reading it back none: `get` rebuilds arrays as read-only views of
the stored buffers, which also makes every stored value immutable to its readers.

While a value is pickled, the ObjectRefs and ActorHandles inside it are recorded, so the owner
can keep what the value refers to alive for as long as the value itself lives.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import pickle
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from fray_ray._private.objects import code_source
from fray_ray.exceptions import RaySystemError

#: Values up to this size (pickle plus buffers) travel inside the messages that use them.
INLINE_LIMIT = 100 * 1024
#: A pickle stream larger than this travels beside a frame's header, as an out-of-band buffer.
PAYLOAD_IN_HEADER_BYTES = 64 * 1024
#: Pickle streams one frame's header carries in all; beyond it they travel as buffers, so a
#: message of ten thousand small values has a small header (the reader caps headers, not buffers).
HEADER_PAYLOAD_BUDGET = 1 << 20

_contained_refs: contextvars.ContextVar[list[bytes] | None] = contextvars.ContextVar("contained_refs", default=None)


def note_contained_ref(object_id: bytes) -> None:
    """Called by ObjectRef.__reduce__: record that the value being pickled holds this ref."""
    collected = _contained_refs.get()
    if collected is not None:
        collected.append(object_id)


@contextlib.contextmanager
def collecting_refs() -> Iterator[list[bytes]]:
    collected: list[bytes] = []
    token = _contained_refs.set(collected)
    try:
        yield collected
    finally:
        _contained_refs.reset(token)


class SerializedValue:
    """A pickled value: the pickle stream, its out-of-band buffers, and the refs it holds.

    Never changed once made. A plain class with slots rather than a frozen dataclass: every
    task, call and result makes several, and a frozen dataclass costs four times as much to build.
    """

    __slots__ = ("payload", "buffers", "contained_refs", "is_error")

    def __init__(
        self,
        payload: bytes,
        buffers: Sequence[bytes | bytearray | memoryview] = (),
        contained_refs: tuple[bytes, ...] = (),
        is_error: bool = False,
    ) -> None:
        self.payload = payload
        self.buffers = buffers
        self.contained_refs = contained_refs
        self.is_error = is_error

    def __eq__(self, other: object) -> bool:
        if type(other) is not SerializedValue:
            return NotImplemented
        return (self.payload == other.payload and list(self.buffers) == list(other.buffers)
                and self.contained_refs == other.contained_refs and self.is_error == other.is_error)

    __hash__ = None  # type: ignore[assignment]  # equal values may hold unhashable buffers

    def __repr__(self) -> str:
        return (f"SerializedValue(payload={self.payload!r}, buffers={self.buffers!r}, "
                f"contained_refs={self.contained_refs!r}, is_error={self.is_error!r})")

    def with_buffers(self, buffers: Sequence[bytes | bytearray | memoryview]) -> SerializedValue:
        """The same value over other buffers (views of the same bytes elsewhere)."""
        return SerializedValue(self.payload, buffers, self.contained_refs, self.is_error)

    @property
    def size(self) -> int:
        if not self.buffers:
            return len(self.payload)
        return len(self.payload) + sum(memoryview(b).nbytes for b in self.buffers)

    def to_wire(self, buffers: list, budget: HeaderBudget) -> list[Any]:
        """A msgpack-able description; appends this value's buffers to `buffers`. The pickle
        stream goes in the description while `budget` has room for it, else first among the
        buffers (the description says None)."""
        payload: bytes | None = self.payload
        size = len(self.payload)
        if size <= budget.left and size <= PAYLOAD_IN_HEADER_BYTES:
            budget.left -= size
            if self.buffers:
                buffers.extend(self.buffers)
        else:
            buffers.append(self.payload)
            buffers.extend(self.buffers)
            payload = None
        return [payload, len(self.buffers), self.contained_refs, self.is_error]

    @classmethod
    def from_wire(cls, description: Sequence[Any], buffers: Sequence[bytearray], offset: int) -> tuple[SerializedValue, int]:
        """Rebuild from `to_wire` output; returns the value and the next buffer offset."""
        payload, count, contained, is_error = description
        if payload is None:  # the pickle stream travelled as the first buffer
            if offset >= len(buffers):
                raise ValueError("a value names its pickle stream as a buffer that did not arrive")
            payload, offset = bytes(buffers[offset]), offset + 1
        elif type(payload) is not bytes:
            payload = bytes(payload)
        if not count:
            return cls(payload, (), tuple(contained) if contained else (), bool(is_error)), offset
        own = [memoryview(b).toreadonly() for b in buffers[offset : offset + count]]
        if len(own) != count:
            raise ValueError(f"a value names {count} buffers, {len(own)} arrived")
        return cls(payload, own, tuple(contained), bool(is_error)), offset + count


class HeaderBudget:
    """How many more bytes of pickle streams one frame's header may carry (see
    `HEADER_PAYLOAD_BUDGET`); one per message encoded."""

    __slots__ = ("left",)

    def __init__(self, total: int = HEADER_PAYLOAD_BUDGET) -> None:
        self.left = total  # `SerializedValue.to_wire` takes from it


#: Values the standard pickler writes exactly as cloudpickle would, holding no ref and no code.
SCALAR_TYPES = frozenset({int, float, str, bytes, bool, type(None)})


def _is_plain(value: Any, depth: int = 0) -> bool:
    """True for scalars, and small tuples, lists and str-keyed dicts of them (two levels deep):
    the common shape of call arguments, which needs neither cloudpickle nor a ref scan."""
    kind = type(value)
    if kind in SCALAR_TYPES:
        return True
    if depth >= 2:
        return False
    if kind is tuple or kind is list:
        return len(value) <= 16 and all(_is_plain(item, depth + 1) for item in value)
    if kind is dict:
        return len(value) <= 16 and all(type(k) is str and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def serialize(value: Any) -> SerializedValue:
    """Pickle `value` (cloudpickle, protocol 5); buffers may alias `value`'s memory."""
    if _is_plain(value):
        return SerializedValue(pickle.dumps(value, protocol=5))
    buffers: list[pickle.PickleBuffer] = []
    with collecting_refs() as refs:
        payload = code_source.dumps(value, protocol=5, buffer_callback=buffers.append)
    return SerializedValue(payload, [b.raw() for b in buffers], tuple(dict.fromkeys(refs)))


def serialize_error(error: BaseException) -> SerializedValue:
    """Pickle an exception to be raised by whoever reads the object.

    A task's RayTaskError always pickles (its cause travels on its own, see `fray_ray.exceptions.pack_cause`);
    any other error that does not is replaced by a RaySystemError with its class name, message
    and traceback text.
    """
    with collecting_refs():
        try:
            payload = cloudpickle.dumps(error, protocol=5)
        except Exception as exc:  # noqa: BLE001 - keep the type name, message and traceback
            payload = cloudpickle.dumps(_unpicklable_error(error, exc))
    return SerializedValue(payload, (), (), True)


def _unpicklable_error(error: BaseException, problem: Exception) -> BaseException:
    kind = type(error)
    text = "".join(traceback.format_exception(kind, error, error.__traceback__))
    return RaySystemError(f"{kind.__module__}.{kind.__qualname__}: {error} (it could not be pickled: {problem})", text)


def deserialize(value: SerializedValue) -> Any:
    """Rebuild the value; arrays become read-only views of the stored buffers.

    An error that cannot be rebuilt here becomes a RaySystemError saying why, never a bare
    unpickling error in place of the one that was stored.
    """
    if not value.is_error:
        return pickle.loads(value.payload, buffers=value.buffers)
    try:
        return pickle.loads(value.payload, buffers=value.buffers)
    except Exception as exc:  # noqa: BLE001 - the stored error is what the reader asked for
        from fray_ray.exceptions import RaySystemError

        return RaySystemError(f"an error was stored but cannot be rebuilt here: {type(exc).__name__}: {exc}")


#: Rebuilding values whose pickle streams total more than this pauses the cyclic collector.
GC_PAUSE_BYTES = 1 << 20


def deserialize_all(values: Sequence[SerializedValue]) -> list[Any]:
    """Rebuild several values, none of them an error (`deserialize` each).

    Rebuilt containers are all alive, yet the cyclic collector runs every few hundred new ones
    and walks what the young generations hold each time: for ten thousand lists that cost
    about a third of the time. While large amounts are rebuilt it is paused (if it was running).
    """
    if len(values) < 2 and (not values or len(values[0].payload) < GC_PAUSE_BYTES):
        return [pickle.loads(v.payload, buffers=v.buffers) for v in values]
    if sum(len(v.payload) for v in values) < GC_PAUSE_BYTES or not gc.isenabled():
        return [pickle.loads(v.payload, buffers=v.buffers) for v in values]
    gc.disable()
    try:
        return [pickle.loads(v.payload, buffers=v.buffers) for v in values]
    finally:
        gc.enable()


def describe_unpicklable(value: Any, what: str) -> str:
    """A message naming which part of `value` cannot be pickled."""
    return f"{what} cannot be serialized with cloudpickle: {type(value).__name__} {value!r:.80}"


@dataclass
class WireBatch:
    """Several SerializedValues packed into one frame: descriptions plus one buffer list."""

    descriptions: list[Any] = field(default_factory=list)
    buffers: list[Any] = field(default_factory=list)
    budget: HeaderBudget = field(default_factory=HeaderBudget)

    def add(self, value: SerializedValue) -> int:
        self.descriptions.append(value.to_wire(self.buffers, self.budget))
        return len(self.descriptions) - 1


def unpack_values(descriptions: Sequence[Any], buffers: Sequence[bytearray]) -> list[SerializedValue]:
    values = []
    offset = 0
    for description in descriptions:
        value, offset = SerializedValue.from_wire(description, buffers, offset)
        values.append(value)
    return values
