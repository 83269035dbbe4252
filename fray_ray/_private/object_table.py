"""The driver's object table: every object the session owns, its state, value and references.

One lock guards all entries. An entry moves PENDING → READY or FAILED exactly once
(`fulfil` twice raises), then to FREED when nothing refers to it any more. References come
from live ObjectRefs in the driver, borrows by workers, pins (a task's arguments while it
runs), and containers (a stored value that holds refs keeps them alive while it lives).
Completion callbacks run after the lock is released.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from fray_ray._private.ids import OBJECT_ID_SIZE
from fray_ray._private.serialization import SerializedValue

DoneCallback = Callable[[bytes], None]


class ForeignReferences:
    """Receives reference counts for ids that are not objects (actor handles, generators)."""

    def incref(self, ids: list[bytes]) -> None: ...

    def decref(self, ids: list[bytes]) -> None: ...


def _is_foreign(reference_id: bytes) -> bool:
    return len(reference_id) != OBJECT_ID_SIZE


class ObjectState(enum.Enum):
    PENDING = "pending"  # the producing task has not finished
    READY = "ready"  # holds a value
    FAILED = "failed"  # holds an error to raise on get
    FREED = "freed"  # nothing refers to it; the value is gone


@dataclass(eq=False)
class ObjectEntry:
    state: ObjectState = ObjectState.PENDING
    value: SerializedValue | None = None
    references: int = 0
    callbacks: list[DoneCallback] = field(default_factory=list)
    #: task that produces this object (for cancel and lineage); None for puts
    producer: bytes | None = None


class ObjectTable:
    """Thread-safe map of object id → entry, with reference counting and completion callbacks."""

    def __init__(
        self, on_freed: Callable[[SerializedValue], None] | None = None, foreign: ForeignReferences | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._entries: dict[bytes, ObjectEntry] = {}
        #: called with the value of each freed object (after the lock is released)
        self.on_freed = on_freed
        #: where counts for actor handles (held by values, tasks, workers) go
        self.foreign = foreign
        self.bytes_stored = 0

    # ---- creation and completion ---------------------------------------------------------

    def create_pending(self, object_ids: Iterable[bytes], producer: bytes | None = None) -> None:
        with self._lock:
            for object_id in object_ids:
                self._entries[object_id] = ObjectEntry(producer=producer)

    def put(self, object_id: bytes, value: SerializedValue) -> None:
        """Create an entry that is READY at once (ray.put)."""
        with self._lock:
            self._entries[object_id] = ObjectEntry(state=ObjectState.READY, value=value)
            self.bytes_stored += value.size
            foreign = self._incref_all_locked(value.contained_refs)
        self._forward_incref(foreign)

    def fulfil(self, object_id: bytes, value: SerializedValue) -> None:
        """Complete a pending object with a value or an error (value.is_error)."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None or entry.state is ObjectState.FREED:
                # Nobody refers to it any more; drop the value, but keep what it holds alive
                # long enough for nothing (it was never visible).
                return
            if entry.state is not ObjectState.PENDING:
                raise RuntimeError(f"object {object_id.hex()} fulfilled twice")
            entry.state = ObjectState.FAILED if value.is_error else ObjectState.READY
            entry.value = value
            self.bytes_stored += value.size
            foreign = self._incref_all_locked(value.contained_refs)
            callbacks, entry.callbacks = entry.callbacks, []
            free_now = entry.references <= 0
        self._forward_incref(foreign)
        for callback in callbacks:
            callback(object_id)
        if free_now:
            self._maybe_free(object_id)

    # ---- reading -------------------------------------------------------------------------

    def state(self, object_id: bytes) -> ObjectState | None:
        with self._lock:
            entry = self._entries.get(object_id)
            return None if entry is None else entry.state

    def is_done(self, object_id: bytes) -> bool:
        with self._lock:
            entry = self._entries.get(object_id)
            return entry is not None and entry.state in (ObjectState.READY, ObjectState.FAILED)

    def value(self, object_id: bytes) -> SerializedValue | None:
        """The stored value or error; None while pending (or unknown)."""
        with self._lock:
            entry = self._entries.get(object_id)
            return None if entry is None else entry.value

    def producer(self, object_id: bytes) -> bytes | None:
        with self._lock:
            entry = self._entries.get(object_id)
            return None if entry is None else entry.producer

    def known(self, object_id: bytes) -> bool:
        with self._lock:
            entry = self._entries.get(object_id)
            return entry is not None and entry.state is not ObjectState.FREED

    def add_done_callback(self, object_id: bytes, callback: DoneCallback) -> None:
        """Call `callback(object_id)` once the object is READY or FAILED (now, if it is)."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is not None and entry.state is ObjectState.PENDING:
                entry.callbacks.append(callback)
                return
        callback(object_id)

    def remove_done_callback(self, object_id: bytes, callback: DoneCallback) -> None:
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is not None:
                try:
                    entry.callbacks.remove(callback)
                except ValueError:
                    pass

    # ---- references ----------------------------------------------------------------------

    def incref(self, object_ids: Iterable[bytes]) -> None:
        with self._lock:
            foreign = self._incref_all_locked(object_ids)
        self._forward_incref(foreign)

    def _incref_all_locked(self, object_ids: Iterable[bytes]) -> list[bytes]:
        """Count references; returns the foreign ids, to forward after the lock is released."""
        foreign = []
        for object_id in object_ids:
            if _is_foreign(object_id):
                foreign.append(object_id)
                continue
            entry = self._entries.get(object_id)
            if entry is not None:
                entry.references += 1
        return foreign

    def _forward_incref(self, foreign: list[bytes]) -> None:
        if foreign and self.foreign is not None:
            self.foreign.incref(foreign)

    def decref(self, object_ids: Iterable[bytes]) -> None:
        to_free = []
        foreign = []
        with self._lock:
            for object_id in object_ids:
                if _is_foreign(object_id):
                    foreign.append(object_id)
                    continue
                entry = self._entries.get(object_id)
                if entry is None:
                    continue
                entry.references -= 1
                if entry.references <= 0 and entry.state is not ObjectState.PENDING:
                    to_free.append(object_id)
        if foreign and self.foreign is not None:
            self.foreign.decref(foreign)
        for object_id in to_free:
            self._maybe_free(object_id)

    def _maybe_free(self, object_id: bytes) -> None:
        inner: Sequence[bytes] = ()
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None or entry.references > 0 or entry.state is ObjectState.PENDING:
                return
            del self._entries[object_id]
            value = entry.value
            if value is not None:
                self.bytes_stored -= value.size
                inner = value.contained_refs
            entry.state = ObjectState.FREED
            entry.value = None
        if self.on_freed is not None and value is not None:
            self.on_freed(value)
        if inner:
            self.decref(inner)

    def references(self, object_id: bytes) -> int:
        with self._lock:
            entry = self._entries.get(object_id)
            return 0 if entry is None else entry.references

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def pending_ids(self) -> list[bytes]:
        with self._lock:
            return [oid for oid, e in self._entries.items() if e.state is ObjectState.PENDING]

    def fail_all_pending(self, error_for: Callable[[bytes], SerializedValue]) -> None:
        """On shutdown: complete every pending object with an error so no waiter hangs."""
        for object_id in self.pending_ids():
            try:
                self.fulfil(object_id, error_for(object_id))
            except RuntimeError:
                pass
