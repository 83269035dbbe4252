"""One thread running delayed callbacks (timeouts, watchdogs), instead of a thread each."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class TimerHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TimerQueue:
    """`call_later(delay, fn)` runs fn on the timer thread after delay seconds."""

    def __init__(self, name: str = "timers") -> None:
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int, TimerHandle, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle()
        with self._condition:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._counter), handle, callback))
            self._condition.notify()
        return handle

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else self._heap[0][0] - time.monotonic()
                    self._condition.wait(timeout)
                if self._stopped:
                    return
                _, _, handle, callback = heapq.heappop(self._heap)
            if not handle.cancelled:
                try:
                    callback()
                except Exception:  # noqa: BLE001 - one timer must not stop the others
                    logger.exception("timer callback failed")

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._heap.clear()
            self._condition.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
