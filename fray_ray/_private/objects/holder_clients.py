"""Fetching held values from their holders: one authenticated stream per holder, kept open.

The driver and every worker read a value another process holds (`remote_values`) straight
from that process's `HolderServer` (`held_objects`), never through a third process. A reader
whose shared-memory directory is the holder's (the same host) is lent the value's files and
maps them (`BorrowedBlocks`); any other reader gets the bytes in one stream transfer. A holder
that cannot be reached, or no longer holds the value, makes the read fail with
`ObjectReconstructionFailedError` (an `ObjectLostError`) naming the holder and why.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from fray_ray._private.objects.held_objects import FETCH, RELEASE, RETURN_LEASES
from fray_ray._private.objects.serialization import SerializedValue, serialize_error, unpack_values
from fray_ray._private.objects.shared_memory import BorrowedBlocks
from fray_ray._private.stream.buffers import Arrivals
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.stream.stream_server import introduce
from fray_ray.exceptions import ObjectReconstructionFailedError

logger = logging.getLogger(__name__)

#: local(object ids): values this very process holds (None: it holds none), read in place.
LocalRead = Callable[[list[bytes]], list[SerializedValue | None]]


def lost(object_id: bytes, holder: str, why: str, reason: str = "OBJECT_LOST") -> SerializedValue:
    """The error a read of a value that can no longer be fetched raises: an
    `ObjectReconstructionFailedError` (an `ObjectLostError`) naming the holder and why."""
    return serialize_error(ObjectReconstructionFailedError(
        object_id.hex(), reason, f"The object's value was held by the worker at {holder}, which cannot serve it ({why}).",
    ))


class HolderLost(Exception):
    """A holder could not be reached and its owner has now dealt with its loss: read the
    objects again from the owner (they may be pending a rebuild, or failed)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


class HolderClients:
    """This process's streams to holders, by address. Thread-safe."""

    def __init__(self, token: str, borrows: BorrowedBlocks, *, own_address: Callable[[], str | None] = lambda: None,
                 local: LocalRead | None = None, connect_timeout: float = 10.0,
                 arrivals: Arrivals | None = None) -> None:
        """`arrivals`: where large values fetched are read into (new private memory if None)."""
        self._token = token
        self._arrivals = arrivals
        self.borrows = borrows
        self._own_address = own_address
        self._local = local
        self._connect_timeout = connect_timeout  # a transfer itself has none: a large one takes its time
        self._lock = threading.Lock()  # guards _connections and _connecting
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, threading.Lock] = {}
        self._gone: set[str] = set()  # holders known to have exited
        self._releases: queue.SimpleQueue[list[tuple[str, bytes]] | None] = queue.SimpleQueue()
        self._releaser: threading.Thread | None = None
        self.fetched_bytes = 0  # bytes that crossed a stream from a holder (not mapped)
        #: on_unreachable(holder): tell the owner a holder cannot be reached; True if it has
        #: now dealt with the loss (the read is then retried through the owner)
        self.on_unreachable: Callable[[str], bool] | None = None

    def reachable(self, holder: str) -> bool:
        """Whether the process at `holder` still answers (the owner's check of a reader's report)."""
        if self.is_gone(holder):
            return False
        try:
            self._connection(holder)
        except (OSError, ConnectionClosed, RemoteError):
            return False
        return True

    def holder_gone(self, holder: str) -> None:
        """The process at `holder` exited: reads of what it held fail at once from now on."""
        with self._lock:
            self._gone.add(holder)
        self._forget(holder)

    def holder_started(self, holder: str) -> None:
        """A new process serves at `holder` (an address a dead holder had may be reused)."""
        with self._lock:
            self._gone.discard(holder)

    def is_gone(self, holder: str) -> bool:
        with self._lock:
            return holder in self._gone

    def fetch(self, wanted: Sequence[tuple[bytes, str]], copies: Collection[bytes] = ()) -> dict[bytes, SerializedValue]:
        """The values of (object id, holder) pairs; a value that cannot be fetched comes back
        as an `ObjectLostError` to raise. Raises HolderLost when a holder is unreachable and
        the owner has dealt with it. `copies`: ids whose holder is a relay (`relays`), which
        answers once its copy is in; a relay that fails is no holder's loss."""
        by_holder: dict[tuple[str, bool], list[bytes]] = {}
        for object_id, holder in wanted:
            by_holder.setdefault((holder, object_id in copies), []).append(object_id)
        found: dict[bytes, SerializedValue] = {}
        for (holder, relay), ids in by_holder.items():
            found.update(self._fetch_from(holder, ids, relay))
        return found

    def _fetch_from(self, holder: str, ids: list[bytes], relay: bool = False) -> dict[bytes, SerializedValue]:
        if self._local is not None and holder == self._own_address():
            values = self._local(ids)
            return {oid: value if value is not None else lost(oid, holder, "it no longer holds it")
                    for oid, value in zip(ids, values)}
        if self.is_gone(holder):
            return {oid: lost(oid, holder, "its worker process exited") for oid in ids}
        try:
            connection = self._connection(holder)
            body, buffers = connection.call(FETCH, {"ids": ids, "wait": True} if relay else {"ids": ids})
            values = unpack_values(body["values"], buffers)
            if body.get("shared"):
                values = self.borrows.attach(connection, values, body["shared"], _return_leases)
        except (OSError, ConnectionClosed) as exc:
            self._forget(holder)
            if not relay and self.on_unreachable is not None and self.on_unreachable(holder):
                raise HolderLost(holder) from exc
            return {oid: lost(oid, holder, f"{type(exc).__name__}: {exc}") for oid in ids}
        except (RemoteError, ValueError, TypeError, KeyError) as exc:
            self._forget(holder)
            return {oid: lost(oid, holder, f"{type(exc).__name__}: {exc}") for oid in ids}
        found: dict[bytes, SerializedValue] = dict(zip(body["ids"], values))
        if not body.get("shared"):
            self.fetched_bytes += sum(value.size for value in values)
        for object_id in ids:
            if object_id not in found:
                found[object_id] = lost(object_id, holder, "it no longer holds it")
        return found

    def release(self, held: Sequence[tuple[str, bytes]]) -> None:
        """Tell holders the owner freed these (holder, object id) values, from a thread of
        its own: the caller (often freeing under a reference flush) never waits on a holder."""
        with self._lock:
            if self._releaser is None:
                self._releaser = threading.Thread(target=self._release_forever, name="holder-releases", daemon=True)
                self._releaser.start()
        self._releases.put(list(held))

    def _release_forever(self) -> None:
        while True:
            held = self._releases.get()
            if held is None:
                return
            try:
                self._release_now(held)
            except Exception:  # noqa: BLE001 - one failed release must not stop the rest
                logger.debug("releasing held values failed", exc_info=True)

    def _release_now(self, held: Sequence[tuple[str, bytes]]) -> None:
        by_holder: dict[str, list[bytes]] = {}
        for holder, object_id in held:
            if not self.is_gone(holder):
                by_holder.setdefault(holder, []).append(object_id)
        for holder, ids in by_holder.items():
            if self._local is not None and holder == self._own_address():
                continue  # a worker owns nothing yet; its own values are released by the driver
            with self._lock:
                connection = self._connections.get(holder)
            try:
                if connection is None:
                    connection = self._connection(holder)
                connection.notify(RELEASE, {"ids": ids})
            except (OSError, ConnectionClosed, RemoteError):
                self._forget(holder)  # gone: its values went with it

    def _connection(self, holder: str) -> Connection:
        with self._lock:
            connection = self._connections.get(holder)
            if connection is not None and not connection.closed:
                return connection
            gate = self._connecting.setdefault(holder, threading.Lock())
        with gate:  # one introduction per holder at a time
            with self._lock:
                connection = self._connections.get(holder)
                if connection is not None and not connection.closed:
                    return connection
            greeting = {"token": self._token, "shared_memory": self.borrows.identity}
            # A holder listens before its address is given out: a refused connection means
            # its process is gone, not yet to come.
            connection, _ = introduce(holder, greeting, name="holder-client", timeout=self._connect_timeout,
                                      received_blocks=self._arrivals,
                                      give_up=lambda failure: isinstance(failure, ConnectionRefusedError)
                                      or self.is_gone(holder))
            connection.add_close_callback(lambda closed, holder=holder: self._closed(holder, closed))
            connection.start({})
            with self._lock:
                self._connections[holder] = connection
            return connection

    def _closed(self, holder: str, connection: Connection) -> None:
        with self._lock:
            if self._connections.get(holder) is connection:
                del self._connections[holder]

    def _forget(self, holder: str) -> None:
        with self._lock:
            connection = self._connections.pop(holder, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        self._releases.put(None)
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()


def _return_leases(connection: Any, leases: list[int]) -> None:
    try:
        connection.notify(RETURN_LEASES, {"leases": leases})
    except (OSError, ConnectionClosed):
        pass
