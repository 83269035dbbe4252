"""The methods every actor answers to, whatever its class defines (as Ray's actors do)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def built_in_method(instance: Any, name: str) -> Callable[..., Any] | None:
    """The built-in method `name` bound to `instance`, or None when `name` is not one.

    `__ray_ready__()` returns True (a caller waits on it to know the actor has started);
    `__ray_call__(fn, *args, **kwargs)` runs `fn(instance, *args, **kwargs)` inside the actor.
    """
    if name == "__ray_ready__":
        return lambda: True
    if name == "__ray_call__":
        return lambda fn, *args, **kwargs: fn(instance, *args, **kwargs)
    return None
