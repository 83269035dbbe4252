"""What interpreter exit waits for (`exit_drain`), against a stand-in object table.

The end-to-end behaviour (real scripts, Ctrl-C, a running task stopped) is in
`test_driver_exit.py`; these pin the rules: wait while a worker starts for a task, say so once,
give running work a short grace, and stop waiting the moment Ctrl-C is noted.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

from fray_ray._private.driver.exit_drain import wait_for_started_work


class Objects:
    """Pending results, each produced by a task; `finish` runs their done callbacks."""

    def __init__(self, *object_ids: bytes) -> None:
        self._pending = list(object_ids)
        self._callbacks: dict[bytes, list[Callable[[bytes], None]]] = {}
        self.lock = threading.Lock()

    def pending_ids(self) -> list[bytes]:
        return list(self._pending)

    def producer(self, object_id: bytes) -> bytes | None:
        return b"task-" + object_id

    def add_done_callback(self, object_id: bytes, callback: object) -> None:
        with self.lock:
            self._callbacks.setdefault(object_id, []).append(callback)  # type: ignore[arg-type]

    def remove_done_callback(self, object_id: bytes, callback: object) -> None:
        with self.lock:
            if callback in self._callbacks.get(object_id, []):
                self._callbacks[object_id].remove(callback)  # type: ignore[arg-type]

    def finish(self, object_id: bytes) -> None:
        with self.lock:
            callbacks = list(self._callbacks.get(object_id, []))
        for callback in callbacks:
            callback(object_id)


def test_nothing_pending_returns_at_once() -> None:
    assert wait_for_started_work(Objects(), start_wait=600, finish_grace=600)


def test_done_work_ends_the_wait() -> None:
    objects = Objects(b"a", b"b")
    finisher = threading.Timer(0.01, lambda: (objects.finish(b"a"), objects.finish(b"b")))
    finisher.start()
    try:
        assert wait_for_started_work(objects, start_wait=600, finish_grace=600)
    finally:
        finisher.join()


def test_a_wait_for_starting_workers_is_said_once_and_ends_when_they_run() -> None:
    objects = Objects(b"a")
    notices = io.StringIO()
    seen = threading.Event()

    def about_to_run() -> int:
        if "\n" in notices.getvalue():  # said: the worker has "started" and the task ends
            seen.set()
            objects.finish(b"a")
            return 0
        return 2

    assert wait_for_started_work(objects, about_to_run, start_wait=600, finish_grace=600, notices=notices)
    assert seen.is_set()
    lines = notices.getvalue().splitlines()
    assert len(lines) == 1 and "2 task(s) whose worker is starting" in lines[0] and "Ctrl-C" in lines[0], lines


def test_ctrl_c_noted_at_exit_ends_the_wait() -> None:
    objects = Objects(b"a")  # never finishes
    for about_to_run in (lambda: 1, lambda: 0):  # waiting for a worker to start; in the grace
        stopped = threading.Event()
        presses = threading.Timer(0.05, stopped.set)
        presses.start()
        try:
            assert not wait_for_started_work(objects, about_to_run, start_wait=600, finish_grace=600,
                                             stop=stopped.is_set, notices=io.StringIO())
        finally:
            presses.join()
