"""The session's side of workers' direct actor calls (`direct_routes.py`, and in a worker
`workers/direct_calls.py`): routes asked for, results handed over, calls handed back, lent
objects asked for on a lender's behalf."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fray_ray._private import messages
from fray_ray._private.messages import (
    Adopted,
    AdoptFor,
    AdoptLent,
    AskRoute,
    HandBack,
    HandOver,
    HandOverDone,
    HandOverStream,
    Route,
)
from fray_ray._private.objects.ids import TASK_ID_SIZE
from fray_ray._private.objects.remote_values import with_remote_results
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import OwnerDiedError, RaySystemError

if TYPE_CHECKING:
    from fray_ray._private.driver.actors import ActorManager
    from fray_ray._private.driver.held_lineage import HeldLineage
    from fray_ray._private.driver.streams import StreamTable
    from fray_ray._private.objects.object_table import ObjectTable

#: How many handed-over objects a worker's set holds before those done are dropped from it.
PRUNE_AT = 1024


class DirectCallDriver(Protocol):
    """The driver's parts these handlers reach (the session's `SessionDriver` has them)."""

    objects: ObjectTable
    actors: ActorManager
    streams: StreamTable
    lineage: HeldLineage


#: Counts one ref of the connection's worker to each object (the session's borrow table).
CountBorrow = Callable[[Connection, list[bytes]], None]


def direct_call_handlers(driver: DirectCallDriver, count_borrow: CountBorrow,
                         worker_connection: Callable[[bytes], Connection | None]) -> dict[Any, Any]:
    """The session's handlers for what workers say about their direct calls (the driver's
    parts are looked up as messages come: the session exists before them).
    `worker_connection(worker_id)`: that worker's session connection, if it has one."""

    def ask_route(connection: Connection, message_id: int | None, ask: AskRoute) -> None:
        if message_id is None:
            return

        def answer(route: Route) -> None:
            messages.reply(connection, message_id, route)

        driver.actors.route(ask.actor, ask.through_driver, answer)

    #: per worker connection, the objects it handed over (until its process ends)
    handed: dict[Connection, set[bytes]] = {}
    lock = threading.Lock()

    def hand_over(connection: Connection, message_id: int | None, over: HandOver) -> None:
        objects = driver.objects
        new = [(oid, producer) for oid, producer in zip(over.ids, over.producers) if not objects.known(oid)]
        for oid, producer in new:
            objects.create_pending([oid], producer=producer)
        count_borrow(connection, [oid for oid, _ in new])
        with lock:
            first = connection not in handed
            held = handed.setdefault(connection, set())
            if len(held) > PRUNE_AT:
                held.difference_update([oid for oid in held if objects.is_done(oid) or not objects.known(oid)])
            held.update(oid for oid, _ in new)
        if first:
            connection.add_close_callback(owner_died)

    def owner_died(connection: Connection) -> None:
        """The worker's process ended: objects it handed over and never gave values for fail
        as Ray's do when their owner dies."""
        with lock:
            held = handed.pop(connection, set())
        lost = [oid for oid in held if driver.objects.known(oid) and not driver.objects.is_done(oid)]
        try:
            driver.objects.fulfil_all([(oid, serialize_error(OwnerDiedError(oid.hex(), None, ""))) for oid in lost])
        except RuntimeError:
            pass  # one completed meanwhile: it keeps its value

    def kept_by_caller(connection: Connection, ids: list[bytes], values: list[SerializedValue],
                       held: list[list[Any]]) -> list[SerializedValue]:
        """`values` with those the caller keeps (`held`) recorded by where they are; each an
        error if the caller's message was malformed."""
        if not held:
            return values
        try:
            if len(ids) != len(values):
                raise ValueError(f"{len(ids)} ids for {len(values)} values")
            values = with_remote_results(values, held)
        except ValueError as exc:
            return [serialize_error(RaySystemError(f"the caller's hand-over was malformed: {exc}"))] * len(values)
        driver.lineage.kept_by_owner(connection, held, [ids[entry[0]] for entry in held])
        return values

    def hand_over_done(connection: Connection, message_id: int | None, done: HandOverDone) -> None:
        results = kept_by_caller(connection, done.ids, done.results, done.held)
        try:
            driver.objects.fulfil_all(list(zip(done.ids, results)))
        except RuntimeError:
            pass  # a value the driver has already (the call was also handed back): the first one stands

    def hand_over_stream(connection: Connection, message_id: int | None, over: HandOverStream) -> None:
        if isinstance(over.stream, bytes) and len(over.stream) == TASK_ID_SIZE and isinstance(over.before, int) \
                and over.before >= 0:
            items = kept_by_caller(connection, over.item_ids(), over.items, over.held)
            driver.streams.adopt(over.stream, over.before, items, bool(over.finished))

    def hand_back(connection: Connection, message_id: int | None, back: HandBack) -> None:
        call, objects = back.call, driver.objects
        new = [oid for oid in call.return_ids if not objects.known(oid)]
        with lock:
            handed.get(connection, set()).difference_update(call.return_ids)  # the driver runs it now
        objects.create_pending(new, producer=call.call_id)
        count_borrow(connection, new)
        driver.actors.take_back(call, back.incarnation)

    def adopt_for(connection: Connection, message_id: int | None, asked: AdoptFor) -> None:
        """A host lost its gate connection to the worker that lent it these objects: ask that
        worker on its own session to hand them over, and answer once it has (or is gone)."""
        if message_id is None:
            return
        owner = worker_connection(asked.owner) if isinstance(asked.owner, bytes) else None
        asking = AdoptLent(asked.ids)
        try:
            if owner is None or not isinstance(asked.ids, list):
                raise ConnectionClosed("the worker that lent them is gone")
            handed = messages.request(owner, asking)
        except ConnectionClosed as exc:
            connection.reply_error(message_id, "OwnerDiedError", str(exc))
            return

        def answer(done: concurrent.futures.Future[Any]) -> None:  # on the lender's reader: never wait there
            try:
                adopted = messages.reply_of(asking, done.result())
            except Exception:  # noqa: BLE001 - gone, refused or malformed: the host reads it as gone
                connection.reply_error(message_id, "OwnerDiedError", "the worker that lent them is gone")
                return
            messages.reply(connection, message_id, Adopted(adopted.missing))

        handed.add_done_callback(answer)

    return {AskRoute: ask_route, HandOver: hand_over, HandOverDone: hand_over_done, HandOverStream: hand_over_stream,
            HandBack: hand_back, AdoptFor: adopt_for}
