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
its caller lost the gate (`ClaimCalls`), is answered to the owner instead.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from fray_ray._private import messages
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.messages import (
    CallDone,
    CallMethod,
    CancelCall,
    ClaimCalls,
    Claimed,
    DirectCallRecords,
    Gate,
    ListDirectCalls,
    OpenGate,
)
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.stream.stream_server import HELLO, StreamServer

logger = logging.getLogger(__name__)

#: Finished calls kept for the owner's state API between two of its questions; older ones go.
RECORDS_KEPT = 10_000

#: Runs a call that arrived from another driver (the host's own `CallMethod` handler).
RunCall = Callable[[Connection, int | None, CallMethod], None]
#: Cancels a call (the host's own `CancelCall` handler).
CancelRun = Callable[[Connection, int | None, CancelCall], None]


class ForeignCallGate:
    """The stream server other drivers send an actor's calls to, and where each call's answer
    goes back. Thread-safe."""

    def __init__(self, run_call: RunCall, *, bind_host: str, advertise_host: str,
                 cancel: CancelRun | None = None) -> None:
        self._run_call = run_call
        #: refs to the objects answers named, kept for the process's life: the caller's own
        #: refs to them may reach the driver after this process's refs are gone
        self._pinned: list[ObjectRef[Any]] = []
        self._bind_host = bind_host
        self._advertise_host = advertise_host
        self._lock = threading.Lock()  # guards everything below
        self._server: StreamServer | None = None
        self._token = ""
        #: call id -> the connection it came on, its method, when it arrived, and whether the
        #: state API lists it (`enable_task_events`)
        self._callers: dict[bytes, tuple[Connection, str, float, bool]] = {}
        #: calls still running whose gate closed, or that the owner claimed: answered to the owner
        self._orphaned: set[bytes] = set()
        self._records: collections.deque[list[Any]] = collections.deque(maxlen=RECORDS_KEPT)
        self._connections: set[Connection] = set()
        self._closed = False
        self._handlers = {
            HELLO: _welcome,
            **messages.handlers({CallMethod: self._on_call, **({CancelCall: cancel} if cancel else {})}),
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
                       for call_id, (_, method, arrived, events) in self._callers.items() if events]
        if message_id is not None:
            messages.reply(connection, message_id, DirectCallRecords(records + running))

    def _on_claim(self, connection: Connection, message_id: int | None, claim: ClaimCalls) -> None:
        """The owner answers for these calls from now on: a caller lost its gate to them."""
        with self._lock:
            for call_id in claim.calls:
                if self._callers.pop(call_id, None) is not None:
                    self._orphaned.add(call_id)
            claimed = [call_id for call_id in claim.calls if call_id in self._orphaned]
        if message_id is not None:
            messages.reply(connection, message_id, Claimed(claimed))

    def _accept(self, connection: Connection, greeting: list[Any]) -> None:
        with self._lock:
            if self._closed:
                connection.close()
                return
            self._connections.add(connection)
        connection.add_close_callback(self._forget)
        connection.start(self._handlers, first_frame=greeting)

    def _forget(self, connection: Connection) -> None:
        with self._lock:
            self._connections.discard(connection)
            for call_id in [c for c, caller in self._callers.items() if caller[0] is connection]:
                del self._callers[call_id]
                self._orphaned.add(call_id)  # its answer goes to the owner

    def _on_call(self, connection: Connection, message_id: int | None, call: CallMethod) -> None:
        with self._lock:
            self._callers[call.call] = (connection, call.method, time.time(), call.events)
        self._run_call(connection, message_id, call)

    def answer(self, done: CallDone) -> bool:
        """Send `done` to the driver its call came from; False if it came from the owner."""
        with self._lock:
            caller = self._callers.pop(done.call, None)
            self._orphaned.discard(done.call)
            if caller is not None and caller[3]:
                error = next((value for value in done.results if value.is_error), None)
                self._records.append([done.call, caller[1], caller[2], time.time(), error])
        if caller is None:
            return False
        contained = [oid for value in done.results for oid in value.contained_refs]
        if contained:
            self._pinned.extend(ObjectRef(oid) for oid in contained)  # before the answer goes
        try:
            messages.notify(caller[0], done)
        except ConnectionClosed:
            pass  # that driver is gone; nobody waits for the answer
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            server, self._server = self._server, None
            connections = list(self._connections)
        if server is not None:
            server.close()
        for connection in connections:
            connection.close()


def _welcome(connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
    """The gate checked the greeting's token; say so."""
    if message_id is not None:
        connection.reply(message_id, {})
