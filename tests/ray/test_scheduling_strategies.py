"""Tests of fray_ray.util.scheduling_strategies: the strategy values and their checks.

Expectations marked "observed" come from building the same values with Ray 2.60.0 (python 3.11)
and printing `vars()`, `inspect.signature` and the errors raised.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from fray_ray.util.scheduling_strategies import (
    DoesNotExist,
    Exists,
    In,
    LabelMatchExpression,
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    NotIn,
    PlacementGroupSchedulingStrategy,
)

NODE = "ab" * 28


def test_signatures_match_ray() -> None:
    # Observed with Ray 2.60.0.
    def parameters(cls: type) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(cls).parameters.values()]

    empty = inspect.Parameter.empty
    assert parameters(PlacementGroupSchedulingStrategy) == [
        ("placement_group", empty),
        ("placement_group_bundle_index", -1),
        ("placement_group_capture_child_tasks", None),
    ]
    assert parameters(NodeAffinitySchedulingStrategy) == [
        ("node_id", empty),
        ("soft", empty),
        ("_spill_on_unavailable", False),
        ("_fail_on_unavailable", False),
    ]
    assert parameters(NodeLabelSchedulingStrategy) == [("hard", empty), ("soft", None)]
    soft = inspect.signature(NodeLabelSchedulingStrategy).parameters["soft"]
    assert soft.kind is inspect.Parameter.KEYWORD_ONLY


def test_placement_group_strategy_fields() -> None:
    group = object()
    strategy = PlacementGroupSchedulingStrategy(group, 2, True)
    assert strategy.placement_group is group
    assert strategy.placement_group_bundle_index == 2
    assert strategy.placement_group_capture_child_tasks is True
    default = PlacementGroupSchedulingStrategy(None)
    assert (default.placement_group_bundle_index, default.placement_group_capture_child_tasks) == (
        -1,
        None,
    )


def test_placement_group_strategy_checks_its_fields() -> None:
    # Ray 2.60 stores any value here (observed); fray_ray refuses nonsense at once.
    with pytest.raises(TypeError):
        PlacementGroupSchedulingStrategy(None, "a")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PlacementGroupSchedulingStrategy(None, -2)
    with pytest.raises(TypeError):
        PlacementGroupSchedulingStrategy(None, 0, 1)  # type: ignore[arg-type]


def test_node_affinity_fields() -> None:
    # Observed: vars() is {'node_id': ..., 'soft': True, '_spill_on_unavailable': False,
    # '_fail_on_unavailable': False}; bytes ids are stored hex-encoded.
    strategy = NodeAffinitySchedulingStrategy(NODE, soft=True)
    assert (strategy.node_id, strategy.soft) == (NODE, True)
    assert (strategy._spill_on_unavailable, strategy._fail_on_unavailable) == (False, False)
    assert NodeAffinitySchedulingStrategy(b"\xab" * 28, soft=False).node_id == NODE
    assert NodeAffinitySchedulingStrategy(NODE.upper(), soft=False).node_id == NODE


@pytest.mark.parametrize("node_id", ["ab", "zz" * 28, b"ab"], ids=["short", "not-hex", "bytes"])
def test_node_affinity_rejects_bad_ids(node_id: Any) -> None:
    # Observed: ValueError "Invalid node_id 'ab'. Node ID must be a valid hex string. ..."
    with pytest.raises(ValueError) as error:
        NodeAffinitySchedulingStrategy(node_id, soft=True)
    shown = node_id.hex() if isinstance(node_id, bytes) else node_id
    assert str(error.value).startswith(
        f"Invalid node_id '{shown}'. Node ID must be a valid hex string."
    )
    with pytest.raises(TypeError):
        NodeAffinitySchedulingStrategy(None, soft=True)  # type: ignore[arg-type]


def test_node_affinity_flag_combinations() -> None:
    # Observed with Ray 2.60.0.
    with pytest.raises(ValueError) as spill:
        NodeAffinitySchedulingStrategy(NODE, soft=False, _spill_on_unavailable=True)
    assert str(spill.value) == (
        "_spill_on_unavailable cannot be set when soft is False. Please set soft to True to use "
        "_spill_on_unavailable."
    )
    with pytest.raises(ValueError) as fail:
        NodeAffinitySchedulingStrategy(NODE, soft=True, _fail_on_unavailable=True)
    assert str(fail.value) == (
        "_fail_on_unavailable cannot be set when soft is True. Please set soft to False to use "
        "_fail_on_unavailable."
    )
    NodeAffinitySchedulingStrategy(NODE, soft=True, _spill_on_unavailable=True)
    NodeAffinitySchedulingStrategy(NODE, soft=False, _fail_on_unavailable=True)
    with pytest.raises(TypeError):
        NodeAffinitySchedulingStrategy(NODE)  # type: ignore[call-arg]


def test_label_operators() -> None:
    assert In("a", "b").values == ("a", "b")
    assert NotIn("a").values == ("a",)
    assert In("").values == ("",)  # observed: an empty string is accepted
    assert Exists() == Exists() and DoesNotExist() == DoesNotExist()
    assert In("a") == In("a") and In("a") != NotIn("a")


@pytest.mark.parametrize("operator", [In, NotIn])
def test_label_operator_errors(operator: type) -> None:
    name = operator.__name__
    # Observed with Ray 2.60.0.
    with pytest.raises(ValueError) as empty:
        operator()
    assert str(empty.value) == (
        f"The variadic parameter of the {name} operator must be a non-empty tuple: e.g. "
        f'{name}("value1", "value2").'
    )
    with pytest.raises(ValueError) as not_str:
        operator("a", 1)
    assert str(not_str.value) == (
        f"Type of value in position 1 for the {name} operator must be str (e.g. "
        f"{name}(\"value1\", \"value2\")) but got 1 of type <class 'int'>."
    )


def test_node_label_strategy_keeps_expressions_in_order() -> None:
    strategy = NodeLabelSchedulingStrategy(
        {"ray.io/accelerator-type": In("TPU-V4", "TPU-V5P"), "spot": DoesNotExist()},
        soft={"zone": NotIn("us-east1-b")},
    )
    assert strategy.hard == (
        LabelMatchExpression("ray.io/accelerator-type", In("TPU-V4", "TPU-V5P")),
        LabelMatchExpression("spot", DoesNotExist()),
    )
    assert [(e.key, e.operator) for e in strategy.soft] == [("zone", NotIn("us-east1-b"))]
    soft_only = NodeLabelSchedulingStrategy({}, soft={"a": Exists()})
    assert soft_only.hard == () and len(soft_only.soft) == 1


@pytest.mark.parametrize(
    ("hard", "soft", "message"),
    [
        # Observed with Ray 2.60.0.
        ({}, None, "The `hard` and `soft` parameter of NodeLabelSchedulingStrategy cannot both "
         "be empty."),
        (None, None, "The `hard` and `soft` parameter of NodeLabelSchedulingStrategy cannot "
         "both be empty."),
        (1, None, 'The hard parameter must be a map (e.g. {"key1": In("value1")}) but got type '
         "<class 'int'>."),
        ({"a": In("b")}, 1, 'The soft parameter must be a map (e.g. {"key1": In("value1")}) but '
         "got type <class 'int'>."),
        ({1: In("b")}, None, 'The map key of the hard parameter must be of type str (e.g. '
         '{"key1": In("value1")}) but got 1 of type <class \'int\'>.'),
        ({"a": "b"}, None, "The map value for key a of the hard parameter must be one of the "
         '`In`, `NotIn`, `Exists` or `DoesNotExist` operator (e.g. {"key1": In("value1")}) but '
         "got b of type <class 'str'>."),
    ],
    ids=["empty", "none", "hard-not-map", "soft-not-map", "key-not-str", "value-not-operator"],
)
def test_node_label_strategy_errors(hard: Any, soft: Any, message: str) -> None:
    with pytest.raises(ValueError) as error:
        NodeLabelSchedulingStrategy(hard, soft=soft)
    assert str(error.value) == message


def test_strategies_are_frozen_equal_and_picklable() -> None:
    values = [
        PlacementGroupSchedulingStrategy(None, 1),
        NodeAffinitySchedulingStrategy(NODE, soft=True),
        NodeLabelSchedulingStrategy({"a": In("b")}, soft={"c": Exists()}),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.extra = 1  # type: ignore[attr-defined]
    assert NodeAffinitySchedulingStrategy(NODE, soft=True) == NodeAffinitySchedulingStrategy(
        NODE.upper(), soft=True
    )
