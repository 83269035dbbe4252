"""A caller's own results lent to the host of its next direct call, instead of handed to the driver.

A worker keeps the results of its direct calls (`direct_calls.py`). A ref to one that leaves
the process used to make the driver their owner first (`HandOver`, its value, a `Sync`, and a
`Release` later: four messages for every result passed on). Passed in the arguments of another
direct call, it is lent instead, as a Ray owner keeps the arguments of a task it submitted: the
call names it in `CallMethod.lent`, with its value when that is ready and small (at most
`INLINE_LIMIT`, naming no refs), and the caller keeps the object alive until the call ends.
Most callees read the value they were sent, or nothing, and drop the ref before they answer:
then the driver never hears of the object.

A callee that still holds the ref as it answers (a replay buffer, say) keeps borrowing it from
the caller, as a Ray borrower reports to the owner what it still holds when its task ends: the
answer names it (`CallDone.kept`), the caller keeps a ref for that host (`Borrowers`) until the
host says it dropped it (`LentReturned`), and the driver still hears nothing. A caller whose
process ends on purpose (an executor retired) hands such objects to the driver first and has
the host borrow them from there (`TakeLent`). A link that breaks counts as the borrower's end,
as a Ray owner counts a borrower it cannot reach. A callee may lend such a ref on, in the
arguments of its own direct call (a pipeline stage): it is then that host's lender, and keeps
borrowing the object from its own lender while the host does.

A callee that needs more asks the caller to hand the objects over first (`AdoptLent`, answered
once the driver has them; `adopt`), after which they are ordinary refs the driver counts:

- to read a value the call did not carry (not ready, or large: the driver then says where it is);
- to pass the ref on otherwise (pickled into a task's arguments, a put, a result, an item).

If the gate connection to the caller broke while both live, the callee asks the driver, which
asks the caller on its own session (`AdoptFor`). If the caller is gone, the value reads as
`OwnerDiedError`, as in Ray; if it let the object go when the link broke, as `ObjectLostError`.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fray_ray._private import messages
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.messages import (
    Adopted,
    AdoptFor,
    AdoptLent,
    CallMethod,
    LentReturned,
    LentValues,
    MessageError,
    ReadLent,
    TakeLent,
)
from fray_ray._private.objects.holder_clients import HolderLost
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue, serialize_error
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.workers.driver_notices import DriverNotices
from fray_ray._private.workers.held_results import WORKER_HOLDER
from fray_ray._private.workers.task_interrupts import wait_for_reply
from fray_ray.exceptions import ObjectLostError, OwnerDiedError

#: How long a caller whose process ends waits for each host to borrow from the driver what it kept.
TAKE_LENT_TIMEOUT_S = 60.0


def lend(call: CallMethod, ours: Sequence[bytes], value_of: Callable[[bytes], SerializedValue | None],
         holder_of: Callable[[bytes], tuple[str, int] | None] = lambda object_id: None) -> list[bytes]:
    """Lend with `call` those of `ours` (the caller's own results its arguments name, or
    objects lent to it) that it may, and return them. Values that are ready and small go along,
    once (a top-level argument's travels as the argument's); for a large one, where a holder
    serves it (`holder_of`: it keeps the value there now, or knows where its lender's does). A
    top-level argument whose value neither travels nor has a holder is not lent: the callee
    reads it at once, so it is handed over instead."""
    if not ours:  # the usual call: nothing to lend
        return []
    inlined, top_level = call.args.inlined, set(call.args.top_level)
    sent: list[bytes] = []
    values: list[SerializedValue] = []
    rest: list[bytes] = []
    held: list[tuple[bytes, tuple[str, int]]] = []
    for object_id in ours:
        if object_id in inlined:
            rest.append(object_id)
            continue
        value = value_of(object_id)
        if object_id not in top_level and value is not None and value.size <= INLINE_LIMIT \
                and not value.contained_refs:
            sent.append(object_id)
            values.append(value)
        elif (where := holder_of(object_id)) is not None:
            rest.append(object_id)
            held.append((object_id, where))
        elif object_id not in top_level:
            rest.append(object_id)
    call.lent, call.lent_values = sent + rest, values
    index = {object_id: number for number, object_id in enumerate(call.lent)}
    call.lent_held = [[index[object_id], address, size] for object_id, (address, size) in held]
    return call.lent


def lender_handlers(hand_over: Callable[[list[bytes]], None], notices: DriverNotices, borrowers: Borrowers,
                    let_go: Callable[[list[bytes]], list[bytes]],
                    read: Callable[[list[bytes], Callable[[LentValues], None]], None] | None = None,
                    ) -> dict[type[messages.Message], messages.MessageHandler]:
    """The lender's handlers of what a host says on its link (on the link's reader thread).
    `AdoptLent`: hand the objects to the driver, and answer once the driver has them;
    `let_go(ids)`: those this process no longer refers to (it may have freed them).
    `ReadLent`: `read(ids, answer)` answers with their values once they are ready."""

    def adopt(connection: Connection, message_id: int | None, asked: AdoptLent) -> None:
        missing = let_go(asked.ids)
        hand_over(asked.ids)
        notices.confirm()
        if message_id is not None:
            messages.reply(connection, message_id, Adopted(missing))

    def returned(connection: Connection, message_id: int | None, back: LentReturned) -> None:
        borrowers.returned(connection, back.ids)

    def read_lent(connection: Connection, message_id: int | None, asked: ReadLent) -> None:
        if message_id is None:
            return
        if read is None or not isinstance(asked.ids, list):
            messages.reply(connection, message_id, LentValues())  # nothing here: the host has them handed over
            return
        read(asked.ids, lambda values: messages.reply(connection, message_id, values))

    return {AdoptLent: adopt, LentReturned: returned, ReadLent: read_lent}


def held_for_lending(object_id: bytes, value: SerializedValue) -> tuple[str, int] | None:
    """Keep a large value naming no refs in this process's holder, for the hosts it is lent
    to to fetch there: (holder address, size); None if it is small or cannot be kept."""
    if value.is_error or value.size <= INLINE_LIMIT or value.contained_refs:
        return None
    _, held = WORKER_HOLDER.keep_large([value], [object_id])
    return (held[0][1], held[0][2]) if held else None


def lent_values(ready: Sequence[tuple[bytes, SerializedValue | None]],
                holder_of: Callable[[bytes], tuple[str, int] | None]) -> LentValues:
    """The answer to `ReadLent` from (object id, value or None) pairs: small values as they
    are, others by where `holder_of` says a holder serves them; those naming refs, or that no
    holder serves, are left out (handed over instead)."""
    answer = LentValues()
    for object_id, value in ready:
        where = holder_of(object_id) if value is None or value.size > INLINE_LIMIT else None
        if where is not None:
            answer.held.append([len(answer.ids), *where])
            value = SerializedValue(b"", (), (), False)
        elif value is None or value.size > INLINE_LIMIT or value.contained_refs:
            continue
        answer.ids.append(object_id)
        answer.values.append(value)
    return answer


def after_all(futures: Sequence[concurrent.futures.Future[Any]], then: Callable[[], None]) -> None:
    """Call `then()` once every one of `futures` is done (at once if they are), on the thread
    that completes the last."""
    left = [len(futures) + 1]  # and one until every callback is set
    lock = threading.Lock()

    def one_done(_: object = None) -> None:
        with lock:
            left[0] -= 1
            if left[0] > 0:
                return
        then()

    for future in futures:
        future.add_done_callback(one_done)
    one_done()


class Borrowers:
    """The lender's side: a ref to each of this process's objects a host kept past the call
    that lent it (`CallDone.kept`), held for that host until it returns the object or its link
    closes. Thread-safe."""

    def __init__(self, flush: Callable[[], None] = lambda: None) -> None:
        """`flush()` applies the releases of dropped refs at once (an idle process makes no
        call that would apply them later: `LocalReferenceCounter.flush`)."""
        self._flush = flush
        self._lock = threading.Lock()
        self._by_link: dict[Connection, dict[bytes, ObjectRef[Any]]] = {}

    def kept(self, link: Connection, object_ids: Sequence[bytes]) -> None:
        """The host on `link` keeps these (the call that lent them holds refs meanwhile)."""
        with self._lock:
            refs = self._by_link.setdefault(link, {})
            for object_id in object_ids:
                if object_id not in refs:
                    refs[object_id] = ObjectRef(object_id, _announced=True)

    def returned(self, link: Connection, object_ids: Sequence[bytes]) -> None:
        with self._lock:
            refs = self._by_link.get(link, {})
            dropped = [refs.pop(object_id) for object_id in object_ids if object_id in refs]
            if not refs:
                self._by_link.pop(link, None)
        if dropped:
            del dropped  # released outside the lock
            self._flush()

    def gone(self, link: Connection) -> None:
        """The link closed: its host is gone, or out of reach, which counts the same."""
        with self._lock:
            dropped = self._by_link.pop(link, None)
        if dropped:
            del dropped
            self._flush()

    def hand_off(self, hand_over: Callable[[list[bytes]], None], notices: DriverNotices) -> None:
        """This process ends: hand what hosts keep to the driver, and have each host borrow it
        from there (`TakeLent`) before letting go of it here."""
        with self._lock:
            by_link, self._by_link = self._by_link, {}
        for link, refs in by_link.items():
            ids = list(refs)
            hand_over(ids)
            notices.confirm()
            try:
                messages.call(link, TakeLent(ids), timeout=TAKE_LENT_TIMEOUT_S)
            except (ConnectionClosed, RemoteError, TimeoutError):
                pass  # the host is gone, or did not answer: it fails to read them, as in Ray


@dataclass(eq=False)
class _Lent:
    lender: Connection  # the caller's gate connection, where `AdoptLent` goes
    owner: bytes | None  # the caller's worker id, as its greeting said (for `AdoptFor`)
    value: SerializedValue | None  # None: not sent (pending or large)
    calls: int = 1  # calls that lent it and have not ended
    lost: bool = False  # its lender was gone when asked to hand it over (`value` says so)
    kept: bool = False  # held past the answer of a call that lent it: borrowed from the lender
    held: tuple[str, int] | None = None  # (holder address, size): where its value is served


class LentRefs:
    """The objects lent to this process by the callers of the calls it runs. Thread-safe."""

    def __init__(self, driver: Connection | None = None,
                 borrow_now: Callable[[list[bytes]], None] = lambda object_ids: None) -> None:
        """`driver`: this process's session, which relays `AdoptLent` when a lender's gate
        connection broke. `borrow_now(ids)` tells the driver this process borrows them, and
        returns once it counts that (`DriverNotices.borrow_now`)."""
        self._driver = driver
        self._borrow_now = borrow_now
        self._lock = threading.Lock()
        self._lent: dict[bytes, _Lent] = {}
        #: call id -> the connection it came on and what it lent, until it is answered
        self._calls: dict[bytes, tuple[Connection, list[bytes]]] = {}

    def arrived(self, lender: Connection, call: CallMethod) -> None:
        """`call` came from `lender` (before its arguments are read)."""
        values = call.lent_values
        held = _held_at(call.lent_held)
        owner = lender.peer_info.get("caller")
        owner = owner if isinstance(owner, bytes) else None
        with self._lock:
            self._calls[call.call] = (lender, call.lent)
            for index, object_id in enumerate(call.lent):
                entry = self._lent.get(object_id)
                value = values[index] if index < len(values) else call.args.inlined.get(object_id)
                if entry is None:
                    self._lent[object_id] = _Lent(lender, owner, value, held=held.get(index))
                else:
                    entry.calls += 1
                    entry.value = entry.value or value
                    entry.held = entry.held or held.get(index)
                    if entry.lender.closed and not entry.lost:  # its lender's new link
                        entry.lender, entry.owner = lender, owner

    def keep(self, call_id: bytes, held: Sequence[bytes]) -> list[bytes]:
        """As `call_id` is answered: of `held` (first refs its arguments made, still held),
        those its caller lent keep being borrowed from it, and are returned (its answer names
        them); those other callers lent are handed to the driver first, as before a read."""
        kept, others = [], []
        with self._lock:
            lender = self._calls.get(call_id, (None, ()))[0]
            for object_id in held:
                entry = self._lent.get(object_id)
                if entry is None:
                    continue
                if entry.lender is lender and not entry.lost and not entry.lender.closed:
                    entry.kept = True
                    kept.append(object_id)
                else:
                    others.append(object_id)
        self.adopt(others)
        return kept

    def ended(self, call_id: bytes) -> None:
        """The call was answered: what it lent and was not adopted or kept is forgotten here."""
        with self._lock:
            for object_id in self._calls.pop(call_id, (None, ()))[1]:
                entry = self._lent.get(object_id)
                if entry is not None:
                    entry.calls -= 1
                    if entry.calls <= 0 and not entry.kept:
                        del self._lent[object_id]

    def returned(self, object_ids: list[bytes]) -> list[bytes]:
        """This process dropped its last refs to these: tell the lenders of those it kept
        (`LentReturned`); returns the others (the driver counts them, or nobody does)."""
        if not self._lent:
            return object_ids
        rest: list[bytes] = []
        by_lender: dict[Connection, list[bytes]] = {}
        with self._lock:
            for object_id in object_ids:
                entry = self._lent.get(object_id)
                if entry is None or not entry.kept:
                    rest.append(object_id)
                    continue
                entry.kept = False
                if entry.calls <= 0:
                    del self._lent[object_id]
                by_lender.setdefault(entry.lender, []).append(object_id)
        for lender, ids in by_lender.items():
            _tell(lender, LentReturned(ids))
        return rest

    def take(self, lender: Connection, object_ids: Sequence[bytes]) -> None:
        """`lender`'s process ends and the driver has these: borrow those kept here from it."""
        with self._lock:
            ids = [oid for oid in object_ids if (entry := self._lent.get(oid)) is not None and entry.kept
                   and entry.lender is lender]
            for object_id in ids:
                self._lent[object_id].kept = False
                if self._lent[object_id].calls <= 0:
                    del self._lent[object_id]
        if ids:
            self._borrow_now(ids)

    def holds(self, object_id: bytes) -> bool:
        return object_id in self._lent

    def holder_of(self, object_id: bytes) -> tuple[str, int] | None:
        """Where the value of `object_id`, lent here, is served, if a holder serves it."""
        entry = self._lent.get(object_id)
        return None if entry is None or entry.lost else entry.held

    def ready(self, object_id: bytes) -> bool:
        """Whether the value of `object_id`, lent here, can be read without waiting."""
        entry = self._lent.get(object_id)
        return entry is not None and (entry.value is not None or entry.held is not None)

    def read_pending(self, object_ids: Sequence[bytes], timeout: float | None) -> None:
        """Ask the lenders of those of `object_ids` lent here whose value was not ready as the
        call left for it, and wait until they answer (a value, or where a holder serves it);
        one a lender leaves out is left to `adopt`. Raises TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for asked in self.ask_lenders(object_ids):
            wait_for_reply(asked, None if deadline is None else max(0.0, deadline - time.monotonic()))

    def ask_lenders(self, object_ids: Sequence[bytes]) -> list[concurrent.futures.Future[Any]]:
        """`ReadLent` to the lenders of those of `object_ids` lent here with neither a value nor
        a holder; each future is done once its answer is recorded (or its lender could not
        answer: `adopt` then asks it to hand them over)."""
        if not self._lent:
            return []
        by_lender: dict[Connection, list[bytes]] = {}
        with self._lock:
            for object_id in dict.fromkeys(object_ids):
                entry = self._lent.get(object_id)
                if entry is not None and entry.value is None and entry.held is None and not entry.lost:
                    by_lender.setdefault(entry.lender, []).append(object_id)
        asked = []
        for lender, ids in by_lender.items():
            recorded: concurrent.futures.Future[Any] = concurrent.futures.Future()
            try:
                request = messages.request(lender, ReadLent(ids))
            except ConnectionClosed:
                continue
            request.add_done_callback(lambda done, ids=ids, recorded=recorded: self._record(done, ids, recorded))
            asked.append(recorded)
        return asked

    def _record(self, done: concurrent.futures.Future[Any], ids: list[bytes],
                recorded: concurrent.futures.Future[Any]) -> None:
        try:
            answer = messages.reply_of(ReadLent(ids), done.result())
        except (ConnectionClosed, RemoteError, MessageError):
            recorded.set_result(None)  # the lender is asked to hand them over instead
            return
        held = _held_at(answer.held)
        with self._lock:
            for index, (object_id, value) in enumerate(zip(answer.ids, answer.values)):
                entry = self._lent.get(object_id) if object_id in ids else None
                if entry is not None and entry.value is None:
                    entry.held = held.get(index)
                    entry.value = None if entry.held is not None else value
        recorded.set_result(None)

    def read_held(self, object_ids: Sequence[bytes],
                  fetch: Callable[[list[tuple[bytes, str]]], dict[bytes, SerializedValue]]) -> None:
        """Fetch the values of those of `object_ids` lent here that a holder serves, from it
        (`fetch`: `WorkerHolder.fetch`); one it cannot serve is left to `adopt`."""
        if not self._lent:
            return
        with self._lock:
            wanted = [(oid, entry.held[0]) for oid in dict.fromkeys(object_ids)
                      if (entry := self._lent.get(oid)) is not None and entry.value is None and entry.held is not None
                      and not entry.lost]
        if not wanted:
            return
        try:
            fetched = fetch(wanted)
        except HolderLost:  # the lender's process is gone, or out of reach: it is asked instead
            fetched = {oid: serialize_error(OwnerDiedError(oid.hex(), None, "")) for oid, _ in wanted}
        with self._lock:
            for object_id, value in fetched.items():
                entry = self._lent.get(object_id)
                if entry is not None and entry.value is None:
                    if value.is_error:
                        entry.held = None  # gone from there: the lender is asked instead
                    else:
                        entry.value = value

    def lendable(self, object_id: bytes) -> bool:
        """Whether this process may lend `object_id` on to the host of its own direct call,
        borrowing it from its lender meanwhile (a Ray borrower passing a ref on)."""
        entry = self._lent.get(object_id)
        return entry is not None and not entry.lost

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
        once it has them (and counts this process's borrow of those kept here). A lender that
        is gone leaves them failed with `OwnerDiedError`; one that let them go (its link to
        this process broke), with `ObjectLostError`."""
        if not self._lent or not object_ids:
            return
        by_lender: dict[tuple[Connection, bytes | None], list[bytes]] = {}
        with self._lock:
            for object_id in dict.fromkeys(object_ids):
                entry = self._lent.get(object_id)
                if entry is not None and not entry.lost:
                    by_lender.setdefault((entry.lender, entry.owner), []).append(object_id)
        for (lender, owner), ids in by_lender.items():
            adopted = self._ask(lender, owner, ids)
            if adopted is None:
                self._lost(ids, OwnerDiedError)
                continue
            missing = set(adopted.missing) if isinstance(adopted.missing, list) else set()
            self._lost([oid for oid in ids if oid in missing], ObjectLostError)
            with self._lock:  # an ordinary ref from now on
                taken = [oid for oid in ids if oid not in missing]
                kept = [oid for oid in taken if (entry := self._lent.pop(oid, None)) is not None and entry.kept]
            if kept:
                self._borrow_now(kept)
                _tell(lender, LentReturned(kept))

    def lost_kept(self, object_ids: Sequence[bytes]) -> list[tuple[bytes, SerializedValue]]:
        """Those of `object_ids` kept here whose lender could not hand them over, with their
        error, forgotten here: a ref to one leaving the process hands its error to the driver."""
        if not self._lent:
            return []
        with self._lock:
            lost = [(oid, entry) for oid in object_ids if (entry := self._lent.get(oid)) is not None
                    and entry.kept and entry.lost and entry.value is not None]
            for object_id, _ in lost:
                del self._lent[object_id]
        return [(oid, entry.value) for oid, entry in lost if entry.value is not None]

    def _ask(self, lender: Connection, owner: bytes | None, ids: list[bytes]) -> Adopted | None:
        """`AdoptLent` to the lender, or through the driver if its link broke; None: it is gone."""
        try:
            return messages.call(lender, AdoptLent(ids))
        except ConnectionClosed:  # the link broke: the lender may live on, and the driver can ask it
            pass
        except RemoteError:
            return None
        if owner is None or self._driver is None:
            return None
        try:
            return messages.call(self._driver, AdoptFor(owner, ids))
        except (ConnectionClosed, RemoteError):  # the lender is gone too
            return None

    def _lost(self, ids: list[bytes], error: type[ObjectLostError]) -> None:
        if not ids:
            return
        with self._lock:
            for object_id in ids:
                if (entry := self._lent.get(object_id)) is not None:
                    entry.value, entry.lost = serialize_error(error(object_id.hex(), None, "")), True


def _held_at(entries: Any) -> dict[int, tuple[str, int]]:
    """Index -> (holder address, size), from [index, holder address, size] entries
    (`CallMethod.lent_held`, `LentValues.held`; malformed ones left out)."""
    held: dict[int, tuple[str, int]] = {}
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int) and isinstance(entry[1], str) \
                and isinstance(entry[2], int):
            held[entry[0]] = (entry[1], entry[2])
    return held


def _tell(connection: Connection, message: messages.Message) -> None:
    try:
        messages.notify(connection, message)
    except ConnectionClosed:
        pass  # the lender is gone, or let go of what this process kept when the link broke
