"""Placement groups: reserve bundles of resources together, then schedule into them.

>>> pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
>>> fray_ray.get(pg.ready())
True
>>> remove_placement_group(pg)
"""

from __future__ import annotations

from typing import Any

from fray_ray._private.core import runtime_state
from fray_ray._private.core.placement_group_handle import PlacementGroup, PlacementGroupID
from fray_ray._private.driver.cluster_ledger import STRATEGIES
from fray_ray._private.driver.placement_groups import validate_bundles

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
    """Reserve `bundles` together (all or nothing), so tasks and actors placed in it start together.

    Returns at once; `.ready()` or `.wait()` tell when the bundles are reserved. A group that can
    never fit stays pending, with a warning naming the missing resource.

    Args:
        bundles: the resources of each bundle, e.g. `[{"CPU": 1}, {"CPU": 1, "GPU": 1}]`.
        strategy: how bundles spread over nodes: `PACK`, `SPREAD`, `STRICT_PACK` or `STRICT_SPREAD`.
        name: a name that `get_placement_group` finds it by.
        lifetime: None (ends with the driver) or `"detached"`.
        bundle_label_selector: accepted for Ray's signature.
        **kwargs: other arguments of Ray's, accepted.

    Returns:
        The group's handle.

    Raises:
        ValueError: a bundle is empty or invalid, or the strategy or lifetime is unknown.
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
    """Release the group's resources; tasks and actors placed in it are not waited for.

    Args:
        placement_group: the group to remove.

    Raises:
        TypeError: `placement_group` is not a PlacementGroup.
    """
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group expects a PlacementGroup, got {type(placement_group).__name__}")
    runtime_state.current().remove_placement_group(placement_group.id.binary())


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    """Look up a named group, e.g. one another driver created.

    Args:
        placement_group_name: the group's name.

    Returns:
        A handle to the live group.

    Raises:
        ValueError: no live group has that name, or the name is empty.
    """
    if not placement_group_name:
        raise ValueError("Please supply a non-empty value to get_placement_group")
    info = runtime_state.current().placement_group_by_name(placement_group_name)
    return PlacementGroup(PlacementGroupID(info.id), info.bundles, info.ready_id)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict[str, Any]:
    """Describe placement groups as Ray's state table does, for monitoring.

    Args:
        placement_group: the group to describe; None for all of them.

    Returns:
        That group's row (`placement_group_id`, `name`, `bundles`, `strategy`, `state`, ...),
        or every group's row keyed by its id hex.
    """
    group_id = None if placement_group is None else placement_group.id.binary()
    return runtime_state.current().placement_group_table(group_id)


def get_current_placement_group() -> PlacementGroup | None:
    """Find the group the calling task or actor runs in, to place its children there too.

    Returns:
        That group's handle; None on the driver or outside any group.
    """
    runtime = runtime_state.current_or_none()
    if runtime is None:
        return None
    group_hex = runtime.context_info().get("placement_group_id")
    if not group_hex:
        return None
    return PlacementGroup(PlacementGroupID(bytes.fromhex(group_hex)))


def check_placement_group_index(placement_group: PlacementGroup | None, bundle_index: int) -> None:
    """Check a bundle index against its group, as Ray does before scheduling into it.

    Args:
        placement_group: the group, or None.
        bundle_index: a bundle's index, or -1 for any bundle.

    Raises:
        ValueError: an index without a group, or one out of the group's range.
    """
    if placement_group is None and bundle_index != -1:
        raise ValueError("If placement_group is not set, the value of bundle_index must be -1.")
    if placement_group is not None and not (-1 <= bundle_index < placement_group.bundle_count):
        raise ValueError(f"placement group bundle index {bundle_index} is invalid.")
