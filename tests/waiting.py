"""Waiting on a condition, never on a sleep: what the tests of a loaded 2-core machine need."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Generous: a loaded CI machine can be slow to start processes; correctness never depends on it.
DEFAULT_TIMEOUT = 60.0


def wait_for(predicate: Callable[[], T], timeout: float = DEFAULT_TIMEOUT, interval: float = 0.05, what: str = "") -> T:
    """Poll `predicate` until it returns something truthy; return it. AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    last = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}: last value {last!r}")
        time.sleep(interval)
        last = predicate()
    return last


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a process may vanish while it is read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
