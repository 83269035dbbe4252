"""Where workers send their actor calls themselves, and the calls they give back.

A worker asks once per actor where the actor's host takes calls (`route`). An actor of this
driver that runs, has a gate (its host opens one when asked, `OpenGate`) and has none of that
worker's earlier calls still queued or running here gets its gate named, with the instance
it reaches; otherwise the worker keeps calling through the driver. A call whose host went
away under it comes back (`take_back`) and meets the rules of `actor_restarts` as a call the
driver had sent to that instance would; one whose host lives (only the caller's gate broke) is
claimed from the host, or, if the host no longer has it, may or may not have run (`_gate_lost`).
Hosts keep a record of the direct calls they finished, and say which they run, when the state
API asks (`direct_call_events`), so that listing them costs nothing per call. `DirectRoutes` is
a base of `ActorManager` (`actors.py`) and shares its state and its lock.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from fray_ray._private import messages
from fray_ray._private.core.task_spec import ActorCallSpec, Arguments
from fray_ray._private.driver import actor_restarts as restarts
from fray_ray._private.driver.actor_records import ActorRecord, ActorState
from fray_ray._private.messages import ClaimCalls, ListDirectCalls, OpenGate, Route
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.observe.task_events import TaskEvent, TaskEvents, call_event, finished_call_record
from fray_ray._private.stream.protocol import Connection, ConnectionClosed

if TYPE_CHECKING:
    from fray_ray._private.objects.object_table import ObjectTable


#: How long the state API waits for each host's list of the direct calls it finished.
LIST_WAIT_S = 5.0
GATE_LOST_REASON = "the connection from its caller to its host broke while the call was in flight"


class DirectRoutes:
    """Routes for workers' direct calls; `ActorManager` sets the state below."""

    _lock: threading.Lock
    _actors: dict[bytes, ActorRecord]
    _objects: ObjectTable
    _retries: restarts.RetryBudget
    _events: TaskEvents

    if TYPE_CHECKING:

        def _send_call(self, connection: Connection, call: ActorCallSpec, defer: bool = False) -> None: ...

        def _fail_call(self, call: ActorCallSpec, error: SerializedValue | None) -> None: ...

    def route(self, actor_id: bytes, through_driver: Sequence[bytes], answer: Callable[[Route], None]) -> None:
        """Answer where a worker sends its calls to `actor_id` (`through_driver`: its calls
        sent here that may not have ended). Never blocks: a gate the host must open first is
        named when the host says where."""
        asked = set(through_driver)
        with self._lock:
            record = self._actors.get(actor_id)
            if record is None or record.remote is not None or record.connection is None:
                answer(Route())
                return
            pending = [c for c in record.in_flight if c in asked] + [c.call_id for c in record.queued if c.call_id in asked]
            usable = record.state is ActorState.ALIVE and not pending
            connection, incarnation, gate = record.connection, record.restarts, record.gate
            retries, events = record.spec.max_task_retries, record.spec.task_events
        if not usable:
            answer(Route(pending=pending))
            return
        if gate is not None and gate[0] is connection:
            answer(Route(gate[1]["address"], gate[1]["token"], incarnation, max_task_retries=retries,
                         task_events=events))
            return
        try:
            opened = messages.request(connection, OpenGate())
        except ConnectionClosed:
            answer(Route())
            return

        def named(reply: Any) -> None:
            try:
                where = messages.reply_of(OpenGate(), reply.result()).gate
            except Exception:  # noqa: BLE001 - the host went away or has no gate: calls go through here
                where = None
            if not isinstance(where, dict):
                answer(Route())
                return
            with self._lock:
                if record.connection is connection:
                    record.gate = (connection, where)
            answer(Route(where["address"], where["token"], incarnation, max_task_retries=retries,
                         task_events=events))

        opened.add_done_callback(named)

    def take_back(self, call: ActorCallSpec, incarnation: int) -> None:
        """A worker's direct call to instance `incarnation` whose host went away before it
        answered: the call meets Ray's rules as one this driver had sent there."""
        self._objects.incref(call.arguments.value.contained_refs)  # released as the call ends
        with self._lock:
            record = self._actors.get(call.actor_id)
        if record is None:
            self._fail_call(call, serialize_error(restarts.unknown_actor_error(call.actor_id)))
            return
        retries = record.spec.max_task_retries if call.max_task_retries is None else call.max_task_retries
        if retries > 0:  # the caller may have sent it again already (an exception it retries)
            retries = max(retries - call.attempt, 0)
        error: SerializedValue | None = None
        connection = probe = None
        with record.send_lock:
            with self._lock:
                if record.state is ActorState.DEAD:
                    error = record.death
                elif (record.state is ActorState.ALIVE and record.restarts == incarnation
                      and record.connection is not None):
                    # This driver has not seen that instance end: if it did end, its end decides
                    # (`_host_disconnected`); if it lives, only the caller's gate broke (`_gate_lost`).
                    self._retries.admit(call.call_id, retries)
                    record.in_flight[call.call_id] = call
                    probe = record.connection
                elif retries == 0:
                    error = restarts.unavailable_error(call.actor_id, restarts.DIED_IN_FLIGHT_REASON)
                else:  # the attempt that died spent a retry; the next instance runs it
                    self._retries.admit(call.call_id, retries - 1 if retries > 0 else retries)
                    call.attempt += 1
                    record.in_flight[call.call_id] = call
                    connection = record.connection  # None while it restarts: sent once it is back
            if connection is not None:
                self._send_call(connection, call)
        if error is not None:
            self._fail_call(call, error)
        if probe is not None:
            self._gate_lost(record, probe, call)

    def _gate_lost(self, record: ActorRecord, connection: Connection, call: ActorCallSpec) -> None:
        """A handed-back call whose host this driver still sees: the host answers here from now
        on if it still runs or queues the call (`ClaimCalls`). Otherwise it ran and its answer
        was lost with the gate, or it never arrived: as in Ray, it may or may not have run, so
        it is sent again within its retries, else fails with ActorUnavailableError. A host that
        does not answer has ended, and its end decides (`_host_disconnected`)."""
        try:
            asked = messages.request(connection, ClaimCalls([call.call_id]))
        except ConnectionClosed:
            return

        def decide() -> None:
            with record.send_lock:
                with self._lock:
                    if record.in_flight.get(call.call_id) is not call or record.connection is not connection:
                        return  # it ended meanwhile, or the instance did
                    again = self._retries.spend(call.call_id)
                    if again:
                        call.attempt += 1
                    else:
                        del record.in_flight[call.call_id]
                if again:
                    self._send_call(connection, call)
            if not again:
                self._fail_call(call, restarts.unavailable_error(call.actor_id, GATE_LOST_REASON))

        def answered(reply: concurrent.futures.Future[Any]) -> None:
            if reply.exception() is not None:
                return  # the host's end decides
            claimed = messages.reply_of(ClaimCalls(), reply.result()).calls
            if call.call_id not in claimed:  # not on this thread: the host's reader delivers the reply
                threading.Thread(target=decide, name="gate-lost", daemon=True).start()

        asked.add_done_callback(answered)

    def direct_call_events(self) -> list[TaskEvent]:
        """A live source of `TaskEvents`: the direct calls hosts finished since last asked join
        the history (asked of every host with a gate, each answering within `LIST_WAIT_S`)."""
        with self._lock:
            hosts = [(record, record.gate[0]) for record in self._actors.values()
                     if record.gate is not None and record.gate[0] is record.connection]
        asked = []
        for record, connection in hosts:
            try:
                asked.append((record, messages.request(connection, ListDirectCalls())))
            except ConnectionClosed:
                pass
        done, _ = concurrent.futures.wait([future for _, future in asked], timeout=LIST_WAIT_S)
        records = []
        running = []
        for record, future in asked:
            if future not in done or future.exception() is not None:
                continue
            for call_id, method, arrived, ended, error in messages.reply_of(ListDirectCalls(), future.result()).records:
                call = ActorCallSpec(record.spec.actor_id, call_id, method, cast(Arguments, None), (), 1,
                                     submitted_at=arrived, started_at=arrived)
                if ended is None:
                    running.append(call_event(call, record.spec.class_name, record.host, record.pid))
                else:
                    records.append(finished_call_record(call, record.spec.class_name, record.host, record.pid,
                                                        [error] if error is not None else None, ended))
        self._events.add_finished(records)
        return running
