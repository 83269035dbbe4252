"""Holding back one kind of frame at the driver, as a slow link would, for race tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fray_ray._private.core import runtime_slot


@contextlib.contextmanager
def held_back(kind: str, from_worker: bytes | None = None,
              naming: Callable[[bytes], bool] | None = None) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Frames of `kind` (from the worker with id `from_worker`, or any; naming an object id for
    which `naming` is true, or any) wait at the driver until the second event is set (10 s at
    most), and hold back what follows them on their connection, as a slow link would. The first
    event is set once one arrived."""
    handlers = runtime_slot.current().session._handlers
    original = handlers[kind]
    arrived, let_go = threading.Event(), threading.Event()

    def slow(connection: Any, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        if (from_worker is None or connection.peer_info.get("id") == from_worker) and \
                (naming is None or any(naming(oid) for oid in body.get("ids", ()))):
            arrived.set()
            let_go.wait(10)
        original(connection, message_id, body, buffers)

    handlers[kind] = slow
    try:
        yield arrived, let_go
    finally:
        let_go.set()
        handlers[kind] = original
