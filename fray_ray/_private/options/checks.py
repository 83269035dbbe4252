"""Value checks of the options table, each raising with Ray 2.60's exception type and wording.

Every check takes `(keyword, value, context)`; the type of the value has already been checked
against the row's `types` (see `model.Option.validate`). `notes_ray_parity.md` lists the Ray
behaviour each message was observed from.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from types import FrameType
from typing import Any, Final

from fray_ray._private.core import runtime_state
from fray_ray._private.core.runtime_env import parse_runtime_env
from fray_ray._private.options.model import Check, Context
from fray_ray._private.options.quantities import check_quantity

_PACKAGE_DIR: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
"""fray_ray's own directory: frames inside it are not the user's."""


def _warn(message: str) -> None:
    """Warn at the first frame outside fray_ray, so the user's decorator line is blamed."""
    level = 2  # stacklevel 2 is the caller of _warn
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def quantity(key: str, value: Any, ctx: Context) -> None:
    check_quantity(key, value)


def resources(key: str, value: Any, ctx: Context) -> None:
    if value is None:
        return
    for name, amount in value.items():
        if name in ("CPU", "GPU"):
            raise ValueError(
                "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' in "
                "'resources' keyword"
            )
        if not isinstance(name, str):
            raise TypeError(f"Resource names must be strings, got {name!r} of type {type(name)}")
        if not isinstance(amount, (int, float)):
            raise TypeError(
                f"The quantity of resource {name} must be a number, but received type "
                f"{type(amount)}"
            )
        check_quantity(name, amount)


def _at_least(minimum: int, message: str) -> Check:
    def check(key: str, value: Any, ctx: Context) -> None:
        if value is not None and value < minimum:
            raise ValueError(message.format(key=key))

    return check


NON_NEGATIVE = _at_least(0, "The keyword '{key}' only accepts None, 0 or a positive integer.")
RETRY_COUNT = _at_least(
    -1,
    "The keyword '{key}' only accepts None, 0, -1 or a positive integer, where -1 represents "
    "infinity.",
)


def max_restarts(key: str, value: Any, ctx: Context) -> None:
    if value is None:  # Ray lists None as allowed but fails on it with a TypeError
        raise TypeError(
            "The keyword 'max_restarts' only accepts 0, -1 or a positive integer, where -1 "
            "represents infinity; None is not allowed."
        )
    RETRY_COUNT(key, value, ctx)


_NUM_RETURNS_MESSAGE: Final = (
    "Default None. When None is passed, The default value is 1 for a task and actor task, and "
    "'streaming' for generator tasks and generator actor tasks. The keyword 'num_returns' only "
    "accepts None, a non-negative integer, 'streaming' (for generators), or 'dynamic'. "
    "'dynamic' flag will be deprecated in the future, and it is recommended to use 'streaming' "
    "instead."
)


def check_num_returns(value: Any, is_generator: bool) -> None:
    if isinstance(value, str):
        if value not in ("streaming", "dynamic"):
            raise TypeError(_NUM_RETURNS_MESSAGE)  # Ray fails on other strings with a TypeError
        if not is_generator:
            raise ValueError(
                f"num_returns={value!r} can only be used with generator functions (functions "
                "that use 'yield'). The decorated function is not a generator function."
            )
    elif value is not None and value < 0:
        raise ValueError(_NUM_RETURNS_MESSAGE)


def num_returns(key: str, value: Any, ctx: Context) -> None:
    if value == "dynamic":
        _warn(
            "num_returns='dynamic' is deprecated and will be removed in a future Ray release. "
            "Use num_returns='streaming' instead."
        )
    check_num_returns(value, ctx.is_generator)


def _is_exception_class(item: object) -> bool:
    return isinstance(item, type) and issubclass(item, BaseException)


def retry_exceptions(key: str, value: Any, ctx: Context) -> None:
    if isinstance(value, (list, tuple)) and not all(_is_exception_class(i) for i in value):
        raise ValueError("retry_exceptions must be either a boolean or a list of exceptions")


def generator_backpressure(key: str, value: Any, ctx: Context) -> None:
    if value == 0:
        raise ValueError(
            "_generator_backpressure_num_objects=0 is not allowed. Use a value > 0. If the value "
            "is equal to 1, the behavior is identical to Python generator (generator 1 object "
            "whenever `next` is called). Use -1 to disable this feature. "
        )


def objects_per_yield(key: str, value: Any, ctx: Context) -> None:
    if value is not None and value <= 0:
        raise ValueError(
            "_num_objects_per_yield is a private streaming generator option that must be set to "
            "a positive integer."
        )


def actor_generator_backpressure(key: str, value: Any, ctx: Context) -> None:
    if value is not None and (value == 0 or value < -1):
        raise ValueError(
            "_actor_generator_backpressure_num_objects must be > 0 to cap the actor's total "
            f"unconsumed generator objects, or -1 to disable. Got {value}."
        )


def task_object_store_memory(key: str, value: Any, ctx: Context) -> None:
    if value is not None:
        raise ValueError("Setting 'object_store_memory' is not implemented for tasks")


def actor_object_store_memory(key: str, value: Any, ctx: Context) -> None:
    NON_NEGATIVE(key, value, ctx)
    # Ray warns whenever the keyword is present, even as None.
    _warn(
        "Setting 'object_store_memory' for actors is deprecated since it doesn't actually "
        "reserve the required object store memory. Object spilling handles large objects."
    )


def lifetime(key: str, value: Any, ctx: Context) -> None:
    if value is not None and value not in ("detached", "non_detached"):
        raise ValueError(
            "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."
        )


def scheduling_strategy(key: str, value: Any, ctx: Context) -> None:
    if isinstance(value, str) and value not in ("DEFAULT", "SPREAD"):
        raise ValueError(
            f"Invalid scheduling_strategy value {value}. Valid values are "
            '["DEFAULT" | "SPREAD" | PlacementGroupSchedulingStrategy | '
            "NodeAffinitySchedulingStrategy]"
        )


def runtime_env(key: str, value: Any, ctx: Context) -> None:
    runtime = runtime_state.current_or_none()
    # Paths are read on the driver; a worker re-checking them against its own disk would be wrong.
    parse_runtime_env(value, check_paths=runtime is None or runtime.is_driver)


def concurrency_groups(key: str, value: Any, ctx: Context) -> None:
    normalise_groups(value)  # raises on malformed entries


def normalise_groups(value: Any) -> dict[str, int]:
    """`{"io": 2}`, `[("io", 2)]` or `[{"name": "io", "max_concurrency": 2}]` → `{"io": 2}`."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        pairs = []
        for entry in value:
            if isinstance(entry, Mapping) and set(entry) == {"name", "max_concurrency"}:
                pairs.append((entry["name"], entry["max_concurrency"]))
            elif isinstance(entry, tuple) and len(entry) == 2:
                pairs.append(entry)
            else:
                raise TypeError(
                    "concurrency_groups must be a dict of group name to max concurrency, e.g. "
                    f'{{"io": 2}}; got the entry {entry!r}'
                )
    groups = {}
    for name, limit in pairs:
        if not isinstance(name, str):
            raise TypeError(f"Concurrency group names must be strings, got {name!r}")
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(
                f"The max concurrency of group '{name}' must be an int, got {limit!r} of type "
                f"{type(limit)}"
            )
        if limit < 1:
            raise ValueError(f"The max concurrency of group '{name}' must be >= 1, got {limit}")
        groups[name] = limit
    return groups


def check_method_num_returns(value: Any, is_generator: bool) -> None:
    if isinstance(value, str) and value not in ("streaming", "dynamic"):
        raise TypeError(f"num_returns must be an int, 'streaming' or 'dynamic', got {value!r}")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"num_returns must be >= 0, but got {value}.")
    check_num_returns(value, is_generator)


def method_num_returns(key: str, value: Any, ctx: Context) -> None:
    if value == "dynamic":
        num_returns(key, value, ctx)
    check_method_num_returns(value, ctx.is_generator)


def method_retry_exceptions(key: str, value: Any, ctx: Context) -> None:
    if isinstance(value, bool):
        return
    if not isinstance(value, (list, tuple)) or not all(_is_exception_class(i) for i in value):
        raise AssertionError(
            "retry_exceptions can either be boolean or list/tuple of exception types."
        )


def tpu_variant(key: str, value: Any, ctx: Context) -> None:
    if value is not None:
        from fray_ray.fray import get_tpu_topology

        get_tpu_topology(value)  # ValueError listing the valid variants


def positive(key: str, value: Any, ctx: Context) -> None:
    if value is not None and value < 1:
        raise ValueError(f"The keyword '{key}' must be a positive integer, got {value}.")
