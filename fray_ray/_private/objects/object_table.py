"""The driver's object table: every object the session owns, its state, value and references.

One lock guards all entries. An entry moves PENDING → READY or FAILED exactly once
(`fulfil` twice raises), then to FREED when nothing refers to it any more. References come
from live ObjectRefs in the driver, borrows by workers, pins (a task's arguments while it
runs), and containers (a stored value that holds refs keeps them alive while it lives).
Completion callbacks run after the lock is released.

Values are held through the session's ObjectStore: in memory within `object_store_memory`,
or spilled to a file. When room is needed, the oldest unpinned values in memory are spilled
(`_make_room`); a read of a spilled value maps its file. A value another process holds
(`remote_values`) is recorded by its holder and size alone: reads get its placeholder, and
freeing it tells the holder (`on_remote_freed`).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fray_ray._private.objects.ids import OBJECT_ID_SIZE
from fray_ray._private.objects.object_store import ObjectStore
from fray_ray._private.objects.remote_values import RemoteResult, RemoteValue
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.objects.stored_values import SpilledValue, StoredValue

DoneCallback = Callable[[bytes], None]
#: What an entry holds: the value itself, its spill file, or where another process holds it.
HeldValue = StoredValue | SpilledValue | RemoteValue
#: on_remote_freed([(holder, object id), ...]): the owner no longer needs these held values.
RemoteFreed = Callable[[list[tuple[str, bytes]]], None]


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


class ObjectEntry:
    """One object: a plain class with slots, since every task and call makes one."""

    __slots__ = ("state", "value", "references", "callbacks", "producer")

    def __init__(self, state: ObjectState = ObjectState.PENDING, value: HeldValue | None = None,
                 producer: bytes | None = None) -> None:
        self.state = state
        self.value = value
        self.references = 0
        self.callbacks: list[DoneCallback] | None = None  # made when the first one is added
        #: task that produces this object (for cancel and lineage); None for puts
        self.producer = producer


@dataclass(frozen=True)
class ObjectSummary:
    """One object as `ObjectTable.snapshot()` saw it (for the state API)."""

    object_id: bytes
    state: ObjectState
    size: int | None
    producer: bytes | None
    contained: tuple[bytes, ...]


@dataclass(frozen=True)
class TableSummary:
    """The values the table holds now (count, bytes)."""

    held: int
    held_bytes: int


class ObjectTable:
    """Thread-safe map of object id → entry, with reference counting and completion callbacks."""

    def __init__(self, store: ObjectStore, foreign: ForeignReferences | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[bytes, ObjectEntry] = {}
        #: set by `fail_all_pending` at shutdown: results of work still running arrive late then
        self._shut_down = False
        #: ids of READY values held in memory, oldest first: the order they are spilled in
        self._resident: dict[bytes, None] = {}
        #: holds every value, in memory or on disk
        self.store = store
        #: where counts for actor handles (held by values, tasks, workers) go
        self.foreign = foreign
        #: told of values other processes hold once they are freed here
        self.on_remote_freed: RemoteFreed | None = None
        #: on_values_dropped(object ids): these objects' values are gone (freed, or to be made
        #: again); what was copied of them elsewhere may go too
        self.on_values_dropped: Callable[[list[bytes]], None] | None = None

    # ---- creation and completion ---------------------------------------------------------

    def create_pending(self, object_ids: Iterable[bytes], producer: bytes | None = None, *, referenced: bool = False) -> None:
        """`referenced`: the caller holds one reference to each already (the ObjectRef it makes
        at once, counted as announced), so the first ref costs no second trip through the table."""
        references = 1 if referenced else 0
        with self._lock:
            for object_id in object_ids:
                entry = self._entries[object_id] = ObjectEntry(producer=producer)
                entry.references = references

    def put(self, object_id: bytes, value: SerializedValue, *, copy: bool = True) -> None:
        """Create an entry that is READY at once (ray.put, a generator's item).

        `copy`: the buffers alias the caller's memory. Raises ObjectStoreFullError (and
        stores nothing) when the value fits neither in memory nor on disk.
        """
        if type(value) is RemoteResult:
            held: HeldValue = RemoteValue(value.holder, value.remote_size, value.contained_refs)
        elif value.is_error:
            held = self.store.hold_anyway(value)
        else:
            held = self.store.hold(object_id, value, copy=copy, make_room=self._make_room)
        with self._lock:
            self._entries[object_id] = ObjectEntry(state=ObjectState.READY, value=held)
            if isinstance(held, StoredValue) and not held.is_error:
                self._resident[object_id] = None
            foreign = self._incref_all_locked(value.contained_refs)
        self._forward_incref(foreign)

    def _hold_result(self, object_id: bytes, value: SerializedValue) -> HeldValue:
        """A task's result, or the ObjectStoreFullError its reader gets when it fits nowhere."""
        if type(value) is RemoteResult:
            return RemoteValue(value.holder, value.remote_size, value.contained_refs)
        if value.is_error:
            return self.store.hold_anyway(value)
        try:
            return self.store.hold(object_id, value, copy=False, make_room=self._make_room)
        except Exception as exc:  # noqa: BLE001 - ObjectStoreFullError, raised where the value is read
            return self.store.hold_anyway(serialize_error(exc))

    def fulfil(self, object_id: bytes, value: SerializedValue) -> None:
        """Complete a pending object with a value or an error (value.is_error)."""
        self.fulfil_all([(object_id, value)])

    def fulfil_all(self, results: Sequence[tuple[bytes, SerializedValue]]) -> None:
        """`fulfil` for several objects: one lock for all. RuntimeError (after completing the
        others) if one was fulfilled already, unless the session has shut down meanwhile (its
        pending objects were failed then, and a result still arriving is dropped)."""
        held_values = [self._hold_result(object_id, value) for object_id, value in results]
        unwanted: list[tuple[bytes, HeldValue]] = []
        done: list[tuple[bytes, list[DoneCallback] | None]] = []
        to_free: list[bytes] = []
        foreign: list[bytes] = []
        twice: bytes | None = None
        with self._lock:
            for (object_id, _), held in zip(results, held_values):
                entry = self._entries.get(object_id)
                if entry is None or entry.state is not ObjectState.PENDING:
                    unwanted.append((object_id, held))  # nobody refers to it any more: the value was never visible
                    if entry is not None and entry.state is not ObjectState.FREED and not self._shut_down:
                        twice = object_id
                    continue
                entry.state = ObjectState.FAILED if held.is_error else ObjectState.READY
                entry.value = held
                if not held.is_error and type(held) is StoredValue:
                    self._resident[object_id] = None
                if held.contained_refs:
                    foreign += self._incref_all_locked(held.contained_refs)
                done.append((object_id, entry.callbacks))
                entry.callbacks = None
                if entry.references <= 0:
                    to_free.append(object_id)
        if unwanted:
            self._release(unwanted)
        if foreign:
            self._forward_incref(foreign)
        for object_id, callbacks in done:
            if callbacks:
                for callback in callbacks:
                    callback(object_id)
        if to_free:
            self._free(to_free)
        if twice is not None:
            raise RuntimeError(f"object {twice.hex()} fulfilled twice")

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
        """The stored value or error; None while pending (or unknown, or freed meanwhile).

        A value in memory comes on fresh views (made under the lock, so it cannot be spilled
        while they live); a spilled one is mapped from its file.
        """
        with self._lock:
            entry = self._entries.get(object_id)
            held = None if entry is None else entry.value
            if held is None or isinstance(held, StoredValue):
                return None if held is None else held.serialized()
            if type(held) is RemoteValue:
                return held.placeholder()
        return self.store.read(held)

    def ready_values(self, object_ids: Sequence[bytes]) -> list[SerializedValue] | None:
        """Every object's value or error if all are done (one lock for all), else None."""
        return self.values(object_ids, all_or_none=True)  # type: ignore[return-value]  # all or none: no None among them

    def values(self, object_ids: Sequence[bytes], *, all_or_none: bool = False) -> list[SerializedValue | None] | None:
        """Each object's value or error, None for those pending, unknown or freed (one lock for
        all); with `all_or_none`, None at once unless every one is there."""
        values: list[SerializedValue | None] = []
        spilled = []
        with self._lock:
            for object_id in object_ids:
                entry = self._entries.get(object_id)
                held = None if entry is None else entry.value
                if held is None:
                    if all_or_none:
                        return None
                    values.append(None)
                elif type(held) is StoredValue:
                    values.append(held.serialized())
                elif type(held) is RemoteValue:
                    values.append(held.placeholder())
                else:
                    spilled.append((len(values), held))
                    values.append(None)
        for index, held in spilled:
            values[index] = self.store.read(held)
            if values[index] is None and all_or_none:
                return None  # freed meanwhile
        return values

    def watch(self, object_ids: Sequence[bytes], callback: DoneCallback) -> tuple[list[bytes], bytes | None, bool]:
        """Call `callback(object_id)` when each of `object_ids` still pending is done (one lock
        for all). Returns those pending (each once), the first id this table does not know (no
        callback is left registered then), and whether an error is among those done already."""
        pending: list[bytes] = []
        failed = False
        with self._lock:
            entries = self._entries
            for object_id in object_ids:
                entry = entries.get(object_id)
                if entry is None or entry.state is ObjectState.FREED:
                    for registered in pending:
                        entries[registered].callbacks.remove(callback)  # type: ignore[union-attr]
                    return [], object_id, failed
                if entry.state is ObjectState.PENDING:
                    if entry.callbacks is None:
                        entry.callbacks = [callback]
                    elif callback in entry.callbacks:
                        continue  # the same id twice
                    else:
                        entry.callbacks.append(callback)
                    pending.append(object_id)
                elif entry.state is ObjectState.FAILED:
                    failed = True
        return pending, None, failed

    def done_among(self, object_ids: Sequence[bytes]) -> list[bytes]:
        """Those of `object_ids` that are done, in their order (one lock for all)."""
        with self._lock:
            entries = self._entries
            done = (ObjectState.READY, ObjectState.FAILED)
            return [oid for oid in object_ids if (e := entries.get(oid)) is not None and e.state in done]

    def is_error(self, object_id: bytes) -> bool:
        """True if the object holds an error (cheaper than `value` for spilled objects)."""
        with self._lock:
            entry = self._entries.get(object_id)
            return entry is not None and entry.value is not None and entry.value.is_error

    def size(self, object_id: bytes) -> int | None:
        """The value's size in bytes; None while pending (or unknown)."""
        with self._lock:
            entry = self._entries.get(object_id)
            return None if entry is None or entry.value is None else entry.value.size

    def spilled_ids(self) -> list[bytes]:
        """Ids of the objects whose values are on disk now."""
        with self._lock:
            return [oid for oid, e in self._entries.items() if isinstance(e.value, SpilledValue)]

    def holders(self, object_ids: Sequence[bytes]) -> dict[bytes, str]:
        """Where each of `object_ids` that another process holds is held (its holder's address)."""
        with self._lock:
            found = {}
            for object_id in object_ids:
                entry = self._entries.get(object_id)
                if entry is not None and type(entry.value) is RemoteValue:
                    found[object_id] = entry.value.holder
            return found

    # ---- spilling ------------------------------------------------------------------------

    def _make_room(self, needed: int) -> int:
        """Spill unpinned values in memory, oldest first, until `needed` bytes are freed.

        Called by the store with its admission lock held; files are written without this
        table's lock, and a value a reader started using meanwhile stays in memory.
        """
        freed = 0
        while freed < needed:
            with self._lock:
                victims = []
                planned = freed
                for object_id in self._resident:
                    entry = self._entries.get(object_id)
                    held = None if entry is None else entry.value
                    if isinstance(held, StoredValue) and not held.pinned():
                        victims.append((object_id, held))
                        planned += held.size
                        if planned >= needed:
                            break
            if not victims:
                return freed
            progressed = False
            for object_id, stored in victims:
                spilled = self.store.spill(object_id, stored)
                if spilled is None:
                    return freed  # the disk refuses; nothing more can be spilled now
                with self._lock:
                    entry = self._entries.get(object_id)
                    swapped = entry is not None and entry.value is stored and not stored.pinned()
                    if swapped:
                        entry.value = spilled
                        self._resident.pop(object_id, None)
                if not swapped:
                    self.store.release(spilled)  # freed, or read meanwhile: keep it as it is
                    continue
                self.store.spilled_out(stored)
                freed += stored.size
                progressed = True
            if not progressed:
                return freed
        return freed

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
                if entry.callbacks is None:
                    entry.callbacks = [callback]
                else:
                    entry.callbacks.append(callback)
                return
        callback(object_id)

    def remove_done_callback(self, object_id: bytes, callback: DoneCallback) -> None:
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is not None and entry.callbacks:
                try:
                    entry.callbacks.remove(callback)
                except ValueError:
                    pass

    # ---- references ----------------------------------------------------------------------

    def incref(self, object_ids: Iterable[bytes]) -> None:
        if not object_ids:
            return  # most calls' arguments hold no refs: no lock for them
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
        if not object_ids:
            return
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
        if to_free:
            self._free(to_free)

    def _maybe_free(self, object_id: bytes) -> None:
        self._free([object_id])

    def _free(self, object_ids: list[bytes]) -> None:
        """Drop the entries among `object_ids` that nothing refers to any more, and their values
        (a value that holds refs releases them in turn)."""
        freed: list[tuple[bytes, HeldValue]] = []
        inner: list[bytes] = []
        with self._lock:
            for object_id in object_ids:
                entry = self._entries.get(object_id)
                if entry is None or entry.references > 0 or entry.state is ObjectState.PENDING:
                    continue
                del self._entries[object_id]
                self._resident.pop(object_id, None)
                value = entry.value
                entry.state = ObjectState.FREED
                entry.value = None
                if value is not None:
                    freed.append((object_id, value))
                    if value.contained_refs:
                        inner.extend(value.contained_refs)
        if freed:
            self._release(freed)
            if self.on_values_dropped is not None:
                self.on_values_dropped([object_id for object_id, _ in freed])
        if inner:
            self.decref(inner)

    def held_by(self, holder: str) -> list[bytes]:
        """Ids of the objects whose value the process at `holder` holds."""
        with self._lock:
            return [oid for oid, e in self._entries.items() if type(e.value) is RemoteValue and e.value.holder == holder]

    def take_over(self, object_id: bytes, value: SerializedValue) -> bool:
        """Hold here, from now on, a value another process held (copied: its buffers may be
        that process's memory). False, holding nothing, if the object is gone or held here
        already. Raises ObjectStoreFullError when it fits nowhere."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None or type(entry.value) is not RemoteValue:
                return False
        held = self.store.hold(object_id, value, copy=True, make_room=self._make_room)
        with self._lock:
            entry = self._entries.get(object_id)
            swapped = entry is not None and type(entry.value) is RemoteValue
            if swapped:
                entry.value = held  # type: ignore[union-attr]
                if type(held) is StoredValue:
                    self._resident[object_id] = None
        if not swapped:
            self.store.release(held)
        return swapped

    def rebuild(self, object_ids: Sequence[bytes]) -> list[bytes]:
        """Make these done objects PENDING again (their task runs once more), keeping their
        references; returns those made pending. Their values are released."""
        reset: list[bytes] = []
        dropped: list[tuple[bytes, HeldValue]] = []
        with self._lock:
            for object_id in object_ids:
                entry = self._entries.get(object_id)
                if entry is None or entry.state not in (ObjectState.READY, ObjectState.FAILED):
                    continue
                if entry.value is not None:
                    dropped.append((object_id, entry.value))  # the rerun's value brings its own refs
                entry.state = ObjectState.PENDING
                entry.value = None
                self._resident.pop(object_id, None)
                reset.append(object_id)
        local = [held for _, held in dropped if type(held) is not RemoteValue]
        if local:
            self.store.release_all(local)
        inner = [ref for _, held in dropped for ref in held.contained_refs]
        if inner:
            self.decref(inner)
        if reset and self.on_values_dropped is not None:
            self.on_values_dropped(reset)
        return reset

    def fail_lost(self, object_id: bytes, error: SerializedValue) -> None:
        """A held value that is gone for good: reads of the object raise `error` from now on."""
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None or type(entry.value) is not RemoteValue:
                return
            entry.value = self.store.hold_anyway(error)
            entry.state = ObjectState.FAILED

    def drop_results(self, results: Sequence[tuple[bytes, SerializedValue]]) -> None:
        """Results no object takes (a cancelled call's): those another process holds are
        given back to it."""
        remote = [(value.holder, object_id) for object_id, value in results if type(value) is RemoteResult]
        if remote and self.on_remote_freed is not None:
            self.on_remote_freed(remote)

    def _release(self, named: list[tuple[bytes, HeldValue]]) -> None:
        """Give these values back: the store's to the store, the ids of those held elsewhere to
        their holders."""
        local: list[HeldValue] = []
        remote: list[tuple[str, bytes]] = []
        for object_id, held in named:
            if type(held) is RemoteValue:
                remote.append((held.holder, object_id))
            else:
                local.append(held)
        if local:
            self.store.release_all(local)
        if remote and self.on_remote_freed is not None:
            self.on_remote_freed(remote)

    def references(self, object_id: bytes) -> int:
        with self._lock:
            entry = self._entries.get(object_id)
            return 0 if entry is None else entry.references

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def snapshot(self) -> list[ObjectSummary]:
        """Every live object now: id, state, size (None while pending), producer, the refs it holds."""
        with self._lock:
            return [
                ObjectSummary(oid, e.state, e.value.size if e.value is not None else None, e.producer,
                              tuple(e.value.contained_refs) if e.value is not None else ())
                for oid, e in self._entries.items()
            ]

    def summary(self) -> TableSummary:
        """The values held now (ready ones), for the session's dashboard."""
        with self._lock:
            held = [e.value.size for e in self._entries.values() if e.value is not None and e.state is ObjectState.READY]
        return TableSummary(len(held), sum(held))

    def pending_ids(self) -> list[bytes]:
        with self._lock:
            return [oid for oid, e in self._entries.items() if e.state is ObjectState.PENDING]

    def fail_all_pending(self, error_for: Callable[[bytes], SerializedValue]) -> None:
        """On shutdown: complete every pending object with an error so no waiter hangs."""
        with self._lock:
            self._shut_down = True
        for object_id in self.pending_ids():
            self.fulfil(object_id, error_for(object_id))  # one finished meanwhile is left as it is
