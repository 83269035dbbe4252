"""Captured task output: stdout and stderr lines per task attempt, with timestamps.

Lines are keyed by the attempt's uid (unique for the cluster's lifetime), so output still
arriving from an attempt of a replaced job can never mix with the new job's. Each attempt keeps
its newest `max_lines` lines. A global sequence number orders lines and serves as a cursor.
Thread-safe: the process supervisor appends while RPC handlers read.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LogRecord:
    """One captured line."""

    seq: int
    timestamp_ms: int
    source: str  # "stdout" or "stderr"
    data: str
    attempt_id: int


class LogStore:
    """Bounded per-attempt line buffers under one lock."""

    def __init__(self, max_lines_per_attempt: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._lines: dict[int, deque[LogRecord]] = {}
        self._seq = itertools.count(1)
        self._max_lines = max_lines_per_attempt

    def append(self, uid: int, attempt_id: int, source: str, data: str, timestamp_ms: int) -> None:
        if self._max_lines == 0:
            return
        with self._lock:
            lines = self._lines.get(uid)
            if lines is None:
                lines = self._lines[uid] = deque(maxlen=self._max_lines)
            lines.append(LogRecord(next(self._seq), timestamp_ms, source, data, attempt_id))

    def read(
        self, uids: Iterable[int], *, since_ms: int = 0, after_seq: int = 0, substring: str = ""
    ) -> list[LogRecord]:
        """Lines of these attempts, oldest first, filtered by time, cursor and substring."""
        with self._lock:
            records = [r for uid in uids for r in self._lines.get(uid, ())]
        return sorted(
            (
                r
                for r in records
                if r.timestamp_ms >= since_ms and r.seq > after_seq and (not substring or substring in r.data)
            ),
            key=lambda r: r.seq,
        )

    def read_attempts(self, uids: Iterable[int]) -> list[tuple[int, LogRecord]]:
        """Every kept line of these attempts with its attempt's uid, in no particular order."""
        with self._lock:
            return [(uid, r) for uid in uids for r in self._lines.get(uid, ())]

    def tail(self, uid: int, count: int, source: str = "stderr") -> list[str]:
        """The last `count` lines one attempt wrote to `source`."""
        with self._lock:
            lines = list(self._lines.get(uid, ()))
        return [r.data for r in lines if r.source == source][-count:]

    def forget(self, uids: Iterable[int]) -> None:
        with self._lock:
            for uid in uids:
                self._lines.pop(uid, None)
