"""Refs passed between processes on direct calls stay counted while any process holds them,
however late the driver hears of them: real worker processes on the embedded cluster.

A worker's notices to its driver (`Borrow`, `HandOver`) and its direct calls travel on
different connections. The race tests hold one kind of notice back at the driver, as a slow
link would, and check that the object it names is not freed under the process that holds it
(`workers/driver_notices.py`); the others check that objects an actor's answers or items name
are freed once nobody holds them, and what the driver is told. The unit tests at the end
check `DriverNotices` alone.
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private.core import runtime_slot
from fray_ray._private.messages import Borrow
from fray_ray._private.stream.protocol import ConnectionClosed
from fray_ray._private.workers.driver_notices import DriverNotices

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from held_frames import held_back  # noqa: E402
from latches import Latch  # noqa: E402
from waiting import wait_for  # noqa: E402

#: How long a held-back notice waits for the caller's task to end before it is let go: the
#: task ends within it only if the driver was not asked to confirm the notice first.
HOLD_S = 2.0


@pytest.fixture(scope="module")
def session(cluster_session: fray_ray.RayContext) -> fray_ray.RayContext:
    return cluster_session


def _direct_sent() -> int:
    direct = runtime_slot.current().direct
    return 0 if direct is None else direct.sent


@fray_ray.remote
class Keeper:
    def __init__(self) -> None:
        self.refs: list[Any] = []

    def keep(self, refs: list[Any]) -> int:
        self.refs = refs
        return len(refs)

    def read(self) -> Any:
        return fray_ray.get(self.refs[0], timeout=60)

    def kept(self) -> list[Any]:
        return self.refs

    def size(self, refs: list[Any]) -> int:
        return len(refs)


@fray_ray.remote
class Producer:
    def make(self) -> str:
        return "made"


@fray_ray.remote
def pass_a_put_on(keeper: Any) -> int:
    ref = fray_ray.put("put")
    assert fray_ray.get(keeper.keep.remote([ref])) == 1
    del ref  # the keeper's is the last ref
    return _direct_sent()


@fray_ray.remote
def pass_a_result_on(producer: Any, keeper: Any) -> int:
    fray_ray.get(keeper.keep.remote([]))  # the way to the keeper is known before the hand-over below
    made = producer.make.remote()  # held in this process until a ref to it leaves
    fray_ray.wait([made])
    assert fray_ray.get(keeper.keep.remote([made])) == 1
    del made
    return _direct_sent()


@fray_ray.remote
def hand_refs_to(keeper: Any) -> tuple[int, int]:
    refs = [fray_ray.put(index) for index in range(3)]
    return fray_ray.get(keeper.size.remote(refs)), fray_ray.get(keeper.keep.remote(refs))


def _ready_keeper() -> tuple[Any, bytes]:
    keeper = Keeper.remote()
    assert fray_ray.get(keeper.keep.remote([])) == 0  # running: workers call it directly
    return keeper, keeper._actor_id.binary()


def test_a_ref_an_actor_took_outlives_the_callers_release_when_its_borrow_is_late(session: fray_ray.RayContext) -> None:
    keeper, keeper_id = _ready_keeper()
    with held_back("borrow", from_worker=keeper_id) as (arrived, let_go):
        task = pass_a_put_on.remote(keeper)
        wait_for(arrived.is_set, what="the keeper's borrow at the driver")
        fray_ray.wait([task], timeout=HOLD_S)  # ends only if the keeper answered before its borrow counted
        let_go.set()
        assert fray_ray.get(task, timeout=60) >= 1, "the call went through the driver"
    assert fray_ray.get(keeper.read.remote(), timeout=60) == "put"


def test_a_kept_result_passed_on_is_known_to_the_driver_before_the_callee_borrows_it(
        session: fray_ray.RayContext) -> None:
    keeper, _ = _ready_keeper()
    producer = Producer.remote()
    fray_ray.get(producer.make.remote())
    assert fray_ray.get(pass_a_result_on.remote(producer, keeper), timeout=60) >= 3, "the calls went through the driver"
    with held_back("hand_over") as (arrived, let_go):  # the keeper borrows it from the task's process so far
        answer = keeper.kept.remote()  # the ref leaves the keeper: the task's process hands it over
        wait_for(arrived.is_set, what="the lender's hand-over at the driver")
        fray_ray.wait([answer], timeout=HOLD_S)  # the keeper borrows meanwhile, unless it waited
        let_go.set()
        (ref,) = fray_ray.get(answer, timeout=60)
    assert fray_ray.get(ref, timeout=60) == "made"
    assert fray_ray.get(keeper.read.remote(), timeout=60) == "made"


@fray_ray.remote
def read_an_unknown_object() -> str:
    ref = fray_ray.ObjectRef(b"\x07" * 28)  # an id the driver never made
    try:
        fray_ray.get(ref, timeout=60)
    except fray_ray.exceptions.ObjectLostError as exc:  # raised as the type it is, in the worker
        return f"{type(exc).__name__} {exc.object_ref_hex}"
    return "read"


def test_a_worker_reading_an_object_the_driver_does_not_know_gets_object_freed_error(session: fray_ray.RayContext) -> None:
    assert fray_ray.get(read_an_unknown_object.remote(), timeout=60) == f"ObjectFreedError {'07' * 28}"


class _SessionStandIn:
    """Answers every request at once, as a driver that has handled all before it (or, `closed`,
    as one that went away after the notices); records them."""

    def __init__(self, closed: bool = False) -> None:
        self.asked: list[str] = []
        self.told: list[str] = []
        self.closed = closed

    def notify(self, method: str, body: Any, buffers: Any, **_: Any) -> None:
        self.told.append(method)

    def request(self, method: str, body: Any, buffers: Any) -> concurrent.futures.Future:
        self.asked.append(method)
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self.closed:
            future.set_exception(ConnectionClosed("gone"))
        else:
            future.set_result(({}, []))
        return future


def test_notices_are_confirmed_with_one_sync_and_only_when_some_went_out() -> None:
    session = _SessionStandIn()
    notices = DriverNotices(session)  # type: ignore[arg-type]
    notices.confirm()
    assert session.asked == []  # nothing to confirm: no round trip
    notices.tell(Borrow([b"\x01" * 28]))
    notices.tell(Borrow([b"\x02" * 28]))
    notices.confirm()
    notices.confirm()
    assert session.told == ["borrow", "borrow"]
    assert session.asked == ["sync"] and notices.unconfirmed() == 0


def test_confirming_with_the_driver_gone_returns() -> None:
    session = _SessionStandIn(closed=True)
    notices = DriverNotices(session)  # type: ignore[arg-type]
    notices.tell(Borrow([b"\x01" * 28]))
    notices.confirm()  # nobody counts refs any more: nothing to wait for
    assert session.asked == ["sync"]


@fray_ray.remote
class PutSource:
    def make(self) -> list[Any]:
        return [fray_ray.put(b"x" * (1 << 20))]  # large: kept in this process, its only ref in the answer

    def ping(self) -> None:
        """Releases the refs the last call dropped before it answers: an API call sends what was
        released first, on the connection its answer to the driver takes too."""
        fray_ray.put(None)


@fray_ray.remote
def take_and_drop(source: Any, times: int) -> list[str]:
    fray_ray.get(source.make.remote())  # the way to the source is known: the calls below go straight there
    made = []
    for _ in range(times):
        (ref,) = fray_ray.get(source.make.remote())
        assert len(fray_ray.get(ref)) == 1 << 20
        made.append(ref.hex())
    return made


def test_objects_an_answer_named_are_freed_once_their_caller_drops_them(session: fray_ray.RayContext) -> None:
    objects = runtime_slot.current().objects
    source = PutSource.remote()  # lives on: its process could keep the objects
    made = fray_ray.get(take_and_drop.remote(source, 20), timeout=60)
    assert len(set(made)) == 20
    # The host kept each until its caller counted it; nothing keeps them once the caller is done,
    # though neither makes another call that would send what it released last.
    wait_for(lambda: not any(objects.known(bytes.fromhex(oid)) for oid in made), timeout=30,
             what="the objects the answers named to be freed")
    assert fray_ray.get(source.ping.remote(), timeout=60) is None


@fray_ray.remote
def take_one(source: Any) -> tuple[int, int]:
    (ref,) = fray_ray.get(source.make.remote())
    return len(fray_ray.get(ref)), _direct_sent()


def test_an_idle_actor_releases_what_its_last_call_held(session: fray_ray.RayContext) -> None:
    objects = runtime_slot.current().objects
    source = PutSource.remote()
    (ref,) = fray_ray.get(source.make.remote(), timeout=60)  # the driver's own call
    made = ref.binary()
    del ref
    wait_for(lambda: not objects.known(made), timeout=30, what="the object the idle actor made to be freed")


def test_an_answer_keeps_what_it_names_until_the_caller_is_counted(session: fray_ray.RayContext) -> None:
    source = PutSource.remote()
    fray_ray.get(source.make.remote())
    objects = runtime_slot.current().objects
    with held_back("borrow", naming=lambda oid: bool(objects.holders([oid]))) as (arrived, let_go):  # of a put it holds
        task = take_one.remote(source)
        wait_for(arrived.is_set, what="the caller's borrow at the driver")  # the answer reached the caller
        fray_ray.get(source.ping.remote(), timeout=60)  # the source's own ref goes: only its answer's keeps it
        let_go.set()
        assert fray_ray.get(task, timeout=60) == (1 << 20, 1)


@fray_ray.remote
class PutItems:
    def items(self, n: int) -> Iterator[Any]:
        for index in range(n):
            yield fray_ray.put(bytes([index]) * (1 << 20))  # large: kept in this process

    def ping(self) -> None:
        fray_ray.put(None)  # as PutSource.ping


@fray_ray.remote
def read_items_late(source: Any, n: int) -> list[int]:
    refs = list(source.items.remote(n))  # each item names an object the source made
    fray_ray.get(source.ping.remote())  # the source's own refs to them are gone now
    return [fray_ray.get(fray_ray.get(ref))[0] for ref in refs]


def test_items_of_a_direct_generator_keep_what_they_name_until_read(session: fray_ray.RayContext) -> None:
    source = PutItems.remote()
    fray_ray.get(source.ping.remote())
    assert fray_ray.get(read_items_late.remote(source, 4), timeout=60) == [0, 1, 2, 3]


def test_an_actor_tells_the_driver_only_of_the_refs_it_still_holds_when_it_answers(session: fray_ray.RayContext) -> None:
    """As a Ray borrower reports what it still holds as its task ends: refs from a call's
    arguments that die before the answer cost the driver nothing."""
    keeper, keeper_id = _ready_keeper()
    handlers = runtime_slot.current().session._handlers
    seen: list[tuple[str, list[bytes]]] = []
    originals = {kind: handlers[kind] for kind in ("borrow", "release")}

    def counting(kind: str) -> Any:
        def handle(connection: Any, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
            if connection.peer_info.get("id") == keeper_id:
                seen.append((kind, list(body["ids"])))
            originals[kind](connection, message_id, body, buffers)
        return handle

    handlers.update({kind: counting(kind) for kind in originals})
    try:
        assert fray_ray.get(hand_refs_to.remote(keeper), timeout=60) == (3, 3)  # `size` drops them, `keep` keeps them
    finally:
        handlers.update(originals)
    assert [kind for kind, _ in seen] == ["borrow"] and len(seen[0][1]) == 3, seen


@fray_ray.remote
class LateSource:
    def __init__(self) -> None:
        self.made: str | None = None

    def make_after(self, started: Any, go: Any) -> list[Any]:
        fray_ray.get(started.open.remote())
        fray_ray.get(go.wait.remote())
        ref = fray_ray.put(b"x" * (1 << 20))  # large: kept in this process, its only ref in the answer
        self.made = ref.hex()
        return [ref]

    def made_last(self) -> str | None:
        return self.made


@fray_ray.remote
def cancel_while_it_runs(source: Any, started: Any, go: Any) -> str | None:
    fray_ray.get(source.made_last.remote())  # the way to the source is known: the call below goes straight there
    ref = source.make_after.remote(started, go)
    fray_ray.get(started.wait.remote())
    fray_ray.cancel(ref)  # a running method is not interrupted: it answers after this
    fray_ray.get(go.open.remote())
    return fray_ray.get(source.made_last.remote())  # runs once make_after has answered


def test_what_the_answer_of_a_cancelled_call_names_is_freed(session: fray_ray.RayContext) -> None:
    objects = runtime_slot.current().objects
    source, started, go = LateSource.remote(), Latch.remote(), Latch.remote()
    made = fray_ray.get(cancel_while_it_runs.remote(source, started, go), timeout=60)
    assert made is not None
    wait_for(lambda: not objects.known(bytes.fromhex(made)), timeout=30,
             what="the object the cancelled call's answer named to be freed")
