"""An event loop on a thread of its own for one concurrency group of an async actor.

The loop waits in a `SpinningSelector`: calls reach it from the connection's reader thread, and
while they come often it looks for the next one before it sleeps (`spin_wait.py`). Calls that
arrive together (one frame carries a batch of them) wake the loop once: each wake-up is a write
to the loop's self-pipe and a read of it. The loop knows how many of its calls have not started
(`backlog`), so that an answer can wait to leave with the next ones.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from fray_ray._private.stream.spin_wait import SpinningSelector

CoroutineMaker = Callable[[], Coroutine[Any, Any, Any]]


class GroupLoop:
    """An event loop on its own thread, with a limit on coroutines running at once."""

    def __init__(self, name: str, max_concurrency: int) -> None:
        self.loop = asyncio.SelectorEventLoop(SpinningSelector())
        self._spawn_lock = threading.Lock()
        self._to_spawn: list[CoroutineMaker] = []  # given by `spawn`, not yet tasks (the loop is woken for them)
        self._unstarted = 0  # tasks made whose coroutine has not begun (changed on the loop's thread only)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

        async def build() -> asyncio.Semaphore:
            return asyncio.Semaphore(max(1, max_concurrency))

        self.semaphore = asyncio.run_coroutine_threadsafe(build(), self.loop).result()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, fn: Any) -> None:
        """Run a plain callable on the loop thread."""
        self.loop.call_soon_threadsafe(fn)

    def spawn(self, make_coroutine: CoroutineMaker) -> None:
        """Start `make_coroutine()` as a task on the loop, after those spawned before it."""
        with self._spawn_lock:
            self._to_spawn.append(make_coroutine)
            if len(self._to_spawn) > 1:
                return  # the loop was woken for the first of them
        self.loop.call_soon_threadsafe(self._start_spawned)

    def backlog(self) -> int:
        """How many spawned coroutines have not begun (a moment ago)."""
        return len(self._to_spawn) + self._unstarted

    def _start_spawned(self) -> None:
        with self._spawn_lock:
            makers, self._to_spawn = self._to_spawn, []
        self._unstarted += len(makers)
        for make in makers:
            self.loop.create_task(self._begin(make))

    async def _begin(self, make_coroutine: CoroutineMaker) -> None:
        self._unstarted -= 1
        await make_coroutine()

    def stop(self) -> None:
        """Cancel what still runs on the loop, then stop it."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.loop.stop()

        try:
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(cancel_all()))
        except RuntimeError:
            pass
