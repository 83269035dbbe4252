"""Scheduling strategies (`ray.util.scheduling_strategies`): where a task or actor may run.

Pass one as `scheduling_strategy=` to `@remote` or `.options()`. All of them are immutable
values, checked when built:

- `PlacementGroupSchedulingStrategy`: run in a bundle of a placement group.
- `NodeAffinitySchedulingStrategy`: run on one node (hard, or soft with fallback).
- `NodeLabelSchedulingStrategy`: run on nodes whose labels match `In`/`NotIn`/`Exists`/
  `DoesNotExist` expressions.

>>> strategy = NodeLabelSchedulingStrategy({"ray.io/accelerator-type": In("TPU-V4")})
>>> strategy.hard[0].key, strategy.hard[0].operator.values
('ray.io/accelerator-type', ('TPU-V4',))
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from fray_ray._private.core.placement_group_handle import PlacementGroup

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

NODE_ID_HEX_LENGTH: Final = 56
"""Node ids are 28 bytes written as 56 hex characters, as `get_runtime_context().get_node_id()`."""


@dataclasses.dataclass(frozen=True)
class PlacementGroupSchedulingStrategy:
    """Run in a placement group: bundle `placement_group_bundle_index`, or any bundle if -1.

    `placement_group_capture_child_tasks=True` makes tasks started from inside run in the same
    group; None means "not given" (the runtime's default, False).
    """

    placement_group: PlacementGroup | None
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None

    def __post_init__(self) -> None:
        index = self.placement_group_bundle_index
        if not isinstance(index, int):
            raise TypeError(
                "placement_group_bundle_index must be an int (-1 for any bundle), got "
                f"{index!r} of type {type(index)}"
            )
        if index < -1:
            raise ValueError(
                f"placement_group_bundle_index must be -1 or a bundle index, got {index}"
            )
        capture = self.placement_group_capture_child_tasks
        if capture is not None and not isinstance(capture, bool):
            raise TypeError(
                "placement_group_capture_child_tasks must be a bool or None, got "
                f"{capture!r} of type {type(capture)}"
            )


def _node_id_hex(node_id: object) -> str:
    """`node_id` as lower-case hex; bytes are hex-encoded. Raises ValueError/TypeError."""
    if isinstance(node_id, bytes):
        node_id = node_id.hex()
    if not isinstance(node_id, str):
        raise TypeError(
            f"node_id must be a hex string, got {node_id!r} of type {type(node_id)}. To get "
            "the IDs of the nodes in your cluster, use ray.nodes()."
        )
    if len(node_id) != NODE_ID_HEX_LENGTH or not all(c in string.hexdigits for c in node_id):
        raise ValueError(
            f"Invalid node_id '{node_id}'. Node ID must be a valid hex string. To get a list of "
            "all nodes and their IDs in your cluster, use ray.nodes()."
        )
    return node_id.lower()


@dataclasses.dataclass(frozen=True)
class NodeAffinitySchedulingStrategy:
    """Run on the node `node_id`; if `soft`, fall back to other nodes when it cannot.

    `_spill_on_unavailable` (soft only) spills to another node when the target is busy;
    `_fail_on_unavailable` (hard only) fails at once instead of waiting for the target.
    Raises ValueError for a node id that is not 56 hex characters or a bad flag combination.
    """

    node_id: str
    soft: bool
    _spill_on_unavailable: bool = False
    _fail_on_unavailable: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", _node_id_hex(self.node_id))
        if self._spill_on_unavailable and not self.soft:
            raise ValueError(
                "_spill_on_unavailable cannot be set when soft is False. Please set soft to "
                "True to use _spill_on_unavailable."
            )
        if self._fail_on_unavailable and self.soft:
            raise ValueError(
                "_fail_on_unavailable cannot be set when soft is True. Please set soft to False "
                "to use _fail_on_unavailable."
            )


def _operator_values(operator: str, values: tuple[object, ...]) -> tuple[str, ...]:
    if not values:
        raise ValueError(
            f"The variadic parameter of the {operator} operator must be a non-empty tuple: "
            f'e.g. {operator}("value1", "value2").'
        )
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(
                f"Type of value in position {position} for the {operator} operator must be str "
                f'(e.g. {operator}("value1", "value2")) but got {value} of type {type(value)}.'
            )
    return tuple(values)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True, init=False)
class In:
    """The label's value is one of `values`."""

    values: tuple[str, ...]

    def __init__(self, *values: str) -> None:
        object.__setattr__(self, "values", _operator_values("In", values))


@dataclasses.dataclass(frozen=True, init=False)
class NotIn:
    """The label is missing or its value is none of `values`."""

    values: tuple[str, ...]

    def __init__(self, *values: str) -> None:
        object.__setattr__(self, "values", _operator_values("NotIn", values))


@dataclasses.dataclass(frozen=True)
class Exists:
    """The node has the label, with any value."""


@dataclasses.dataclass(frozen=True)
class DoesNotExist:
    """The node does not have the label."""


LabelOperator = In | NotIn | Exists | DoesNotExist
LabelMatchExpressionsT = dict[str, LabelOperator]
"""What `NodeLabelSchedulingStrategy` takes: label key → operator."""


@dataclasses.dataclass(frozen=True)
class LabelMatchExpression:
    """One `key: operator` pair of a `NodeLabelSchedulingStrategy`."""

    key: str
    operator: LabelOperator


def _expressions(kind: str, labels: object) -> tuple[LabelMatchExpression, ...]:
    """Check a `{key: operator}` map and turn it into expressions; None means none."""
    if labels is None:
        return ()
    example = '(e.g. {"key1": In("value1")})'
    if not isinstance(labels, Mapping):
        raise ValueError(
            f"The {kind} parameter must be a map {example} but got type {type(labels)}."
        )
    expressions = []
    for key, operator in labels.items():
        if not isinstance(key, str):
            raise ValueError(
                f"The map key of the {kind} parameter must be of type str {example} but got "
                f"{key} of type {type(key)}."
            )
        if not isinstance(operator, (In, NotIn, Exists, DoesNotExist)):
            raise ValueError(
                f"The map value for key {key} of the {kind} parameter must be one of the `In`, "
                f"`NotIn`, `Exists` or `DoesNotExist` operator {example} but got {operator} of "
                f"type {type(operator)}."
            )
        expressions.append(LabelMatchExpression(key, operator))
    return tuple(expressions)


@dataclasses.dataclass(frozen=True, init=False)
class NodeLabelSchedulingStrategy:
    """Run on a node whose labels match every `hard` expression, preferring `soft` matches.

    `hard` and `soft` are `{label: In(...)|NotIn(...)|Exists()|DoesNotExist()}` maps; they are
    kept as tuples of `LabelMatchExpression` in the order given. Raises ValueError if both are
    empty or an entry is malformed.
    """

    hard: tuple[LabelMatchExpression, ...]
    soft: tuple[LabelMatchExpression, ...]

    def __init__(
        self,
        hard: LabelMatchExpressionsT | None,
        *,
        soft: LabelMatchExpressionsT | None = None,
    ) -> None:
        hard_expressions = _expressions("hard", hard)
        soft_expressions = _expressions("soft", soft)
        if not hard_expressions and not soft_expressions:
            raise ValueError(
                "The `hard` and `soft` parameter of NodeLabelSchedulingStrategy cannot both be "
                "empty."
            )
        object.__setattr__(self, "hard", hard_expressions)
        object.__setattr__(self, "soft", soft_expressions)


SchedulingStrategyT = (
    None
    | str  # "DEFAULT" or "SPREAD"
    | PlacementGroupSchedulingStrategy
    | NodeAffinitySchedulingStrategy
    | NodeLabelSchedulingStrategy
)
"""Everything `scheduling_strategy=` accepts."""

