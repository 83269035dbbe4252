"""Which placement group a new task or actor runs in, when its options do not say it with a
`scheduling_strategy`: Ray 2.60's rules for the deprecated `placement_group=` keywords and
for `placement_group_capture_child_tasks`.

- `placement_group=pg` (with `placement_group_bundle_index` and
  `placement_group_capture_child_tasks`) means `PlacementGroupSchedulingStrategy` with the same
  values; it is ignored when a `scheduling_strategy` is given.
- Otherwise, a task or actor started from inside a task or actor whose group captures its
  children (`placement_group_capture_child_tasks=True`) runs in that group too (any bundle),
  and captures its own children in turn, unless it says `placement_group_capture_child_tasks=False`.
"""

from __future__ import annotations

from typing import Any

from fray_ray._private.core.placement_group_handle import PlacementGroup, PlacementGroupID
from fray_ray._private.core.scheduling_strategies import PlacementGroupSchedulingStrategy
from fray_ray._private.core.task_context import current_task


def effective_strategy(options: Any) -> Any:
    """The scheduling strategy a task or actor with these parsed options runs with."""
    strategy = options.scheduling_strategy
    if strategy is not None:
        return strategy
    group = options.placement_group
    capture = options.placement_group_capture_child_tasks
    if isinstance(group, PlacementGroup):
        return PlacementGroupSchedulingStrategy(group, options.placement_group_bundle_index, capture)
    context = current_task.get()
    if context is None or not context.capture_child_tasks or not context.placement_group_id or capture is False:
        return None
    parent_group = PlacementGroup(PlacementGroupID(bytes.fromhex(context.placement_group_id)))
    return PlacementGroupSchedulingStrategy(parent_group, -1, True)
