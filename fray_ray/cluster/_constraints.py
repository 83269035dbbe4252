"""Constraint matching: does a worker's attribute set satisfy a job's constraints?

REQUIRED constraints filter workers; PREFERRED ones rank them (more matches first). A device
request adds the implicit `device-type`/`device-variant` constraints unless the job already
constrains those keys itself (the user's own constraint wins, as in Iris).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fray_ray.cluster._config import ATTR_DEVICE_TYPE, ATTR_DEVICE_VARIANT
from fray_ray.iris.types import AttributeValue, Constraint, ConstraintMode, ConstraintOp, Device, GpuDevice, TpuDevice

_NEEDS_VALUE = (ConstraintOp.EQ, ConstraintOp.NE, ConstraintOp.GT, ConstraintOp.GE, ConstraintOp.LT, ConstraintOp.LE)
_AUTO_GPU_VARIANTS = ("", "auto", "any")


def validate_constraint(constraint: Constraint) -> None:
    """ValueError when the constraint cannot be evaluated (no key, missing value, empty IN)."""
    if not constraint.key:
        raise ValueError("a constraint needs a key")
    if constraint.op in _NEEDS_VALUE and constraint.value is None:
        raise ValueError(f"constraint on {constraint.key!r} with op {constraint.op.name} needs a value")
    if constraint.op == ConstraintOp.IN and not constraint.values:
        raise ValueError(f"constraint on {constraint.key!r} with op IN needs at least one value")
    if constraint.op in (ConstraintOp.GT, ConstraintOp.GE, ConstraintOp.LT, ConstraintOp.LE):
        if _number(constraint.value) is None:
            raise ValueError(f"constraint on {constraint.key!r} with op {constraint.op.name} needs a number")


def _number(value: AttributeValue | None) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        return None


def _equal(a: AttributeValue, b: AttributeValue) -> bool:
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return na == nb
    return str(a).casefold() == str(b).casefold()


def matches(constraint: Constraint, attributes: Mapping[str, AttributeValue]) -> bool:
    """True when `attributes` satisfy `constraint` (its mode is ignored here)."""
    present = constraint.key in attributes
    actual = attributes.get(constraint.key)
    op = constraint.op
    if op == ConstraintOp.EXISTS:
        return present
    if op == ConstraintOp.NOT_EXISTS:
        return not present
    if op == ConstraintOp.NE:
        return not present or not _equal(actual, constraint.value)  # type: ignore[arg-type]
    if not present:
        return False
    if op == ConstraintOp.EQ:
        return _equal(actual, constraint.value)  # type: ignore[arg-type]
    if op == ConstraintOp.IN:
        return any(_equal(actual, v) for v in constraint.values)  # type: ignore[arg-type]
    left, right = _number(actual), _number(constraint.value)
    if left is None or right is None:
        return False
    if op == ConstraintOp.GT:
        return left > right
    if op == ConstraintOp.GE:
        return left >= right
    if op == ConstraintOp.LT:
        return left < right
    return left <= right  # LE


def device_constraints(device: Device) -> tuple[Constraint, ...]:
    """The constraints a device request implies."""
    if isinstance(device, TpuDevice):
        return (Constraint(ATTR_DEVICE_TYPE, value="tpu"), Constraint(ATTR_DEVICE_VARIANT, value=device.variant))
    if isinstance(device, GpuDevice):
        if device.variant.casefold() in _AUTO_GPU_VARIANTS:
            return (Constraint(ATTR_DEVICE_TYPE, value="gpu"),)
        return (Constraint(ATTR_DEVICE_TYPE, value="gpu"), Constraint(ATTR_DEVICE_VARIANT, value=device.variant))
    return ()


def effective_constraints(user: Sequence[Constraint], device: Device) -> tuple[Constraint, ...]:
    """The user's constraints plus the implicit device ones for keys the user left alone."""
    user_keys = {c.key for c in user}
    implicit = tuple(c for c in device_constraints(device) if c.key not in user_keys)
    return tuple(user) + implicit


def required_match(constraints: Iterable[Constraint], attributes: Mapping[str, AttributeValue]) -> bool:
    return all(matches(c, attributes) for c in constraints if c.mode == ConstraintMode.REQUIRED)


def preference_score(constraints: Iterable[Constraint], attributes: Mapping[str, AttributeValue]) -> int:
    """How many PREFERRED constraints the attributes satisfy."""
    return sum(1 for c in constraints if c.mode == ConstraintMode.PREFERRED and matches(c, attributes))


def describe(constraint: Constraint) -> str:
    """`region == us-east1`, `tpu-name exists`, `zone in (a, b)`."""
    symbols = {
        ConstraintOp.EQ: "==",
        ConstraintOp.NE: "!=",
        ConstraintOp.GT: ">",
        ConstraintOp.GE: ">=",
        ConstraintOp.LT: "<",
        ConstraintOp.LE: "<=",
    }
    if constraint.op == ConstraintOp.EXISTS:
        return f"{constraint.key} exists"
    if constraint.op == ConstraintOp.NOT_EXISTS:
        return f"{constraint.key} does not exist"
    if constraint.op == ConstraintOp.IN:
        return f"{constraint.key} in ({', '.join(str(v) for v in constraint.values)})"
    return f"{constraint.key} {symbols[constraint.op]} {constraint.value}"
