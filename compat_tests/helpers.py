"""Test helpers written with the public API only: ``SignalActor`` and ``wait_for_condition``.

``SignalActor`` is an async actor that needs no CPU (``num_cpus=0``), so it can run beside any
number of blocked tasks without starving the cluster::

    signal = SignalActor.remote()
    ref = task_that_waits.remote(signal)        # the task calls ray.get(signal.wait.remote())
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 1)
    signal.send.remote()                        # releases every waiter

``wait_for_condition(predicate, timeout=30, retry_interval_ms=100, **kwargs)`` polls
``predicate(**kwargs)`` until it returns a truthy value, and raises ``RuntimeError`` with the
last exception seen when the timeout expires.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from compat_tests._backend import ray


@ray.remote(num_cpus=0)
class SignalActor:
    """A one-shot (re-armable) signal that any task or actor can wait on."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiters = 0

    async def send(self, clear: bool = False) -> None:
        """Release all current waiters; with ``clear=True`` re-arm the signal afterwards."""
        self._event.set()
        if clear:
            # Let the released waiters run before the event is cleared again.
            await asyncio.sleep(0)
            self._event.clear()

    async def wait(self, should_wait: bool = True) -> None:
        """Block until ``send`` is called (returns at once if ``should_wait`` is false)."""
        if not should_wait:
            return
        self._waiters += 1
        try:
            await self._event.wait()
        finally:
            self._waiters -= 1

    async def num_waiters(self) -> int:
        """How many ``wait`` calls are currently blocked."""
        return self._waiters

    async def is_set(self) -> bool:
        return self._event.is_set()


@ray.remote(num_cpus=0)
class Recorder:
    """Collects values from tasks and actors, so a test can see what ran and in which order."""

    def __init__(self) -> None:
        self._items: list[Any] = []

    def record(self, item: Any) -> int:
        self._items.append(item)
        return len(self._items)

    def items(self) -> list[Any]:
        return list(self._items)

    def count(self) -> int:
        return len(self._items)


def wait_for_condition(
    predicate: Callable[..., Any],
    timeout: float = 30,
    retry_interval_ms: float = 100,
    **kwargs: Any,
) -> None:
    """Poll ``predicate(**kwargs)`` until it is truthy; raise RuntimeError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            if predicate(**kwargs):
                return
        except Exception as error:  # noqa: BLE001 - reported below if the condition never holds
            last_error = error
        if time.monotonic() >= deadline:
            break
        time.sleep(retry_interval_ms / 1000)
    message = f"condition not met within {timeout} s"
    if last_error is not None:
        raise RuntimeError(f"{message}; last error: {last_error!r}") from last_error
    raise RuntimeError(message)
