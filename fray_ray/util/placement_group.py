"""Placement groups: reserve bundles of resources together, then schedule into them.

>>> pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
>>> fray_ray.get(pg.ready())
True
>>> remove_placement_group(pg)
"""

from __future__ import annotations

from typing import Any

from fray_ray._private import runtime_state
from fray_ray._private.placement_group_handle import PlacementGroup, PlacementGroupID
from fray_ray._private.placement_groups import STRATEGIES, validate_bundles

__all__ = [
    "PlacementGroup",
    "get_current_placement_group",
    "get_placement_group",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
]


def placement_group(
    bundles: list[dict[str, float]],
    strategy: str = "PACK",
    name: str = "",
    lifetime: str | None = None,
    _soft_target_node_id: str | None = None,
    bundle_label_selector: Any = None,
    **kwargs: Any,
) -> PlacementGroup:
    """Reserve `bundles` together (all or nothing); returns at once, see `.ready()`/`.wait()`.

    A group that can never fit stays pending, with a warning naming the missing resource.
    """
    checked = validate_bundles(bundles)
    if strategy not in STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy}. Supported strategies are: {list(STRATEGIES)}.")
    if lifetime not in (None, "detached"):
        raise ValueError(
            "Placement group `lifetime` argument must be either `None` or 'detached'. " f"Got {lifetime}."
        )
    info = runtime_state.current().create_placement_group(checked, strategy, name or "", lifetime == "detached")
    return PlacementGroup(PlacementGroupID(info.id), checked, info.ready_id)


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Release the group's resources."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group expects a PlacementGroup, got {type(placement_group).__name__}")
    runtime_state.current().remove_placement_group(placement_group.id.binary())


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    """The live group with this name; ValueError if there is none."""
    if not placement_group_name:
        raise ValueError("Please supply a non-empty value to get_placement_group")
    info = runtime_state.current().placement_group_by_name(placement_group_name)
    return PlacementGroup(PlacementGroupID(info.id), info.bundles, info.ready_id)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict[str, Any]:
    """One group's row, or every group keyed by id hex."""
    group_id = None if placement_group is None else placement_group.id.binary()
    return runtime_state.current().placement_group_table(group_id)


def get_current_placement_group() -> PlacementGroup | None:
    """The group the calling task or actor runs in, or None."""
    runtime = runtime_state.current_or_none()
    if runtime is None:
        return None
    group_hex = runtime.context_info().get("placement_group_id")
    if not group_hex:
        return None
    return PlacementGroup(PlacementGroupID(bytes.fromhex(group_hex)))


def check_placement_group_index(placement_group: PlacementGroup | None, bundle_index: int) -> None:
    if placement_group is None and bundle_index != -1:
        raise ValueError("If placement_group is not set, the value of bundle_index must be -1.")
    if placement_group is not None and not (-1 <= bundle_index < placement_group.bundle_count):
        raise ValueError(f"placement group bundle index {bundle_index} is invalid.")
