"""What workers ask the driver to reserve: placement groups (`ray.util.placement_group`) and the
hosts of TPU slices for gangs. Their replies are `_from_workers`' `Result` and `Done`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fray_ray._private.messages._codec import Message, _message
from fray_ray._private.messages._from_workers import Done, Result


@_message
@dataclass(repr=False, eq=False)
class CreatePlacementGroup(Message):
    """ray.util.placement_group; answered with the new group's PlacementGroupInfo."""

    KIND: ClassVar[str] = "placement_group_create"
    REPLY: ClassVar[type[Message]] = Result

    bundles: list[dict[str, float]]
    strategy: str
    name: str
    detached: bool


@_message
@dataclass(repr=False, eq=False)
class RemovePlacementGroup(Message):
    """ray.util.remove_placement_group."""

    KIND: ClassVar[str] = "placement_group_remove"
    REPLY: ClassVar[type[Message]] = Done

    id: bytes


@_message
@dataclass(repr=False, eq=False)
class WaitPlacementGroup(Message):
    """PlacementGroup.wait: answered with whether the group was placed within `timeout`."""

    KIND: ClassVar[str] = "placement_group_wait"
    REPLY: ClassVar[type[Message]] = Result

    id: bytes
    timeout: float | None


@_message
@dataclass(repr=False, eq=False)
class DescribePlacementGroup(Message):
    """The PlacementGroupInfo of a group (None if there is none)."""

    KIND: ClassVar[str] = "placement_group_info"
    REPLY: ClassVar[type[Message]] = Result

    id: bytes


@_message
@dataclass(repr=False, eq=False)
class FindPlacementGroup(Message):
    """ray.util.get_placement_group: the PlacementGroupInfo of a live group by name."""

    KIND: ClassVar[str] = "placement_group_get"
    REPLY: ClassVar[type[Message]] = Result

    name: str


@_message
@dataclass(repr=False, eq=False)
class PlacementGroupTable(Message):
    """ray.util.placement_group_table of one group (`id`) or of all (None)."""

    KIND: ClassVar[str] = "placement_group_table"
    REPLY: ClassVar[type[Message]] = Result

    id: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class ReserveGang(Message):
    """Reserve the hosts of `num_slices` TPU slices of type `tpu`; answered with the gang id."""

    KIND: ClassVar[str] = "gang_reserve"
    REPLY: ClassVar[type[Message]] = Result

    tpu: str
    num_slices: int
    timeout: float | None = None


@_message
@dataclass(repr=False, eq=False)
class ReleaseGang(Message):
    """Give back a reserved gang's hosts."""

    KIND: ClassVar[str] = "gang_release"
    REPLY: ClassVar[type[Message]] = Done

    gang_id: bytes


@_message
@dataclass(repr=False, eq=False)
class GangSize(Message):
    """How many hosts a reserved gang has."""

    KIND: ClassVar[str] = "gang_size"
    REPLY: ClassVar[type[Message]] = Result

    gang_id: bytes
