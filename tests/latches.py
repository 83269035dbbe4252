"""A latch actor for tests that need a remote call to wait until the test lets it go."""

from __future__ import annotations

import asyncio

import fray_ray


@fray_ray.remote
class Latch:
    """`wait()` returns once `open()` was called (an async actor: both run at once)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def wait(self) -> None:
        await self.event.wait()

    async def open(self) -> None:
        self.event.set()
