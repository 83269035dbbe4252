"""The owner's handling of a holder's loss, one layer alone: the object table says what became
of each value before reads of the holder fail, and callers that report the loss at once wait
for the one that deals with it."""

from __future__ import annotations

import threading

from fray_ray._private.driver.held_lineage import HeldLineage
from fray_ray._private.objects.holder_clients import HolderClients
from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectState, ObjectTable
from fray_ray._private.objects.remote_values import RemoteResult
from fray_ray._private.objects.shared_memory import BorrowedBlocks

HOLDER = "127.0.0.2:9"
OID = b"t" * 24 + (1).to_bytes(4, "little")  # a task's first return, its lineage not kept


def test_reads_of_a_lost_holder_fail_only_once_the_table_says_why_and_reporters_wait_for_it() -> None:
    table = ObjectTable(ObjectStore(ObjectStoreConfig(1 << 20)))
    holders = HolderClients("token", BorrowedBlocks())
    lineage = HeldLineage(table, holders, resubmit=lambda spec: None, spec_of=lambda task_id: None,
                          refill=lambda stream_id, item_ids, holder, why: None, stream_running=lambda stream_id: False)
    table.create_pending([OID], referenced=True)
    table.fulfil(OID, RemoteResult(HOLDER, 8 << 20))
    failing, go_on = threading.Event(), threading.Event()
    gone_while_failing: list[bool] = []
    fail_lost = table.fail_lost

    def slow_fail_lost(object_id: bytes, error: object) -> None:
        gone_while_failing.append(holders.is_gone(HOLDER))
        failing.set()
        assert go_on.wait(60)
        fail_lost(object_id, error)  # type: ignore[arg-type]

    table.fail_lost = slow_fail_lost  # type: ignore[method-assign]
    first = threading.Thread(target=lineage.holder_gone, args=(HOLDER,))  # its connection closed
    first.start()
    assert failing.wait(60)
    second_done = threading.Event()
    second = threading.Thread(target=lambda: (lineage.holder_gone(HOLDER), second_done.set()))  # a reader's report
    second.start()
    assert not second_done.wait(0.3), "a second report returned before the table said what became of the value"
    go_on.set()
    first.join(60)
    second.join(60)
    assert second_done.is_set()
    assert gone_while_failing == [False]  # reads went on to the holder (and found it gone) until then
    assert holders.is_gone(HOLDER) and table.state(OID) is ObjectState.FAILED
