"""Checking option keywords against the table, and telling the decorator forms apart.

Options are layered decorator → `.options()` → call. Each layer's keywords are checked here with
Ray 2.60's exception types and wording (see `notes_ray_parity.md` for every case observed);
`values.py` then parses the merged keywords into the typed values the runtime reads.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from fray_ray._private.options.model import UNSET, Context, Kind, Option
from fray_ray._private.options.table import (
    ACTOR_OPTION_KEYS,
    ALL_OPTION_KEYS,
    METHOD_OPTION_KEYS,
    TASK_OPTION_KEYS,
    rows_for,
)

__all__ = [
    "check_decorator_options",
    "check_method_call_keys",
    "check_remote_target",
    "is_async_actor_class",
    "is_generator_function",
    "split_method_args",
    "split_remote_args",
    "validate_actor_options",
    "validate_method_options",
    "validate_task_options",
]


def _validate(
    options: Mapping[str, Any],
    table: Mapping[str, Option],
    ctx: Context,
    unknown: Callable[[str], Exception],
) -> dict[str, Any]:
    for key, value in options.items():
        row = table.get(key)
        if row is None:
            raise unknown(key)
        row.validate(value, ctx)
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

    return _validate(options, rows_for(Kind.TASK), Context(is_generator=is_generator), unknown)


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

    checked = _validate(options, rows_for(Kind.ACTOR), Context(is_async=is_async), unknown)
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

    table = rows_for(Kind.METHOD, in_options=in_options)
    unknown = _unknown_option_error if in_options else _unknown_method_error
    return _validate(options, table, Context(is_generator=is_generator), unknown)


def check_method_call_keys(options: Mapping[str, Any]) -> None:
    """Refuse a keyword an actor method's `.options()` does not take (TypeError, as in Ray)."""
    for key in options:
        if key not in rows_for(Kind.METHOD, in_options=True):
            raise _unknown_option_error(key)


def _unknown_method_error(key: str) -> Exception:
    return AssertionError(
        f"Unexpected keyword argument to @ray.method: '{key}'. The supported keyword "
        f"arguments are {list(METHOD_OPTION_KEYS)}"
    )


def _unknown_option_error(key: str) -> Exception:
    return TypeError(
        f"ActorMethod.options() got an unexpected keyword argument '{key}'. Valid ones are "
        f"{list(rows_for(Kind.METHOD, in_options=True))}."
    )


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
        if key not in METHOD_OPTION_KEYS:
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
