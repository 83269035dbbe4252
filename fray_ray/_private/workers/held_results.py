"""A worker process's part in keeping objects where they are made.

A task's result larger than `INLINE_LIMIT` stays in the executor that made it (`HeldObjects`,
served by a `HolderServer` this process starts on first use, at its host's address); its
`task_done` says only where and how big. When this process reads an object another process
holds, the driver answers with the holder's address and the value is fetched from there
directly (`HolderClients`), or read in place if this process is the holder. A large object many
hosts read may be fetched from another reader's copy instead, and this process may be asked to
keep the copy it fetched and serve it onward (`objects/relays.py`): its server starts at its
first read, so that the driver can name it.

The store's memory limit is `FRAY_RAY_HELD_OBJECT_MEMORY` (bytes) if set, else the session's
`object_store_memory`; beyond it values are spilled to a file of this process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from fray_ray._private.objects.held_objects import HeldObjects, HolderServer
from fray_ray._private.objects.holder_clients import HolderClients
from fray_ray._private.objects.ids import new_put_id
from fray_ray._private.objects.remote_values import held_entry
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue
from fray_ray._private.objects.shared_memory import WORKER_BORROWS, SharedArrivals, shared_memory_dir

logger = logging.getLogger(__name__)

#: Overrides the memory a worker keeps its held values in (bytes).
HELD_MEMORY_ENV = "FRAY_RAY_HELD_OBJECT_MEMORY"
DEFAULT_HELD_MEMORY = 1 << 30
#: How long an actor leaving on purpose waits for the driver to take the values it holds.
HAND_OFF_TIMEOUT_S = 300.0


def _has_large(values: Sequence[SerializedValue]) -> bool:
    """Whether any of `values` is a value larger than `INLINE_LIMIT` (not an error): one this
    process would keep. Most answers carry none, and then skip the holder altogether."""
    for value in values:
        if value.size > INLINE_LIMIT and not value.is_error:
            return True
    return False


class WorkerHolder:
    """This process's held values, their server and its streams to other holders. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards everything below
        self._token = ""
        self._limit = DEFAULT_HELD_MEMORY
        self._held: HeldObjects | None = None
        self._server: HolderServer | None = None
        self._clients: HolderClients | None = None
        self._report_unreachable: Callable[[str], bool] | None = None

    def configure(self, token: str, object_store_memory: int, report_unreachable: Callable[[str], bool]) -> None:
        """Called as the session opens (a worker process has one session at a time);
        `report_unreachable(holder)` tells the driver of a holder that does not answer."""
        with self._lock:
            self._report_unreachable = report_unreachable
            self._token = token
            self._limit = object_store_memory if object_store_memory > 0 else DEFAULT_HELD_MEMORY

    @property
    def held(self) -> HeldObjects | None:
        return self._held

    def holds_values(self) -> bool:
        held = self._held
        return held is not None and bool(held.held())

    @property
    def address(self) -> str | None:
        server = self._server
        return server.address if server is not None else None

    def _started(self) -> HolderServer:
        with self._lock:
            if self._server is None:
                if not self._token:
                    raise RuntimeError("this worker has no session to hold values for")
                directory = shared_memory_dir()
                limit = int(os.environ.get(HELD_MEMORY_ENV) or self._limit)
                self._held = HeldObjects(limit, shared_dir=directory, session_name=f"held-{os.getpid()}")
                bind = os.environ.get("IRIS_BIND_HOST") or "127.0.0.1"
                advertise = os.environ.get("IRIS_ADVERTISE_HOST") or bind
                self._server = HolderServer(self._held, token=self._token, bind_host=bind,
                                            advertise_host=advertise, shared_dir=directory).start()
            return self._server

    def keep_large(self, values: Sequence[SerializedValue], returns: Sequence[bytes]) -> tuple[list[SerializedValue], list[list[Any]]]:
        """`values` (a task's results, one per id of `returns`) with each large one kept here
        and sent as an empty value, and the entries that say where those are."""
        sent = list(values)
        held: list[list[Any]] = []
        if len(returns) != len(sent) or not _has_large(sent):
            return sent, held
        for index, (object_id, value) in enumerate(zip(returns, sent)):
            if value.is_error or value.size <= INLINE_LIMIT:
                continue
            try:
                server = self._started()
                if not server.held.holds(object_id):  # a replay by this process: the first stands
                    server.held.hold(object_id, value)
            except Exception as exc:  # noqa: BLE001 - the value still goes to the driver as before
                logger.warning("cannot keep result %s here (%s); it goes to the driver", object_id.hex(), exc)
                continue
            held.append(held_entry(index, server.address, value.size))
            sent[index] = SerializedValue(b"", (), value.contained_refs, False)
        return sent, held

    def keep_put(self, value: SerializedValue) -> tuple[bytes, list[list[Any]]] | None:
        """Keep a large `ray.put` value here under a new put id: (id, where), or None to send
        it to the driver (small, or this process cannot hold values)."""
        if value.size <= INLINE_LIMIT or not self._token:
            return None
        object_id = new_put_id()
        try:
            server = self._started()
            server.held.hold(object_id, value)
        except Exception as exc:  # noqa: BLE001 - ObjectStoreFullError here: the driver may have room
            logger.warning("cannot keep a put value here (%s); it goes to the driver", exc)
            return None
        return object_id, [held_entry(0, server.address, value.size)]

    def fetch(self, wanted: Sequence[tuple[bytes, str]], copies: Collection[bytes] = ()) -> dict[bytes, SerializedValue]:
        """The values of (object id, holder address) pairs, each from its holder (`copies`:
        ids whose holder is a relay)."""
        return self._client().fetch(wanted, copies)

    # ---- relaying (`objects/relays.py`) ----------------------------------------------------

    def relay_address(self) -> str | None:
        """Where this process serves copies it keeps for its host (its server starts now), or
        None if it cannot serve."""
        if not self._token:
            return None
        try:
            return self._started().address
        except Exception:  # noqa: BLE001 - no port to listen on: this process reads, never relays
            logger.debug("cannot serve copies", exc_info=True)
            return None

    def kept(self, object_ids: Sequence[bytes]) -> dict[bytes, SerializedValue]:
        """The values among `object_ids` this process holds (made here or kept as a copy)."""
        held = self._held
        if held is None:
            return {}
        return {oid: value for oid, value in zip(object_ids, held.values(list(object_ids))) if value is not None}

    def expect(self, object_ids: Sequence[bytes]) -> None:
        """The owner made this process a relay of these: readers sent here wait for them."""
        if object_ids:
            self._started().held.expect(object_ids)

    def keep_copies(self, values: dict[bytes, SerializedValue]) -> dict[bytes, SerializedValue]:
        """Keep each of `values` (expected here, just fetched) to serve onward: the buffers it
        arrived in are kept as they are (shared blocks of this host: `SharedArrivals`). Returns
        the values as read from what is kept. One that is an error or does not fit is given up
        (its waiting readers ask the owner again)."""
        held = self._held
        if held is None:
            return values
        read: dict[bytes, SerializedValue] = {}
        for object_id, value in values.items():
            if value.is_error or held.holds(object_id):
                held.abandon([object_id])
                continue
            try:
                held.hold(object_id, value, copy=False)
            except Exception as exc:  # noqa: BLE001 - ObjectStoreFullError: readers go elsewhere
                logger.info("cannot keep a copy of %s to serve (%s)", object_id.hex(), exc)
                held.abandon([object_id])
                continue
            (copy,) = held.values([object_id])
            if copy is not None:
                read[object_id] = copy
        return {**values, **read}

    def abandon(self, object_ids: Sequence[bytes]) -> None:
        """Copies this process was to keep and will not: their readers are answered now."""
        held = self._held
        if held is not None and object_ids:
            held.abandon(object_ids)

    def _client(self) -> HolderClients:
        with self._lock:
            if self._clients is None:
                self._clients = HolderClients(self._token, WORKER_BORROWS, own_address=lambda: self.address,
                                              local=self._read_own,
                                              arrivals=SharedArrivals(shared_memory_dir(), self._limit))
                self._clients.on_unreachable = self._report_unreachable
            return self._clients

    def _read_own(self, object_ids: list[bytes]) -> list[SerializedValue | None]:
        held = self._held
        return held.values(object_ids) if held is not None else [None] * len(object_ids)


#: This worker process's holder (an executor's or an actor host's).
WORKER_HOLDER = WorkerHolder()
