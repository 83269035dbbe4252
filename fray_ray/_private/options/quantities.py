"""Numeric option values, checked as Ray 2.60 checks them, plus a bound Ray lacks.

- Resource quantities (`num_cpus`, `num_gpus`, `memory`, the values of `resources`) must not be
  negative or finer than 1/10000, and must be finite: Ray fails on NaN with ValueError and on
  infinity with OverflowError when it turns them into its fixed-point units. The same types
  and Ray's words are used here, followed by the option's name.
- Counts that Ray hands to its C++ core as 64-bit integers (`max_retries`, `max_task_retries`,
  `max_concurrency`, `max_pending_calls`, `num_returns`) raise OverflowError at `.remote()`
  when they do not fit, as in Ray.
- `num_returns` is bounded by MAX_NUM_RETURNS: every return gets its object entry and
  ObjectRef when the call is submitted, so an absurd count would exhaust the driver's memory
  (Ray's driver too). Ray has no such bound; this is a documented difference.
- An actor method's `num_returns` and `max_task_retries` are checked at `.remote()`, where Ray
  checks them (it turns them into C integers there: 1.5 becomes 1, NaN and infinity raise).

>>> check_quantity("num_cpus", float("nan"))
Traceback (most recent call last):
...
ValueError: cannot convert float NaN to integer (the quantity of resource num_cpus must be a finite number)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MAX_NUM_RETURNS", "check_c_integers", "check_quantity", "method_call_integer", "method_num_returns"]

#: The largest `num_returns` fray_ray accepts for one call.
MAX_NUM_RETURNS: Final = 1_000_000
_C_LONG_MIN: Final = -(2**63)
_C_LONG_MAX: Final = 2**63 - 1
#: Options Ray passes to C as 64-bit integers when a task is submitted or an actor created.
C_INTEGER_OPTIONS: Final = ("max_retries", "max_task_retries", "max_concurrency", "max_pending_calls", "num_returns")


def check_quantity(name: str, value: Any) -> None:
    """Reject a negative, too fine or non-finite resource quantity with Ray's error type."""
    if value is None:
        return
    if value < 0:
        raise ValueError(f"The quantity of resource {name} cannot be negative")
    if 0 < value < 0.0001:
        raise ValueError(
            f"The precision of the fractional quantity of resource {name} cannot go beyond 0.0001"
        )
    if isinstance(value, float) and not math.isfinite(value):
        _raise_not_finite(value, f"the quantity of resource {name} must be a finite number")


def _raise_not_finite(value: float, why: str) -> None:
    if math.isnan(value):
        raise ValueError(f"cannot convert float NaN to integer ({why})")
    raise OverflowError(f"cannot convert float infinity to integer ({why})")


def _fits_c_long(value: int) -> bool:
    return _C_LONG_MIN <= value <= _C_LONG_MAX


def check_c_integers(options: Mapping[str, Any]) -> None:
    """At `.remote()`: integer options that Ray could not pass to C raise OverflowError there."""
    for key in C_INTEGER_OPTIONS:
        value = options.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not _fits_c_long(value):
            raise OverflowError(f"Python int too large to convert to C long (the option {key}={value})")
    _check_num_returns_bound(options.get("num_returns"))


def _check_num_returns_bound(value: Any) -> None:
    if isinstance(value, int) and value > MAX_NUM_RETURNS:
        raise ValueError(
            f"num_returns={value} is more than fray_ray allows for one call ({MAX_NUM_RETURNS}): every "
            "return gets its ObjectRef when the call is submitted. Return a list in one object instead."
        )


def method_call_integer(key: str, value: Any) -> int:
    """An actor method's integer option as Ray reads it at `.remote()` (a C int conversion)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            _raise_not_finite(value, f"the option {key} must be a finite number")
        value = int(value)
    if not isinstance(value, int):
        raise TypeError(f"an integer is required (the option {key}={value!r})")
    if not _fits_c_long(value):
        raise OverflowError(f"Python int too large to convert to C long (the option {key}={value})")
    return int(value)


def method_num_returns(value: Any) -> int | str:
    """An actor method call's `num_returns`, checked and converted as Ray does at `.remote()`."""
    if value in ("streaming", "dynamic"):
        return value
    count = method_call_integer("num_returns", value)
    if count < 0:
        raise ValueError(f"num_returns must be >= 0, but got {count}.")
    _check_num_returns_bound(count)
    return count
