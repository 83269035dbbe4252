"""The refs that the answers and generator items of a worker's direct calls name, on the caller's side.

An actor host keeps the objects an answer or item names until its caller says that the driver
counts the caller's own refs to them (`ForeignCallGate`, `ResultsTaken`). So the caller counts
those refs as its own from the moment the answer or item comes, for as long as it keeps the
value, and tells the host once the driver has handled what it was told (`DriverNotices.then`).
A value that goes to the driver, or is dropped, lets go of its refs: the driver counts a value
it stores itself.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence

from fray_ray._private import messages
from fray_ray._private.messages import ResultsTaken
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.workers.driver_notices import DriverNotices


class AnswerRefs:
    """Counts the refs that values this process keeps from its direct calls name. Thread-safe."""

    def __init__(self, references: LocalReferenceCounter, notices: DriverNotices) -> None:
        self._references = references
        self._notices = notices
        self._lock = threading.Lock()
        self._items_naming: set[bytes] = set()  # calls whose items named refs counted here
        self._kept: set[bytes] = set()  # results (and taken items) kept here whose values name refs

    def count(self, values: Iterable[SerializedValue]) -> None:
        """These values came: the refs they name are this process's (before anyone reads them)."""
        for value in values:
            for ref in value.contained_refs:
                self._references.add(ref)

    def let_go(self, values: Iterable[SerializedValue]) -> None:
        """Counted values no longer kept here (sent to the driver, or dropped)."""
        for value in values:
            for ref in value.contained_refs:
                self._references.release_later(ref)

    def item_arrived(self, call_id: bytes, value: SerializedValue) -> None:
        if value.contained_refs:
            self.count([value])
            with self._lock:
                self._items_naming.add(call_id)

    def kept(self, object_id: bytes, value: SerializedValue) -> None:
        """A counted value is kept as the value of `object_id` (a result, or a taken item)."""
        if value.contained_refs:
            with self._lock:
                self._kept.add(object_id)

    def dropped(self, object_id: bytes, value: SerializedValue) -> None:
        """The value of `object_id` is no longer kept here."""
        with self._lock:
            if object_id not in self._kept:
                return
            self._kept.discard(object_id)
        self.let_go([value])

    def named(self, call_id: bytes, results: Sequence[SerializedValue]) -> bool:
        """Whether the call's answer or items named refs, which its host keeps until told."""
        with self._lock:
            items = call_id in self._items_naming
            self._items_naming.discard(call_id)
        return items or any(value.contained_refs for value in results)

    def host_gone(self, call_id: bytes) -> None:
        """The call's host went away, and the refs it kept with it."""
        with self._lock:
            self._items_naming.discard(call_id)

    def tell_host(self, host: Connection, calls: list[bytes]) -> None:
        """Once the driver counts what these calls named here, the host may let go of its refs."""
        self._notices.then(functools.partial(_results_taken, host, calls))


def _results_taken(host: Connection, calls: list[bytes]) -> None:
    try:
        messages.notify(host, ResultsTaken(calls))
    except ConnectionClosed:
        pass  # the host is gone, and its refs with it
