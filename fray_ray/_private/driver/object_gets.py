"""The session's answer to a worker's `get`: once every object asked for is done (or one has
failed), the values it may have and where to fetch the rest.

A value the driver stores goes in the answer (as a shared-memory file name to a worker on the
driver's host). A value another process holds is fetched by the worker from its holder; a large
one that many hosts read, from whichever host already has a copy (`objects/relays.py`): the answer
names the address to fetch from, which of those are copies, and which values the worker is to
keep a copy of and serve onward.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from fray_ray._private import messages
from fray_ray._private.messages import GetObjects, Objects
from fray_ray._private.objects.relays import route_reads
from fray_ray._private.stream.protocol import Connection

if TYPE_CHECKING:
    from fray_ray._private.driver.held_lineage import HeldLineage
    from fray_ray._private.driver.scheduler import TaskScheduler
    from fray_ray._private.objects.object_table import ObjectTable
    from fray_ray._private.objects.relays import RelayPlan
    from fray_ray._private.objects.shared_memory import LentBlocks


class GetDriver(Protocol):
    """The driver's parts a get reaches (the session's `SessionDriver` has them)."""

    objects: ObjectTable
    scheduler: TaskScheduler
    lineage: HeldLineage
    relays: RelayPlan
    lent_blocks: LentBlocks
    shared_memory_identity: str


def answer_get(driver: GetDriver, connection: Connection, message_id: int | None, get: GetObjects) -> None:
    """Answer `get` from the worker on `connection` now or, if some objects are pending, once
    they are done (the asking task counts as blocked meanwhile: its executor may take other work)."""
    assert message_id is not None
    object_ids = get.ids
    task_id = get.task
    objects = driver.objects
    relay = _relay_of(driver, connection, get.relay)
    state: dict[str, Any] = {"remaining": set(), "replied": False}
    lock = threading.Lock()

    def reply() -> None:
        ids = []
        found = []
        for object_id in object_ids:
            value = objects.value(object_id)
            if value is None:
                continue
            ids.append(object_id)
            found.append(value)
        reads = route_reads(driver.relays, ids, found, own_host=driver.shared_memory_identity,
                            host_of=driver.lineage.host_of, reader_host=connection.peer_info.get("host", ""),
                            reader_relay=relay, failed=get.failed)
        found = reads.values
        shared: list[list[Any]] = []
        if get.shared and connection.peer_info.get("shared_memory"):
            found, lent = driver.lent_blocks.lend(connection, found)
            shared = [entry.to_wire() for entry in lent]
        messages.reply(connection, message_id, Objects(ids, found, shared, reads.held, reads.copies, reads.keep))

    def done(object_id: bytes) -> None:
        value = objects.value(object_id)
        with lock:
            if state["replied"]:
                return
            state["remaining"].discard(object_id)
            failed = value is not None and value.is_error
            if state["remaining"] and not failed:
                return
            state["replied"] = True
        reply()
        driver.scheduler.task_unblocked(task_id)

    missing = [oid for oid in object_ids if not objects.is_done(oid)]
    unknown = [oid for oid in missing if not objects.known(oid)]
    if unknown:
        # As the driver's own get says it: the asker raises ObjectFreedError for this id.
        connection.reply_error(message_id, "ObjectFreedError", unknown[0].hex())
        return
    if not missing or any((v := objects.value(oid)) is not None and v.is_error for oid in object_ids):
        reply()
        return
    with lock:
        state["remaining"] = set(missing)
    driver.scheduler.task_blocked(task_id)
    for object_id in missing:
        objects.add_done_callback(object_id, done)


def _relay_of(driver: GetDriver, connection: Connection, relay: Any) -> str | None:
    """The address the worker on `connection` serves copies at (None: it serves none); the
    copies it keeps are forgotten when it goes."""
    if not isinstance(relay, str) or not relay:
        return None
    if connection.peer_info.get("relay") != relay:
        connection.peer_info["relay"] = relay
        connection.add_close_callback(lambda _closed: driver.relays.relay_gone(relay))
    return relay
