"""Objects whose value stays in the process that made it: what the owner records of them.

A task's result larger than `INLINE_LIMIT` is kept by the worker process that produced it (its
*holder*, `held_objects`); the completion carries only where it is and how big. The owner's
object table then holds a `RemoteValue` (holder address and size) instead of the bytes, and
hands out a `RemoteResult`, a placeholder `SerializedValue` with no bytes whose `size` is the
real one, wherever code asks for a stored value: such a value is never inlined into a message
(it is above the inline limit), never spilled by the owner, and reaches a reader only through
a fetch from its holder (`holder_clients`), in the driver or in the reading worker itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fray_ray._private.objects.serialization import SerializedValue


class RemoteResult(SerializedValue):
    """A stand-in for a value held by the process serving `holder` (host:port): no bytes."""

    __slots__ = ("holder", "remote_size")

    def __init__(self, holder: str, remote_size: int, contained_refs: tuple[bytes, ...] = ()) -> None:
        super().__init__(b"", (), contained_refs, False)
        self.holder = holder
        self.remote_size = remote_size

    @property
    def size(self) -> int:
        return self.remote_size

    def __repr__(self) -> str:
        return f"RemoteResult(holder={self.holder!r}, size={self.remote_size})"


class RemoteValue:
    """The owner's record of a value another process holds (see the module docstring)."""

    __slots__ = ("holder", "size", "contained_refs", "is_error")

    def __init__(self, holder: str, size: int, contained_refs: tuple[bytes, ...] = ()) -> None:
        self.holder = holder
        self.size = size
        self.contained_refs = contained_refs
        self.is_error = False

    def placeholder(self) -> RemoteResult:
        return RemoteResult(self.holder, self.size, self.contained_refs)


def held_entry(index: int, holder: str, size: int) -> list[Any]:
    """How a message says its value at `index` is held by `holder` (its frame value is empty)."""
    return [index, holder, size]


def with_remote_results(values: Sequence[SerializedValue], held: Sequence[Any]) -> list[SerializedValue]:
    """`values` (as a message brought them) with each one `held` names replaced by its
    `RemoteResult`. ValueError for an entry that names no value or is malformed."""
    if not held:
        return list(values)
    replaced = list(values)
    for entry in held:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"malformed held-value entry {entry!r}")
        index, holder, size = entry
        if not isinstance(index, int) or not 0 <= index < len(replaced):
            raise ValueError(f"held-value entry names value {index!r} of {len(replaced)}")
        if not isinstance(holder, str) or not holder or not isinstance(size, int) or size < 0:
            raise ValueError(f"malformed held-value entry {entry!r}")
        replaced[index] = RemoteResult(holder, size, replaced[index].contained_refs)
    return replaced


def split_remote(values: Sequence[SerializedValue]) -> tuple[list[SerializedValue], list[list[Any]]]:
    """The reverse, for sending: `values` with each `RemoteResult` made an empty value, and
    the entries that say where those are held."""
    sent: list[SerializedValue] = []
    held: list[list[Any]] = []
    for index, value in enumerate(values):
        if isinstance(value, RemoteResult):
            held.append(held_entry(index, value.holder, value.remote_size))
            value = SerializedValue(b"", (), value.contained_refs, False)
        sent.append(value)
    return sent, held
