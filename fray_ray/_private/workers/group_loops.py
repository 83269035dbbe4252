"""An event loop on a thread of its own for one concurrency group of an async actor.

The loop waits in a `SpinningSelector`: calls reach it from the connection's reader thread, and
while they come often it looks for the next one before it sleeps (`spin_wait.py`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fray_ray._private.stream.spin_wait import SpinningSelector


class GroupLoop:
    """An event loop on its own thread, with a limit on coroutines running at once."""

    def __init__(self, name: str, max_concurrency: int) -> None:
        self.loop = asyncio.SelectorEventLoop(SpinningSelector())
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

    def spawn(self, make_coroutine: Any) -> None:
        """Start `make_coroutine()` as a task on the loop."""
        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(make_coroutine()))

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
