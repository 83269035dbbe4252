"""Fixtures for the Fray layer tests: a LocalClient that must leave no thread behind, and a poller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fray_ray.fray.local_backend import LocalClient

# Generous: the suite must pass on a loaded two-core machine. Waits end as soon as their
# condition holds, so this only matters when something is wrong.
DEADLINE = 20.0


def _fray_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fray-") and t.is_alive()]


@pytest.fixture(autouse=True)
def _outside_iris_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run as a plain process, whatever the environment that started pytest says."""
    monkeypatch.delenv("IRIS_TASK_ID", raising=False)


@pytest.fixture
def client() -> Iterator[LocalClient]:
    """A LocalClient shut down after the test; fails the test if a thread it started survives."""
    before = set(_fray_threads())
    local = LocalClient(max_threads=4)
    try:
        yield local
    finally:
        local.shutdown(wait=True)
    leftovers = [t for t in _fray_threads() if t not in before]
    assert not leftovers, f"threads left running after shutdown: {[t.name for t in leftovers]}"


@pytest.fixture
def eventually() -> Callable[..., None]:
    """`eventually(predicate, what)`: poll until `predicate()` is true; fail after DEADLINE."""

    def poll(predicate: Callable[[], bool], what: str = "condition", timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not predicate():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    return poll
