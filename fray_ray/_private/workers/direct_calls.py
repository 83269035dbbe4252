"""Actor calls a worker sends straight to the actor's host, and their results, kept here.

A task or actor that calls an actor asks its driver once where the actor's host takes calls
(its gate: an address and a secret, `foreign_calls.py`), then sends each call there as the
driver would (`CallMethod`) on one connection per host, in submission order, and the host
answers (`CallDone`) on that connection. The results stay in this process: `get` and `wait`
of them are answered here, and a synchronous call is one frame each way.

The driver learns of a result only when a ref to it leaves this process (pickled into
arguments, a put, a return value): the object is then handed over (`HandOver`), and its value
follows when it is known (`HandOverDone`); from then on the driver owns it. A large value
stays here all the same (this process's holder serves it, as an executor's serves its
results), and fails with `OwnerDiedError` if this process ends, as it would in Ray. A call whose
host went away before answering is handed back to the driver (`HandBack`), which retries or
fails it by Ray's rules, as it does its own calls.

Calls go through the driver instead while the actor is not running, belongs to another
driver, or this process has calls to it still queued in the driver (a caller's calls never
overtake each other), and for `num_returns="dynamic"`. A call that raised an exception its
`retry_exceptions` names is sent to the host again by its caller, within its retries. A
generator method's items come to the caller as they are made (`direct_streams.py`).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from fray_ray._private import messages
from fray_ray._private.core import object_ref
from fray_ray._private.core.cancelled_calls import cancelled_call_error
from fray_ray._private.core.generators import ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.retry_policy import retries_user_exception
from fray_ray._private.core.task_spec import ActorCallSpec
from fray_ray._private.messages import (
    CallDone,
    CallMethod,
    CancelCall,
    HandBack,
    HandOver,
    HandOverDone,
    HandOverStream,
    TakeLent,
    Yield,
)
from fray_ray._private.objects.ids import TASK_ID_SIZE
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.stream.frames import MessageTooLarge
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.stream.stream_server import introduce
from fray_ray._private.workers import lent_out
from fray_ray._private.workers.answer_refs import AnswerRefs
from fray_ray._private.workers.direct_links import CONNECT_TIMEOUT_S, ActorWay, DirectCall, HostLink
from fray_ray._private.workers.direct_streams import DirectStreams
from fray_ray._private.workers.driver_notices import DriverNotices
from fray_ray._private.workers.held_results import WORKER_HOLDER
from fray_ray._private.workers.lent_refs import LentRefs
from fray_ray._private.workers.task_interrupts import read_until_done, wait_for_reply

#: How long a task waits for direct results before its driver hears that it waits (and lends
#: its CPU to others, as Ray's tasks do in `get`): a quick call costs the driver nothing.
LONG_WAIT_S = 0.01


class LongWait(Protocol):
    """Told when a task's wait for direct results outlasts `LONG_WAIT_S`, and when it ends."""

    def began(self) -> None: ...

    def ended(self) -> None: ...


class DirectCalls:
    """The direct calls of one worker process and the results they made. Thread-safe."""

    def __init__(self, session: Connection, references: LocalReferenceCounter, notices: DriverNotices,
                 worker_id: bytes = b"") -> None:
        """`references`: the process's counts of refs and handles; a call in flight counts as a
        handle to its actor, which ends when its last handle goes only after its calls end.
        `notices`: what the driver has heard, confirmed before a call carries refs to a host.
        `worker_id`: this worker's, told to hosts so they can have the driver reach it."""
        self._session = session
        self._worker_id = worker_id
        self._references = references
        self._notices = notices
        #: held while a call is routed and sent, and while a closed link's calls are handed back,
        #: so that no call of this process overtakes an earlier one on its way to the driver
        self._order = threading.RLock()
        self._lock = threading.Lock()  # guards the tables below
        self._ways: dict[bytes, ActorWay] = {}
        self._links: dict[str, HostLink] = {}
        self._calls: dict[bytes, DirectCall] = {}  # call id -> call in flight
        #: return id -> its call's id, while this process holds the result (or waits for it)
        self._producers: dict[bytes, bytes] = {}
        self._values: dict[bytes, SerializedValue] = {}
        self._answer_refs = AnswerRefs(references, notices)  # refs that the values held here name
        self._handed_over: set[bytes] = set()
        #: handed over, no ref left here, the call still running: its value goes to the driver
        self._released: set[bytes] = set()
        self._changed = threading.Condition(self._lock)  # a result arrived (for `wait`)
        self._streams = DirectStreams(self._lock, self._changed, self._take_item, self._send_stream,
                                      lambda item_id: ObjectRef(item_id, _announced=True), self._answer_refs.let_go)
        self.lent = LentRefs(session, notices.borrow_now)  # what the callers of the calls this process runs lent it
        self.lending = lent_out.Lending(self, notices, references, worker_id)  # who borrows what this process lent them
        self.sent = 0  # calls sent straight to hosts (tests read it)
        object_ref.set_escape_hook(self.escaped)

    # ---- submitting ----------------------------------------------------------------------

    def submit(self, spec: ActorCallSpec, through_driver: Callable[[], list[Any]]) -> list[Any]:
        """Send `spec` to its actor's host, or through the driver (`through_driver()`). Results
        of ours that its arguments name are lent to the host, else handed to the driver first."""
        escaped = object_ref.take_held_escapes()
        if spec.num_returns == "dynamic":
            self.escaped(*escaped)
            return through_driver()
        with self._lock:
            way = self._ways.setdefault(spec.actor_id, ActorWay())
        with self._order:
            link = self._route(spec.actor_id, way)
            if link is None:
                self.escaped(*escaped)
                refs = through_driver()
                way.through_driver.append(spec.call_id)
                return refs
            return self._send(spec, way, link, through_driver, escaped)

    def _route(self, actor_id: bytes, way: ActorWay) -> HostLink | None:
        """The live link to the actor's host, asking the driver if it is time; None: through the driver."""
        if way.link is not None and not way.link.closed:
            return way.link
        way.link = None
        route = way.ask(self._session, actor_id)
        if route is None or route.address is None:
            return None
        link = self._link(route.address, route.token)
        if link is not None:
            way.link, way.incarnation = link, route.incarnation
            way.max_task_retries, way.task_events = route.max_task_retries, route.task_events
        return link

    def _link(self, address: str, token: str) -> HostLink | None:
        with self._lock:
            link = self._links.get(address)
        if link is not None and not link.closed:
            return link
        try:
            connection, _ = introduce(address, {"token": token, "caller": self._worker_id}, name="direct-calls", timeout=CONNECT_TIMEOUT_S)
        except (ConnectionClosed, RemoteError, OSError, ValueError):
            return None
        link = HostLink(address, connection)
        connection.add_close_callback(lambda _: self._link_closed(link))
        connection.start(messages.handlers({Yield: lambda _connection, _id, item: self._item_arrived(item),
                                            TakeLent: self.lent.on_take_lent, **self.lending.handlers()},
                                           batched={CallDone: lambda _, done: self._answered(link, done)}))
        with self._lock:
            self._links[address] = link
        return link

    # ---- as a lender (`lent_out.Lending`) -------------------------------------------------

    def lendable(self, object_ids: Iterable[bytes]) -> list[bytes]:
        with self._lock:
            return [oid for oid in dict.fromkeys(object_ids)
                    if (oid in self._producers and oid not in self._handed_over) or self.lent.lendable(oid)]

    def read_own(self, object_ids: Sequence[bytes]) -> tuple[list[bytes], list[concurrent.futures.Future[Any]]]:
        with self._lock:
            ours = [oid for oid in dict.fromkeys(object_ids) if oid in self._producers and oid not in self._released]
            return ours, [call.future for oid in ours if oid not in self._values
                          and (call := self._calls.get(self._producers[oid])) is not None]

    def own_value(self, object_id: bytes) -> SerializedValue | None:
        return self._values.get(object_id)

    def ready_value(self, object_id: bytes) -> SerializedValue | None:
        value = self._values.get(object_id)
        return value if value is not None or not self.lent.lendable(object_id) else self.lent.value(object_id)

    def _send(self, spec: ActorCallSpec, way: ActorWay, link: HostLink, through_driver: Callable[[], list[Any]],
              escaped: list[bytes]) -> list[Any]:
        arguments = spec.arguments
        named = (*arguments.value.contained_refs, *((arguments.stored,) if arguments.stored else ()))
        call = DirectCall(spec, way.incarnation, link, concurrent.futures.Future(), [ObjectRef(oid) for oid in named])
        if spec.retry_exceptions:
            call.retries_left = way.max_task_retries if spec.max_task_retries is None else spec.max_task_retries
        streaming = spec.num_returns == "streaming"
        if streaming:
            self._streams.open(spec.call_id)  # before its first item can arrive
            refs: list[Any] = [ObjectRefGenerator(spec.call_id)]
        else:
            refs = [ObjectRef(oid, _announced=True) for oid in spec.return_ids]
        self._references.add(spec.actor_id)  # released as the call ends (`_ended`)
        with self._lock:
            self._calls[spec.call_id] = call
            for oid in spec.return_ids:
                self._producers[oid] = spec.call_id
        message = CallMethod.of(spec, self.ready_value)
        call.lent = lent_out.lend(message, self.lendable(escaped), self.ready_value, self.lent, self._worker_id)
        self.escaped(*[oid for oid in escaped if oid not in call.lent])
        message.events = call.events = way.task_events if spec.task_events is None else spec.task_events
        if call.keep:
            self._notices.confirm()  # the host may count the refs it names as soon as it has the call
        with link.lock:
            alone = not link.in_flight
            sent = not link.closed
            if sent:
                link.in_flight[spec.call_id] = call
                try:
                    messages.notify(link.connection, message, defer=not alone)
                except ConnectionClosed:
                    sent = link.in_flight.pop(spec.call_id, None) is None  # gone with the link's close
                except MessageTooLarge:  # the driver's path says which limit it exceeds, as for its calls
                    link.in_flight.pop(spec.call_id, None)
                    sent = False
        if not sent:  # never left: it goes through the driver, after the calls handed back before it
            self.hand_over(call.lent)
            if link.closed:
                self._link_closed(link)
            with self._lock:
                self._calls.pop(spec.call_id, None)
                for oid in spec.return_ids:
                    self._producers.pop(oid, None)
            self._ended(call)
            if link.closed:
                way.link = None
            if streaming:
                self._streams.discard(spec.call_id)
                refs = through_driver()  # a generator the driver feeds
            else:
                through_driver()
            way.through_driver.append(spec.call_id)
            return refs
        self.sent += 1
        return refs

    def _ended(self, call: DirectCall) -> None:
        """The call needs neither its arguments' objects nor its actor from this process any more."""
        if call.keep is not None:
            call.keep = None
            self._references.release_later(call.spec.actor_id)

    def _take_item(self, item_id: bytes, call_id: bytes, value: SerializedValue) -> None:
        """A generator's item the consumer took is a result of its call held here (lock held)."""
        self._producers[item_id] = call_id
        self._values[item_id] = value
        self._answer_refs.kept(item_id, value)  # counted as it arrived (`_item_arrived`)

    def _item_arrived(self, item: Yield) -> None:
        """A generator's item came (on its link's reader thread, before the call's `CallDone`)."""
        self._answer_refs.item_arrived(item.stream, item.value)
        self._streams.arrived(item)

    # ---- answers -------------------------------------------------------------------------

    def _answered(self, link: HostLink, answers: Sequence[CallDone]) -> None:
        ended, unwanted = [], []
        if any(done.loans for done in answers):
            self._references.flush()  # which refs this process still holds (`lent_with_answer`)
        with link.lock:
            for done in answers:
                call = link.in_flight.get(done.call)
                if done.kept and call is not None and isinstance(done.kept, list):  # before the call's own refs go
                    self.lending.borrowers.kept(link.connection, [oid for oid in done.kept if isinstance(oid, bytes) and oid in call.lent])
                if done.loans:  # borrowed from the host from now on, unless this process has them already
                    self.lent.lent_with_answer(link.connection, done, taken=call is not None and not call.cancelled,
                                               known=lambda oid: self._references.count(oid) > 0 or oid in self._producers)
                if call is not None and call.retries_left and not call.cancelled and not link.closed \
                        and retries_user_exception(call.spec.retry_exceptions, done.results) \
                        and self._send_again(link, call):
                    continue  # still in flight: its next attempt
                link.in_flight.pop(done.call, None)
                if call is not None:
                    ended.append((call, done.results))
                elif self._answer_refs.named(done.call, done.results):
                    unwanted.append(done.call)  # cancelled before it answered: nothing here takes what it names
        self._finish(ended)
        if unwanted:
            self._answer_refs.tell_host(link.connection, unwanted)

    def _send_again(self, link: HostLink, call: DirectCall) -> bool:
        """Send a call that raised an exception it retries to its host again (with `link.lock`
        held, on the link's reader thread: the frame goes out from the writer thread); False
        if it cannot be (it then ends with the exception it raised)."""
        try:
            message = CallMethod.of(replace(call.spec, attempt=call.spec.attempt + 1), self.ready_value)
            lent_out.lend(message, call.lent, self.ready_value, self.lent, self._worker_id)
            message.events = call.events
            messages.notify(link.connection, message, defer=True)
        except MessageTooLarge:  # arguments since made ready no longer fit in one frame
            return False
        except ConnectionClosed:
            pass  # the link's close hands it back to the driver, which applies what retries are left
        call.spec.attempt += 1
        if call.retries_left > 0:
            call.retries_left -= 1
        return True

    def _finish(self, ended: Sequence[tuple[DirectCall, Sequence[SerializedValue]]]) -> None:
        handed: list[tuple[bytes, SerializedValue]] = []
        naming = [(call.spec.call_id, call.link) for call, results in ended if self._answer_refs.named(call.spec.call_id, results)]
        for call, results in ended:  # the refs a result names count as ours before it can be read
            self._answer_refs.count(value for _, value in zip(call.spec.return_ids, results))
        with self._lock:
            for call, results in ended:
                self._calls.pop(call.spec.call_id, None)
                for oid, value in zip(call.spec.return_ids, results):
                    if not call.cancelled and oid in self._producers and oid not in self._released:
                        self._values[oid] = value
                        self._answer_refs.kept(oid, value)
                    else:
                        self._answer_refs.let_go([value])
                    if call.cancelled or oid not in self._producers:
                        continue  # nothing refers to it any more
                    if oid in self._handed_over:
                        handed.append((oid, value))
                    if oid in self._released:
                        self._released.discard(oid)
                        self._handed_over.discard(oid)
                        del self._producers[oid]
            self._changed.notify_all()
        for call, results in ended:
            self._ended(call)
            if call.spec.num_returns == "streaming":
                self._streams.ended(call.spec.call_id, results)
            if not call.future.done():
                call.future.set_result(list(results))
        if handed:
            self._send_values(handed)
        for link in {link for _, link in naming}:
            self._answer_refs.tell_host(link.connection, [call_id for call_id, to in naming if to is link])
        for call, _ in ended:
            call.link.connection.wake_lender()

    def _link_closed(self, link: HostLink) -> None:
        """The host went away (or its gate closed): calls it did not answer go back to the driver."""
        with self._order:
            self._hand_back(link)
        link.connection.close()

    def _hand_back(self, link: HostLink) -> None:
        with link.lock:
            link.closed = True
            unanswered, link.in_flight = list(link.in_flight.values()), {}
        self.lending.borrowers.gone(link.connection)
        with self._lock:
            if self._links.get(link.address) is link:
                del self._links[link.address]
            wanted = []  # calls whose results something still refers to
            for call in unanswered:
                self._calls.pop(call.spec.call_id, None)
                self._answer_refs.host_gone(call.spec.call_id)
                if any(oid in self._producers for oid in call.spec.return_ids) or self._streams.wanted(call.spec.call_id):
                    wanted.append(call)
                for oid in call.spec.return_ids:
                    self._producers.pop(oid, None)  # the driver's from now on
                    self._handed_over.discard(oid)
                    self._released.discard(oid)
            self._changed.notify_all()
        self.hand_over([oid for call in unanswered for oid in call.lent])  # the driver runs them now
        for call in wanted:
            self._streams.hand_over(call.spec.call_id, last=True)  # the driver has the stream before the call
            self._notify(HandBack(call.spec, call.incarnation))
            way = self._ways.get(call.spec.actor_id)
            if way is not None:  # its later calls go through the driver until this one ended
                way.through_driver.append(call.spec.call_id)
        for call in unanswered:
            self._ended(call)
            self._streams.discard(call.spec.call_id)  # a generator nobody reads any more (the others went above)
            call.future.set_result([])  # waiters look again: the driver has these now

    # ---- reading results -----------------------------------------------------------------

    def holds(self, object_id: bytes) -> bool:
        """Whether this process answers for `object_id` (a direct result, a generator's stream, a lent object)."""
        return (object_id in self._producers and object_id not in self._released) or self._streams.holds(object_id) \
            or self.lent.holds(object_id)

    def stream_next(self, stream_id: bytes, index: int, ask_driver: Callable[[], concurrent.futures.Future[Any]]
                    ) -> concurrent.futures.Future[Any] | None:
        """A future of the ref to item `index` of a direct generator call's stream (None at
        its end); None if the driver keeps that stream (`ask_driver` is how waiters ask it
        if the stream goes there meanwhile)."""
        return self._streams.next_item(stream_id, index, ask_driver)

    def stream_ready(self, stream_id: bytes) -> str | None:
        """"item", "end" or "pending" for the consumer's next item; None if the driver keeps the stream."""
        return self._streams.ready(stream_id, settle=True)

    def values(self, object_ids: Sequence[bytes], timeout: float | None,
               long_wait: LongWait | None = None) -> dict[bytes, SerializedValue]:
        """The values of those of `object_ids` this process holds, waiting for them; ids that
        went to the driver meanwhile are left out. Raises TimeoutError. A wait that outlasts
        `LONG_WAIT_S` is announced (`long_wait`: its task lends its CPU meanwhile, as in Ray)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        found: dict[bytes, SerializedValue] = {}
        announced = False
        self.lent.read_pending(object_ids, timeout)  # its lender answers once it has them
        self.lent.read_held(object_ids, WORKER_HOLDER.fetch)  # from the holder its lender named
        self.lent.adopt(self.lent.without_value(object_ids))  # read through the driver
        try:
            for object_id in object_ids:
                while True:
                    with self._lock:
                        value = self._values.get(object_id) or self.lent.value(object_id)
                        call_id = self._producers.get(object_id)
                        call = self._calls.get(call_id) if call_id is not None else None
                    if value is not None:
                        found[object_id] = value
                        break
                    if call is None:
                        break  # the driver's now
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not call.future.done():
                        self.lending.borrowers.away_from(call.link.connection)
                    if not call.future.done() and long_wait is not None and not announced:
                        read_until_done(call.link.connection, call.future,
                                        LONG_WAIT_S if remaining is None else min(remaining, LONG_WAIT_S))
                        if not call.future.done() and (remaining is None or remaining > LONG_WAIT_S):
                            announced = True
                            long_wait.began()
                        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not call.future.done():
                        read_until_done(call.link.connection, call.future, remaining)
                        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    wait_for_reply(call.future, remaining)
        finally:
            if announced and long_wait is not None:
                long_wait.ended()
        return found

    def wait(self, object_ids: Sequence[bytes], num_returns: int, timeout: float | None,
             long_wait: LongWait | None = None) -> set[bytes] | None:
        """Which of `object_ids` (all held here) are ready: `num_returns` of them, or fewer
        once `timeout` passes; None as soon as one of them went to the driver (wait there). A
        wait that outlasts `LONG_WAIT_S` is announced, as in `values`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        announced = False
        self.lending.borrowers.away_from(None)  # this thread reads no link meanwhile
        for asked in self.lent.ask_lenders(object_ids):  # lent values not here yet: their lenders say when
            asked.add_done_callback(self._wake_waiters)
        try:
            while True:
                with self._changed:
                    if not all(self._answers_here(oid) for oid in object_ids):
                        return None
                    ready = {oid for oid in object_ids if oid in self._values or self._streams.ready(oid) in ("item", "end")
                             or self.lent.ready(oid)}
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if len(ready) >= num_returns or (remaining is not None and remaining <= 0):
                        return ready
                    if announced or long_wait is None or (remaining is not None and remaining <= LONG_WAIT_S):
                        self._changed.wait(remaining)
                        continue
                    if self._changed.wait(LONG_WAIT_S):
                        continue  # something arrived: look again before saying this waits
                announced = True  # told outside the lock: it sends a frame
                long_wait.began()
        finally:
            if announced and long_wait is not None:
                long_wait.ended()

    def _answers_here(self, object_id: bytes) -> bool:
        if object_id in self._producers:
            return object_id not in self._released
        return self._streams.holds(object_id) or self.lent.awaitable(object_id)

    def _wake_waiters(self, _: object = None) -> None:
        with self._changed:
            self._changed.notify_all()

    # ---- refs leaving the process, and forgetting ----------------------------------------

    def escaped(self, *object_ids: bytes) -> None:
        """Refs to these are being pickled: the driver takes over those that are ours, or lent here."""
        if ours := [oid for oid in object_ids if oid in self._producers or self.lent.holds(oid)]:
            self.hand_over(ours)

    def hand_over(self, object_ids: Iterable[bytes], inline: bool = False) -> None:
        """The driver takes these over (results, streams of generator calls, lent objects);
        `inline`: it holds their values itself (this process ends)."""
        object_ids = [oid for oid in object_ids if not self._streams.hand_over(oid)]
        self.lent.adopt(object_ids)  # those lent here
        if lost := self.lent.lost_kept(object_ids):  # their lender could not: the driver fails them
            self._notify(HandOver([oid for oid, _ in lost], [oid[:TASK_ID_SIZE] for oid, _ in lost]))
            self._notify(HandOverDone([oid for oid, _ in lost], [error for _, error in lost]))
        with self._lock:
            ids = [oid for oid in object_ids if oid in self._producers and oid not in self._handed_over]
            self._handed_over.update(ids)
            producers = [self._producers[oid] for oid in ids]
            ready = [(oid, self._values[oid]) for oid in ids if oid in self._values]
        if not ids:
            return
        self._notify(HandOver(ids, producers))
        if ready:
            self._send_values(ready, inline)

    def _send_values(self, handed: list[tuple[bytes, SerializedValue]], inline: bool = False) -> None:
        """The values of objects handed over: a large one stays here unless `inline`, served by
        this process's holder (`held_results.py`), and the driver learns where it is and how big."""
        ids = [oid for oid, _ in handed]
        values, held = [value for _, value in handed], []
        if not inline:
            values, held = WORKER_HOLDER.keep_large(values, ids)
        self._notify(HandOverDone(ids, values, held))

    def _send_stream(self, over: HandOverStream) -> None:
        """A stream's items going to the driver: large ones stay here, as `_send_values` keeps
        results."""
        if over.items:
            items, held = WORKER_HOLDER.keep_large(over.items, over.item_ids())
            over = HandOverStream(over.stream, over.before, items, over.finished, held)
        self._notify(over)

    def forget(self, object_ids: list[bytes]) -> list[bytes]:
        """Refs to these are gone from this process: drop the results held here; returns the
        ids the driver counts this process's refs to (all but ours it never took over; a
        generator's stream is counted there too)."""
        self._streams.release(object_ids)
        object_ids = self.lent.returned(object_ids)  # those kept past their calls go back to their lenders
        if not self._producers:
            return object_ids
        dropped = []  # (result of ours dropped here, whether the driver has it)
        with self._lock:
            driver_ids = []
            for oid in object_ids:
                if oid not in self._producers:
                    driver_ids.append(oid)
                    continue
                value = self._values.pop(oid, None)
                if value is not None:
                    self._answer_refs.dropped(oid, value)
                dropped.append((oid, oid in self._handed_over))
                if oid not in self._handed_over:
                    del self._producers[oid]
                    continue
                driver_ids.append(oid)
                if value is None and self._producers[oid] in self._calls:
                    self._released.add(oid)  # its value still goes to the driver as it comes
                else:
                    del self._producers[oid]
                    self._handed_over.discard(oid)
        served = set(self.lending.served([oid for oid, _ in dropped]))
        unheld = [oid for oid, handed in dropped if oid in served and not handed]  # else the driver releases it
        if unheld and (held := WORKER_HOLDER.held) is not None:
            held.release(unheld)
        return driver_ids

    # ---- cancel --------------------------------------------------------------------------

    def cancel(self, object_id: bytes, force: bool) -> bool:
        """Cancel the direct call that makes `object_id`; False if it is not one of ours."""
        with self._lock:
            call_id = self._producers.get(object_id, object_id)  # a generator's stream is its call's id
            call = self._calls.get(call_id)
        if call is None:
            return object_id in self._producers or self._streams.holds(object_id)  # done already: nothing to cancel
        if force:
            raise ValueError("force=True is not supported for actor tasks.")
        with call.link.lock:
            if call.link.in_flight.pop(call.spec.call_id, None) is None:
                return True  # answered meanwhile
        error = serialize_error(cancelled_call_error(
            call.spec.call_id, class_name=call.spec.name or "Actor", method=call.spec.method,
            actor_id=call.spec.actor_id, pid=None, coroutine_running=False,
        ))
        self._finish([(call, [error] * max(1, len(call.spec.return_ids)))])
        call.cancelled = True
        try:
            messages.notify(call.link.connection, CancelCall(call.spec.call_id))
        except ConnectionClosed:
            pass
        return True

    def _notify(self, message: messages.Message) -> None:
        self._notices.tell(message)

    def close(self, hand_off: bool = False) -> None:
        """The process ends: calls not answered yet go back to the driver, which may still be
        waiting for their results. `hand_off`: what hosts keep of this process's objects goes
        to the driver first (an executor ends: in Ray, a worker that owns objects would not)."""
        if hand_off:
            self.lending.hand_off()
        self.lending.close()  # before the links close: nothing waits for a borrower any more
        object_ref.set_escape_hook(None)
        with self._lock:
            links = list(self._links.values())
        for link in links:
            self._link_closed(link)
