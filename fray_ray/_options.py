"""Options of `@remote`, `.options()` and `@method`: valid keys, defaults, and validation.

Options are layered decorator → `.options()` → call. Each layer's keywords are checked with
Ray 2.60's exception types and wording (see `notes_ray_parity.md` for every case observed), then
the merged mapping is parsed once into a frozen `TaskOptions`, `ActorOptions` or
`MethodOptions` whose typed fields the runtime reads. `given` on each value keeps the keywords
that were set explicitly (what Ray exposes as `remote_fn._default_options`).

The key tables (`_COMMON`, `_TASK_ONLY`, `_ACTOR_ONLY`, `_METHOD`) are the one place that says
which keys exist, which types they take and how their values are checked; the dataclass fields
are the one place that says what the defaults are:

    tasks    num_cpus=1, num_gpus=0, memory=0, max_retries=3, retry_exceptions=False,
             num_returns=1 ("streaming" for generator functions), max_calls=0 (no limit)
    actors   num_cpus: 1 to place and 0 while alive when no resource is given (see
             `ActorOptions.scheduling_demand`), max_restarts=0, max_task_retries=0,
             max_concurrency=1 (1000 for async actors), max_pending_calls=-1 (no limit),
             lifetime=None, get_if_exists=False
    methods  num_returns=1 ("streaming" for generator methods), max_task_retries=the actor's

>>> opts = TaskOptions.from_options({"num_cpus": 2, "resources": {"TPU": 4}})
>>> opts.resource_demand()
{'CPU': 2.0, 'GPU': 0.0, 'memory': 0, 'TPU': 4.0}
>>> opts.merge({"max_retries": 0}).max_retries
0
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from fray_ray._option_values import check_quantity as _check_quantity

if TYPE_CHECKING:
    from fray_ray.util.scheduling_strategies import SchedulingStrategyT

__all__ = [
    "ACTOR_OPTION_KEYS",
    "ALL_OPTION_KEYS",
    "METHOD_OPTION_KEYS",
    "TASK_OPTION_KEYS",
    "UNSET",
    "ActorOptions",
    "MethodOptions",
    "TaskOptions",
    "check_decorator_options",
    "check_remote_target",
    "is_async_actor_class",
    "is_generator_function",
    "split_method_args",
    "split_remote_args",
    "validate_actor_options",
    "validate_method_options",
    "validate_task_options",
]


class _Unset(enum.Enum):
    """Type of `UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = _Unset.UNSET
"""An option that was not given, as opposed to one given as None."""

NumReturns: TypeAlias = int | Literal["streaming", "dynamic"]
RetryExceptions: TypeAlias = bool | tuple[type[BaseException], ...]
_NoneType = type(None)
_PACKAGE_DIR: Final = os.path.dirname(os.path.abspath(__file__)) + os.sep


# --------------------------------------------------------------------------------------------
# Value checks. Each takes (key, value, context) and raises with Ray's type and wording.


@dataclasses.dataclass(frozen=True)
class _Context:
    """What a check may need to know besides the value."""

    is_generator: bool = False
    is_async: bool = False


Check: TypeAlias = Callable[[str, Any, _Context], None]


def _warn(message: str) -> None:
    """Warn at the first frame outside fray_ray, so the user's decorator line is blamed."""
    level, frame = 2, sys._getframe(1)  # stacklevel 2 is the caller of _warn
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _quantity(key: str, value: Any, ctx: _Context) -> None:
    _check_quantity(key, value)


def _resources(key: str, value: Any, ctx: _Context) -> None:
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
        _check_quantity(name, amount)


def _at_least(minimum: int, message: str) -> Check:
    def check(key: str, value: Any, ctx: _Context) -> None:
        if value is not None and value < minimum:
            raise ValueError(message.format(key=key))

    return check


_NON_NEGATIVE = _at_least(0, "The keyword '{key}' only accepts None, 0 or a positive integer.")
_RETRY_COUNT = _at_least(
    -1,
    "The keyword '{key}' only accepts None, 0, -1 or a positive integer, where -1 represents "
    "infinity.",
)


def _max_restarts(key: str, value: Any, ctx: _Context) -> None:
    if value is None:  # Ray lists None as allowed but fails on it with a TypeError
        raise TypeError(
            "The keyword 'max_restarts' only accepts 0, -1 or a positive integer, where -1 "
            "represents infinity; None is not allowed."
        )
    _RETRY_COUNT(key, value, ctx)


_NUM_RETURNS_MESSAGE: Final = (
    "Default None. When None is passed, The default value is 1 for a task and actor task, and "
    "'streaming' for generator tasks and generator actor tasks. The keyword 'num_returns' only "
    "accepts None, a non-negative integer, 'streaming' (for generators), or 'dynamic'. "
    "'dynamic' flag will be deprecated in the future, and it is recommended to use 'streaming' "
    "instead."
)


def _check_num_returns(value: Any, is_generator: bool) -> None:
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


def _num_returns(key: str, value: Any, ctx: _Context) -> None:
    if value == "dynamic":
        _warn(
            "num_returns='dynamic' is deprecated and will be removed in a future Ray release. "
            "Use num_returns='streaming' instead."
        )
    _check_num_returns(value, ctx.is_generator)


def _is_exception_class(item: object) -> bool:
    return isinstance(item, type) and issubclass(item, BaseException)


def _retry_exceptions(key: str, value: Any, ctx: _Context) -> None:
    if isinstance(value, (list, tuple)) and not all(_is_exception_class(i) for i in value):
        raise ValueError("retry_exceptions must be either a boolean or a list of exceptions")


def _generator_backpressure(key: str, value: Any, ctx: _Context) -> None:
    if value == 0:
        raise ValueError(
            "_generator_backpressure_num_objects=0 is not allowed. Use a value > 0. If the value "
            "is equal to 1, the behavior is identical to Python generator (generator 1 object "
            "whenever `next` is called). Use -1 to disable this feature. "
        )


def _objects_per_yield(key: str, value: Any, ctx: _Context) -> None:
    if value is not None and value <= 0:
        raise ValueError(
            "_num_objects_per_yield is a private streaming generator option that must be set to "
            "a positive integer."
        )


def _actor_generator_backpressure(key: str, value: Any, ctx: _Context) -> None:
    if value is not None and (value == 0 or value < -1):
        raise ValueError(
            "_actor_generator_backpressure_num_objects must be > 0 to cap the actor's total "
            f"unconsumed generator objects, or -1 to disable. Got {value}."
        )


def _task_object_store_memory(key: str, value: Any, ctx: _Context) -> None:
    if value is not None:
        raise ValueError("Setting 'object_store_memory' is not implemented for tasks")


def _actor_object_store_memory(key: str, value: Any, ctx: _Context) -> None:
    _NON_NEGATIVE(key, value, ctx)
    # Ray warns whenever the keyword is present, even as None.
    _warn(
        "Setting 'object_store_memory' for actors is deprecated since it doesn't actually "
        "reserve the required object store memory. Object spilling handles large objects."
    )


def _lifetime(key: str, value: Any, ctx: _Context) -> None:
    if value is not None and value not in ("detached", "non_detached"):
        raise ValueError(
            "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."
        )


def _scheduling_strategy(key: str, value: Any, ctx: _Context) -> None:
    if isinstance(value, str) and value not in ("DEFAULT", "SPREAD"):
        raise ValueError(
            f"Invalid scheduling_strategy value {value}. Valid values are "
            '["DEFAULT" | "SPREAD" | PlacementGroupSchedulingStrategy | '
            "NodeAffinitySchedulingStrategy]"
        )


def _runtime_env(key: str, value: Any, ctx: _Context) -> None:
    from fray_ray._private import runtime_state
    from fray_ray._private.runtime_env import parse_runtime_env

    runtime = runtime_state.current_or_none()
    # Paths are read on the driver; a worker re-checking them against its own disk would be wrong.
    parse_runtime_env(value, check_paths=runtime is None or runtime.is_driver)


# Label names and values: at most 63 characters, alphanumeric at both ends, [-_.] inside.
_LABEL_NAME: Final = re.compile(r"[a-zA-Z0-9]([-_.a-zA-Z0-9]{0,61}[a-zA-Z0-9])?")
_LABEL_RULE: Final = (
    "must be 63 chars or less beginning and ending with an alphanumeric character "
    "([a-z0-9A-Z]) with dashes (-), underscores (_),dots (.), and alphanumerics between."
)
_IN_OPERATOR: Final = re.compile(r"in\((.*)\)")


def _check_label_key(key: object) -> None:
    if not isinstance(key, str):
        raise TypeError(f"Label selector keys must be strings, got {key!r} of type {type(key)}")
    prefix, _, name = key.rpartition("/")
    if "/" in key and (
        len(prefix) > 253 or not all(_LABEL_NAME.fullmatch(part) for part in prefix.split("."))
    ):
        raise ValueError(
            f"Invalid label key prefix `{prefix}`. Prefix must be a series of DNS labels "
            "separated by dots (.), not longer than 253 characters in total."
        )
    if not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"Invalid label key name `{name}`. Name {_LABEL_RULE}")


def _check_label_value(raw: object) -> None:
    if not isinstance(raw, str):
        raise TypeError(
            f"Label selector values must be strings, got {raw!r} of type {type(raw)}"
        )
    if raw == "":
        return
    body = raw[1:] if raw.startswith("!") else raw
    operator = _IN_OPERATOR.fullmatch(body)
    values = [v.strip() for v in operator.group(1).split(",")] if operator else [body]
    if not all(_LABEL_NAME.fullmatch(v) for v in values):
        raise ValueError(
            f"Invalid label selector value `{raw}`. The label selector value should contain "
            "optional operators and a label value. Supported operators are: ! and {'in'}. "
            f"Value {_LABEL_RULE}"
        )


def _label_selector(key: str, value: Any, ctx: _Context) -> None:
    for label, selector in (value or {}).items():
        _check_label_key(label)
        _check_label_value(selector)


def _fallback_strategy(key: str, value: Any, ctx: _Context) -> None:
    for entry in value or ():
        if not isinstance(entry, Mapping):
            raise ValueError("Each element in fallback_strategy must be a dictionary.")
        for option, setting in entry.items():
            if option != "label_selector":
                raise ValueError(
                    f"Unsupported option found: '{option}'. Only ['label_selector'] is "
                    "currently supported."
                )
            if not isinstance(setting, Mapping):
                raise ValueError('The value of "label_selector" must be a dictionary.')
            _label_selector(option, setting, ctx)


def _concurrency_groups(key: str, value: Any, ctx: _Context) -> None:
    _normalise_groups(value)  # raises on malformed entries


def _normalise_groups(value: Any) -> dict[str, int]:
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


# --------------------------------------------------------------------------------------------
# Key tables


@functools.cache
def _strategy_types() -> tuple[type, ...]:
    # Imported on first use: fray_ray.util may import the runtime, which imports this module.
    from fray_ray.util import scheduling_strategies as s

    return (
        _NoneType,
        str,
        s.PlacementGroupSchedulingStrategy,
        s.NodeAffinitySchedulingStrategy,
        s.NodeLabelSchedulingStrategy,
    )


class _PlacementGroupStandIn:
    """Names PlacementGroup in messages and checks until fray_ray.util.placement_group exists."""

    def __repr__(self) -> str:
        return "<class 'fray_ray.util.placement_group.PlacementGroup'>"


def _placement_group_types() -> tuple[Any, ...]:
    try:
        from fray_ray.util.placement_group import PlacementGroup
    except ImportError:
        return (_NoneType, str, _PlacementGroupStandIn())
    return (_NoneType, str, PlacementGroup)


@dataclasses.dataclass(frozen=True)
class _Key:
    """One option keyword: the types it takes (in Ray's order) and its value check."""

    types: tuple[type, ...] | Callable[[], tuple[Any, ...]]
    check: Check | None = None

    def validate(self, key: str, value: Any, ctx: _Context) -> None:
        types = self.types() if callable(self.types) else self.types
        if not _isinstance(value, types):
            shown = types[0] if len(types) == 1 else types
            raise TypeError(
                f"The type of keyword '{key}' must be {shown}, but received type {type(value)}"
            )
        if self.check is not None:
            self.check(key, value, ctx)


def _isinstance(value: Any, types: tuple[Any, ...]) -> bool:
    for kind in types:
        if isinstance(kind, _PlacementGroupStandIn):
            if hasattr(value, "bundle_specs"):
                return True
        elif isinstance(value, kind):
            return True
    return False


_NUMBER: Final = (float, int, _NoneType)
_INT: Final = (int, _NoneType)
_STR: Final = (str, _NoneType)
_BOOL: Final = (bool, _NoneType)
_DICT: Final = (dict, _NoneType)

# Valid for both remote functions and actors, in the order Ray lists them.
_COMMON: Final[dict[str, _Key]] = {
    "label_selector": _Key(_DICT, _label_selector),
    "fallback_strategy": _Key((list, _NoneType), _fallback_strategy),
    "accelerator_type": _Key(_STR),
    "memory": _Key(_NUMBER, _quantity),
    "name": _Key(_STR),
    "num_cpus": _Key(_NUMBER, _quantity),
    "num_gpus": _Key(_NUMBER, _quantity),
    "object_store_memory": _Key(_INT, _NON_NEGATIVE),
    "placement_group": _Key(_placement_group_types),
    "placement_group_bundle_index": _Key((int,)),
    "placement_group_capture_child_tasks": _Key(_BOOL),
    "resources": _Key(_DICT, _resources),
    "runtime_env": _Key(_DICT, _runtime_env),
    "scheduling_strategy": _Key(_strategy_types, _scheduling_strategy),
    "enable_task_events": _Key((bool,)),
    "_labels": _Key(_DICT),
}

# Remote functions only (num_cpus and object_store_memory are re-specified for tasks).
_TASK_ONLY: Final[dict[str, _Key]] = {
    "max_calls": _Key(_INT, _NON_NEGATIVE),
    "max_retries": _Key(_INT, _RETRY_COUNT),
    "num_cpus": _Key(_NUMBER, _quantity),
    "num_returns": _Key((int, str, _NoneType), _num_returns),
    "object_store_memory": _Key(_INT, _task_object_store_memory),
    "retry_exceptions": _Key((bool, list, tuple), _retry_exceptions),
    "_generator_backpressure_num_objects": _Key(_INT, _generator_backpressure),
    "_num_objects_per_yield": _Key(_INT, _objects_per_yield),
}

# Actors only (object_store_memory is re-specified: allowed but deprecated).
_ACTOR_ONLY: Final[dict[str, _Key]] = {
    "concurrency_groups": _Key((list, dict, _NoneType), _concurrency_groups),
    "enable_tensor_transport": _Key(_BOOL),
    "lifetime": _Key(_STR, _lifetime),
    "max_concurrency": _Key(_INT, _NON_NEGATIVE),
    "max_restarts": _Key(_INT, _max_restarts),
    "max_task_retries": _Key(_INT, _RETRY_COUNT),
    "max_pending_calls": _Key(_INT, _RETRY_COUNT),
    "namespace": _Key(_STR),
    "get_if_exists": _Key((bool,)),
    "allow_out_of_order_execution": _Key(_BOOL),
    "_actor_generator_backpressure_num_objects": _Key(_INT, _actor_generator_backpressure),
    "object_store_memory": _Key(_INT, _actor_object_store_memory),
}


def _check_method_num_returns(value: Any, is_generator: bool) -> None:
    if isinstance(value, str) and value not in ("streaming", "dynamic"):
        raise TypeError(f"num_returns must be an int, 'streaming' or 'dynamic', got {value!r}")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"num_returns must be >= 0, but got {value}.")
    _check_num_returns(value, is_generator)


def _method_num_returns(key: str, value: Any, ctx: _Context) -> None:
    if value == "dynamic":
        _num_returns(key, value, ctx)
    _check_method_num_returns(value, ctx.is_generator)


def _method_retry_exceptions(key: str, value: Any, ctx: _Context) -> None:
    if isinstance(value, bool):
        return
    if not isinstance(value, (list, tuple)) or not all(_is_exception_class(i) for i in value):
        raise AssertionError(
            "retry_exceptions can either be boolean or list/tuple of exception types."
        )


# `@method(...)` keywords; `.options()` on an actor method also takes `name`.
_METHOD: Final[dict[str, _Key]] = {
    "num_returns": _Key((int, str, _NoneType), _method_num_returns),
    "concurrency_group": _Key(_STR),
    "max_task_retries": _Key(_INT, _RETRY_COUNT),
    # Any type reaches the check: Ray reports every bad value here with an AssertionError.
    "retry_exceptions": _Key((object,), _method_retry_exceptions),
    "_generator_backpressure_num_objects": _Key(_INT, _generator_backpressure),
    "_num_objects_per_yield": _Key(_INT, _objects_per_yield),
    "enable_task_events": _Key((bool,)),
    "tensor_transport": _Key(_STR),
}
_METHOD_CALL_ONLY: Final[dict[str, _Key]] = {"name": _Key(_STR)}

def _tpu_variant(key: str, value: Any, ctx: _Context) -> None:
    if value is not None:
        from fray_ray.fray import get_tpu_topology

        get_tpu_topology(value)  # ValueError listing the valid variants


def _positive(key: str, value: Any, ctx: _Context) -> None:
    if value is not None and value < 1:
        raise ValueError(f"The keyword '{key}' must be a positive integer, got {value}.")


# fray_ray's own keywords (gangs of hosts); accepted everywhere, not listed in Ray's messages.
_FRAY_KEYS: Final[dict[str, _Key]] = {
    "tpu": _Key(_STR, _tpu_variant),  # a TPU slice variant, e.g. "v5p-16": run on every host
    "num_slices": _Key(_INT, _positive),  # how many slices of `tpu` (multislice)
    "gpu": _Key(_STR),  # a GPU variant, e.g. "H100", with num_gpus per host
    "num_hosts": _Key(_INT, _positive),  # how many GPU hosts one call spans (a gang)
    "_gang": _Key((bytes, _NoneType)),  # a reserved slice (SlicePlacementGroup) to run on
}
FRAY_OPTION_KEYS: Final = tuple(_FRAY_KEYS)
"""fray_ray's own option keywords: `tpu`, `num_slices`, `gpu`, `num_hosts`."""

_TASK_KEYS: Final = {**_COMMON, **_TASK_ONLY, **_FRAY_KEYS}
_ACTOR_KEYS: Final = {**_COMMON, **_ACTOR_ONLY, **_FRAY_KEYS}
_METHOD_CALL_KEYS: Final = {**_METHOD, **_METHOD_CALL_ONLY}

TASK_OPTION_KEYS: Final = tuple({**_COMMON, **_TASK_ONLY})
"""Keywords `@remote`/`.options()` accept for functions, in the order Ray's errors list them."""
ACTOR_OPTION_KEYS: Final = tuple({**_COMMON, **_ACTOR_ONLY})
"""Keywords `@remote`/`.options()` accept for classes, in the order Ray's errors list them."""
METHOD_OPTION_KEYS: Final = tuple(_METHOD)
"""Keywords `@method` accepts; an actor method's `.options()` also takes `name`."""
ALL_OPTION_KEYS: Final = tuple({**_TASK_ONLY, **_ACTOR_ONLY, **_COMMON})
"""Every `@remote` keyword (for functions or classes), in the order Ray's usage error lists them."""


# --------------------------------------------------------------------------------------------
# Validation entry points


def _validate(
    options: Mapping[str, Any],
    table: Mapping[str, _Key],
    ctx: _Context,
    unknown: Callable[[str], Exception],
) -> dict[str, Any]:
    for key, value in options.items():
        spec = table.get(key)
        if spec is None:
            raise unknown(key)
        spec.validate(key, value, ctx)
    return dict(options)


def validate_task_options(
    options: Mapping[str, Any], *, is_generator: bool = False
) -> dict[str, Any]:
    """Check a remote function's option keywords; returns them as a new dict.

    Pass the merged mapping (decorator, then `.options()`, then call). Raises ValueError for an
    unknown keyword (the message lists the valid ones) or a bad value, TypeError for a wrong
    type, as Ray does.

    >>> validate_task_options({"num_cpus": 0.5})
    {'num_cpus': 0.5}
    """

    def unknown(key: str) -> Exception:
        return ValueError(
            f"Invalid option keyword {key} for remote functions. Valid ones are "
            f"{list(TASK_OPTION_KEYS)}."
        )

    return _validate(options, _TASK_KEYS, _Context(is_generator=is_generator), unknown)


def validate_actor_options(
    options: Mapping[str, Any], *, is_async: bool = False, in_options: bool = False
) -> dict[str, Any]:
    """Check an actor class's option keywords; returns them as a new dict.

    Pass the merged mapping (decorator, then `.options()`), or, with `in_options=True`, the
    `.options()` keywords alone: `concurrency_groups` is refused there, and the checks that
    need the merged mapping (`get_if_exists` needs `name`) are skipped. Raises ValueError or
    TypeError as Ray does.
    """
    if in_options and "concurrency_groups" in options:
        raise ValueError("Setting 'concurrency_groups' is not supported in '.options()'.")

    def unknown(key: str) -> Exception:
        return ValueError(
            f"Invalid option keyword {key} for actors. Valid ones are {list(ACTOR_OPTION_KEYS)}."
        )

    checked = _validate(options, _ACTOR_KEYS, _Context(is_async=is_async), unknown)
    if not in_options and checked.get("get_if_exists") and not checked.get("name"):
        raise ValueError("The actor name must be specified to use `get_if_exists`.")
    return checked


def validate_method_options(
    options: Mapping[str, Any], *, is_generator: bool = False, in_options: bool = False
) -> dict[str, Any]:
    """Check `@method(...)` keywords (or, with `in_options=True`, a method's `.options()`).

    An unknown `@method` keyword raises AssertionError, as in Ray; an unknown `.options()`
    keyword raises TypeError (Ray raises it from `.remote()`). Bad values raise what Ray raises
    when the call is submitted: TypeError/ValueError for num_returns, AssertionError for
    retry_exceptions.
    """

    table = _METHOD_CALL_KEYS if in_options else _METHOD
    unknown = _unknown_option_error if in_options else _unknown_method_error
    return _validate(options, table, _Context(is_generator=is_generator), unknown)


def _unknown_method_error(key: str) -> Exception:
    return AssertionError(
        f"Unexpected keyword argument to @ray.method: '{key}'. The supported keyword "
        f"arguments are {list(METHOD_OPTION_KEYS)}"
    )


def _unknown_option_error(key: str) -> Exception:
    return TypeError(
        f"ActorMethod.options() got an unexpected keyword argument '{key}'. Valid ones are "
        f"{list(_METHOD_CALL_KEYS)}."
    )


# --------------------------------------------------------------------------------------------
# Decorator forms


_REMOTE_USAGE: Final = (
    "The @ray.remote decorator must be applied either with no arguments and no parentheses, "
    "for example '@ray.remote', or it must be applied using some of the arguments in the list "
    f"{list(ALL_OPTION_KEYS)}, for example "
    "'@ray.remote(num_returns=2, resources={\"CustomResource\": 1})'."
)
_METHOD_USAGE: Final = (
    "The @ray.method decorator must be applied using no arguments or at least one of the "
    f"arguments in the list {list(METHOD_OPTION_KEYS)}, for example '@ray.method(num_returns=2)'."
)


def split_remote_args(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """Tell `@remote` from `@remote(**options)`.

    Returns `(target, {})` for the bare form and `(UNSET, options)` for the options form (the
    options are validated when the decorator is applied, as in Ray). Raises AssertionError, as
    Ray does, for `@remote()`, `remote(f, num_cpus=1)` and other positional use.
    """
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0], {}
    if not args and kwargs:
        return UNSET, dict(kwargs)
    raise AssertionError(_REMOTE_USAGE)


def check_decorator_options(options: Mapping[str, Any]) -> None:
    """Check the keywords of `@remote(**options)` before the target is known.

    Raises AssertionError for `@remote()` (no keywords), as Ray does. The keywords themselves are
    validated when the decorator is applied, once it is known whether the target is a function
    (`validate_task_options`) or a class (`validate_actor_options`), again as in Ray.
    """
    if not options:
        raise AssertionError(_REMOTE_USAGE)


def check_remote_target(target: object) -> Literal["function", "class"]:
    """Say whether `@remote` is applied to a function or a class.

    Raises ValueError for an `async def` function (async generators are allowed) and TypeError
    for anything that is neither a Python function nor a class.
    """
    if inspect.isclass(target):
        return "class"
    if inspect.isfunction(target):
        if inspect.iscoroutinefunction(target):
            raise ValueError(
                "'async def' should not be used for remote tasks. You can wrap the async "
                "function with `asyncio.run(f())`. See the async actors documentation for "
                "running coroutines in an actor."
            )
        return "function"
    raise TypeError("The @ray.remote decorator must be applied to either a function or a class.")


def split_method_args(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """Tell `@method` from `@method(**options)`; the options are validated here.

    Returns `(function, {})` for the bare form, `(UNSET, options)` otherwise. Raises
    AssertionError for positional misuse or an unknown keyword, as Ray does.
    """
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0], {}
    if args:
        raise AssertionError(_METHOD_USAGE)
    # Only the keys are checked now; Ray checks method option values when a call is submitted.
    for key in kwargs:
        if key not in _METHOD:
            raise _unknown_method_error(key)
    return UNSET, dict(kwargs)


def is_generator_function(function: Callable[..., Any]) -> bool:
    """True for generator and async generator functions (their default is streaming)."""
    return inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)


def is_async_actor_class(cls: type) -> bool:
    """True if any method of `cls` is `async def`: the actor then runs on one event loop."""
    return any(
        inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
        for _, member in inspect.getmembers(cls, inspect.isfunction)
    )


# --------------------------------------------------------------------------------------------
# Parsed option values


def _bytes(value: float) -> int:
    return math.ceil(value)


def _custom_resources(value: Mapping[str, float]) -> dict[str, float]:
    return {name: float(amount) for name, amount in value.items()}


def _retry_value(value: bool | list[Any] | tuple[Any, ...]) -> RetryExceptions:
    return value if isinstance(value, bool) else tuple(value)


# How a validated keyword becomes a field value; keys not listed are taken as they are.
_NORMALISE: Final[dict[str, Callable[[Any], Any]]] = {
    "num_cpus": float,
    "num_gpus": float,
    "memory": _bytes,
    "resources": _custom_resources,
    "retry_exceptions": _retry_value,
    "concurrency_groups": _normalise_groups,
    "fallback_strategy": tuple,
    "label_selector": dict,
    "_labels": dict,
    "runtime_env": dict,
    "tensor_transport": str.upper,
}


def _fields(given: Mapping[str, Any]) -> dict[str, Any]:
    """Field values for the keywords given; None means "default", so it is left out."""
    return {
        key.lstrip("_"): _NORMALISE.get(key, _identity)(value)
        for key, value in given.items()
        if value is not None
    }


def _identity(value: Any) -> Any:
    return value


def _check_placement(options: _Placement) -> None:
    # The deprecated placement_group_* keywords are ignored when a strategy is given.
    if (
        options.placement_group_bundle_index != -1
        and options.placement_group is None
        and options.scheduling_strategy is None
    ):
        raise ValueError("If placement group is not set, the value of bundle index must be -1.")


class _Placement:
    """Fields and helpers shared by task and actor options (no state of its own)."""

    num_gpus: float
    memory: int
    resources: Mapping[str, float]
    runtime_env: Mapping[str, Any] | None
    placement_group: Any
    placement_group_bundle_index: int
    scheduling_strategy: SchedulingStrategyT

    def _demand(self, cpus: float) -> dict[str, float | int]:
        demand: dict[str, float | int] = {"CPU": cpus, "GPU": self.num_gpus, "memory": self.memory}
        demand.update((name, amount) for name, amount in self.resources.items() if amount)
        return demand

    def runtime_env_vars(self) -> dict[str, str]:
        """The `env_vars` of `runtime_env`: set in the task's or actor's process."""
        return dict((self.runtime_env or {}).get("env_vars") or {})


def _check_common(options: _Placement) -> None:
    for name in ("num_gpus", "memory"):
        _check_quantity(name, getattr(options, name))
    _resources("resources", options.resources, _Context())
    _check_placement(options)


@dataclasses.dataclass(frozen=True)
class TaskOptions(_Placement):
    """A remote function's options, merged and checked: what the runtime schedules with.

    Build with `from_options` (which validates the keywords) and layer with `merge`.
    """

    given: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The keywords set explicitly, as given (Ray's `_default_options`)."""
    is_generator: bool = False
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int = 0
    """Bytes of memory to reserve."""
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Custom resources (never CPU or GPU), e.g. `{"TPU": 4}`."""
    accelerator_type: str | None = None
    num_returns: NumReturns | _Unset = UNSET
    """UNSET resolves to 1, or "streaming" for generator functions."""
    max_retries: int = 3
    retry_exceptions: RetryExceptions = False
    max_calls: int = 0
    """Calls per worker process before it is replaced; 0 means no limit."""
    name: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    scheduling_strategy: SchedulingStrategyT = None
    placement_group: Any = None
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None
    label_selector: Mapping[str, str] | None = None
    fallback_strategy: tuple[Mapping[str, Any], ...] | None = None
    enable_task_events: bool = True
    labels: Mapping[str, str] | None = None
    generator_backpressure_num_objects: int | None = None
    num_objects_per_yield: int | None = None

    def __post_init__(self) -> None:
        if self.num_returns is UNSET or self.num_returns is None:
            object.__setattr__(self, "num_returns", "streaming" if self.is_generator else 1)
        _check_num_returns(self.num_returns, self.is_generator)
        _check_quantity("num_cpus", self.num_cpus)
        _check_common(self)
        _RETRY_COUNT("max_retries", self.max_retries, _Context())
        _NON_NEGATIVE("max_calls", self.max_calls, _Context())

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, is_generator: bool = False) -> TaskOptions:
        """Validate `options` (see `validate_task_options`) and parse them. Raises as Ray does."""
        given = validate_task_options(options, is_generator=is_generator)
        return cls(given=given, is_generator=is_generator, **_fields(given))

    def merge(self, overrides: Mapping[str, Any]) -> TaskOptions:
        """A new value with `overrides` on top (a later layer wins, key by key)."""
        return self.from_options({**self.given, **overrides}, is_generator=self.is_generator)

    def resource_demand(self) -> dict[str, float | int]:
        """What one call holds while it runs: `{"CPU", "GPU", "memory" (bytes), **custom}`."""
        return self._demand(self.num_cpus)


@dataclasses.dataclass(frozen=True)
class ActorOptions(_Placement):
    """An actor class's options, merged and checked: what the runtime creates the actor with.

    Build with `from_options` (which validates the keywords) and layer with `merge`.
    """

    given: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The keywords set explicitly, as given (Ray's `_default_options`)."""
    is_async: bool = False
    num_cpus: float | _Unset = UNSET
    """UNSET gives Ray's actor default; see `scheduling_demand` and `resource_demand`."""
    num_gpus: float = 0.0
    memory: int = 0
    """Bytes of memory to reserve."""
    object_store_memory: int | None = None
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Custom resources (never CPU or GPU), e.g. `{"TPU": 4}`."""
    accelerator_type: str | None = None
    max_restarts: int = 0
    max_task_retries: int = 0
    max_concurrency: int | _Unset = UNSET
    """UNSET (or 0) resolves to 1 for sync actors and 1000 for async ones."""
    max_pending_calls: int = -1
    lifetime: Literal["detached", "non_detached"] | None = None
    name: str | None = None
    namespace: str | None = None
    get_if_exists: bool = False
    concurrency_groups: Mapping[str, int] = dataclasses.field(default_factory=dict)
    allow_out_of_order_execution: bool = False
    enable_tensor_transport: bool = False
    runtime_env: Mapping[str, Any] | None = None
    scheduling_strategy: SchedulingStrategyT = None
    placement_group: Any = None
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None
    label_selector: Mapping[str, str] | None = None
    fallback_strategy: tuple[Mapping[str, Any], ...] | None = None
    enable_task_events: bool = True
    labels: Mapping[str, str] | None = None
    actor_generator_backpressure_num_objects: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency is UNSET or self.max_concurrency == 0:
            object.__setattr__(self, "max_concurrency", 1000 if self.is_async else 1)
        if self.num_cpus is not UNSET:
            _check_quantity("num_cpus", self.num_cpus)
        _check_common(self)
        ctx = _Context()
        _RETRY_COUNT("max_restarts", self.max_restarts, ctx)
        _RETRY_COUNT("max_task_retries", self.max_task_retries, ctx)
        _RETRY_COUNT("max_pending_calls", self.max_pending_calls, ctx)
        _lifetime("lifetime", self.lifetime, ctx)
        if self.name == "":
            raise ValueError("Actor name cannot be an empty string.")
        if self.namespace == "":
            raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')
        if self.get_if_exists and not self.name:
            raise ValueError("The actor name must be specified to use `get_if_exists`.")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, is_async: bool = False) -> ActorOptions:
        """Validate `options` (see `validate_actor_options`) and parse them. Raises as Ray does."""
        given = validate_actor_options(options, is_async=is_async)
        return cls(given=given, is_async=is_async, **_fields(given))

    def merge(self, overrides: Mapping[str, Any]) -> ActorOptions:
        """A new value with `.options()` keywords on top; `concurrency_groups` is refused there."""
        if "concurrency_groups" in overrides:
            raise ValueError("Setting 'concurrency_groups' is not supported in '.options()'.")
        return self.from_options({**self.given, **overrides}, is_async=self.is_async)

    @property
    def detached(self) -> bool:
        """True for `lifetime="detached"`: the actor outlives the driver that made it."""
        return self.lifetime == "detached"

    def _cpus(self) -> tuple[float, float]:
        """(CPUs needed to place the actor, CPUs it holds while alive), as Ray 2.60 does it."""
        if self.num_cpus is not UNSET:
            return self.num_cpus, self.num_cpus
        given = {key for key, value in self.given.items() if value is not None}
        if given & {"num_gpus", "resources", "accelerator_type"}:
            return 1.0, 1.0  # any other resource request makes the CPU default 1 throughout
        return 1.0, 0.0  # `memory` alone too: placing needs a node with a CPU, none is held

    def scheduling_demand(self) -> dict[str, float | int]:
        """What a host must have to start the actor (1 CPU by default; in its totals, not free)."""
        return self._demand(self._cpus()[0])

    def resource_demand(self) -> dict[str, float | int]:
        """What the actor holds while alive (0 CPU by default, so idle actors cost no CPU)."""
        return self._demand(self._cpus()[1])


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """An actor method's options from `@method` and `.options()`, merged and checked."""

    given: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The keywords set explicitly, as given."""
    is_generator: bool = False
    num_returns: NumReturns | _Unset = UNSET
    """UNSET resolves to 1, or "streaming" for generator methods."""
    concurrency_group: str | None = None
    max_task_retries: int | _Unset = UNSET
    """UNSET means the actor's `max_task_retries`."""
    retry_exceptions: RetryExceptions = False
    enable_task_events: bool = True
    tensor_transport: str | None = None
    name: str | None = None
    generator_backpressure_num_objects: int | None = None
    num_objects_per_yield: int | None = None

    def __post_init__(self) -> None:
        if self.num_returns is UNSET or self.num_returns is None:
            object.__setattr__(self, "num_returns", "streaming" if self.is_generator else 1)
        _check_method_num_returns(self.num_returns, self.is_generator)

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], *, is_generator: bool = False, in_options: bool = False
    ) -> MethodOptions:
        """Validate `options` (see `validate_method_options`) and parse them."""
        given = validate_method_options(options, is_generator=is_generator, in_options=in_options)
        return cls(given=given, is_generator=is_generator, **_fields(given))

    def merge(self, overrides: Mapping[str, Any]) -> MethodOptions:
        """A new value with a method's `.options()` keywords on top."""
        return self.from_options(
            {**self.given, **overrides}, is_generator=self.is_generator, in_options=True
        )

    def task_retries(self, actor: ActorOptions) -> int:
        """Retries of this call when the actor dies: the method's own, else the actor's."""
        return actor.max_task_retries if self.max_task_retries is UNSET else self.max_task_retries
