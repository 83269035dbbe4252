"""A caller's own results lent to the host of its next direct call, instead of handed to the driver.

A worker keeps the results of its direct calls (`direct_calls.py`). A ref to one that leaves
the process used to make the driver their owner first (`HandOver`, its value, a `Sync`, and a
`Release` later: four messages for every result passed on). Passed in the arguments of another
direct call, it is lent instead, as a Ray owner keeps the arguments of a task it submitted: the
call names it in `CallMethod.lent`, with its value when that is ready and small (at most
`INLINE_LIMIT`, naming no refs), and the caller keeps the object alive until the call ends.
Most callees read the value they were sent, or nothing, and drop the ref before they answer:
then the driver never hears of the object.

A callee that needs more asks the caller to hand the objects over first (`AdoptLent`, answered
once the driver has them; `adopt`), after which they are ordinary refs the driver counts:

- to read a value the call did not carry (not ready, or large: the driver then says where it is);
- to pass the ref on (pickled into anything: another call, a put, a result, an item);
- to keep it past its answer (it announces its borrow then, `actor_host._complete`).

If the gate connection to the caller broke while both live, the callee asks the driver, which
asks the caller on its own session (`AdoptFor`). If the caller is gone, the value reads as
`OwnerDiedError`, as in Ray.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fray_ray._private import messages
from fray_ray._private.messages import Adopted, AdoptFor, AdoptLent, CallMethod
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue, serialize_error
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.workers.driver_notices import DriverNotices
from fray_ray.exceptions import OwnerDiedError


def lend(call: CallMethod, ours: Sequence[bytes], value_of: Callable[[bytes], SerializedValue | None]) -> list[bytes]:
    """Lend with `call` those of `ours` (the caller's own results its arguments name) that it
    may, and return them: every one but a top-level argument whose value does not travel with
    the call (the callee reads it at once: it is handed over instead). Values that are ready
    and small go along, once: a top-level argument's travels as the argument's."""
    if not ours:  # the usual call: nothing to lend
        return []
    inlined, top_level = call.args.inlined, set(call.args.top_level)
    sent: list[bytes] = []
    values: list[SerializedValue] = []
    rest: list[bytes] = []
    for object_id in ours:
        if object_id in inlined:
            rest.append(object_id)
        elif object_id not in top_level:
            value = value_of(object_id)
            if value is not None and value.size <= INLINE_LIMIT and not value.contained_refs:
                sent.append(object_id)
                values.append(value)
            else:
                rest.append(object_id)
    call.lent, call.lent_values = sent + rest, values
    return call.lent


def adoption_handler(hand_over: Callable[[list[bytes]], None], notices: DriverNotices) -> messages.MessageHandler:
    """The lender's handler of `AdoptLent` (on the link's reader thread): hand the objects to
    the driver, and answer once the driver has them."""

    def adopt(connection: Connection, message_id: int | None, asked: AdoptLent) -> None:
        hand_over(asked.ids)
        notices.confirm()
        if message_id is not None:
            messages.reply(connection, message_id, Adopted())

    return adopt


@dataclass(eq=False)
class _Lent:
    lender: Connection  # the caller's gate connection, where `AdoptLent` goes
    owner: bytes | None  # the caller's worker id, as its greeting said (for `AdoptFor`)
    value: SerializedValue | None  # None: not sent (pending or large)
    calls: int = 1  # calls that lent it and have not ended
    lost: bool = False  # its lender was gone when asked to hand it over (`value` says so)


class LentRefs:
    """The objects lent to this process by the callers of the calls it runs. Thread-safe."""

    def __init__(self, driver: Connection | None = None) -> None:
        """`driver`: this process's session, which relays `AdoptLent` when a lender's gate
        connection broke."""
        self._driver = driver
        self._lock = threading.Lock()
        self._lent: dict[bytes, _Lent] = {}
        self._calls: dict[bytes, list[bytes]] = {}  # call id -> what it lent, until it is answered

    def arrived(self, lender: Connection, call: CallMethod) -> None:
        """`call` came from `lender` (before its arguments are read)."""
        values = call.lent_values
        with self._lock:
            self._calls[call.call] = call.lent
            for index, object_id in enumerate(call.lent):
                entry = self._lent.get(object_id)
                value = values[index] if index < len(values) else call.args.inlined.get(object_id)
                if entry is None:
                    owner = lender.peer_info.get("caller")
                    self._lent[object_id] = _Lent(lender, owner if isinstance(owner, bytes) else None, value)
                else:
                    entry.calls += 1
                    entry.value = entry.value or value

    def ended(self, call_id: bytes) -> None:
        """The call was answered: what it lent and was not adopted is forgotten here."""
        with self._lock:
            for object_id in self._calls.pop(call_id, ()):
                entry = self._lent.get(object_id)
                if entry is not None:
                    entry.calls -= 1
                    if entry.calls <= 0:
                        del self._lent[object_id]

    def holds(self, object_id: bytes) -> bool:
        return object_id in self._lent

    def value(self, object_id: bytes) -> SerializedValue | None:
        """The value the call sent with `object_id` (or its loss), if any."""
        entry = self._lent.get(object_id)
        return None if entry is None else entry.value

    def without_value(self, object_ids: Sequence[bytes]) -> list[bytes]:
        """Those of `object_ids` lent here without their value."""
        if not self._lent:
            return []
        with self._lock:
            return [oid for oid in object_ids if (entry := self._lent.get(oid)) is not None and entry.value is None]

    def adopt(self, object_ids: Sequence[bytes]) -> None:
        """Have the lenders of those of `object_ids` lent here hand them to the driver; returns
        once it has them. A lender that is gone leaves them failed with `OwnerDiedError`."""
        if not self._lent:
            return
        by_lender: dict[tuple[Connection, bytes | None], list[bytes]] = {}
        with self._lock:
            for object_id in dict.fromkeys(object_ids):
                entry = self._lent.get(object_id)
                if entry is not None and not entry.lost:
                    by_lender.setdefault((entry.lender, entry.owner), []).append(object_id)
        for (lender, owner), ids in by_lender.items():
            try:
                messages.call(lender, AdoptLent(ids))
            except ConnectionClosed:  # the link broke: the lender may live on, and the driver can ask it
                if not self._adopted_through_driver(owner, ids):
                    self._lost(ids)
                    continue
            except RemoteError:
                self._lost(ids)
                continue
            with self._lock:
                for object_id in ids:
                    self._lent.pop(object_id, None)  # an ordinary ref from now on

    def _adopted_through_driver(self, owner: bytes | None, ids: list[bytes]) -> bool:
        if owner is None or self._driver is None:
            return False
        try:
            messages.call(self._driver, AdoptFor(owner, ids))
        except (ConnectionClosed, RemoteError):  # the lender is gone too
            return False
        return True

    def _lost(self, ids: list[bytes]) -> None:
        with self._lock:
            for object_id in ids:
                if (entry := self._lent.get(object_id)) is not None:
                    entry.value, entry.lost = serialize_error(OwnerDiedError(object_id.hex(), None, "")), True
