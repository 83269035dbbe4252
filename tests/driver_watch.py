"""Watching what the driver hears about objects: the tests of direct calls assert that a shape
costs the driver nothing by recording the kinds of the notices its session handles meanwhile."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fray_ray._private.core import runtime_slot

#: What a worker tells the driver about objects.
NOTICES = ("hand_over", "hand_over_done", "sync", "borrow", "release")


@contextlib.contextmanager
def driver_hears() -> Iterator[list[str]]:
    """The kinds of the notices about objects the driver gets meanwhile."""
    handlers = runtime_slot.current().session._handlers
    originals = {kind: handlers[kind] for kind in NOTICES}
    heard: list[str] = []

    def watching(kind: str) -> Any:
        def handle(connection: Any, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
            heard.append(kind)
            originals[kind](connection, message_id, body, buffers)
        return handle

    handlers.update({kind: watching(kind) for kind in NOTICES})
    try:
        yield heard
    finally:
        handlers.update(originals)
