"""A driver that reaches the end of its script lets the work it started finish first.

Ray prints what tasks print even when the script never waits for them: its shutdown at exit
takes long enough for started tasks to run. fray_ray's shutdown is quicker, so at interpreter
exit (not on an explicit `shutdown()`) the driver waits for the tasks and actor calls whose
results are still pending, for at most `EXIT_GRACE_SECONDS`, then shuts down. Their output
travels ahead of their results on the same connection, so it has been printed by then.
"""

from __future__ import annotations

import threading
from typing import Protocol

#: How long, at most, interpreter exit waits for unfinished tasks; then they are stopped.
EXIT_GRACE_SECONDS = 10.0


class _Objects(Protocol):
    def pending_ids(self) -> list[bytes]: ...
    def producer(self, object_id: bytes) -> bytes | None: ...
    def add_done_callback(self, object_id: bytes, callback: object) -> None: ...
    def remove_done_callback(self, object_id: bytes, callback: object) -> None: ...


def wait_for_started_work(objects: _Objects, timeout: float = EXIT_GRACE_SECONDS) -> bool:
    """Wait until every pending task or actor-call result is done; False if time ran out."""
    pending = [oid for oid in objects.pending_ids() if objects.producer(oid) is not None]
    if not pending:
        return True
    lock = threading.Lock()
    left = {"count": len(pending)}
    all_done = threading.Event()

    def done(_object_id: bytes) -> None:
        with lock:
            left["count"] -= 1
            if left["count"] <= 0:
                all_done.set()

    for object_id in pending:
        objects.add_done_callback(object_id, done)
    try:
        return all_done.wait(timeout)
    finally:
        for object_id in pending:
            objects.remove_done_callback(object_id, done)
