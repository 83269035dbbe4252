"""A driver that reaches the end of its script lets the tasks it started print first.

Ray prints what tasks print even when the script never waits for them: its shutdown at exit
takes a second or two, long enough for started tasks to run a little; then it kills what still
runs. fray_ray's shutdown is quicker, so at interpreter exit (not on an explicit `shutdown()`,
and not after Ctrl-C) the driver waits while tasks it started wait for a worker that is
starting (Ray's are started ahead), at most `START_WAIT_SECONDS`, saying so in one line if that
takes longer than a moment; then it waits at most `FINISH_GRACE_SECONDS` more for the tasks to
end, and shutdown stops what still runs (tasks queued behind a busy worker never run, as in
Ray). Output travels ahead of results on the same connection, so what the tasks printed has
been printed by then.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from fray_ray._private.driver import interpreter_exit

#: How long, at most, interpreter exit waits for workers starting for its tasks.
START_WAIT_SECONDS = 10.0
#: How long interpreter exit waits for running tasks to end once all have begun (Ray's
#: shutdown at exit lets them run about this long too before it kills them).
FINISH_GRACE_SECONDS = 1.0
#: After this long waiting for tasks to begin, say what the exit is waiting for.
NOTICE_AFTER_SECONDS = 1.0
_POLL_SECONDS = 0.05  # how often the count of tasks about to run, and Ctrl-C, are read again


class _Objects(Protocol):
    def pending_ids(self) -> list[bytes]: ...
    def producer(self, object_id: bytes) -> bytes | None: ...
    def add_done_callback(self, object_id: bytes, callback: object) -> None: ...
    def remove_done_callback(self, object_id: bytes, callback: object) -> None: ...


def wait_for_started_work(
    objects: _Objects,
    about_to_run: Callable[[], int] = lambda: 0,
    *,
    start_wait: float = START_WAIT_SECONDS,
    finish_grace: float = FINISH_GRACE_SECONDS,
    notices: TextIO | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Wait until every pending task or actor-call result is done, or for `finish_grace` once
    `about_to_run()` (the tasks a starting worker will run) is 0; True if all were done.
    `notices` (stderr by default) gets the one line said on a long wait; `stop()` turning
    True (Ctrl-C) ends the wait at once."""
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
        started = time.monotonic()
        said = False
        while time.monotonic() - started < start_wait and not stop():
            waiting = about_to_run()
            if not waiting:
                break
            if not said and time.monotonic() - started >= NOTICE_AFTER_SECONDS:  # one line, once
                said = True
                print(
                    f"fray_ray: the script has ended; waiting up to {start_wait - NOTICE_AFTER_SECONDS:.0f} s for "
                    f"{waiting} task(s) whose worker is starting (Ctrl-C stops them now)",
                    file=notices or sys.stderr,
                    flush=True,
                )
            if all_done.wait(_POLL_SECONDS):
                return True
        finish_by = time.monotonic() + finish_grace
        while not stop() and time.monotonic() < finish_by:
            if all_done.wait(min(_POLL_SECONDS, max(0.0, finish_by - time.monotonic()))):
                return True
        return all_done.is_set()
    finally:
        for object_id in pending:
            objects.remove_done_callback(object_id, done)


def let_started_work_print(runtime: Any, interrupted: bool = False) -> None:
    """At interpreter exit, before the session shuts down: wait for the driver's started
    work as above, unless the script was interrupted (Ctrl-C ends it at once, as in Ray)."""
    objects = getattr(runtime, "objects", None) if runtime is not None and runtime.is_driver else None
    if objects is None or interrupted or _interrupted():
        return
    scheduler = getattr(runtime, "scheduler", None)
    try:
        wait_for_started_work(
            objects,
            scheduler.about_to_run if scheduler is not None else lambda: 0,
            stop=interpreter_exit.interrupted_at_exit,
        )
    except KeyboardInterrupt:  # a Ctrl-C the program's own handler raised: stop waiting
        pass


def _interrupted() -> bool:
    """Whether the script ended with an uncaught KeyboardInterrupt, or Ctrl-C came after it ended."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(last, KeyboardInterrupt) or interpreter_exit.interrupted_at_exit()
