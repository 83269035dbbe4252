"""ObjectRef: a reference to a value the session owns, usable as a future."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Generator
from typing import Any

from fray_ray._private import runtime_state
from fray_ray._private.ids import JOB_ID_HEX
from fray_ray._private.serialization import note_contained_ref


class ObjectRef:
    """A handle to a (possibly not yet computed) object. Pass it to tasks, `get` it, await it.

    Equal refs have equal ids; refs are hashable, picklable (a pickled ref keeps its object
    alive wherever it lands) and can be nested inside other values.

    >>> ref = fray_ray.put(41)
    >>> fray_ray.get(ref) + 1
    42
    """

    __slots__ = ("_id", "_counter", "__weakref__")

    def __init__(self, object_id: bytes, *, _register: bool = True, _announced: bool = False) -> None:
        self._id = object_id
        #: the reference counter this ref was counted in (released there, whichever thread
        #: or runtime the garbage collector happens to run in)
        self._counter = None
        if _register:
            runtime = runtime_state.current_or_none()
            if runtime is not None:
                if _announced:
                    runtime.references.add_announced(object_id)
                else:
                    runtime.references.add(object_id)
                self._counter = runtime.references

    def __del__(self) -> None:
        if self._counter is not None:
            self._counter.release_later(self._id)

    def __reduce__(self) -> tuple[Any, ...]:
        note_contained_ref(self._id)
        return (_rebuild_ref, (self._id,))

    # ---- identity ------------------------------------------------------------------------

    def binary(self) -> bytes:
        return self._id

    def hex(self) -> str:
        return self._id.hex()

    def task_id(self) -> str:
        return self._id[:24].hex()

    def job_id(self) -> str:
        return JOB_ID_HEX

    def is_nil(self) -> bool:
        return not any(self._id)

    @classmethod
    def nil(cls) -> ObjectRef:
        return cls(bytes(28), _register=False)

    @classmethod
    def from_binary(cls, binary: bytes) -> ObjectRef:
        return cls(binary)

    @classmethod
    def from_hex(cls, hex_id: str) -> ObjectRef:
        return cls(bytes.fromhex(hex_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return f"ObjectRef({self._id.hex()})"

    # ---- futures -------------------------------------------------------------------------

    def future(self) -> concurrent.futures.Future:
        """A concurrent.futures.Future resolving to the value (or raising its error)."""
        return runtime_state.current().object_future(self)

    def as_future(self) -> Any:
        """An asyncio Future on the running loop, resolving to the value."""
        return asyncio.wrap_future(self.future())

    def __await__(self) -> Generator[Any, None, Any]:
        return self.as_future().__await__()


def _rebuild_ref(object_id: bytes) -> ObjectRef:
    return ObjectRef(object_id)


ObjectID = ObjectRef
