"""The session's side of workers' direct actor calls (`direct_routes.py`, and in a worker
`workers/direct_calls.py`): routes asked for, results handed over, calls handed back."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fray_ray._private import messages
from fray_ray._private.messages import AskRoute, HandBack, HandOver, HandOverDone, Route
from fray_ray._private.stream.protocol import Connection

if TYPE_CHECKING:
    from fray_ray._private.driver.actors import ActorManager
    from fray_ray._private.objects.object_table import ObjectTable

class DirectCallDriver(Protocol):
    """The driver's parts these handlers reach (the session's `SessionDriver` has them)."""

    objects: ObjectTable
    actors: ActorManager


#: Counts one ref of the connection's worker to each object (the session's borrow table).
CountBorrow = Callable[[Connection, list[bytes]], None]


def direct_call_handlers(driver: DirectCallDriver, count_borrow: CountBorrow) -> dict[Any, Any]:
    """The session's handlers for what workers say about their direct calls (the driver's
    parts are looked up as messages come: the session exists before them)."""

    def ask_route(connection: Connection, message_id: int | None, ask: AskRoute) -> None:
        if message_id is None:
            return

        def answer(route: Route) -> None:
            messages.reply(connection, message_id, route)

        driver.actors.route(ask.actor, ask.through_driver, answer)

    def hand_over(connection: Connection, message_id: int | None, over: HandOver) -> None:
        objects = driver.objects
        new = [(oid, producer) for oid, producer in zip(over.ids, over.producers) if not objects.known(oid)]
        for oid, producer in new:
            objects.create_pending([oid], producer=producer)
        count_borrow(connection, [oid for oid, _ in new])

    def hand_over_done(connection: Connection, message_id: int | None, done: HandOverDone) -> None:
        try:
            driver.objects.fulfil_all(list(zip(done.ids, done.results)))
        except RuntimeError:
            pass  # a value the driver has already (the call was also handed back): the first one stands

    def hand_back(connection: Connection, message_id: int | None, back: HandBack) -> None:
        call, objects = back.call, driver.objects
        new = [oid for oid in call.return_ids if not objects.known(oid)]
        objects.create_pending(new, producer=call.call_id)
        count_borrow(connection, new)
        driver.actors.take_back(call, back.incarnation)

    return {AskRoute: ask_route, HandOver: hand_over, HandOverDone: hand_over_done, HandBack: hand_back}
