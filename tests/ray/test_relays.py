"""A large object many hosts read leaves its origin at most twice: from the second host on, each
reader keeps a copy and serves it onward (`objects/relays.py`). The plan's rules, a relay's
waiting readers, and the real thing on simulated hosts: fan-out correctness, the origin's bytes
bounded, and readers sent elsewhere when a relay loses its copy or its process."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.objects.held_objects import HeldObjects
from fray_ray._private.objects.relays import FROM_ORIGIN, RelayPlan, Route, route_reads
from fray_ray._private.objects.remote_values import RemoteResult
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray.cluster_utils import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import wait_for  # noqa: E402

BIG = 1 << 30
OID = b"o" * 28


def plan() -> RelayPlan:
    return RelayPlan(min_size=1000, origin_fanout=2)


def route(relays: RelayPlan, host: str, relay: str | None, failed: tuple[str, ...] = (), size: int = BIG,
          oid: bytes = OID) -> Route:
    return relays.route(oid, size, origin_host="origin", reader_host=host, reader_relay=relay, failed=failed)


# ---- the plan ---------------------------------------------------------------------------------


def test_small_objects_and_readers_on_the_origins_host_always_read_the_origin() -> None:
    relays = plan()
    for reader in range(5):
        assert route(relays, f"h{reader}", f"r{reader}", size=999) == FROM_ORIGIN
        assert route(relays, "origin", f"s{reader}") == FROM_ORIGIN
    assert relays.relays_of(OID) == []


def test_the_first_reader_keeps_nothing_the_second_keeps_a_copy_and_later_ones_read_copies() -> None:
    relays = plan()
    assert route(relays, "h1", "r1") == Route(None, keep=False)  # most objects have one reader
    assert route(relays, "h2", "r2") == Route(None, keep=True)  # the origin's second (and last) transfer
    later = [route(relays, f"h{n}", f"r{n}") for n in range(3, 9)]
    assert all(r.source is not None and r.keep for r in later)
    assert set(relays.relays_of(OID)) == {f"r{n}" for n in range(2, 9)}
    # A tree, not a chain: each copy serves two readers before a deeper copy is used.
    assert [r.source for r in later] == ["r2", "r2", "r3", "r4", "r3", "r4"]


def test_a_reader_on_a_relays_host_maps_that_copy_and_keeps_none() -> None:
    relays = plan()
    route(relays, "h1", "r1")
    assert route(relays, "h2", "r2").keep
    assert route(relays, "h2", "r2b") == Route("r2", keep=False)
    assert relays.relays_of(OID) == ["r2"]


def test_a_reader_that_cannot_serve_reads_the_origin_and_counts_for_nothing() -> None:
    relays = plan()
    assert route(relays, "h1", None) == FROM_ORIGIN
    assert route(relays, "h2", "r2") == Route(None, keep=False)  # still the first that can relay


def test_a_failed_relay_is_dropped_and_its_copy_still_released_on_free() -> None:
    relays = plan()
    route(relays, "h1", "r1")
    route(relays, "h2", "r2")
    assert route(relays, "h3", "r3").source == "r2"
    again = route(relays, "h3", "r3", failed=("r2",))
    assert again == Route(None, keep=True)  # no other copy: the origin, which has sent one only
    assert relays.relays_of(OID) == ["r3"]
    assert route(relays, "h4", "r4").source == "r3"
    released = relays.forget([OID])
    assert sorted(released) == [("r2", OID), ("r3", OID), ("r4", OID)]
    assert relays.forget([OID]) == []


def test_with_every_relay_gone_readers_go_back_to_the_origin() -> None:
    relays = plan()
    route(relays, "h1", "r1")
    route(relays, "h2", "r2")
    route(relays, "h3", "r3")
    relays.relay_gone("r2")
    relays.relay_gone("r3")
    assert route(relays, "h4", "r4") == Route(None, keep=True)
    assert relays.forget([OID]) == [("r4", OID)]


def test_route_reads_turns_answers_into_fetches_from_copies() -> None:
    relays = plan()
    own = SerializedValue(b"p", (b"x" * 2000,), (), False)
    held = RemoteResult("holder:1", 5000)
    small = SerializedValue(b"tiny", (), (), False)
    ids = [b"a" * 28, b"b" * 28, b"c" * 28]
    hosts = {"holder:1": "hostA"}

    def answer(host: str, relay: str) -> Any:
        return route_reads(relays, ids, [own, held, small], own_host="driver", host_of=hosts.get,
                           reader_host=host, reader_relay=relay)

    first = answer("h1", "r1")
    assert first.values[0] is own and first.held == [[1, "holder:1", 5000]] and first.copies == [] and first.keep == []
    second = answer("h2", "r2")
    assert second.keep == [ids[0], ids[1]] and second.copies == []
    third = answer("h3", "r3")
    assert third.copies == [ids[0], ids[1]] and third.keep == [ids[0], ids[1]] and third.values[0].size == 0
    assert [entry[1] for entry in third.held] == ["r2", "r2"] and third.values[2] is small
    on_holders_host = answer("hostA", "r9")  # the holder's own value comes from the holder itself
    assert [entry for entry in on_holders_host.held if entry[0] == 1] == [[1, "holder:1", 5000]]
    assert on_holders_host.keep == [ids[0]]


# ---- a relay's waiting readers ----------------------------------------------------------------


def value(fill: int) -> SerializedValue:
    return SerializedValue(b"payload", (bytes([fill]) * 4096,), (), False)


@pytest.fixture
def held() -> Iterator[HeldObjects]:
    objects = HeldObjects(1 << 20, shared_dir=None, unexpected_wait=0.2)
    yield objects
    objects.close()


def test_a_reader_waits_for_an_expected_copy_and_is_answered_when_it_arrives(held: HeldObjects) -> None:
    answered = threading.Event()
    held.expect([OID])
    held.wait_for([OID], answered.set)
    assert not answered.wait(0.5)  # past the unexpected wait: expected copies are waited for
    held.hold(OID, value(1))
    assert answered.wait(10)
    assert held.values([OID])[0] is not None


def test_an_abandoned_copy_answers_its_readers_at_once(held: HeldObjects) -> None:
    answered = threading.Event()
    held.expect([OID])
    held.wait_for([OID], answered.set)
    held.abandon([OID])
    assert answered.wait(10)
    assert held.values([OID]) == [None]


def test_a_copy_never_expected_is_answered_as_missing_after_a_while(held: HeldObjects) -> None:
    answered = threading.Event()
    held.wait_for([OID], answered.set)
    assert answered.wait(10)


def test_a_released_copy_answers_at_once(held: HeldObjects) -> None:
    held.hold(OID, value(3))
    held.release([OID])
    answered: list[bool] = []
    held.wait_for([OID], lambda: answered.append(True))
    assert answered == [True] and held.values([OID]) == [None]


def test_a_copy_already_held_answers_at_once(held: HeldObjects) -> None:
    held.hold(OID, value(2))
    answered: list[bool] = []
    held.wait_for([OID], lambda: answered.append(True))
    assert answered == [True]


# ---- on simulated hosts ---------------------------------------------------------------------

SIZE = 16 << 20  # above RELAY_MIN
READERS = 4


@pytest.fixture
def hosts(own_cluster_env: None, fresh_shutdown: None) -> Iterator[Cluster]:
    """A head, an origin host and `READERS` reader hosts, each its own shared-memory directory."""
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        made.add_node(num_cpus=1, resources={"origin": 1})
        for index in range(READERS):
            made.add_node(num_cpus=1, resources={f"reader_{index}": 1})
        made.connect()
        yield made
    finally:
        made.shutdown()


@fray_ray.remote(num_cpus=0)
class Host:
    """An actor pinned to one host: it makes, reads or drops large objects and says what it served."""

    def make(self, fill: int) -> list[Any]:
        return [fray_ray.put(np.full(SIZE, fill, np.uint8))]

    def read(self, box: list[Any]) -> int:
        return int(fray_ray.get(box[0])[::4096].sum())

    def served(self) -> int:
        from fray_ray._private.workers.held_results import WORKER_HOLDER

        held = WORKER_HOLDER.held
        return 0 if held is None else held.served_bytes

    def holds(self, object_id: bytes) -> bool:
        from fray_ray._private.workers.held_results import WORKER_HOLDER

        held = WORKER_HOLDER.held
        return held is not None and held.holds(object_id)

    def drop_copy(self, box: list[Any]) -> bool:
        from fray_ray._private.workers.held_results import WORKER_HOLDER

        held = WORKER_HOLDER.held
        had = held is not None and held.holds(box[0].binary())
        if held is not None:
            held.release([box[0].binary()])
        return had

    def address(self) -> str | None:
        from fray_ray._private.workers.held_results import WORKER_HOLDER

        return WORKER_HOLDER.address


def on(resource: str) -> Any:
    return Host.options(resources={resource: 0.01}).remote()


def test_a_broadcast_leaves_the_origin_at_most_twice_and_every_host_reads_it(hosts: Cluster) -> None:
    origin = on("origin")
    readers = [on(f"reader_{index}") for index in range(READERS)]
    (ref,) = fray_ray.get(origin.make.remote(3))
    expected = 3 * (SIZE // 4096)
    assert fray_ray.get([reader.read.remote([ref]) for reader in readers]) == [expected] * READERS
    sent = fray_ray.get(origin.served.remote())
    assert SIZE <= sent <= 2 * SIZE + 4096  # two transfers at most (a pickle header each)
    relayed = fray_ray.get([reader.served.remote() for reader in readers])
    assert sum(relayed) >= (READERS - 2) * SIZE  # the other hosts were served by copies
    copies = runtime_state.current().relays.relays_of(ref.binary())
    assert len(copies) >= 2

    object_id = ref.binary()
    del ref  # freed: the copies are released where they are kept
    wait_for(lambda: not any(fray_ray.get([reader.holds.remote(object_id) for reader in readers])),
             what="the copies to be released")
    assert runtime_state.current().relays.relays_of(object_id) == []


def test_a_drivers_put_is_spread_the_same_way(hosts: Cluster) -> None:
    readers = [on(f"reader_{index}") for index in range(READERS)]
    ref = fray_ray.put(np.full(SIZE, 5, np.uint8))
    assert fray_ray.get([reader.read.remote([ref]) for reader in readers]) == [5 * (SIZE // 4096)] * READERS
    relayed = fray_ray.get([reader.served.remote() for reader in readers])
    assert sum(relayed) >= (READERS - 2) * SIZE


def test_a_relay_that_lost_its_copy_sends_its_reader_elsewhere(hosts: Cluster) -> None:
    origin = on("origin")
    first, second, third = (on(f"reader_{index}") for index in range(3))
    (ref,) = fray_ray.get(origin.make.remote(7))
    expected = 7 * (SIZE // 4096)
    assert fray_ray.get(first.read.remote([ref])) == expected
    assert fray_ray.get(second.read.remote([ref])) == expected  # keeps a copy
    relays = runtime_state.current().relays
    assert relays.relays_of(ref.binary()) == [ray_address(second)]
    assert fray_ray.get(second.drop_copy.remote([ref]))  # gone behind the owner's back
    assert fray_ray.get(third.read.remote([ref])) == expected  # sent to the copy, then elsewhere
    assert relays.relays_of(ref.binary()) == [ray_address(third)]
    assert fray_ray.get(origin.served.remote()) <= 3 * SIZE + 4096


def ray_address(host: Any) -> str:
    """Where `host` serves the copies it keeps."""
    return fray_ray.get(host.address.remote())


def test_a_relay_whose_process_ended_is_forgotten_and_readers_go_elsewhere(hosts: Cluster) -> None:
    origin = on("origin")
    readers = [on(f"reader_{index}") for index in range(READERS)]
    (ref,) = fray_ray.get(origin.make.remote(9))
    expected = 9 * (SIZE // 4096)
    for reader in readers[:3]:
        assert fray_ray.get(reader.read.remote([ref])) == expected
    relays = runtime_state.current().relays
    kept = relays.relays_of(ref.binary())
    assert len(kept) == 2  # the second and third readers keep copies
    for reader in readers[1:3]:
        fray_ray.kill(reader)
    wait_for(lambda: relays.relays_of(ref.binary()) == [], what="the driver to forget the dead relays")
    assert fray_ray.get(readers[3].read.remote([ref])) == expected
    assert fray_ray.get(origin.served.remote()) <= 3 * SIZE + 4096  # the origin served again, as it must


def test_waiting_fetches_beyond_the_limit_are_answered_at_once(held: HeldObjects, monkeypatch: pytest.MonkeyPatch) -> None:
    from fray_ray._private.objects import held_objects

    monkeypatch.setattr(held_objects, "MAX_WAITERS", 2)
    held.expect([OID])
    answered: list[int] = []
    for index in range(3):
        held.wait_for([OID], lambda index=index: answered.append(index))
    assert answered == [2]  # the first two wait for the copy; the third is not kept waiting
    held.abandon([OID])
    wait_for(lambda: sorted(answered) == [0, 1, 2], what="the waiting fetches to be answered")
