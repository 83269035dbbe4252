"""When a failed attempt is run again because of the exception it raised: one rule for tasks,
gang tasks and actor calls (Ray's `retry_exceptions`).

An attempt is retried when its error is the user's (a RayTaskError raised by the function or
method, not a system failure or an actor's own death), `retry_exceptions` is True or lists a
class the cause is an instance of, and the budget allows (`max_retries` for tasks,
`max_task_retries` for actor calls, which callers count themselves; -1: no limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fray_ray._private.objects.serialization import SerializedValue, deserialize
from fray_ray.exceptions import RayTaskError


def retries_user_exception(retry_exceptions: bool | tuple[type, ...], results: Sequence[SerializedValue]) -> bool:
    """True if the attempt failed with a user exception its `retry_exceptions` asks to retry."""
    if not retry_exceptions:
        return False
    error = next((value for value in results if value.is_error), None)
    if error is None:
        return False
    try:
        raised: Any = deserialize(error)
    except Exception:  # noqa: BLE001 - an exception the driver cannot rebuild is still the user's
        return retry_exceptions is True
    if not isinstance(raised, RayTaskError):
        return False  # a system failure, or the actor's own (its constructor raised), not the call's
    if retry_exceptions is True:
        return True
    return isinstance(raised.cause, tuple(retry_exceptions))


def within_retries(max_retries: int, failures: int) -> bool:
    """True while `failures` attempts have failed and `max_retries` (-1: no limit) allows another."""
    return max_retries < 0 or failures < max_retries
