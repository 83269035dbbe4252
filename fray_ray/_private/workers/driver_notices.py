"""Making sure the driver has heard what this process told it before a peer can act on it.

A worker tells its driver of the refs it holds (`Borrow`) and of its direct results that leave
it (`HandOver`) with notices on its session connection, and talks to actor hosts on other
connections. Frames on different connections reach the driver in no fixed order, so without
care a peer could act on a ref before the driver counts the holder that passed it on:

- a callee whose answer reaches its caller before its `Borrow` reaches the driver lets the
  caller drop its own ref first, and the driver frees an object the callee still holds;
- a callee's `Borrow` of a caller's result that reaches the driver before the caller's
  `HandOver` names an object the driver does not know yet.

So before a call or an answer leaves for another process, `confirm()` asks the driver to
answer a `Sync` if any notice went out since the last one it answered: the driver handles a
connection's frames in order, so its answer says everything before it is counted. Calls and
answers that carry no new refs, the usual case, cost nothing. A caller that counts the refs an
answer named tells the host once the driver has them (`then`), and only then does the host
let go of its own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterator

from fray_ray._private import messages
from fray_ray._private.messages import Borrow, Release, Sync
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError


class DriverNotices:
    """Counts the notices sent on a session connection and which of them the driver has
    answered for. Thread-safe."""

    def __init__(self, connection: Connection, flush_releases: Callable[[], None] = lambda: None) -> None:
        """`flush_releases()` sends the releases this process has queued (`LocalReferenceCounter`)."""
        self._connection = connection
        self._flush_releases = flush_releases
        self._lock = threading.Lock()  # also held while a borrow or release goes, so they go in order
        self._sent = 0  # notices sent so far
        self._confirmed = 0  # of those, how many the driver is known to have handled
        self._unannounced: set[bytes] = set()  # first refs whose borrow waits (`borrows_deferred`)
        self._thread = threading.local()  # .deferred: this thread's unannounced first refs, while it defers

    # ---- refs ----------------------------------------------------------------------------

    def borrowed(self, object_ids: list[bytes]) -> None:
        """This process holds its first refs to these objects."""
        deferred: list[bytes] | None = getattr(self._thread, "deferred", None)
        with self._lock:
            if deferred is not None:
                deferred.extend(object_ids)
                self._unannounced.update(object_ids)
                return
            self._notify(Borrow(object_ids))

    def released(self, object_ids: list[bytes]) -> None:
        """This process dropped its last refs to these objects."""
        with self._lock:
            if self._unannounced:
                told = [oid for oid in object_ids if oid not in self._unannounced]
                self._unannounced.difference_update(object_ids)
                object_ids = told
            if object_ids:
                self._notify(Release(object_ids))

    @contextlib.contextmanager
    def borrows_deferred(self, into: dict[bytes, list[bytes]], key: bytes) -> Iterator[None]:
        """First refs this thread makes meanwhile are not announced yet, as a Ray borrower
        reports only what it still holds when its task ends: an actor call's caller keeps the
        objects its arguments name alive until the answer, and most such refs die before it.
        Their ids go to `into[key]`, to `announce` as the call is answered."""
        deferred: list[bytes] = []
        self._thread.deferred = deferred
        try:
            yield
        finally:
            self._thread.deferred = None
            if deferred:
                into[key] = deferred

    def announce(self, object_ids: list[bytes], first: Callable[[list[bytes]], list[bytes]] | None = None) -> list[bytes]:
        """Borrow those of these deferred first refs that are still held (releases queued
        meanwhile are sent first: a ref that died unannounced is never told). `first(held)`
        runs before and returns those it took care of, which the driver is not told of (lent
        objects the callee keeps borrow from their lender, `lent_refs.py`); returns them."""
        self._flush_releases()
        taken: list[bytes] = []
        if first is not None:
            with self._lock:
                held = [oid for oid in object_ids if oid in self._unannounced]
            if held:
                taken = first(held)
        with self._lock:
            self._unannounced.difference_update(taken)
            held = [oid for oid in object_ids if oid in self._unannounced]
            self._unannounced.difference_update(held)
            if held:
                self._notify(Borrow(held))
        return taken

    def borrow_now(self, object_ids: list[bytes]) -> None:
        """Borrow these from the driver whatever this thread defers, and return once it counts
        them (a lent object this process kept, and now borrows from the driver instead)."""
        with self._lock:
            self._notify(Borrow(object_ids))
        self.confirm()

    def tell(self, notice: messages.Message) -> None:
        """Send the driver a notice another process may act on (a `HandOver`, say)."""
        with self._lock:
            self._notify(notice)

    def _notify(self, notice: messages.Message) -> None:
        try:
            messages.notify(self._connection, notice)
        except ConnectionClosed:
            return  # the driver is gone: nobody counts refs any more
        self._sent += 1

    # ---- confirming ----------------------------------------------------------------------

    def unconfirmed(self) -> int:
        with self._lock:
            return self._sent - self._confirmed

    def confirm(self) -> None:
        """Return once the driver has handled every notice sent before this call (at once if it
        has answered for them all). Must not run on the session connection's reader thread."""
        with self._lock:
            target = self._sent
            if self._confirmed >= target:
                return
        try:
            messages.call(self._connection, Sync())
        except (ConnectionClosed, RemoteError):
            return  # the driver is gone: nobody counts refs any more
        self._reached(target)

    def then(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the driver has handled every notice sent before this call: at
        once if it has, else on the session's reader thread when it answers (so `callback`
        must not block)."""
        with self._lock:
            target = self._sent
            if self._confirmed >= target:
                target = -1
        if target < 0:
            callback()
            return

        def answered(future: concurrent.futures.Future) -> None:
            if future.exception() is None:
                self._reached(target)
            callback()  # with the driver gone nobody counts refs any more: nothing to wait for

        messages.request(self._connection, Sync()).add_done_callback(answered)

    def _reached(self, target: int) -> None:
        with self._lock:
            self._confirmed = max(self._confirmed, target)
