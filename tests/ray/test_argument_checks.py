"""`.remote()` checks arguments as `Signature.bind` does, whichever path the check takes."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from fray_ray._private.core.argument_checks import ArgumentCheck


def plain(a, b, c=3): ...
def positional_only(a, /, b=2): ...
def keyword_only(a, *, b): ...
def variadic(a, *rest, **named): ...
def nothing(): ...


CALLS: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
    (function, args, kwargs)
    for function in (plain, positional_only, keyword_only, variadic, nothing)
    for args, kwargs in (((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1, 2, 3, 4), {}),
                         ((1,), {"b": 2}), ((), {"a": 1}), ((1,), {"zzz": 0}))
]


@pytest.mark.parametrize(("function", "args", "kwargs"), CALLS)
def test_the_check_agrees_with_bind(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    signature = inspect.signature(function)
    try:
        signature.bind(*args, **kwargs)
        expected = None
    except TypeError as exc:
        expected = str(exc)
    if expected is None:
        ArgumentCheck(signature).check(args, kwargs)
    else:
        with pytest.raises(TypeError) as raised:
            ArgumentCheck(signature).check(args, kwargs)
        assert str(raised.value) == expected
