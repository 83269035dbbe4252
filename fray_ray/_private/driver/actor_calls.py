"""Calls to actors in the driver: sending them in order, their results, retries and cancellation.

A call goes to its actor's host on the actor's connection, in submission order, or waits in
the actor's queue while it starts; the driver tracks up to `max_concurrency` calls as running
and the rest as waiting. A call that raised is sent again while `retry_exceptions` and
`max_task_retries` allow; a cancelled call's refs fail at once (`cancelled_calls`). What calls
become when an actor dies or restarts is `actors.py`'s (by the rules in `actor_restarts`).
`ActorCalls` is a base of `ActorManager` (`actors.py`) and shares its state and its lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fray_ray._private import messages
from fray_ray._private.core.cancelled_calls import cancelled_call_error
from fray_ray._private.core.retry_policy import retries_user_exception
from fray_ray._private.core.task_spec import ActorCallSpec
from fray_ray._private.driver import actor_restarts as restarts
from fray_ray._private.driver.actor_records import ActorRecord, ActorState
from fray_ray._private.driver.actor_restarts import CallFate, unknown_actor_error
from fray_ray._private.messages import CallMethod, CancelCall
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.observe.task_events import TaskEvent, call_event, finished_call_record, first_error
from fray_ray._private.stream import read_hints
from fray_ray._private.stream.frames import MessageTooLarge
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import ActorDiedError, RaySystemError

if TYPE_CHECKING:
    from fray_ray._private.driver.streams import StreamTable
    from fray_ray._private.objects.object_table import ObjectTable
    from fray_ray._private.observe.task_events import TaskEvents


class ActorCalls:
    """Calls, their results and cancellation; `ActorManager` sets the state below and supplies
    the methods declared for type checkers (an actor's death and its error)."""

    _lock: threading.Lock
    _actors: dict[bytes, ActorRecord]
    _by_connection: dict[Connection, ActorRecord]
    _cancelled: set[bytes]  # calls cancelled while running: their results are dropped when they arrive
    _retries: restarts.RetryBudget  # retries left per pending call (max_task_retries)
    _events: TaskEvents
    _streams: StreamTable
    _objects: ObjectTable

    if TYPE_CHECKING:

        def _death_error(self, record: ActorRecord, reason: str, detail: str = "") -> SerializedValue: ...

        def _mark_dead(self, record: ActorRecord, death: SerializedValue, *, terminate: bool = False) -> None: ...

    # ---- calls ---------------------------------------------------------------------------

    def submit_call(self, call: ActorCallSpec) -> None:
        """Send (or queue) a call whose return objects already exist (pending)."""
        self._objects.incref(call.arguments.value.contained_refs)
        with self._lock:
            record = self._actors.get(call.actor_id)
            if record is None:
                death = serialize_error(unknown_actor_error(call.actor_id))
            elif record.state is ActorState.DEAD:
                death = record.death
            else:
                death = None
        if record is not None and record.remote is None and (
                record.spec.task_events if call.task_events is None else call.task_events):
            call.submitted_at = time.time()  # listed by the state API from now on
        if death is not None:
            self._fail_call(call, death)
            return
        if record.remote is not None:
            record.remote.submit(call)
            return
        retries = record.spec.max_task_retries if call.max_task_retries is None else call.max_task_retries
        self._retries.admit(call.call_id, retries)
        with record.send_lock:
            with self._lock:
                if record.state is ActorState.DEAD:
                    death = record.death
                elif (record.state is ActorState.RESTARTING
                      and restarts.fate_while_restarting(self._retries, call.call_id) is CallFate.UNAVAILABLE):
                    death = restarts.unavailable_error(call.actor_id, restarts.RESTARTING_REASON)
                elif record.state is not ActorState.STARTING and record.connection is not None:
                    record.in_flight[call.call_id] = call  # a restarting host runs it after __init__
                    connection = record.connection
                    if len(record.in_flight) <= record.spec.max_concurrency:
                        call.started_at = call.submitted_at
                    else:
                        record.waiting.append(call.call_id)
                else:
                    record.queued.append(call)
                    return
            if death is None:
                # Calls behind others in flight are written together by the connection's writer.
                alone = len(record.in_flight) == 1
                self._send_call(connection, call, defer=not alone)
                read_hints.after_send(call.return_ids, connection, alone)
        if death is not None:
            self._fail_call(call, death)

    def _send_call(self, connection: Connection, call: ActorCallSpec, defer: bool = False) -> None:
        message = CallMethod.of(call, self._objects.value)
        message.keep_items = call.num_returns == "streaming"  # its large items stay in the actor's process
        try:
            messages.notify(connection, message, defer=defer)
        except ConnectionClosed:
            pass  # the close callback decides about the call
        except MessageTooLarge as exc:
            # Nothing was sent: the call fails as if its actor had answered so. On a thread of
            # its own: the caller may hold the actor's send lock, which answers may need.
            record = self._actors.get(call.actor_id)
            name = call.name or (f"{record.spec.class_name}.{call.method}" if record is not None else call.method)
            error = serialize_error(RaySystemError(f"actor call {name} cannot be sent to its actor: {exc}"))
            threading.Thread(target=self.calls_done, args=(connection, [(call.call_id, [error])]),
                             name="call-too-large", daemon=True).start()

    def return_ids(self, connection: Connection, call_id: bytes) -> tuple[bytes, ...]:
        """The ids of the results of call `call_id` in flight on `connection` (none if unknown)."""
        with self._lock:
            record = self._by_connection.get(connection)
            call = None if record is None else record.in_flight.get(call_id)
            return () if call is None else call.return_ids

    def call_done(self, connection: Connection, call_id: bytes, results: Sequence[SerializedValue]) -> None:
        self.calls_done(connection, [(call_id, results)])

    def calls_done(self, connection: Connection, answers: Sequence[tuple[bytes, Sequence[SerializedValue]]]) -> None:
        """Answers from one actor's host, in the order it sent them: each call completes, or is
        sent again if it raised an exception its `retry_exceptions` and retries allow."""
        finished: list[tuple[ActorCallSpec, Sequence[SerializedValue]]] = []
        again: list[tuple[ActorCallSpec, Sequence[SerializedValue]]] = []
        with self._lock:
            record = self._by_connection.get(connection)
            if record is None:
                return
            for call_id, results in answers:
                call = record.in_flight.get(call_id)
                if call is not None and call_id in self._cancelled:
                    self._cancelled.discard(call_id)
                    self._objects.drop_results(list(zip(call.return_ids, results)))
                    call = None  # already completed as cancelled
                elif call is not None and call.retry_exceptions and self._retries_on(call, results):
                    again.append((call, results))  # still in flight
                    continue
                record.in_flight.pop(call_id, None)
                if call is not None:
                    finished.append((call, results))
                # A call that ended makes room for the oldest one waiting (as far as the driver can tell).
                while record.waiting:
                    now_running = record.in_flight.get(record.waiting.popleft())
                    if now_running is not None:
                        now_running.started_at = time.time()
                        break
            retire = record.out_of_scope and not record.in_flight and not record.queued
        if again:
            self._attempts_ended(record, again, running=True)
            with record.send_lock:
                for call, _ in again:
                    self._send_call(connection, call)
        self._complete_calls(finished)
        if retire:
            self._mark_dead(record, self._death_error(record, "out_of_scope"), terminate=True)

    def _retries_on(self, call: ActorCallSpec, results: Sequence[SerializedValue]) -> bool:
        """Whether a call that raised is sent again (spends one of its retries)."""
        return retries_user_exception(call.retry_exceptions, results) and self._retries.spend(call.call_id)

    def _attempts_ended(self, record: ActorRecord, ended: Sequence[tuple[ActorCallSpec, Sequence[SerializedValue] | None]],
                        *, running: bool, error_kind: str | None = None) -> None:
        """Calls that run again (an exception they retry, or their actor restarting): the attempt
        that ended joins the history, and each call goes on as its next attempt, `running` at
        once or waiting for its actor's next instance."""
        now = time.time()
        self._events.add_finished([
            finished_call_record(call, record.spec.class_name, record.host, record.pid, results, now, error_kind)
            for call, results in ended if call.submitted_at is not None
        ])
        for call, _ in ended:
            call.attempt += 1
            if call.submitted_at is not None:
                call.submitted_at = now
            call.started_at = now if running else None

    def live_call_events(self) -> list[TaskEvent]:
        """The calls not yet ended, as the state API lists them (a live source of `TaskEvents`):
        calls keep no event while they run, so that a call costs the driver less."""
        with self._lock:
            calls = [
                # Without a connection, a call is queued or waits for its restarting actor: on no host.
                (call, record.spec.class_name, *((record.host, record.pid) if record.connection is not None else (None, None)))
                for record in self._actors.values()
                for call in (*record.in_flight.values(), *record.queued) if call.submitted_at is not None
            ]
        return [call_event(call, class_name, host, pid) for call, class_name, host, pid in calls]

    # ---- cancel --------------------------------------------------------------------------

    def owns_call(self, call_id: bytes) -> bool:
        with self._lock:
            return any(call_id in r.in_flight or any(c.call_id == call_id for c in r.queued) for r in self._actors.values())

    def cancel_call(self, call_id: bytes) -> bool:
        """Cancel an actor call: its refs fail at once (see `cancelled_calls`); the host skips
        it if it has not started, cancels it if it is a coroutine, and flags it otherwise
        (`get_runtime_context().is_canceled()`)."""
        with self._lock:
            for record in self._actors.values():
                queued = next((c for c in record.queued if c.call_id == call_id), None)
                if queued is not None:
                    record.queued.remove(queued)
                    call, connection = queued, None
                    break
                if call_id in record.in_flight:
                    call, connection = record.in_flight[call_id], record.connection
                    if connection is None:  # kept for a restarting actor: it is not sent again
                        del record.in_flight[call_id]
                    else:
                        self._cancelled.add(call_id)
                    break
            else:
                return False
        error = cancelled_call_error(
            call_id,
            class_name=record.spec.class_name,
            method=call.method,
            actor_id=record.spec.actor_id,
            pid=record.pid,
            coroutine_running=connection is not None and record.spec.is_async,
        )
        self._complete_call(call, serialize_error(error))
        if connection is not None:
            try:
                messages.notify(connection, CancelCall(call_id))
            except ConnectionClosed:
                pass
        return True

    def _forget_cancelled_locked(self, record: ActorRecord) -> None:
        """Drop from `record` the calls cancelled while they ran: their refs already failed, so
        the actor's death or restart neither fails them again nor sends them again."""
        for call_id in [c for c in record.in_flight if c in self._cancelled]:
            del record.in_flight[call_id]
            self._cancelled.discard(call_id)

    # ---- results -------------------------------------------------------------------------

    def _complete_calls(self, finished: Sequence[tuple[ActorCallSpec, SerializedValue | Sequence[SerializedValue]]]) -> None:
        """Calls that ended together, each with its results (or one error for all its returns):
        their records for the state API, streams and return objects, one pass over each table."""
        now = time.time()
        records = []
        for call, results in finished:
            self._retries.forget(call.call_id)
            if call.submitted_at is not None:  # it reached its actor's queue (see `live_call_events`)
                actor = self._actors.get(call.actor_id)
                if actor is not None:
                    records.append(finished_call_record(call, actor.spec.class_name, actor.host, actor.pid, results, now))
        self._events.add_finished(records)
        for call, results in finished:
            if call.num_returns == "streaming":
                self._streams.finish(call.call_id, first_error(results))
        self._objects.fulfil_all([
            (object_id, value) for call, results in finished
            for object_id, value in zip(call.return_ids, [results] * len(call.return_ids)
                                        if isinstance(results, SerializedValue) else results)
        ])
        for call, _ in finished:
            self._objects.decref(call.arguments.value.contained_refs)

    def _complete_call(self, call: ActorCallSpec, results: SerializedValue | Sequence[SerializedValue]) -> None:
        self._complete_calls([(call, results)])

    def _fail_call(self, call: ActorCallSpec, error: SerializedValue | None) -> None:
        self._complete_call(call, error or serialize_error(ActorDiedError()))
