"""The items of generator methods a worker calls directly (`direct_calls.py`), kept by the caller.

The actor's host sends each item to the caller as it is made (`Yield` on the gate connection);
the call's `CallDone` ends the stream, an error as one last item. The consumer takes items in
order, and a taken item is a direct result like any other: its value stays here, and goes to
the driver only if a ref to it leaves this process.

The driver gets the whole stream (`HandOverStream`) when this process waits for it together
with objects the driver has, or loses the host's gate (the driver then finishes the call):
the items not taken yet go with it, and those that arrive later are forwarded; a large one
stays here all the same, and the driver learns where it is. From then on
the consumer asks the driver for items, as for a generator called through the driver.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fray_ray._private.messages import HandOverStream, Yield
from fray_ray._private.objects.ids import object_id_for
from fray_ray._private.objects.serialization import SerializedValue

#: Asks the driver for an item of a stream it keeps (the runtime's way, for a handed-over stream).
AskDriver = Callable[[], "concurrent.futures.Future[Any]"]
#: Records a taken item as a direct result of its call (item id, call id, value), with the lock held.
TakeItem = Callable[[bytes, bytes, SerializedValue], None]


@dataclass(eq=False)
class _Stream:
    call_id: bytes
    arrived: collections.deque[SerializedValue] = field(default_factory=collections.deque)  # not taken yet
    taken: int = 0  # items 1..taken were handed to the consumer
    finished: bool = False
    handed_over: bool = False
    forwarded: int = 0  # once handed over: items 1..forwarded went to the driver (or were taken)
    released: bool = False  # the generator is gone: later items are dropped
    #: consumers waiting for the next item: (its index, their future, how to ask the driver)
    waiters: list[tuple[int, concurrent.futures.Future[Any], AskDriver]] = field(default_factory=list)
    #: held while a message about the stream goes to the driver, so that they go in order
    sending: threading.Lock = field(default_factory=threading.Lock)

    @property
    def produced(self) -> int:
        return self.taken + len(self.arrived)


class DirectStreams:
    """The streams of one process's direct generator calls. Shares its caller's lock and
    condition (`direct_calls.DirectCalls`), whose tables a taken item joins."""

    def __init__(self, lock: threading.Lock, changed: threading.Condition, take: TakeItem,
                 notify: Callable[[HandOverStream], None], make_ref: Callable[[bytes], Any],
                 let_go: Callable[[Sequence[SerializedValue]], None]) -> None:
        """`let_go(values)`: items this process no longer keeps, other than those taken (sent to
        the driver, or dropped): the refs they name are not this process's any more."""
        self._let_go = let_go
        self._lock = lock
        self._changed = changed  # notified as items arrive (for `wait`)
        self._take = take
        self._notify = notify  # to the driver (the caller keeps large items, `DirectCalls._send_stream`)
        self._make_ref = make_ref  # an ObjectRef to a taken item
        self._streams: dict[bytes, _Stream] = {}

    def open(self, call_id: bytes) -> None:
        with self._lock:
            self._streams[call_id] = _Stream(call_id)

    def discard(self, call_id: bytes) -> None:
        """The call went through the driver after all: it feeds the generator."""
        with self._lock:
            stream = self._streams.pop(call_id, None)
            if stream is not None:
                self._let_go(stream.arrived)

    def holds(self, stream_id: bytes) -> bool:
        """Whether this process keeps the stream (it was not handed to the driver)."""
        stream = self._streams.get(stream_id)
        return stream is not None and not stream.handed_over and not stream.released

    def wanted(self, call_id: bytes) -> bool:
        """Whether the stream of a call whose host went away still matters (its generator lives)."""
        stream = self._streams.get(call_id)
        return stream is not None and not stream.released and not stream.finished

    # ---- from the host -------------------------------------------------------------------

    def arrived(self, item: Yield) -> None:
        """An item came from the host (on its link's reader thread)."""
        stream = self._streams.get(item.stream)
        if stream is None:
            self._let_go([item.value])
            return
        with stream.sending:
            resolved = []
            forward = None
            with self._lock:
                kept = False
                if stream.finished or stream.released:
                    pass  # a released stream's items are dropped (here, or by the driver)
                elif not stream.handed_over:
                    if item.index == stream.produced + 1:  # a retry's replay of items it has is dropped
                        stream.arrived.append(item.value)
                        kept = True
                        resolved = self._serve_waiters(stream)
                        self._changed.notify_all()
                elif item.index == stream.forwarded + 1:
                    stream.forwarded = item.index
                    forward = HandOverStream(item.stream, item.index - 1, [item.value])
            if forward is not None:
                self._notify(forward)
            if not kept:
                self._let_go([item.value])
        self._resolve(resolved)

    def ended(self, call_id: bytes, results: Sequence[SerializedValue]) -> None:
        """The call ended (its `CallDone`, or a cancel here): an error in `results` is the
        stream's last item."""
        stream = self._streams.get(call_id)
        if stream is None:
            return
        error = next((value for value in results if value.is_error), None)
        with stream.sending:
            with self._lock:
                if stream.finished:
                    return
                stream.finished = True
                forward = None
                if stream.handed_over:
                    forward = HandOverStream(call_id, stream.forwarded, [error] if error is not None else [], finished=True)
                elif error is not None and not stream.released:
                    stream.arrived.append(error)
                resolved = self._serve_waiters(stream)
                if stream.released:
                    del self._streams[call_id]
                self._changed.notify_all()
            if forward is not None:
                self._notify(forward)
        self._resolve(resolved)

    # ---- the consumer --------------------------------------------------------------------

    def next_item(self, stream_id: bytes, index: int, ask_driver: AskDriver) -> concurrent.futures.Future[Any] | None:
        """A future of item `index`'s ref (None at the stream's end); None if the driver
        keeps the stream."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return None
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        answer: tuple[bool, bytes | None] = (False, None)  # (known now, the item's id or None at the end)
        with self._lock:
            handed_over = stream.handed_over
            if handed_over:
                pass
            elif index <= stream.taken:
                answer = (True, object_id_for(stream_id, index))
            elif index == stream.taken + 1 and stream.arrived:
                answer = (True, self._take_next(stream))
            elif stream.finished:
                answer = (True, None)
            else:
                stream.waiters.append((index, future, ask_driver))
        if handed_over:
            self._settle(stream)
            return None
        if answer[0]:
            self._resolve([(future, answer[1])])
        return future

    def ready(self, stream_id: bytes, *, settle: bool = False) -> str | None:
        """"item" if the consumer's next item is here, "end" if the stream ended before it,
        else "pending"; None if the driver keeps the stream (`settle`: once the driver knows
        of it; never with the lock held)."""
        stream = self._streams.get(stream_id)
        if stream is not None and stream.handed_over and settle:
            self._settle(stream)
        if stream is None or stream.handed_over:
            return None
        if stream.arrived:
            return "item"
        return "end" if stream.finished else "pending"

    def hand_over(self, stream_id: bytes, *, last: bool = False) -> bool:
        """Give the stream to the driver (its items not taken yet go with it); False if it is
        not one of ours. `last`: no more of its items come here (the host's connection is
        gone), so this process forgets it."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return False
        with stream.sending:
            with self._lock:
                if stream.handed_over or stream.released:
                    return True
                stream.handed_over = True
                items, stream.arrived = list(stream.arrived), collections.deque()
                before, finished = stream.taken, stream.finished
                stream.forwarded = before + len(items)
                waiters, stream.waiters = stream.waiters, []
            self._notify(HandOverStream(stream_id, before, items, finished=finished))
            self._let_go(items)
            if finished or last:  # the driver has all of it: forgotten once the message is on its way
                self.discard(stream_id)
        for _, future, ask_driver in waiters:  # they ask the driver now
            _chain(ask_driver(), future)
        return True

    def release(self, ids: Sequence[bytes]) -> None:
        """Refs to these are gone: a generator's stream among them drops the items not taken.
        A handed-over stream's end still goes to the driver, which then forgets it."""
        if not self._streams:
            return  # no lock on the common path: refs to objects, no generator
        with self._lock:
            for stream_id in ids:
                stream = self._streams.get(stream_id)
                if stream is None:
                    continue
                stream.released = not stream.handed_over
                self._let_go(stream.arrived)
                stream.arrived.clear()
                if stream.finished:
                    del self._streams[stream_id]

    # ---- helpers (with the lock held where named) ------------------------------------------

    @staticmethod
    def _settle(stream: _Stream) -> None:
        """Wait until a hand-over of `stream` under way has sent its message: what this process
        asks the driver about the stream next reaches it after the stream."""
        with stream.sending:
            pass

    def _take_next(self, stream: _Stream) -> bytes:
        """Hand the next item to the consumer (lock held): it joins this process's direct results."""
        value = stream.arrived.popleft()
        stream.taken += 1
        item_id = object_id_for(stream.call_id, stream.taken)
        self._take(item_id, stream.call_id, value)
        return item_id

    def _serve_waiters(self, stream: _Stream) -> list[tuple[concurrent.futures.Future[Any], bytes | None]]:
        """The waiters whose item arrived or whose stream ended, and their answers (lock held)."""
        served = []
        while stream.waiters:
            index, future, _ = stream.waiters[0]
            if index <= stream.taken:
                served.append((future, object_id_for(stream.call_id, index)))
            elif index == stream.taken + 1 and stream.arrived:
                served.append((future, self._take_next(stream)))
            elif stream.finished:
                served.append((future, None))
            else:
                break
            stream.waiters.pop(0)
        return served

    def _resolve(self, answers: list[tuple[concurrent.futures.Future[Any], bytes | None]]) -> None:
        for future, item_id in answers:  # outside the lock: a ref counts itself, callbacks run
            if not future.done():
                future.set_result(None if item_id is None else self._make_ref(item_id))


def _chain(source: concurrent.futures.Future[Any], target: concurrent.futures.Future[Any]) -> None:
    def copy(done: concurrent.futures.Future[Any]) -> None:
        if target.done():
            return
        error = done.exception()
        if error is not None:
            target.set_exception(error)
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)
