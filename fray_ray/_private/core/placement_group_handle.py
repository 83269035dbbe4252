"""The placement group handle (`PlacementGroup`) and its id, shown as `fray_ray.util.placement_group`'s.

They live here, below the public module, so the options model can check
`placement_group=` against the real class without importing `fray_ray.util`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fray_ray._private.core import runtime_slot
from fray_ray._private.core.object_ref import ObjectRef

__all__ = ["PlacementGroup", "PlacementGroupID", "PlacementGroupInfo"]

#: The public module these classes belong to (reprs, docs and pickles name it).
PUBLIC_MODULE = "fray_ray.util.placement_group"


class PlacementGroupRuntime(Protocol):
    """What a handle asks of the runtime of the process it is in (every `runtime.CoreRuntime` has it)."""

    def placement_group_info(self, group_id: bytes) -> PlacementGroupInfo | None: ...

    def wait_placement_group(self, group_id: bytes, timeout: float | None) -> bool: ...


@dataclass(frozen=True)
class PlacementGroupInfo:
    """What a PlacementGroup handle needs of its group: its id, bundles and readiness object."""

    id: bytes
    bundles: list[dict[str, float]]
    ready_id: bytes


class PlacementGroupID:
    """A placement group's id (18 bytes; 36 hex characters)."""

    SIZE = 18

    def __init__(self, binary: bytes) -> None:
        self._binary = binary

    @classmethod
    def size(cls) -> int:
        """Returns:
            The id's length in bytes, as Ray's `PlacementGroupID.size()`.
        """
        return cls.SIZE

    @classmethod
    def from_binary(cls, binary: bytes) -> PlacementGroupID:
        """Returns:
            The id of these bytes.
        """
        return cls(binary)

    @classmethod
    def from_hex(cls, hex_id: str) -> PlacementGroupID:
        """Returns:
            The id this hex (as `hex()` prints it) stands for.
        """
        return cls(bytes.fromhex(hex_id))

    @classmethod
    def from_random(cls) -> PlacementGroupID:
        """Returns:
            A random id.
        """
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def nil(cls) -> PlacementGroupID:
        """Returns:
            Ray's nil id (every byte 0xff).
        """
        return cls(b"\xff" * cls.SIZE)

    def is_nil(self) -> bool:
        """Returns:
            Whether this is the nil id.
        """
        return self._binary == b"\xff" * self.SIZE

    def binary(self) -> bytes:
        """Returns:
            The id as bytes.
        """
        return self._binary

    def hex(self) -> str:
        """Returns:
            The id as hex, as Ray prints it.
        """
        return self._binary.hex()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroupID) and other._binary == self._binary

    def __hash__(self) -> int:
        return hash(self._binary)

    def __repr__(self) -> str:
        return f"PlacementGroupID({self.hex()})"


class PlacementGroup:
    """A handle to a placement group; picklable, so tasks can schedule into it too.

    Made by `placement_group()` and `get_placement_group()`, not by hand.

    Args:
        id: the group's id.
        bundle_cache: the group's bundles, when known (saves asking the driver).
    """

    def __init__(self, id: PlacementGroupID, bundle_cache: Sequence[dict[str, float]] | None = None,
                 _ready_id: bytes | None = None) -> None:
        self.id = id
        self._bundles = [dict(b) for b in bundle_cache] if bundle_cache is not None else None
        self._ready_id = _ready_id

    def _info(self) -> PlacementGroupInfo:
        runtime: PlacementGroupRuntime = runtime_slot.current()
        info = runtime.placement_group_info(self.id.binary())
        if info is None:
            raise ValueError(f"Placement group {self.id.hex()} does not exist.")
        return info

    @property
    def bundle_specs(self) -> list[dict[str, float]]:
        """The resources of each bundle, in bundle-index order (copies: changing them changes nothing).

        Raises:
            ValueError: the group was removed and its bundles were never read here.
        """
        if self._bundles is None:
            self._bundles = [dict(b) for b in self._info().bundles]
        return [dict(b) for b in self._bundles]

    @property
    def bundle_count(self) -> int:
        """How many bundles the group has (valid `bundle_index` values are 0 to this - 1)."""
        return len(self.bundle_specs)

    def ready(self) -> ObjectRef[Any]:
        """Wait for placement without blocking, e.g. with `get`, `wait` or `await`.

        Returns:
            A ref that becomes ready when every bundle is reserved.
        """
        if self._ready_id is None:
            self._ready_id = self._info().ready_id
        return ObjectRef(self._ready_id)

    def wait(self, timeout_seconds: float | None = 30) -> bool:
        """Block until the group is placed or the timeout passes.

        Args:
            timeout_seconds: seconds to wait at most; None waits as long as it takes.

        Returns:
            True once every bundle is reserved, False if the timeout passed first.
        """
        runtime: PlacementGroupRuntime = runtime_slot.current()
        return bool(runtime.wait_placement_group(self.id.binary(), timeout_seconds))

    def __reduce__(self) -> Any:
        return (PlacementGroup, (self.id, self._bundles, self._ready_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"PlacementGroup({self.id.hex()})"


PlacementGroupID.__module__ = PUBLIC_MODULE
PlacementGroup.__module__ = PUBLIC_MODULE
