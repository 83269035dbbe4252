"""How a non-forced `ray.cancel` interrupts the task an executor is running.

Ray raises KeyboardInterrupt in the task: at its next Python bytecode, or at once if the task
is waiting in `ray.get`/`ray.wait` (a task asleep in `time.sleep` or in C code is not woken;
it sees the interrupt when it runs Python again). fray_ray does the same: the exception is set
on the task's thread (`PyThreadState_SetAsyncExc`), and a thread that waits for the driver's
reply does so through `wait_for_reply`, which the interrupt wakes so that the exception fires.
A thread that reads a connection itself while it waits (`reading_until`) must not be
interrupted in the middle of a frame: its interrupt is held until it stops reading, then raised.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fray_ray._private.stream.protocol import Connection

_waiting_lock = threading.Lock()  # guards _waiting
#: thread id -> the event that wakes that thread's `wait_for_reply`
_waiting: dict[int, threading.Event] = {}
#: thread id -> what makes that thread stop reading a connection (see `reading_until`)
_reading: dict[int, Callable[[], None]] = {}
_held: set[int] = set()  # threads whose interrupt waits until they stop reading


def wait_for_reply(future: concurrent.futures.Future, timeout: float | None) -> Any:
    """`future.result(timeout)`, woken early by `interrupt_thread` on this thread."""
    wake = threading.Event()
    future.add_done_callback(lambda _: wake.set())
    thread_id = threading.get_ident()
    with _waiting_lock:
        _waiting[thread_id] = wake
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not future.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            wake.wait(remaining)  # back to bytecode here: a pending interrupt fires
            wake.clear()
    finally:
        with _waiting_lock:
            if _waiting.get(thread_id) is wake:
                del _waiting[thread_id]
    return future.result(0)  # the result, its exception, or TimeoutError if the time ran out


@contextlib.contextmanager
def reading_until(stop_reading: Callable[[], None]) -> Iterator[Callable[[], bool]]:
    """While this thread reads a connection: yields whether an interrupt came (the reading
    should stop); `stop_reading()` is called when one does. Raises KeyboardInterrupt after."""
    thread_id = threading.get_ident()
    with _waiting_lock:
        _reading[thread_id] = stop_reading
    try:
        yield lambda: thread_id in _held
    finally:
        with _waiting_lock:
            del _reading[thread_id]
            interrupted = thread_id in _held
            _held.discard(thread_id)
    if interrupted:
        raise KeyboardInterrupt


def interrupt_thread(thread_id: int) -> None:
    """Raise KeyboardInterrupt in `thread_id` at its next bytecode, waking it if it waits
    for a reply; once it stops reading, if it reads a connection."""
    with _waiting_lock:
        stop_reading = _reading.get(thread_id)
        if stop_reading is not None:
            _held.add(thread_id)
    if stop_reading is not None:
        stop_reading()
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(KeyboardInterrupt))
    with _waiting_lock:
        wake = _waiting.get(thread_id)
    if wake is not None:
        wake.set()


def read_until_done(connection: Connection, future: concurrent.futures.Future, timeout: float | None) -> None:
    """Read `connection` on this thread until `future` is done (no thread is woken for its
    answer), the time is up, or this task is cancelled (raised once the reading has stopped)."""
    with reading_until(connection.wake_lender) as interrupted:
        connection.serve_until(lambda: future.done() or interrupted(), timeout)
