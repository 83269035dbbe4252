"""The owner's records of values other processes hold: placeholders, wire entries, and the
object table's handling of them (no bytes stored, freed ones reported, lost ones failed)."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import pytest

from fray_ray._private.driver.driver_reads import DriverReads
from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectState, ObjectTable
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.remote_values import RemoteResult, split_remote, with_remote_results
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue, serialize, serialize_error

OID = b"t" * 24 + (1).to_bytes(4, "little")


def test_a_placeholder_says_where_and_how_big_and_round_trips_through_messages() -> None:
    values = [serialize(1), SerializedValue(b"", (), (b"r" * 28,), False)]
    replaced = with_remote_results(values, [[1, "127.0.0.2:9", 5 << 20]])
    assert type(replaced[1]) is RemoteResult and replaced[1].size == 5 << 20 > INLINE_LIMIT
    assert replaced[1].contained_refs == (b"r" * 28,) and replaced[0] is values[0]
    sent, held = split_remote(replaced)
    assert held == [[1, "127.0.0.2:9", 5 << 20]] and type(sent[1]) is SerializedValue and sent[1].payload == b""


@pytest.mark.parametrize("entry", [[5, "h:1", 1], [0, "", 1], [0, "h:1", -1], ["0", "h:1", 1], [0, "h:1"], "x"])
def test_malformed_entries_are_refused(entry: object) -> None:
    with pytest.raises(ValueError):
        with_remote_results([serialize(1)], [entry])


def test_the_table_records_a_held_value_without_its_bytes_and_reports_its_release() -> None:
    table = ObjectTable(ObjectStore(ObjectStoreConfig(1 << 20)))
    freed: list[tuple[str, bytes]] = []
    table.on_remote_freed = freed.extend
    table.create_pending([OID], producer=OID[:24])
    table.incref([OID])
    table.fulfil(OID, RemoteResult("127.0.0.2:9", 8 << 20))
    assert table.store.used == 0 and table.holders([OID]) == {OID: "127.0.0.2:9"}
    assert type(table.value(OID)) is RemoteResult and table.spilled_ids() == []
    assert table.held_by("127.0.0.2:9") == [OID]
    table.decref([OID])
    assert freed == [("127.0.0.2:9", OID)]


def test_a_lost_value_fails_and_a_rebuilt_one_waits_again() -> None:
    table = ObjectTable(ObjectStore(ObjectStoreConfig(1 << 20)))
    other = OID[:-4] + (2).to_bytes(4, "little")
    table.create_pending([OID, other], referenced=True)
    table.fulfil_all([(OID, RemoteResult("h:1", 1 << 20)), (other, RemoteResult("h:1", 1 << 20))])
    table.fail_lost(OID, serialize_error(RuntimeError("gone")))
    assert table.state(OID) is ObjectState.FAILED and table.is_error(OID)
    assert table.rebuild([other]) == [other] and table.state(other) is ObjectState.PENDING
    table.fulfil(other, serialize(7))  # the rerun's value
    assert table.state(other) is ObjectState.READY


def test_a_refused_holder_is_reported_unreachable_at_once() -> None:
    """Holders listen before their address is given out, so a refused connection means the
    holder's process is gone: the reader reports it at once instead of retrying for the whole
    connect timeout (here ten minutes: the test's own timeout would end a retrying read)."""
    import socket

    from fray_ray._private.objects.holder_clients import HolderClients, HolderLost
    from fray_ray._private.objects.shared_memory import BorrowedBlocks

    with socket.create_server(("127.0.0.1", 0)) as closed:
        holder = f"127.0.0.1:{closed.getsockname()[1]}"
    clients = HolderClients("token", BorrowedBlocks(), connect_timeout=600)
    reported: list[str] = []
    clients.on_unreachable = lambda gone: reported.append(gone) or True
    try:
        with pytest.raises(HolderLost):
            clients.fetch([(b"\x01" * 28, holder)])
    finally:
        clients.close()
    assert reported == [holder]


class _Ref:
    """What a get reads of an ObjectRef: its id (a real one needs a session)."""

    def __init__(self, object_id: bytes) -> None:
        self._id = object_id

    def binary(self) -> bytes:
        return self._id


DONE, PENDING = OID, OID[:-4] + (2).to_bytes(4, "little")


def _reads_of_one_done_one_pending() -> tuple[DriverReads, ObjectTable, threading.Event]:
    """A driver's reads over a table holding DONE (its first run's value) and PENDING; the event
    is set each time a get starts waiting."""
    reads = DriverReads()
    table = reads.objects = ObjectTable(ObjectStore(ObjectStoreConfig(1 << 20)))
    reads.references = LocalReferenceCounter(lambda ids: None, lambda ids: None)
    table.create_pending([DONE, PENDING], referenced=True)
    table.fulfil(DONE, serialize("first run"))
    watching = threading.Event()
    watch = table.watch

    def watched(*args: Any) -> Any:
        try:
            return watch(*args)
        finally:
            watching.set()

    table.watch = watched  # type: ignore[method-assign]
    return reads, table, watching


def test_a_get_that_waits_reads_again_an_object_rebuilt_meanwhile() -> None:
    """`get([done, pending])`: while it waits for the pending one, the done one's holder is lost
    and its task runs again; the get then waits for the rebuilt value instead of calling the
    object freed."""
    reads, table, watching = _reads_of_one_done_one_pending()
    done, pending = DONE, PENDING
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        got = pool.submit(reads.get, [_Ref(done), _Ref(pending)], 60)
        assert watching.wait(60)
        assert table.rebuild([done]) == [done]
        watching.clear()
        got.add_done_callback(lambda _: watching.set())
        table.fulfil(pending, serialize("other"))
        assert watching.wait(60)  # the get ended, or waits again
        table.fulfil(done, serialize("second run"))
        assert got.result(60) == ["second run", "other"]


def test_releases_queued_while_last_releases_are_reported_go_in_the_same_flush() -> None:
    """A value dropped with its last ref releases the refs it names from within the report."""
    reported: list[list[bytes]] = []
    inner = OID[:-4] + (3).to_bytes(4, "little")

    def on_last(ids: list[bytes]) -> None:
        reported.append(ids)
        if OID in ids:
            counter.release_later(inner)  # what the dropped value named

    counter = LocalReferenceCounter(lambda ids: None, on_last)
    counter.add(OID)
    counter.add(inner)
    counter.release_later(OID)
    counter.flush()
    assert reported == [[OID], [inner]] and counter.live_ids() == []


def test_a_get_reads_again_an_object_whose_rebuild_ends_as_it_looks() -> None:
    """The rebuilt value lands between the get reading the object as pending and checking why:
    it is still no freed object."""
    reads, table, watching = _reads_of_one_done_one_pending()
    done, pending = DONE, PENDING
    values = table.values

    def rebuilt_as_read(*args: Any, **kwargs: Any) -> Any:
        read = values(*args, **kwargs)
        if table.state(done) is ObjectState.PENDING:
            table.fulfil(done, serialize("second run"))  # the rerun ends just after the read
        return read

    table.values = rebuilt_as_read  # type: ignore[method-assign]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        got = pool.submit(reads.get, [_Ref(done), _Ref(pending)], 60)
        assert watching.wait(60)
        assert table.rebuild([done]) == [done]
        table.fulfil(pending, serialize("other"))
        assert got.result(60) == ["second run", "other"]
