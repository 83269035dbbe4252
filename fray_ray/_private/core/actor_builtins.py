"""Which callable a call on an actor runs: the built-in methods every actor answers to, and
otherwise the method its class defines (as Ray's actors do)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

_MISSING = object()


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


def actor_method(instance: Any, name: str) -> Callable[..., Any]:
    """The callable a remote call of `name` runs on `instance`.

    A method is looked up on the class first, as Ray does, so an instance attribute of the same
    name does not hide it; names the class does not define fall back to the instance.

    Raises:
        AttributeError: neither the class nor the instance has `name`.
    """
    built_in = built_in_method(instance, name)
    if built_in is not None:
        return built_in
    cls = type(instance)
    member = _class_member(cls, name)
    if member is not _MISSING and hasattr(member, "__get__"):
        bound: Callable[..., Any] = member.__get__(instance, cls)
        return bound
    found: Callable[..., Any] = getattr(instance, name)
    return found


@functools.lru_cache(maxsize=4096)
def _class_member(cls: type, name: str) -> Any:
    """`name` as the class defines it (looked up once per class and name: Ray, too, takes an
    actor's methods from its class when the actor is created)."""
    return inspect.getattr_static(cls, name, _MISSING)
