"""`ray.types`: the generic `ObjectRef[T]` for type annotations.

As in Ray, this `ObjectRef` is for annotations only (`def f(x: ObjectRef[int])`); the refs
calls return are `fray_ray.ObjectRef`, which can be subscripted too (`fray_ray.ObjectRef[int]`).
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class ObjectRef(Generic[T]):
    """An ObjectRef to a value of type T, for annotations.

    >>> from fray_ray.types import ObjectRef
    >>> ObjectRef[int]
    fray_ray.types.ObjectRef[int]
    """


__all__ = ["ObjectRef", "T"]
