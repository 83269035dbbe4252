"""`ResourceConfig.required_attributes`: a job runs only on hosts that have these attributes."""

from __future__ import annotations

import pytest

from fray_ray.fray import ResourceConfig
from fray_ray.fray.iris_backend import convert_constraints
from fray_ray.iris.types import Constraint, ConstraintOp


def test_each_required_attribute_becomes_an_exists_constraint() -> None:
    resources = ResourceConfig(required_attributes=("ray-resource:special", "ray-resource:other"))
    assert convert_constraints(resources) == [
        Constraint("ray-resource:special", ConstraintOp.EXISTS),
        Constraint("ray-resource:other", ConstraintOp.EXISTS),
    ]


def test_required_attributes_must_be_a_list_of_strings() -> None:
    with pytest.raises(ValueError, match="required_attributes"):
        ResourceConfig(required_attributes="ray-resource:special")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="required_attributes"):
        ResourceConfig(required_attributes=[1])  # type: ignore[list-item]


def test_required_attribute_values_become_eq_constraints() -> None:
    resources = ResourceConfig(required_attribute_values=(("tpu-name", "slice-a"), ("tpu-worker-id", 0)))
    assert convert_constraints(resources) == [
        Constraint("tpu-name", ConstraintOp.EQ, "slice-a"),
        Constraint("tpu-worker-id", ConstraintOp.EQ, 0),
    ]


@pytest.mark.parametrize("bad", ["tpu-name", [("tpu-name",)], [("", "x")], [("tpu-worker-id", True)], [("a", 1.5)]])
def test_required_attribute_values_must_be_pairs_of_names_and_values(bad: object) -> None:
    with pytest.raises(ValueError, match="required_attribute_values"):
        ResourceConfig(required_attribute_values=bad)  # type: ignore[arg-type]
