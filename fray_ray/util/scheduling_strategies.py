"""Scheduling strategies (`ray.util.scheduling_strategies`): where a task or actor may run.

The classes live in `fray_ray._private.core.scheduling_strategies`, low enough in the Ray layer for
the options model to check `scheduling_strategy=` against them; they are shown under this
module's name, as in Ray.
"""

from __future__ import annotations

from fray_ray._private.core.scheduling_strategies import (
    DoesNotExist,
    Exists,
    In,
    LabelMatchExpression,
    LabelMatchExpressionsT,
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    NotIn,
    PlacementGroupSchedulingStrategy,
    SchedulingStrategyT,
)

__all__ = [
    "DoesNotExist",
    "Exists",
    "In",
    "LabelMatchExpression",
    "LabelMatchExpressionsT",
    "NodeAffinitySchedulingStrategy",
    "NodeLabelSchedulingStrategy",
    "NotIn",
    "PlacementGroupSchedulingStrategy",
    "SchedulingStrategyT",
]

for _public in (
    DoesNotExist,
    Exists,
    In,
    LabelMatchExpression,
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    NotIn,
    PlacementGroupSchedulingStrategy,
):
    _public.__module__ = __name__
del _public
