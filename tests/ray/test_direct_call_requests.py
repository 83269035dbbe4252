"""The driver's side of direct calls, asked things no well-behaved worker asks: unknown actors,
values for objects never handed over, a caller that leaves, lent objects of a worker that is
gone. One layer (the session's handlers on the real driver of an embedded session), a stand-in
for the worker's connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import fray_ray
from fray_ray._private.core import runtime_slot
from fray_ray._private.core.task_spec import ActorCallSpec, Arguments
from fray_ray._private.driver.direct_session import direct_call_handlers
from fray_ray._private.messages import AdoptFor, AskRoute, HandBack, HandOver, HandOverDone
from fray_ray._private.objects import ids
from fray_ray._private.objects.serialization import serialize
from fray_ray.exceptions import ActorDiedError, OwnerDiedError
from fray_ray.remote_function import return_ids_for


class StandInConnection:
    """What the handlers use of a worker's connection: replies and close callbacks."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.on_close: list[Callable[[Any], None]] = []

    def reply(self, message_id: int, body: Any = None, buffers: Any = ()) -> None:
        self.replies.append(body)

    def reply_error(self, message_id: int, kind: str, message: str) -> None:
        self.replies.append((kind, message))

    def add_close_callback(self, callback: Callable[[Any], None]) -> None:
        self.on_close.append(callback)

    def close(self) -> None:
        for callback in self.on_close:
            callback(self)


@pytest.fixture
def handlers(cluster_session: fray_ray.RayContext) -> tuple[dict[Any, Any], list[bytes]]:
    borrowed: list[bytes] = []
    driver = runtime_slot.current()

    def count_borrow(connection: Any, object_ids: list[bytes]) -> None:  # as the session counts them
        borrowed.extend(object_ids)
        driver.objects.incref(object_ids)

    return direct_call_handlers(driver, count_borrow, lambda worker_id: None), borrowed


def _call_to(actor_id: bytes) -> ActorCallSpec:
    call_id = ids.new_task_id()
    return_ids, _ = return_ids_for(call_id, 1)
    return ActorCallSpec(actor_id, call_id, "method", Arguments.pack((), {}), tuple(return_ids), 1)


def test_a_route_to_an_unknown_actor_is_through_the_driver(handlers: Any) -> None:
    table, _ = handlers
    connection = StandInConnection()
    table[AskRoute](connection, 7, AskRoute(ids.new_actor_id(), [b"x" * 24]))
    (route,) = connection.replies
    assert route["address"] is None and route["pending"] == []


def test_a_call_handed_back_for_an_unknown_actor_fails_with_actor_died(handlers: Any) -> None:
    table, borrowed = handlers
    call = _call_to(ids.new_actor_id())
    table[HandBack](StandInConnection(), None, HandBack(call, 0))
    assert borrowed == list(call.return_ids)
    with pytest.raises(ActorDiedError):
        fray_ray.get(fray_ray.ObjectRef(call.return_ids[0]), timeout=30)


def test_values_for_objects_never_handed_over_are_dropped(handlers: Any) -> None:
    table, _ = handlers
    never = ids.new_task_id() + bytes(4)
    table[HandOverDone](StandInConnection(), None, HandOverDone([never], [serialize(1)]))
    assert not runtime_slot.current().objects.known(never)


def test_objects_of_a_caller_that_leaves_fail_with_owner_died(handlers: Any) -> None:
    table, _ = handlers
    connection = StandInConnection()
    call = _call_to(ids.new_actor_id())
    (object_id,) = call.return_ids
    table[HandOver](connection, None, HandOver([object_id], [call.call_id]))
    ref = fray_ray.ObjectRef(object_id)
    connection.close()
    with pytest.raises(OwnerDiedError):
        fray_ray.get(ref, timeout=30)


def test_lent_objects_asked_for_on_behalf_of_a_gone_worker_fail_as_its_death(handlers: Any) -> None:
    table, _ = handlers
    connection = StandInConnection()
    table[AdoptFor](connection, 3, AdoptFor(b"w" * 8, [ids.new_task_id() + bytes(4)]))
    table[AdoptFor](connection, 4, AdoptFor("not an id", "not a list"))  # type: ignore[arg-type]
    assert [kind for kind, _ in connection.replies] == ["OwnerDiedError", "OwnerDiedError"]
