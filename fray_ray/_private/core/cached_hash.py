"""Frozen dataclasses used as keys on every call (executor pools, runtime envs) hash once, and
compare by identity first.

A frozen dataclass hashes all its fields on every `hash()`; a pool key holds a runtime env of
eight fields, and the scheduler looks pools up several times per task. `CachedHash` keeps the
hash in the instance after the first call. It never travels: a str's hash differs between
processes, so the cached value is left out of the pickled state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

_SLOT = "_cached_hash"


class CachedHash:
    """Mix into a frozen dataclass (declared with `eq=False`: equality comes from here)."""

    def __hash__(self) -> int:
        cached = self.__dict__.get(_SLOT)
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))  # type: ignore[arg-type]
            object.__setattr__(self, _SLOT, cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        if hash(self) != hash(other):
            return False
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop(_SLOT, None)
        return state
