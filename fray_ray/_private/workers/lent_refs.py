"""A caller's own results lent to the host of its next direct call, instead of handed to the
driver: the callee's side (`LentRefs`); the caller's is `lent_out.py`.

A worker keeps the results of its direct calls (`direct_calls.py`). A ref to one that leaves
the process used to make the driver their owner first (`HandOver`, its value, a `Sync`, and a
`Release` later: four messages for every result passed on). Passed in the arguments of another
direct call, it is lent instead, as a Ray owner keeps the arguments of a task it submitted: the
call names it in `CallMethod.loans`, with its value when that is ready and small (at most
`INLINE_LIMIT`, naming no refs), and the caller keeps the object alive until the call ends. A
callee that reads a value the call did not carry (large, or not ready) asks the caller
(`ReadLent`), which answers once it has it (`LentValues`: one over 8 MiB by where its holder
serves it). Most callees read what they were sent, or nothing, and drop the ref before they answer:
then the driver never hears of it.

A callee that still holds the ref as it answers (a replay buffer, say) keeps borrowing it from
the caller, as a Ray borrower reports to the owner what it still holds when its task ends: the
answer names it (`CallDone.kept`), the caller keeps a ref for that host (`Borrowers`) until the
host says it dropped it (`LentReturned`), and the driver still hears nothing. A caller whose
process ends on purpose (an executor retired) hands such objects to the driver first and has
the host borrow them from there (`TakeLent`). A link that breaks keeps the borrower's loans a
grace period longer (`lent_out.BROKEN_LINK_GRACE_S`), for it to ask through the driver. A
callee may lend such a ref on, in the
arguments of its own direct call (a pipeline stage): it is then that host's lender, and keeps
borrowing the object from its own lender while the host does.

Loans also go the other way. A host whose answer to a worker names objects it may lend (results
of its own calls, or objects lent to it by others: a replay buffer's `sample`) lends them on to
that caller (`CallDone.loans`, with the values it has), and keeps a ref for that connection until
the caller returns them; the caller borrows them from the host as a callee borrows from its
caller (`lent_with_answer`), and its first refs to them are not announced to the driver. The
caller's own objects sent back to it need nothing. A `wait` for lent values asks their lenders
as a read does (one `ReadLent` outstanding per object) and ends here once they answer.

A callee asks the caller to hand the objects over first (`AdoptLent`, answered once the driver
has them; `adopt`), after which they are ordinary refs the driver counts, only to pass the ref
on otherwise (pickled into a task's arguments, a put, a result, an item), to read a value that
names refs, or when its lender cannot answer.

Every loan names the object's owner (`Loans.owners`: the process that made it, however many
loans away). If the link to the lender broke, or the lender is gone, the borrower asks the
driver, which asks that owner on its own session (`AdoptFor`), as a Ray borrower reads from the
owner whoever passed it the ref. If the owner is gone, the value reads as `OwnerDiedError`, as in
Ray; if it let the object go (its grace after the link broke ended), as `ObjectLostError`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fray_ray._private import messages
from fray_ray._private.messages import (
    Adopted,
    AdoptFor,
    AdoptLent,
    CallDone,
    CallMethod,
    LentReturned,
    LentTaken,
    MessageError,
    ReadLent,
    TakeLent,
)
from fray_ray._private.objects.holder_clients import HolderLost
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.workers.task_interrupts import wait_for_reply
from fray_ray.exceptions import ObjectLostError, OwnerDiedError

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Lent:
    lender: Connection  # the caller's gate connection, where `AdoptLent` goes
    owner: bytes | None  # its owner's worker id (for `AdoptFor`): the lender's, or the one it named
    value: SerializedValue | None  # None: not sent (pending or large)
    calls: int = 1  # calls that lent it and have not ended
    lost: bool = False  # its lender was gone when asked to hand it over (`value` says so)
    kept: bool = False  # held past the answer of a call that lent it: borrowed from the lender
    held: tuple[str, int] | None = None  # (holder address, size): where its value is served
    unanswered: bool = False  # its lender was asked and sent neither (the driver must take it over)
    asked: concurrent.futures.Future[Any] | None = None  # a `ReadLent` for it not answered yet


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
        """`call`, which lends refs (`call.loans`), came from `lender` (before its arguments are read)."""
        loans = call.loans
        if loans is None:
            return
        values = loans.values
        held = _held_at(loans.held)
        caller = lender.peer_info.get("caller")
        owners = _owners(loans.owners, len(loans.ids), caller if isinstance(caller, bytes) else None)
        with self._lock:
            self._calls[call.call] = (lender, loans.ids)
            for index, object_id in enumerate(loans.ids):
                entry = self._lent.get(object_id)
                value = values[index] if index < len(values) else call.args.inlined.get(object_id)
                owner = owners[index]
                if entry is None:
                    self._lent[object_id] = _Lent(lender, owner, value, held=held.get(index))
                else:
                    entry.calls += 1
                    entry.value = entry.value or value
                    entry.held = entry.held or held.get(index)
                    if entry.lender.closed and not entry.lost:  # its lender's new link
                        entry.lender, entry.owner = lender, owner

    def lent_with_answer(self, lender: Connection, done: CallDone, *, taken: bool,
                         known: Callable[[bytes], bool]) -> None:
        """`done`, an answer from the host on `lender`, lends on what its results name
        (`CallDone.loans`): borrowed from that host from now on, as kept refs are. Those this
        process has already (`known`), or all if the call is no longer wanted (not `taken`),
        go back to the host at once."""
        if done.loans is None:
            return
        ids, values, held = done.loans.ids, done.loans.values, _held_at(done.loans.held)
        if not isinstance(ids, list) or not isinstance(values, list):
            return  # malformed: the host keeps them until the link closes
        owners = _owners(done.loans.owners, len(ids), None)
        back: list[bytes] = []
        with self._lock:
            for index, object_id in enumerate(ids):
                if not isinstance(object_id, bytes):
                    continue
                entry = self._lent.get(object_id)
                if taken and entry is not None and entry.lender is lender and not entry.lost:
                    entry.kept = True  # lent again by the same host: it counts this process once
                    continue
                if not taken or entry is not None or known(object_id):
                    back.append(object_id)
                    continue
                value = values[index] if index < len(values) and isinstance(values[index], SerializedValue) else None
                self._lent[object_id] = _Lent(lender, owners[index], value, calls=0, kept=True, held=held.get(index))
        if back:
            _tell(lender, LentReturned(back))

    def owners(self, object_ids: Sequence[bytes], own_id: bytes) -> list[bytes]:
        """The owner of each of `object_ids` this process lends on: its lender's for one lent
        here, else this process (`own_id`), which made it."""
        return [entry.owner if (entry := self._lent.get(oid)) is not None and entry.owner else own_id
                for oid in object_ids]

    def lent_by(self, object_id: bytes, lender: Connection) -> bool:
        """Whether `lender` lent `object_id` here (it is that caller's own, or borrowed by it)."""
        entry = self._lent.get(object_id)
        return entry is not None and entry.lender is lender

    def borrows_any(self) -> bool:
        return bool(self._lent)

    def borrowed_here(self, object_id: bytes) -> bool:
        """Whether `object_id` is borrowed from its lender past any call (the driver does not count it)."""
        entry = self._lent.get(object_id)
        return entry is not None and entry.kept

    def on_take_lent(self, lender: Connection, message_id: int | None, take: TakeLent) -> None:
        """`lender`'s process ends and the driver has these (`Borrowers.hand_off`): borrow
        what this process kept of them from the driver instead, then say so."""
        ids: list[bytes] = []
        if isinstance(take.ids, list):
            with self._lock:
                ids = [oid for oid in take.ids if (entry := self._lent.get(oid)) is not None and entry.kept
                       and entry.lender is lender]
                for object_id in ids:
                    self._unkeep_locked(object_id, self._lent[object_id])
        if ids:
            self._borrow_now(ids)
        if message_id is not None:
            messages.reply(lender, message_id, LentTaken())

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
                self._unkeep_locked(object_id, entry)
                by_lender.setdefault(entry.lender, []).append(object_id)
        for lender, ids in by_lender.items():
            _tell(lender, LentReturned(ids))
        return rest

    def _unkeep_locked(self, object_id: bytes, entry: _Lent) -> None:
        """No longer borrowed from its lender past its calls: forgotten unless a call still lends it."""
        entry.kept = False
        if entry.calls <= 0:
            del self._lent[object_id]

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
        asked: dict[int, concurrent.futures.Future[Any]] = {}  # one per request, asked before or now
        with self._lock:
            for object_id in dict.fromkeys(object_ids):
                entry = self._lent.get(object_id)
                if entry is None or entry.value is not None or entry.held is not None or entry.lost:
                    continue
                if entry.asked is not None:  # asked already (a wait that polls): that answer will do
                    asked[id(entry.asked)] = entry.asked
                    continue
                by_lender.setdefault(entry.lender, []).append(object_id)
            requests = []
            for lender, ids in by_lender.items():
                recorded: concurrent.futures.Future[Any] = concurrent.futures.Future()
                for object_id in ids:
                    self._lent[object_id].asked = recorded
                requests.append((lender, ids, recorded))
        for lender, ids, recorded in requests:  # a closed link's request fails at once: recorded unanswered
            request = messages.request(lender, ReadLent(ids))
            request.add_done_callback(lambda done, ids=ids, recorded=recorded: self._record(done, ids, recorded))
            asked[id(recorded)] = recorded
        return list(asked.values())

    def _record(self, done: concurrent.futures.Future[Any], ids: list[bytes],
                recorded: concurrent.futures.Future[Any]) -> None:
        """Record a lender's `LentValues` (on the link's reader thread, or at once if the link
        was closed); `recorded` is done whatever it said: what it did not answer well is asked
        to be handed over instead."""
        try:
            # A failed request is looked at, never raised: its traceback would hold this stack,
            # and the refs of the `get` that asked, until the cycle collector ran.
            if done.exception() is not None:
                return
            answer = messages.reply_of(ReadLent(ids), done.result())
            held = _held_at(answer.held)
            with self._lock:
                for index, (object_id, value) in enumerate(zip(answer.ids, answer.values)):
                    entry = self._lent.get(object_id) if object_id in ids else None
                    if entry is not None and entry.value is None and isinstance(value, SerializedValue):
                        entry.held = held.get(index)
                        entry.value = None if entry.held is not None else value
        except MessageError:
            pass  # the lender refused
        except Exception:  # noqa: BLE001 - a malformed answer must not leave the reader waiting
            logger.warning("a lender's answer to ReadLent was malformed", exc_info=True)
        finally:
            with self._lock:
                for object_id in ids:
                    entry = self._lent.get(object_id)
                    if entry is not None and entry.asked is recorded:
                        entry.asked = None
                        entry.unanswered = entry.value is None and entry.held is None
            recorded.set_result(None)

    def awaitable(self, object_id: bytes) -> bool:
        """Whether a wait for `object_id`, lent here, ends here: its value or holder came, or
        its lender may still send them (`ask_lenders`)."""
        entry = self._lent.get(object_id)
        return entry is not None and not entry.lost and not entry.unanswered

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
        except HolderLost:  # the lender's process is gone, or out of reach
            fetched = {}
        with self._lock:
            for object_id, _ in wanted:
                entry = self._lent.get(object_id)
                if entry is None or entry.value is not None:
                    continue
                value = fetched.get(object_id)
                if value is None or value.is_error:
                    entry.held = None  # not served there: the lender is asked instead
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
        answer = _call_quietly(lender, AdoptLent(ids))
        if isinstance(answer, Adopted):
            return answer
        if not isinstance(answer, ConnectionClosed):
            return None  # refused, or malformed
        # The link broke: the lender may live on, and the driver can ask it (or the owner it named).
        if owner is None or self._driver is None:
            return None
        answer = _call_quietly(self._driver, AdoptFor(owner, ids))
        return answer if isinstance(answer, Adopted) else None  # else the lender is gone too

    def _lost(self, ids: list[bytes], error: type[ObjectLostError]) -> None:
        if not ids:
            return
        with self._lock:
            for object_id in ids:
                if (entry := self._lent.get(object_id)) is not None:
                    entry.value, entry.lost = serialize_error(error(object_id.hex(), None, "")), True


def _held_at(entries: Any) -> dict[int, tuple[str, int]]:
    """Index -> (holder address, size), from [index, holder address, size] entries
    (`Loans.held`, `LentValues.held`; malformed ones left out)."""
    held: dict[int, tuple[str, int]] = {}
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int) and isinstance(entry[1], str) \
                and isinstance(entry[2], int):
            held[entry[0]] = (entry[1], entry[2])
    return held


def _owners(named: Any, count: int, default: bytes | None) -> list[bytes | None]:
    """`count` owners from a loan's `owners` (`default` for those it leaves out or
    names badly: the lender itself)."""
    named = named if isinstance(named, list) else []
    return [owner if index < len(named) and isinstance(owner := named[index], bytes) and owner else default
            for index in range(count)]


def _call_quietly(connection: Connection, message: messages.Message) -> Any:
    """`messages.call`, with a failure returned instead of raised: a raised one's traceback
    would hold the reading thread's stack, and the refs of the `get` that asked, until the
    cycle collector ran (a late release)."""
    future = messages.request(connection, message)  # on a closed connection: failed with ConnectionClosed
    concurrent.futures.wait([future])
    failure = future.exception()
    if failure is not None:
        return failure
    try:
        return messages.reply_of(message, future.result())
    except MessageError as exc:
        return exc


def _tell(connection: Connection, message: messages.Message) -> None:
    try:
        messages.notify(connection, message)
    except ConnectionClosed:
        pass  # the lender is gone, or let go of what this process kept when the link broke
