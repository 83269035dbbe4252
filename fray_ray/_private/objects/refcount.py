"""Counting live ObjectRefs in this process without taking locks in `__del__`.

`__del__` can run during garbage collection at any point, even while this thread holds a lock
the release would need; so releases are queued lock-free and applied later by `flush()`, which
the runtime calls on each API call and from a background thread.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable


class LocalReferenceCounter:
    """Counts ObjectRef instances per object id; reports first use and last release."""

    def __init__(self, on_first: Callable[[list[bytes]], None], on_last: Callable[[list[bytes]], None]) -> None:
        self._lock = threading.Lock()
        self._counts: dict[bytes, int] = {}
        self._released: collections.deque[bytes] = collections.deque()
        self._on_first = on_first
        self._on_last = on_last

    def add(self, object_id: bytes) -> None:
        with self._lock:
            count = self._counts.get(object_id, 0) + 1
            self._counts[object_id] = count
        if count == 1:
            self._on_first([object_id])

    def add_announced(self, object_id: bytes) -> None:
        """Count a ref the owner already counts for us (we created it through the owner)."""
        with self._lock:
            self._counts[object_id] = self._counts.get(object_id, 0) + 1

    def release_later(self, object_id: bytes) -> None:
        """Safe from `__del__`: only appends to a deque."""
        self._released.append(object_id)

    def flush(self) -> None:
        """Apply the queued releases, and those that reporting last releases queues in turn
        (a value dropped with its last ref releases the refs it names)."""
        while self._released:
            lasts = []
            with self._lock:
                while self._released:
                    try:
                        object_id = self._released.popleft()
                    except IndexError:
                        break
                    count = self._counts.get(object_id, 0) - 1
                    if count > 0:
                        self._counts[object_id] = count
                    else:
                        self._counts.pop(object_id, None)
                        lasts.append(object_id)
            if lasts:
                self._on_last(lasts)

    def count(self, object_id: bytes) -> int:
        with self._lock:
            return self._counts.get(object_id, 0)

    def live_ids(self) -> list[bytes]:
        with self._lock:
            return list(self._counts)
