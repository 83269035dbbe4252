"""How the driver reads objects: `get`, `wait`, the futures behind `await ref`, and stream items.

Every read waits on the object table's done-callbacks (and a stream's change callbacks) rather
than polling, and `wait_async` answers through a callback so the session service can serve a
worker's wait without a thread. A freed or unknown object raises `ObjectFreedError` at once.
`DriverReads` is a base of `DriverRuntime` (`driver.py`) and reads the object table, reference
counter, stream table and timers it builds; writes (`put`, task results) stay there.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fray_ray._private.core.generators import ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.driver.streams import END, StreamTable
from fray_ray._private.objects.holder_clients import HolderLost
from fray_ray._private.objects.remote_values import RemoteResult
from fray_ray._private.objects.serialization import SerializedValue, deserialize, deserialize_all
from fray_ray._private.stream import read_hints
from fray_ray._private.stream.outbox import flush_deferred
from fray_ray.exceptions import GetTimeoutError, ObjectFreedError

if TYPE_CHECKING:
    from fray_ray._private.driver.timers import TimerQueue
    from fray_ray._private.objects.holder_clients import HolderClients
    from fray_ray._private.objects.object_table import ObjectTable
    from fray_ray._private.objects.refcount import LocalReferenceCounter


#: Reads of one `get` that may meet a lost holder before the last one reports what it finds.
READ_AGAIN = 4


class _Rebuilding(Exception):
    """An object a get waited with went back to pending (its holder was lost): read it again."""


class DriverReads:
    """Reading objects and streams; `DriverRuntime` sets the fields below in its `__init__`."""

    objects: ObjectTable
    references: LocalReferenceCounter
    streams: StreamTable
    timers: TimerQueue
    holders: HolderClients

    def _lost(self, object_id: bytes) -> BaseException:
        return ObjectFreedError(object_id.hex(), None, "")

    def _fetched(self, object_ids: Sequence[bytes], values: Sequence[Any]) -> list[Any]:
        """`values` with each value a worker holds fetched from it (mapped on this host)."""
        wanted = [(oid, value.holder) for oid, value in zip(object_ids, values) if type(value) is RemoteResult]
        if not wanted:
            return list(values)
        found = self.holders.fetch(wanted)
        return [found.get(oid, value) if type(value) is RemoteResult else value for oid, value in zip(object_ids, values)]

    def _fetched_one(self, object_id: bytes, value: SerializedValue) -> SerializedValue:
        return self._fetched([object_id], [value])[0] if type(value) is RemoteResult else value

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        lost = 0
        while True:
            try:
                return self._get_once(refs, timeout)
            except _Rebuilding:
                continue  # each read waits for the rebuild, which ends in a value or an error
            except HolderLost:
                lost += 1
                if lost >= READ_AGAIN:
                    raise
                # its values are being rebuilt, or failed: read them again

    def _get_once(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        self.references.flush()
        object_ids = [r.binary() for r in refs]
        ready = self.objects.ready_values(object_ids)
        if ready is not None:  # the common case: everything is there
            ready = self._fetched(object_ids, ready)
            for value in ready:
                if value.is_error:
                    raise deserialize(value)
            return deserialize_all(ready)
        flush_deferred()  # calls this thread queued may be what the results wait for
        event = threading.Event()
        remaining: set[bytes] = set()
        lock = threading.Lock()

        def done(object_id: bytes) -> None:
            failed = self.objects.is_error(object_id)
            with lock:
                remaining.discard(object_id)
                finished = not remaining or failed
            if finished:
                event.set()

        source = read_hints.take(object_ids[0]) if len(object_ids) == 1 else None
        if len(object_ids) == 1:  # the commonest wait (get of one ref): its completion ends it
            def done(object_id: bytes) -> None:  # noqa: F811
                event.set()
                if source is not None:
                    source.wake_lender()  # in case it arrived another way than `source`

        with lock:  # a completion that comes while the callbacks are registered waits for `remaining`
            pending, unknown, failed = self.objects.watch(object_ids, done)
            remaining.update(pending)
        if unknown is not None:
            raise self._lost(unknown)
        # Errors already present are raised at once, without waiting for the rest.
        if pending and not failed and remaining:
            wait_s = timeout
            if source is not None:  # read its connection here rather than be woken by its reader
                started = time.monotonic()
                source.serve_until(event.is_set, timeout)
                wait_s = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            if not event.wait(wait_s):
                for object_id in pending:
                    self.objects.remove_done_callback(object_id, done)
                raise GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} seconds.")
        values = self.objects.values(object_ids)
        assert values is not None
        values = self._fetched(object_ids, values)
        for value in values:
            if value is not None and value.is_error:
                raise deserialize(value)  # the first error among them, in the order asked
        for object_id, value in zip(object_ids, values):
            if value is None:
                if self.objects.known(object_id):  # pending again (or since rebuilt): its holder was lost meanwhile
                    raise _Rebuilding(object_id)
                raise self._lost(object_id)  # freed meanwhile
        return deserialize_all(values)  # type: ignore[arg-type]

    def wait_async(
        self,
        object_ids: Sequence[bytes],
        num_returns: int,
        timeout: float | None,
        callback: Callable[[list[bytes]], None],
        stream_indices: Mapping[bytes, int] | None = None,
    ) -> None:
        """Call `callback(ready_ids)` once num_returns are ready or the timeout passes.

        Ids in `stream_indices` are generators: ready when their next item (or end) is there.
        """
        streams = dict(stream_indices or {})
        if not streams:  # enough done already (a wait loop over many refs): no callbacks at all
            done_now = self.objects.done_among(object_ids)
            if len(done_now) >= num_returns or timeout == 0:
                callback(done_now)
                return
        lock = threading.Lock()
        state = {"fired": False}
        ready: list[bytes] = []

        def is_ready(item: bytes) -> bool:
            if item in streams:
                return self.stream_ready(item, streams[item]) != "pending"
            return self.objects.is_done(item)

        def fire() -> None:
            with lock:
                if state["fired"]:
                    return
                state["fired"] = True
                chosen = [i for i in object_ids if i in ready or is_ready(i)]
            for item in object_ids:
                if item not in streams:
                    self.objects.remove_done_callback(item, done)
            callback(chosen)

        def done(item: bytes) -> None:
            with lock:
                if item not in ready:
                    ready.append(item)
                enough = len(ready) >= num_returns
            if enough:
                fire()

        for item in object_ids:
            if item in streams:
                self._when_stream_ready(item, streams[item], lambda item=item: done(item))
            else:
                self.objects.add_done_callback(item, done)
        with lock:
            enough = len(ready) >= num_returns
        if enough or timeout == 0:
            fire()
        elif timeout is not None:
            self.timers.call_later(timeout, fire)

    def _when_stream_ready(self, stream_id: bytes, index: int, callback: Callable[[], None]) -> None:
        def check() -> None:
            if self.stream_ready(stream_id, index) == "pending":
                self.streams.on_change(stream_id, check)
            else:
                callback()

        check()

    def wait(
        self, refs: Sequence[Any], num_returns: int, timeout: float | None, fetch_local: bool
    ) -> tuple[list[Any], list[Any]]:
        self.references.flush()
        done_event = threading.Event()
        result: list[list[bytes]] = []

        def answer(ready: list[bytes]) -> None:
            result.append(ready)
            done_event.set()

        keys = [_wait_key(r) for r in refs]
        streams = {r._stream_id: r._next_index for r in refs if isinstance(r, ObjectRefGenerator)}
        self.wait_async(keys, num_returns, timeout, answer, streams)
        flush_deferred()
        done_event.wait()
        ready_keys = set(result[0])
        ready = [r for r, k in zip(refs, keys) if k in ready_keys][:num_returns]
        chosen = {id(r) for r in ready}
        return ready, [r for r in refs if id(r) not in chosen]

    def object_future(self, ref: ObjectRef) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        keep_alive = ref  # the ref must live until the value is read

        def done(object_id: bytes) -> None:
            value = self.objects.value(object_id)
            if future.done():
                return
            if value is not None:
                try:
                    value = self._fetched_one(object_id, value)
                except HolderLost:  # being rebuilt, or failed now: wait for that
                    self.objects.add_done_callback(object_id, done)
                    return
            if value is None:
                future.set_exception(self._lost(object_id))
            elif value.is_error:
                future.set_exception(deserialize(value))
            else:
                try:
                    future.set_result(deserialize(value))
                except BaseException as exc:  # noqa: BLE001 - delivered through the future
                    future.set_exception(exc)
            del keep_alive_box[:]

        keep_alive_box = [keep_alive]
        flush_deferred()  # the future is awaited next
        if not self.objects.known(ref.binary()):
            future.set_exception(self._lost(ref.binary()))
            return future
        self.objects.add_done_callback(ref.binary(), done)
        return future

    # ---- streams -------------------------------------------------------------------------

    def stream_next_future(self, stream_id: bytes, index: int) -> concurrent.futures.Future:
        """A future for the ref to item `index` of a stream (None once the stream has ended)."""
        future: concurrent.futures.Future = concurrent.futures.Future()

        def check() -> None:
            object_id = self.streams.poll(stream_id, index)
            if object_id is None:
                self.streams.on_change(stream_id, check)
                return
            if future.done():
                return
            if object_id == END:
                future.set_result(None)
                return
            ref = ObjectRef(object_id)
            self.streams.taken(stream_id, index)
            future.set_result(ref)

        check()
        return future

    def stream_ready(self, stream_id: bytes, index: int) -> str:
        """"item" if item `index` is there, "end" if the stream ended before it, else "pending"."""
        object_id = self.streams.poll(stream_id, index)
        return "pending" if object_id is None else ("end" if object_id == END else "item")


def _wait_key(waitable: Any) -> bytes:
    return waitable._stream_id if isinstance(waitable, ObjectRefGenerator) else waitable.binary()
