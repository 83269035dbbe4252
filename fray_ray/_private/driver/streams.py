"""Streams in the driver: the items of streaming generator tasks and actor methods.

A generator task (or method) sends each yielded value as it is produced; the driver stores it
as object `object_id_for(stream_id, i)` and wakes whoever waits for item i. The stream holds a
reference to each item until the consumer has taken a ref to it, so items nobody consumed
are freed when the generator is dropped. An error ends the stream with one last item that
raises it.

A streaming task's large items stay in its executor, as its results do (`held_lineage.py`).
When that process exits, the items it held are made pending again (`refill`) and taken from the
next run of the task, which replays every item: the retry of a task that was still running, or
a rerun for a finished one. An item the rerun does not yield again fails, never hangs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fray_ray._private.core.generators import DynamicObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.objects.holder_clients import lost
from fray_ray._private.objects.ids import index_of, object_id_for
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.remote_values import RemoteResult
from fray_ray._private.objects.serialization import SerializedValue, serialize, serialize_error
from fray_ray.exceptions import ActorUnavailableError

#: What `next_item` returns when the stream has ended.
END = b""

ChangeCallback = Callable[[], None]


@dataclass(eq=False)
class _Stream:
    produced: int = 0  # items stored so far (item ids 1..produced)
    handed_out: int = 0  # items the consumer has taken
    finished: bool = False
    released: bool = False
    handles: int = 0  # live ObjectRefGenerators for this stream
    callbacks: list[ChangeCallback] = field(default_factory=list)


class StreamTable:
    """Thread-safe state of every open stream, keyed by the producing task or call id."""

    def __init__(self, objects: ObjectTable) -> None:
        self._objects = objects
        self._lock = threading.Lock()
        self._streams: dict[bytes, _Stream] = {}
        #: stream id -> {index: (its lost holder, why no run made it again)} of items taken from
        #: the next run's replay
        self._refills: dict[bytes, dict[int, tuple[str, str]]] = {}

    def open(self, stream_id: bytes) -> None:
        with self._lock:
            self._streams.setdefault(stream_id, _Stream())

    def is_stream(self, stream_id: bytes) -> bool:
        with self._lock:
            return stream_id in self._streams

    def adopt(self, stream_id: bytes, before: int, items: list[SerializedValue], finished: bool) -> None:
        """Keep the stream of a direct generator call from here on (`HandOverStream`): at
        first, its caller took items 1..`before` itself (its handle to the stream is counted
        now); `items` follow item `before`."""
        with self._lock:
            if stream_id not in self._streams:
                self._streams[stream_id] = _Stream(produced=before, handed_out=before, handles=1)
        for index, value in enumerate(items, start=before + 1):
            self.add_item(stream_id, index, value)  # one the driver has already is dropped
        if finished:
            self.finish(stream_id)

    def running(self, stream_id: bytes) -> bool:
        """Whether the stream may still get items: a run of its producer has not ended."""
        with self._lock:
            stream = self._streams.get(stream_id)
            return stream is not None and not stream.finished

    def refill(self, stream_id: bytes, item_ids: Sequence[bytes], holder: str, why: str) -> None:
        """These items (pending again) were lost with `holder`, the process keeping them: take
        them from the replay of the stream's next run. Call before that run can start. An item
        the runs of the stream end without yielding again fails, saying `why`."""
        with self._lock:
            self._refills.setdefault(stream_id, {}).update(dict.fromkeys(map(index_of, item_ids), (holder, why)))

    def add_item(self, stream_id: bytes, index: int, value: SerializedValue) -> None:
        """Store item `index` (1-based). Items a retry replays (already stored) are dropped,
        unless lost since (`refill`); items missing before `index` (lost on the way) end the
        stream with an error."""
        with self._lock:
            refills = self._refills.get(stream_id)
            refilled = refills is not None and refills.pop(index, None) is not None
        if refilled:
            self._objects.fulfil(object_id_for(stream_id, index), value)
            return
        with self._lock:
            stream = self._streams.get(stream_id)
            taken = stream is not None and not stream.finished and index > stream.produced
            if taken:
                missing = range(stream.produced + 1, index)
                if not missing:
                    stream.produced = index
                    callbacks, stream.callbacks = stream.callbacks, []
                    released = stream.released
        if not taken:
            self._drop(stream_id, index, value)
            return
        if missing:
            self._drop(stream_id, index, value)
            self.finish(stream_id, serialize_error(ActorUnavailableError(
                f"items {missing.start} to {missing.stop - 1} of this generator were lost with the connection to "
                "its actor's host", None)))
            return
        object_id = object_id_for(stream_id, index)
        if released:  # the generator is gone: nobody can take this item (it used to stay stored, unreferenced)
            self._drop(stream_id, index, value)
        else:
            try:
                self._objects.put(object_id, value, copy=False)
            except Exception as exc:  # noqa: BLE001 - ObjectStoreFullError: the consumer reads it as the item
                self._objects.put(object_id, serialize_error(exc), copy=False)
            self._objects.incref([object_id])  # the stream's hold until the consumer takes it
        for callback in callbacks:
            callback()

    def _drop(self, stream_id: bytes, index: int, value: SerializedValue) -> None:
        """An item no object takes: one its producer keeps is given back to it, unless it is
        the very value the stored item already names (a replay by the same process)."""
        if type(value) is not RemoteResult:
            return
        object_id = object_id_for(stream_id, index)
        if self._objects.holders([object_id]).get(object_id) != value.holder:
            self._objects.drop_results([(object_id, value)])

    def finish(self, stream_id: bytes, error: SerializedValue | None = None) -> None:
        """End the stream (a run of its task ended); an error becomes one last item that raises
        it. Lost items this run did not yield again fail."""
        with self._lock:
            unmade = self._refills.pop(stream_id, None)
        for index, (holder, why) in sorted((unmade or {}).items()):
            object_id = object_id_for(stream_id, index)
            self._objects.fulfil(object_id, lost(object_id, holder, f"its worker process exited; {why}", "OBJECT_LOST"))
        if error is not None:
            with self._lock:
                stream = self._streams.get(stream_id)
                index = None if stream is None or stream.finished else stream.produced + 1
            if index is not None:
                self.add_item(stream_id, index, error)
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None or stream.finished:
                return
            stream.finished = True
            callbacks, stream.callbacks = stream.callbacks, []
            if stream.released:
                del self._streams[stream_id]
        for callback in callbacks:
            callback()

    def produced(self, stream_id: bytes) -> int:
        """How many items the stream has stored so far."""
        with self._lock:
            stream = self._streams.get(stream_id)
            return 0 if stream is None else stream.produced

    def poll(self, stream_id: bytes, index: int) -> bytes | None:
        """The id of item `index` if produced, END if the stream ended before it, else None."""
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None:
                return END
            if index <= stream.produced:
                return object_id_for(stream_id, index)
            return END if stream.finished else None

    def on_change(self, stream_id: bytes, callback: ChangeCallback) -> None:
        """Call `callback()` once the stream gets a new item or ends (now, if it has ended)."""
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is not None and not stream.finished:
                stream.callbacks.append(callback)
                return
        callback()

    def taken(self, stream_id: bytes, index: int) -> None:
        """The consumer now holds its own ref to item `index`: drop the stream's hold."""
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None or index <= stream.handed_out:
                return
            stream.handed_out = index
        self._objects.decref([object_id_for(stream_id, index)])

    def incref(self, stream_ids: list[bytes]) -> None:
        with self._lock:
            for stream_id in stream_ids:
                stream = self._streams.get(stream_id)
                if stream is not None:
                    stream.handles += 1

    def decref(self, stream_ids: list[bytes]) -> None:
        for stream_id in stream_ids:
            with self._lock:
                stream = self._streams.get(stream_id)
                if stream is None:
                    continue
                stream.handles -= 1
                last = stream.handles <= 0
            if last:
                self.release(stream_id)

    def release(self, stream_id: bytes) -> None:
        """The generator is gone: free items it never handed out."""
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None or stream.released:
                return
            stream.released = True
            pending = list(range(stream.handed_out + 1, stream.produced + 1))
            stream.handed_out = stream.produced
            if stream.finished:
                del self._streams[stream_id]
        self._objects.decref([object_id_for(stream_id, i) for i in pending])


def failed_generator_value(streams: StreamTable, task_id: bytes, error: SerializedValue) -> SerializedValue:
    """The value of a dynamic generator task whose generator raised `error`: the stream ends
    with `error` as one more item, and the DynamicObjectRefGenerator refers to every item (the
    return object holds them once stored)."""
    streams.finish(task_id, error)
    count = streams.produced(task_id)
    refs: list[ObjectRef[object]] = [ObjectRef(object_id_for(task_id, i), _register=False) for i in range(1, count + 1)]
    return serialize(DynamicObjectRefGenerator(refs))
