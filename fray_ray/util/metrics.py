"""`ray.util.metrics`: application metrics from the driver, tasks and actors.

`Counter`, `Gauge` and `Histogram` take Ray's arguments and check them as Ray does. Values
recorded in a task or actor reach the driver within about a second and are merged there
(counters and histograms add up, a gauge keeps the last value set); the session's metrics are
served in Prometheus's text format, names prefixed `ray_` as Ray exports them (see
`fray_ray._private.observe.metrics`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from fray_ray._private.core import runtime_state
from fray_ray._private.observe.metrics import MetricKind, MetricSpec, process_registry, report_from

__all__ = ["Counter", "Gauge", "Histogram", "Metric"]

_VALID_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


class Metric:
    """What every metric has: a name, a description, tag keys and default tags."""

    _KIND = MetricKind.GAUGE

    def __init__(self, name: str, description: str = "", tag_keys: tuple[str, ...] | None = None) -> None:
        if not name:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        self._discarded = _VALID_NAME.match(name) is None
        if self._discarded:
            warnings.warn(
                f"Invalid metric name: {name}. Metric will be discarded and data will not be collected or "
                "published. Metric names can only contain letters, numbers, _, and :. Metric names cannot "
                "start with numbers.",
                UserWarning,
                stacklevel=2,
            )
        if tag_keys is None:
            tag_keys = ()
        if not isinstance(tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(tag_keys)}")
        for key in tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")
        self._name = name
        self._description = description
        self._tag_keys = tag_keys
        self._default_tags: dict[str, str] = {}
        self._spec = MetricSpec(name, self._KIND, description)

    def set_default_tags(self, default_tags: dict[str, str]) -> Metric:
        """Tags used when a record does not give them. Returns the metric."""
        for key, value in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key}.")
            _check_tag_value(value)
        self._default_tags = dict(default_tags)
        return self

    @property
    def info(self) -> dict[str, Any]:
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys,
                "default_tags": self._default_tags}

    def _record(self, value: float, tags: Mapping[str, str] | None) -> None:
        merged = {**self._default_tags, **(tags or {})}
        missing = [key for key in self._tag_keys if key not in merged]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")
        for tag_value in merged.values():
            _check_tag_value(tag_value)
        if self._discarded:
            return
        _record(self._spec, tuple((key, merged[key]) for key in self._tag_keys), float(value))


class Counter(Metric):
    """A count that only goes up."""

    _KIND = MetricKind.COUNTER

    def inc(self, value: int | float = 1.0, tags: dict[str, str] | None = None) -> None:
        _check_value(value)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        self._record(value, tags)


class Gauge(Metric):
    """A value that is set: the last one set counts."""

    _KIND = MetricKind.GAUGE

    def set(self, value: int | float | None, tags: dict[str, str] | None = None) -> None:
        if value is None:
            return
        _check_value(value)
        self._record(value, tags)


class Histogram(Metric):
    """Observed values counted into buckets whose upper bounds are `boundaries`."""

    _KIND = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str = "", boundaries: Sequence[float] | None = None,
                 tag_keys: tuple[str, ...] | None = None) -> None:
        super().__init__(name, description, tag_keys)
        if not boundaries:
            raise ValueError(
                'boundaries argument should be provided when using the Histogram class. e.g., '
                'Histogram("name", boundaries=[1.0, 2.0])'
            )
        for index, bound in enumerate(boundaries):
            if not isinstance(bound, (int, float)) or bound <= 0:
                raise ValueError(
                    f"Invalid `boundaries` argument at index {index}, {list(boundaries)}. "
                    "Use positive values for the arguments."
                )
        self._boundaries = list(boundaries)
        self._spec = MetricSpec(name, MetricKind.HISTOGRAM, description, tuple(sorted(float(b) for b in boundaries)))

    def observe(self, value: int | float, tags: dict[str, str] | None = None) -> None:
        _check_value(value)
        self._record(value, tags)

    @property
    def info(self) -> dict[str, Any]:
        return {**super().info, "boundaries": self._boundaries}


def _check_value(value: object) -> None:
    if not isinstance(value, (int, float)):
        raise TypeError(f"value must be int or float, got {type(value)}.")


def _check_tag_value(value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"Tag values must be str, got {type(value)}.")


def _record(spec: MetricSpec, tags: tuple[tuple[str, str], ...], value: float) -> None:
    runtime = runtime_state.process_runtime_or_none()
    if runtime is not None and not runtime.is_driver:
        report_from(runtime)
    process_registry().record(spec, tags, value)
