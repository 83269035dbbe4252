"""The error a caller reads for an actor call that `ray.cancel` stopped.

Ray 2.60 tells two cases apart. A call whose coroutine was running on an async actor is
cancelled inside the actor (asyncio.CancelledError at its `await`), so it fails there like any
other task: the caller gets `RayTaskError(TaskCancelledError)`, caught by both
`except RayTaskError` and `except TaskCancelledError`. A call that never started, or a sync
method (which only sees the flag through `is_canceled()`), fails with a plain
TaskCancelledError.
"""

from __future__ import annotations

import traceback

from fray_ray.exceptions import RayTaskError, TaskCancelledError


def cancelled_call_error(
    call_id: bytes,
    *,
    class_name: str,
    method: str,
    actor_id: bytes,
    pid: int | None,
    coroutine_running: bool,
) -> BaseException:
    """The error for a cancelled actor call; `coroutine_running` says whether the call had
    been handed to an async actor (whose coroutine the cancel interrupts)."""
    cancelled = TaskCancelledError(call_id.hex())
    if not coroutine_running:
        return cancelled
    text = "".join(traceback.format_exception_only(type(cancelled), cancelled))
    return RayTaskError.create(
        f"{class_name}.{method}",
        text,
        cancelled,
        pid=pid,
        actor_repr=class_name,
        actor_id=actor_id.hex(),
    )
