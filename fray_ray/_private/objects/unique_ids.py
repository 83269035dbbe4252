"""Ray's id types (`ray.NodeID`, `ray.ActorID`, `ray.JobID`, ...): fixed-size byte strings.

Each id has Ray's size, its `binary()`/`hex()` forms, `from_binary`/`from_hex`, `nil()`,
`is_nil()`, `size()` and `from_random()`; ids are equal when their types and bytes are.

>>> node = NodeID.from_random()
>>> NodeID.from_hex(node.hex()) == node, len(node.binary())
(True, 28)
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, TypeVar

_ID = TypeVar("_ID", bound="BaseID")

__all__ = [
    "ActorClassID",
    "ActorID",
    "BaseID",
    "ClusterID",
    "FunctionID",
    "JobID",
    "NodeID",
    "TaskID",
    "UniqueID",
    "WorkerID",
]


class BaseID:
    """An id of `SIZE` bytes."""

    SIZE: ClassVar[int] = 28
    __slots__ = ("_binary",)

    def __init__(self, id: bytes) -> None:  # noqa: A002 - Ray's parameter name
        if not isinstance(id, bytes):
            raise TypeError(f"{type(self).__name__} takes bytes, got {type(id).__name__}")
        if len(id) != self.SIZE:
            raise ValueError(f"ID string needs to have length {self.SIZE}, got {len(id)}")
        self._binary = id

    @classmethod
    def size(cls) -> int:
        return cls.SIZE

    @classmethod
    def from_binary(cls: type[_ID], id_bytes: bytes) -> _ID:
        return cls(id_bytes)

    @classmethod
    def from_hex(cls: type[_ID], hex_id: str | bytes) -> _ID:
        return cls(bytes.fromhex(hex_id.decode() if isinstance(hex_id, bytes) else hex_id))

    @classmethod
    def from_random(cls: type[_ID]) -> _ID:
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def nil(cls: type[_ID]) -> _ID:
        return cls(b"\xff" * cls.SIZE)

    def is_nil(self) -> bool:
        return self._binary == b"\xff" * self.SIZE

    def binary(self) -> bytes:
        return self._binary

    def hex(self) -> str:
        return self._binary.hex()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._binary == self._binary  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._binary))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hex()})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._binary,))


class UniqueID(BaseID):
    SIZE = 28


class NodeID(UniqueID):
    SIZE = 28


class WorkerID(UniqueID):
    SIZE = 28


class FunctionID(UniqueID):
    SIZE = 28


class ActorClassID(UniqueID):
    SIZE = 28


class ClusterID(UniqueID):
    SIZE = 28


class JobID(BaseID):
    SIZE = 4

    @classmethod
    def from_int(cls, value: int) -> JobID:
        return cls(value.to_bytes(cls.SIZE, "little"))

    def int(self) -> int:  # noqa: A003 - Ray's method name
        return int.from_bytes(self._binary, "little")


class ActorID(BaseID):
    SIZE = 16

    def job_id(self) -> JobID:
        return JobID(self._binary[-JobID.SIZE:])


class TaskID(BaseID):
    SIZE = 24

    def actor_id(self) -> ActorID:
        return ActorID(self._binary[-ActorID.SIZE:])

    def job_id(self) -> JobID:
        return JobID(self._binary[-JobID.SIZE:])
