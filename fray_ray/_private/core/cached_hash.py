"""Frozen dataclasses used as keys on every call (executor pools, runtime envs) hash once, and
compare by identity first.

A frozen dataclass hashes all its fields on every `hash()`; a pool key holds a runtime env of
eight fields, and the scheduler looks pools up several times per task. `CachedHash` keeps the
hash in the instance after the first call. It never travels: a str's hash differs between
processes, so the cached value is left out of the pickled state.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any

_SLOT = "_cached_hash"
#: class -> a function of an instance giving the tuple of its field values (C-speed `attrgetter`)
_VALUES: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _values_of(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    values = _VALUES.get(cls)
    if values is None:
        names = [f.name for f in dataclasses.fields(cls)]
        getter = operator.attrgetter(*names) if names else (lambda _: ())
        values = getter if len(names) != 1 else (lambda instance: (getter(instance),))
        _VALUES[cls] = values
    return values


class CachedHash:
    """Mix into a frozen dataclass (declared with `eq=False`: equality comes from here)."""

    def __hash__(self) -> int:
        cached = self.__dict__.get(_SLOT)
        if cached is None:
            cached = hash(_values_of(self.__class__)(self))
            object.__setattr__(self, _SLOT, cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        if hash(self) != hash(other):
            return False
        values = _values_of(self.__class__)
        return values(self) == values(other)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop(_SLOT, None)
        return state
