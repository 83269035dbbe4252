"""Calls to an actor from processes other than its owner, over the stream protocol.

An actor's owner sends calls over its session connection. Another driver of the cluster finds
a named actor through the endpoint registry and asks its ActorService to `describe` it; the
answer names this gate (an address and a secret of its own, so only a caller that could
already reach the actor's ActorService learns it). The caller then sends the same `CallMethod`
messages the owner does, with every top-level argument value inlined, and gets `CallDone`
back on its own connection, pipelined and without an HTTP request per call.

The owner's own workers send their calls here too, once the owner names the gate to them
(`direct_calls.py`); they may cancel a call they sent (`CancelCall`).

The gate starts on the first `describe` or the owner's `OpenGate`, so actors nobody looks
up pay nothing for it. It keeps a short record of each call it answered until the owner asks
for them (`ListDirectCalls`, when its state API lists tasks; the calls it runs are listed too).
A call whose gate connection closes before it is answered, or that the owner claims because
its caller lost the gate (`ClaimCalls`), is answered to the owner instead. The objects an
answer or item names are kept alive here until its caller says the driver counts its own refs
to them (`ResultsTaken`), or for `ORPHANED_PINS_S` after the caller's connection closed.

A generator method's items go to its caller as they come (`Yield`, then `CallDone` at the
end). Once the caller's gate connection is gone they are kept here until the owner claims
the call (the caller hands the stream to the owner first), so that none reaches the owner
before it knows the stream; past `HELD_ITEMS_LIMIT` bytes, or once they have waited
`HELD_ITEMS_WAIT_S` (a caller whose call nobody claims: another driver's, say), they are
dropped, and a claim then ends the stream with an error.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from fray_ray._private import messages
from fray_ray._private.core.execution import error_results
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.messages import (
    CallDone,
    CallMethod,
    CancelCall,
    ClaimCalls,
    Claimed,
    DirectCallRecords,
    Gate,
    LentTaken,
    ListDirectCalls,
    OpenGate,
    ResultsTaken,
    TakeLent,
    Yield,
)
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.stream.stream_server import HELLO, StreamServer
from fray_ray._private.workers.lent_out import Lending
from fray_ray._private.workers.lent_refs import LentRefs
from fray_ray.exceptions import ActorUnavailableError

logger = logging.getLogger(__name__)

#: Finished calls kept for the owner's state API between two of its questions; older ones go.
RECORDS_KEPT = 10_000
#: Bytes of generator items kept for calls whose caller is gone, until the owner claims them.
HELD_ITEMS_LIMIT = 64 << 20
#: how long a gone caller's generator call waits for the owner's claim before its items are dropped
HELD_ITEMS_WAIT_S = 300.0
#: How long the objects answers named stay kept after their caller's connection closed before
#: it said it counted them (`ResultsTaken`): a caller that lives on told the driver of its own
#: refs as the answers came, which reaches the driver long before this.
ORPHANED_PINS_S = 60.0

#: Runs a call that arrived from another driver (the host's own `CallMethod` handler).
RunCall = Callable[[Connection, int | None, CallMethod], None]
#: Cancels a call (the host's own `CancelCall` handler).
CancelRun = Callable[[Connection, int | None, CancelCall], None]


class _Caller(NamedTuple):
    """A call that came through the gate, until it is answered."""

    connection: Connection  # the one it came on, where its answer goes
    method: str
    arrived: float
    events: bool  # the state API lists it (`enable_task_events`)
    names_refs: bool  # its arguments name objects, which its caller keeps until the answer comes


class ForeignCallGate:
    """The stream server other drivers send an actor's calls to, and where each call's answer
    goes back. Thread-safe."""

    def __init__(self, run_call: RunCall, *, bind_host: str, advertise_host: str,
                 cancel: CancelRun | None = None, before_answer: Callable[[], None] = lambda: None,
                 released: Callable[[], None] = lambda: None, lent: Callable[[], LentRefs | None] = lambda: None,
                 lending: Callable[[], Lending | None] = lambda: None) -> None:
        """`before_answer()` runs before an answer or item that names refs goes to a caller:
        it returns once the driver has heard of the refs this process took
        (`driver_notices.py`). `released()` tells the driver of refs dropped since. `lent()`:
        where the objects a caller lends with its calls are kept (`lent_refs.py`); `lending()`:
        this process as the lender of what its answers to a worker name (`lent_out.py`)."""
        self._run_call = run_call
        self._lent = lent
        self._lending = lending
        self._before_answer = before_answer
        self._released = released
        #: call id -> its caller's connection and refs to the objects its answer named, kept
        #: until the caller says the driver counts its own (`ResultsTaken`), or for
        #: `ORPHANED_PINS_S` once the caller's connection closed without saying so
        self._pinned: dict[bytes, tuple[Connection, list[ObjectRef[Any]]]] = {}
        self._unpin_timers: set[threading.Timer] = set()
        self._bind_host = bind_host
        self._advertise_host = advertise_host
        self._lock = threading.Lock()  # guards everything below
        self._server: StreamServer | None = None
        self._token = ""
        self._callers: dict[bytes, _Caller] = {}  # calls that came through the gate, until answered
        #: calls still running whose gate closed, or that the owner claimed: answered to the owner.
        #: A call moves here from `_callers` by being added before it is removed, so `answer`
        #: may look for it in the two without the lock
        self._orphaned: set[bytes] = set()
        self._generators: set[bytes] = set()  # calls of generator methods, while they run
        #: generator calls whose caller is gone, not claimed yet: their items and end, kept
        #: (None: past the limit, dropped)
        self._held: dict[bytes, list[Yield | CallDone] | None] = {}
        self._held_since: dict[bytes, float] = {}  # when each kept call's caller went (monotonic)
        self._held_bytes = 0
        self._records: collections.deque[list[Any]] = collections.deque(maxlen=RECORDS_KEPT)
        self._connections: set[Connection] = set()
        self._closed = False
        self._handlers = {
            HELLO: _welcome,
            **messages.handlers({CallMethod: self._on_call, ResultsTaken: self._on_taken, TakeLent: self._on_take_lent,
                                 **({CancelCall: cancel} if cancel else {})}),
        }

    def open(self) -> dict[str, str] | None:
        """{"address", "token"} of the gate, started on first use; None once closed."""
        with self._lock:
            if self._closed:
                return None
            if self._server is None:
                self._token = secrets.token_hex(16)
                self._server = StreamServer(
                    self._accept, token=self._token, host=self._bind_host, name="actor-calls"
                ).start()
            port = self._server.port
        return {"address": f"{self._advertise_host}:{port}", "token": self._token}

    def owner_handlers(self) -> dict[str, Any]:
        """Handlers for what the owner asks on the host's session: open the gate, list the
        calls, claim the calls a caller lost its gate to."""
        return messages.handlers({OpenGate: self._on_open, ListDirectCalls: self._on_list, ClaimCalls: self._on_claim})

    def _on_open(self, connection: Connection, message_id: int | None, asked: OpenGate) -> None:
        try:
            where = self.open()
        except OSError as exc:
            logger.warning("cannot serve calls over the stream protocol: %s", exc)
            where = None
        if message_id is not None:
            messages.reply(connection, message_id, Gate(where))

    def _on_list(self, connection: Connection, message_id: int | None, asked: ListDirectCalls) -> None:
        with self._lock:
            records, self._records = list(self._records), collections.deque(maxlen=RECORDS_KEPT)
            running = [[call_id, method, arrived, None, None]
                       for call_id, (_, method, arrived, events, _) in self._callers.items() if events]
        if message_id is not None:
            messages.reply(connection, message_id, DirectCallRecords(records + running))

    def _on_claim(self, connection: Connection, message_id: int | None, claim: ClaimCalls) -> None:
        """The owner answers for these calls from now on: a caller lost its gate to them."""
        kept: list[Yield | CallDone] = []
        with self._lock:  # held while the kept messages go: a later item must not overtake them
            for call_id in claim.calls:
                if call_id in self._callers:
                    self._orphaned.add(call_id)
                    del self._callers[call_id]  # after: `answer` looks without the lock
            claimed = [call_id for call_id in claim.calls if call_id in self._orphaned]
            for call_id in claim.calls:
                if call_id not in self._held:
                    continue
                held = self._held.pop(call_id)
                self._held_since.pop(call_id, None)
                if held is None:  # its items were dropped: the stream ends with an error
                    error = ActorUnavailableError("the generator's items were lost with its caller's connection", None)
                    kept.append(CallDone(call_id, error_results(error, 0), True))
                    continue
                self._held_bytes -= sum(message.value.size for message in held if isinstance(message, Yield))
                if any(isinstance(message, CallDone) for message in held):
                    self._orphaned.discard(call_id)  # answered, with these
                kept.extend(held)
            try:
                for message in kept:  # before the answer, in the order they were made
                    messages.notify(connection, message)
            except ConnectionClosed:
                return
        if message_id is not None:
            messages.reply(connection, message_id, Claimed(claimed))

    def _accept(self, connection: Connection, greeting: list[Any]) -> None:
        caller = greeting[3].get("caller")  # the greeting is a checked hello: its body is a map
        if isinstance(caller, bytes):
            connection.peer_info["caller"] = caller  # the caller's worker id (`lent_refs.AdoptFor`)
        with self._lock:
            if self._closed:
                connection.close()
                return
            self._connections.add(connection)
        connection.add_close_callback(self._forget)
        lending = self._lending() if isinstance(caller, bytes) else None  # a worker of this session
        handlers = self._handlers if lending is None else {**self._handlers, **messages.handlers(lending.handlers())}
        connection.start(handlers, first_frame=greeting)

    def worker_caller(self, call_id: bytes) -> Connection | None:
        """The gate connection `call_id` came on, if a worker of this session sent it (one
        that borrows what its answer names from this process)."""
        with self._lock:
            caller = self._callers.get(call_id)
        if caller is None or not isinstance(caller.connection.peer_info.get("caller"), bytes):
            return None
        return caller.connection

    def _forget(self, connection: Connection) -> None:
        if (lending := self._lending()) is not None:
            lending.borrowers.gone(connection)  # what answers to it lent on
        with self._lock:
            self._connections.discard(connection)
            for call_id in [c for c, caller in self._callers.items() if caller.connection is connection]:
                self._orphaned.add(call_id)  # its answer goes to the owner
                del self._callers[call_id]  # after: `answer` looks without the lock
                if call_id in self._generators:
                    self._keep_for_owner(call_id)  # once the owner has claimed it
            if self._closed or not any(caller is connection for caller, _ in self._pinned.values()):
                return
            timer = threading.Timer(ORPHANED_PINS_S, self._unpin_orphans, (connection,))
            timer.daemon = True
            self._unpin_timers.add(timer)
        timer.start()

    def _unpin_orphans(self, connection: Connection) -> None:
        """Let go of what answers to the closed `connection` named (its `ResultsTaken` never came)."""
        with self._lock:
            self._unpin_timers = {t for t in self._unpin_timers if t.is_alive() and t is not threading.current_thread()}
            orphans = [call_id for call_id, (caller, _) in self._pinned.items() if caller is connection]
            for call_id in orphans:
                del self._pinned[call_id]
        if orphans:
            self._released()

    def _on_call(self, connection: Connection, message_id: int | None, call: CallMethod) -> None:
        if call.loans and (lent := self._lent()) is not None:
            lent.arrived(connection, call)
        with self._lock:
            self._callers[call.call] = _Caller(connection, call.method, time.time(), call.events, call.args.names_refs())
            if call.num_returns == "streaming":
                self._generators.add(call.call)
        self._run_call(connection, message_id, call)

    def _pin(self, call_id: bytes, caller: Connection, object_ids: Sequence[bytes]) -> None:
        """Keep the objects an answer or item of `call_id` names until its caller has counted them."""
        refs = [ObjectRef(oid) for oid in object_ids]  # before the answer or item goes
        with self._lock:
            pinned = self._pinned.get(call_id)
            if pinned is not None and pinned[0] is caller:
                pinned[1].extend(refs)
            else:
                self._pinned[call_id] = (caller, refs)

    def _on_taken(self, connection: Connection, message_id: int | None, taken: ResultsTaken) -> None:
        with self._lock:
            ours = [c for c in taken.calls if c in self._pinned and self._pinned[c][0] is connection]  # only its caller lets go
            for call_id in ours:
                del self._pinned[call_id]
        if ours:
            self._released()  # an idle actor makes no call that would send these releases later

    def _on_take_lent(self, connection: Connection, message_id: int | None, take: TakeLent) -> None:
        """The caller ends: borrow what this process kept of its objects from the driver."""
        if (lent := self._lent()) is not None:
            lent.on_take_lent(connection, message_id, take)
        elif message_id is not None:
            messages.reply(connection, message_id, LentTaken())

    def item_sender(self, to_owner: Callable[[Yield], None]) -> Callable[[Yield], None]:
        """Sends a generator method's items: to the caller of a call that came through this
        gate, else with `to_owner`."""

        def send(item: Yield) -> None:
            if not self.send_item(item):
                to_owner(item)

        return send

    def send_item(self, item: Yield) -> bool:
        """Send a generator call's item to its caller; False if the call came from the owner
        (or the owner claimed it): the owner gets the item."""
        with self._lock:
            caller = self._callers.get(item.stream)
            if caller is None:
                return self._keep(item)
        if item.value.contained_refs:  # the caller's own refs to them are counted by the end of the call
            self._pin(item.stream, caller.connection, item.value.contained_refs)
            self._before_answer()
        try:
            messages.notify(caller.connection, item)
        except ConnectionClosed:
            with self._lock:  # the connection's close may not have been handled yet
                if item.stream in self._callers or item.stream in self._held:
                    self._keep_for_owner(item.stream)
                return self._keep(item)
        return True

    def _keep_for_owner(self, call_id: bytes) -> None:
        """From now on the messages of generator call `call_id` wait for the owner's claim
        (with `_lock` held)."""
        if call_id not in self._held:
            self._held[call_id] = []
            self._held_since[call_id] = time.monotonic()
        self._drop_unclaimed()

    def _keep(self, message: Yield | CallDone) -> bool:
        """Keep a message of a call whose caller is gone until the owner claims the call (with
        `_lock` held); False if the owner takes it now."""
        call_id = message.stream if isinstance(message, Yield) else message.call
        if call_id not in self._held:
            return False
        self._drop_unclaimed()
        held = self._held[call_id]
        if held is None:
            return True  # dropped: a claim ends the stream with an error
        size = message.value.size if isinstance(message, Yield) else 0
        if self._held_bytes + size > HELD_ITEMS_LIMIT:
            self._drop(call_id)
            return True
        held.append(message)
        self._held_bytes += size
        return True

    def _drop_unclaimed(self) -> None:
        """Drop the items of calls that waited for a claim longer than `HELD_ITEMS_WAIT_S`
        (with `_lock` held)."""
        expired = time.monotonic() - HELD_ITEMS_WAIT_S
        for call_id in [c for c, since in self._held_since.items() if since < expired]:
            self._drop(call_id)

    def _drop(self, call_id: bytes) -> None:
        held = self._held.get(call_id)
        if held:
            self._held_bytes -= sum(kept.value.size for kept in held if isinstance(kept, Yield))
        self._held[call_id] = None  # a claim ends the stream with an error
        self._held_since.pop(call_id, None)

    def answer(self, done: CallDone) -> bool:
        """Send `done` to the driver its call came from; False if it came from the owner."""
        if done.call not in self._callers and done.call not in self._orphaned:
            return False  # the owner's call, as most are: nothing here knows of it
        if (lent := self._lent()) is not None:
            lent.ended(done.call)
        with self._lock:
            self._generators.discard(done.call)
            if self._keep(done):
                return True  # its caller is gone: the owner gets it with the items once it claims the call
            caller = self._callers.pop(done.call, None)
            self._orphaned.discard(done.call)
            if caller is not None and caller.events:
                error = next((value for value in done.results if value.is_error), None)
                self._records.append([done.call, caller.method, caller.arrived, time.time(), error])
        if caller is None:
            return False
        contained = [oid for value in done.results for oid in value.contained_refs]
        if contained:
            self._pin(done.call, caller.connection, contained)
        if contained or caller.names_refs:  # the caller drops its refs to the arguments' objects as this comes
            self._before_answer()
        try:
            messages.notify(caller.connection, done)
        except ConnectionClosed:
            pass  # that driver is gone; nobody waits for the answer
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            server, self._server = self._server, None
            connections = list(self._connections)
            timers, self._unpin_timers = self._unpin_timers, set()
        for timer in timers:
            timer.cancel()
        if server is not None:
            server.close()
        for connection in connections:
            connection.close()


def _welcome(connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
    """The gate checked the greeting's token; say so."""
    if message_id is not None:
        connection.reply(message_id, {})
