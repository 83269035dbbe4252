"""A worker's side as a lender (`lent_refs.py` tells the whole story): what a direct call lends
(`lend`), the processes that keep what it lent (`Borrowers`), and `Lending`, all of it for one
process: what a host's answer to a worker lends on, and what it answers its borrowers (hand
objects to the driver, take back what a borrower dropped, give values the calls did not carry,
once ready)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any, Protocol

from fray_ray._private import messages
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.messages import Adopted, AdoptLent, CallDone, CallMethod, LentReturned, LentValues, Loans, ReadLent, TakeLent
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.workers.driver_notices import DriverNotices
from fray_ray._private.workers.held_results import WORKER_HOLDER
from fray_ray._private.workers.lent_refs import LentRefs

#: How long a caller whose process ends waits for each host to borrow from the driver what it kept.
TAKE_LENT_TIMEOUT_S = 60.0
#: Values up to this size answer a `ReadLent` themselves (one transfer, no copy into the holder);
#: larger ones are fetched from the holder, which a reader on the same host maps instead.
READ_INLINE_LIMIT = 8 << 20
#: How long a lender keeps what a borrower held once the link to it broke: the borrower, if it
#: lives on, or one it lent the object on to, asks the owner through the driver meanwhile
#: (`AdoptFor`), as a Ray borrower whose lender died still reads from the owner.
BROKEN_LINK_GRACE_S = 60.0


def lend(call: CallMethod, ours: Sequence[bytes], value_of: Callable[[bytes], SerializedValue | None],
         lent: LentRefs, own_id: bytes) -> list[bytes]:
    """Lend with `call` every one of `ours` (the caller's own results its arguments name, or
    objects lent to it), and return them. Values that are ready and small go along, once (a
    top-level argument's travels as the argument's); for an object lent to the caller, where a
    holder serves it if its own lender said. The callee asks for the others' values as it
    reads them (`ReadLent`: a top-level argument's as the call starts)."""
    if not ours:  # the usual call: nothing to lend
        return []
    call.loans = _loans(ours, value_of, lent, own_id, call.args.inlined, set(call.args.top_level))
    return call.loans.ids


def _loans(ours: Sequence[bytes], value_of: Callable[[bytes], SerializedValue | None], lent: LentRefs,
           own_id: bytes, inlined: Mapping[bytes, Any] | None = None, top_level: Set[bytes] = frozenset()) -> Loans:
    """The loan of `ours`: their ids, the values of the first of them, [index, holder address,
    size] of others whose holder `lent` knows, the owner of each (`own_id` for this process's own)."""
    inlined = inlined or {}
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
        else:
            rest.append(object_id)
            if (where := lent.holder_of(object_id)) is not None:
                held.append((object_id, where))
    ids = sent + rest
    index = {object_id: number for number, object_id in enumerate(ids)}
    return Loans(ids, values, [[index[object_id], address, size] for object_id, (address, size) in held],
                 lent.owners(ids, own_id))


def held_for_lending(object_id: bytes, value: SerializedValue) -> tuple[str, int] | None:
    """Keep a large value naming no refs in this process's holder, for the hosts it is lent
    to to fetch there: (holder address, size); None if it is small or cannot be kept."""
    if value.contained_refs:  # whoever reads it must be counted by the driver
        return None
    _, held = WORKER_HOLDER.keep_large([value], [object_id])  # which keeps no error nor small value
    return (held[0][1], held[0][2]) if held else None


def lent_values(ready: Sequence[tuple[bytes, SerializedValue | None]],
                holder_of: Callable[[bytes], tuple[str, int] | None]) -> LentValues:
    """The answer to `ReadLent` from (object id, value or None) pairs: values up to
    `READ_INLINE_LIMIT` as they are, others by where `holder_of` says a holder serves them;
    those naming refs, or that no holder serves, are left out (handed over instead)."""
    answer = LentValues()
    for object_id, value in ready:
        where = holder_of(object_id) if value is None or value.size > READ_INLINE_LIMIT else None
        if where is not None:
            answer.held.append([len(answer.ids), *where])
            value = SerializedValue(b"", (), (), False)
        elif value is None or value.size > READ_INLINE_LIMIT or value.contained_refs:
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
    """The lender's side: a ref to each of this process's objects a borrower kept past the
    call that lent it (`CallDone.kept`), or was lent with an answer (`CallDone.loans`), held for
    that borrower until it returns the object, or `BROKEN_LINK_GRACE_S` after its link closed.
    Thread-safe."""

    def __init__(self, flush: Callable[[], None] = lambda: None) -> None:
        """`flush()` applies the releases of dropped refs at once (an idle process makes no
        call that would apply them later: `LocalReferenceCounter.flush`)."""
        self._flush = flush
        self._lock = threading.Lock()
        self._by_link: dict[Connection, dict[bytes, ObjectRef[Any]]] = {}
        #: links that closed: the refs each held, let go when its timer fires
        self._graces: dict[threading.Timer, dict[bytes, ObjectRef[Any]]] = {}
        self._closed = False

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
        """The link closed: its borrower is gone, or out of reach. What it held is kept
        `BROKEN_LINK_GRACE_S` longer, for whoever borrowed it through that link to ask for it
        through the driver."""
        with self._lock:
            refs = self._by_link.pop(link, None)
            if not refs:
                return
            grace = None if self._closed else threading.Timer(BROKEN_LINK_GRACE_S, self._let_go, (refs,))
            if grace is not None:
                grace.daemon = True
                self._graces[grace] = refs
        if grace is not None:
            grace.start()  # it holds the refs until then
        else:
            self._let_go(refs)

    def _let_go(self, refs: dict[bytes, ObjectRef[Any]]) -> None:
        with self._lock:
            self._graces = {grace: kept for grace, kept in self._graces.items() if kept is not refs}
        refs.clear()
        self._flush()

    def close(self) -> None:
        """This process ends: no grace runs on, and links closing from now on let go at once."""
        with self._lock:
            self._closed = True
            graces, self._graces = self._graces, {}
        for grace, refs in graces.items():
            grace.cancel()
            refs.clear()

    def away_from(self, reading: Connection | None) -> None:
        """This thread reads `reading` (or nothing) for a while: connections whose borrowers
        may ask for values meanwhile are read by their own reader threads now."""
        if self._by_link:
            with self._lock:
                links = [link for link in self._by_link if link is not reading]
            for link in links:
                link.hand_to_standby()

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


class OwnResults(Protocol):
    """What a lender's process holds (`DirectCalls`): its own results, and what it was lent."""

    lent: LentRefs

    def lendable(self, object_ids: Iterable[bytes]) -> list[bytes]:
        """Those of `object_ids` it may lend: results of its own it did not hand over, and
        objects lent to it."""
        ...

    def read_own(self, object_ids: Sequence[bytes]) -> tuple[list[bytes], list[concurrent.futures.Future[Any]]]:
        """Those of `object_ids` that are results of its own, and the futures of their calls
        still running."""
        ...

    def own_value(self, object_id: bytes) -> SerializedValue | None: ...

    def ready_value(self, object_id: bytes) -> SerializedValue | None:
        """The value of a result of its own, or of an object lent to it, if it has it."""
        ...

    def hand_over(self, object_ids: Iterable[bytes], inline: bool = False) -> None: ...

    def escaped(self, *object_ids: bytes) -> None: ...


class Lending:
    """This process as a lender: who borrows its objects (`Borrowers`: hosts it lent them to
    with its calls, callers it lent them to with its answers) and what it answers them.
    Thread-safe."""

    def __init__(self, results: OwnResults, notices: DriverNotices, references: LocalReferenceCounter,
                 own_id: bytes = b"") -> None:
        """`own_id`: this process's worker id, which borrowers name as the owner of its own results."""
        self._results = results
        self._own_id = own_id
        self._notices = notices
        self._references = references
        self.borrowers = Borrowers(references.flush)
        self._lock = threading.Lock()
        self._held: set[bytes] = set()  # results of its own its holder serves to borrowers

    def handlers(self) -> dict[type[messages.Message], messages.MessageHandler]:
        """What it answers borrowers on their connections (on their reader threads): `AdoptLent`
        (also on its session when a link broke), `LentReturned`, `ReadLent`."""
        return {AdoptLent: self._on_adopt, LentReturned: self._on_returned, ReadLent: self._on_read}

    def _on_adopt(self, connection: Connection, message_id: int | None, asked: AdoptLent) -> None:
        """Hand the objects to the driver, and answer once it has them, naming those this
        process no longer refers to (it may have freed them)."""
        missing = [oid for oid in asked.ids if not self._references.count(oid)]
        self._results.hand_over(asked.ids)
        self._notices.confirm()
        if message_id is not None:
            messages.reply(connection, message_id, Adopted(missing))

    def _on_returned(self, connection: Connection, message_id: int | None, back: LentReturned) -> None:
        self.borrowers.returned(connection, back.ids)

    def _on_read(self, connection: Connection, message_id: int | None, asked: ReadLent) -> None:
        if message_id is None:
            return
        if not isinstance(asked.ids, list):
            messages.reply(connection, message_id, LentValues())  # nothing to read: it is handed over instead
            return
        self._read(asked.ids, lambda values: messages.reply(connection, message_id, values))

    def with_answer(self, done: CallDone, named: Sequence[bytes], caller: Connection | None) -> None:
        """The refs a host's answer names (`named`, pickled into its results): those it may
        lend are lent on to `caller` (a worker's gate connection), as a Ray borrower's reply
        passes on refs it borrowed; the caller's own need nothing; the rest, and all of them
        for an answer to the driver (`caller` None), are handed over."""
        if caller is None:
            self._results.escaped(*named)
            return
        ours = self._results.lendable(named)
        self._results.escaped(*[oid for oid in named if oid not in ours])
        lent = [oid for oid in ours if not self._results.lent.lent_by(oid, caller)]
        if lent:
            self.borrowers.kept(caller, lent)
            done.loans = _loans(lent, self._results.ready_value, self._results.lent, self._own_id)
            if caller.closed:  # its close may have come first: nobody would return these
                self.borrowers.gone(caller)

    def answer_not_lent(self, done: CallDone, caller: Connection) -> None:
        """`done` did not reach `caller` after all (it goes to the driver, or fails): the
        driver takes over what it lent."""
        if done.loans is not None:
            self.borrowers.returned(caller, done.loans.ids)
            self._results.escaped(*done.loans.ids)
            done.loans = None

    def hand_off(self) -> None:
        """This process ends on purpose: what others borrow from it goes to the driver first,
        and they borrow it from there (`Borrowers.hand_off`)."""
        self.borrowers.hand_off(lambda ids: self._results.hand_over(ids, inline=True), self._notices)

    def close(self) -> None:
        self.borrowers.close()

    def served(self, object_ids: Sequence[bytes]) -> list[bytes]:
        """Those of `object_ids` (results of its own it dropped) its holder served to
        borrowers; forgotten here."""
        if not self._held:
            return []
        with self._lock:
            found = [oid for oid in object_ids if oid in self._held]
            self._held.difference_update(found)
        return found

    def _read(self, object_ids: list[bytes], answer: Callable[[LentValues], None]) -> None:
        """`answer` with the values of these objects lent out, once ready: results of its own
        once their calls end, objects lent to it once their own lenders answer."""
        ours, pending = self._results.read_own(object_ids)
        lent_refs = self._results.lent
        lent = [oid for oid in dict.fromkeys(object_ids) if oid not in ours and lent_refs.lendable(oid)]
        after_all(pending + lent_refs.ask_lenders(lent), lambda: answer(lent_values(
            [(oid, self._results.own_value(oid)) for oid in ours] + [(oid, lent_refs.value(oid)) for oid in lent],
            self._holder_of)))

    def _holder_of(self, object_id: bytes) -> tuple[str, int] | None:
        """Where a holder serves a value this process lent, asked for by a borrower: its own for
        a large ready result of its own naming no refs (kept there from now on), or its lender's."""
        value = self._results.own_value(object_id)
        if value is None:
            return self._results.lent.holder_of(object_id)
        where = held_for_lending(object_id, value)
        if where is not None:
            with self._lock:
                self._held.add(object_id)
        return where
