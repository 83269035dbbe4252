"""`ray.util.metrics`: Counter, Gauge and Histogram take Ray's arguments and refuse bad ones as
Ray does; recording works in the driver, in tasks and in actors."""

from __future__ import annotations

import warnings

import pytest

from compat_tests._backend import LazyModule, ray

metrics = LazyModule("util.metrics")


def test_metrics__names_and_tag_keys_are_checked():
    with pytest.raises(ValueError, match="Empty name is not allowed"):
        metrics.Counter("")
    with pytest.raises(TypeError, match="tag_keys should be a tuple type"):
        metrics.Counter("compat_list_keys", tag_keys=["a"])
    with pytest.raises(TypeError, match="Tag keys must be str"):
        metrics.Counter("compat_int_keys", tag_keys=(1,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics.Gauge("not-a-name")  # kept, but its data are discarded
    assert any("Invalid metric name: not-a-name" in str(w.message) for w in caught)


def test_metrics__values_and_tags_are_checked():
    counter = metrics.Counter("compat_checked", description="d", tag_keys=("a", "b"))
    assert counter.info == {"name": "compat_checked", "description": "d", "tag_keys": ("a", "b"), "default_tags": {}}
    with pytest.raises(ValueError, match="Missing value for tag key\\(s\\): a,b."):
        counter.inc(1)
    with pytest.raises(ValueError, match="value must be >0, got -1"):
        counter.inc(-1, tags={"a": "x", "b": "y"})
    with pytest.raises(TypeError, match="value must be int or float"):
        counter.inc("1", tags={"a": "x", "b": "y"})
    with pytest.raises(TypeError, match="Tag values must be str"):
        counter.inc(1, tags={"a": 1, "b": "y"})
    with pytest.raises(ValueError, match="Unrecognized tag key zz."):
        counter.set_default_tags({"zz": "x"})
    counter.set_default_tags({"a": "x"})
    counter.inc(2, tags={"b": "y"})  # the default fills in `a`
    assert counter.info["default_tags"] == {"a": "x"}


def test_metrics__histogram_needs_positive_boundaries():
    for bad in (None, []):
        with pytest.raises(ValueError, match="boundaries argument should be provided"):
            metrics.Histogram("compat_hist_none", boundaries=bad)
    with pytest.raises(ValueError, match="Invalid `boundaries` argument at index 0"):
        metrics.Histogram("compat_hist_zero", boundaries=[0, 2])
    histogram = metrics.Histogram("compat_hist", boundaries=[1, 2])
    histogram.observe(1.5)
    with pytest.raises(TypeError, match="value must be int or float"):
        histogram.observe("x")


def test_metrics__gauge_takes_none_and_negative_values():
    gauge = metrics.Gauge("compat_gauge")
    gauge.set(None)
    gauge.set(-3)
    assert gauge.info["tag_keys"] == ()


@ray.remote
def record_in_a_task(n: int) -> int:
    counter = metrics.Counter("compat_task_counter", tag_keys=("where",))
    for _ in range(n):
        counter.inc(1, tags={"where": "task"})
    metrics.Histogram("compat_task_hist", boundaries=[10.0]).observe(3)
    return n


@ray.remote
class Recorder:
    def __init__(self) -> None:
        self.gauge = metrics.Gauge("compat_actor_gauge")

    def record(self, value: float) -> float:
        self.gauge.set(value)
        return value


def test_metrics__recording_in_tasks_and_actors(ray_start_regular_shared):
    assert ray.get(record_in_a_task.remote(3)) == 3
    recorder = Recorder.remote()
    assert ray.get(recorder.record.remote(7.5)) == 7.5
