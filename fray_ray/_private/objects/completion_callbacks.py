"""`ObjectRef._on_completed`: a user callback run with an object's value once it is ready."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


def call_when_completed(future: concurrent.futures.Future, callback: Callable[[Any], None]) -> None:
    """Run `callback(value)` when `future` settles; an error settles it with the exception object.

    A callback that raises is logged, never propagated: it runs on a thread of the runtime.
    """

    def settled(done: concurrent.futures.Future) -> None:
        error = done.exception()
        try:
            callback(error if error is not None else done.result())
        except Exception:  # noqa: BLE001 - a user callback must not break the runtime's thread
            logger.exception("ObjectRef._on_completed callback %r raised", callback)

    future.add_done_callback(settled)
