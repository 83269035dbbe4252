"""Application metrics: recorded anywhere in a session, merged in the driver, Prometheus text out."""

from __future__ import annotations

import time
import uuid

import fray_ray
from fray_ray._private.observe.metrics import MetricKind, MetricSpec, Registry, process_registry, prometheus_text
from fray_ray.util import metrics

DEADLINE_S = 120


def test_counters_add_gauges_keep_the_last_value_histograms_bucket() -> None:
    registry = Registry()
    counter = MetricSpec("requests", MetricKind.COUNTER, "served requests")
    gauge = MetricSpec("queue_depth", MetricKind.GAUGE)
    histogram = MetricSpec("latency_s", MetricKind.HISTOGRAM, "latency", (0.1, 1.0))
    registry.record(counter, (("route", "a"),), 2)
    registry.record(counter, (("route", "a"),), 1)
    registry.record(gauge, (), 5)
    registry.record(gauge, (), 3)
    for value in (0.05, 0.1, 0.5, 7):
        registry.record(histogram, (), value)
    assert prometheus_text(registry) == "\n".join([
        "# HELP ray_latency_s latency",
        "# TYPE ray_latency_s histogram",
        'ray_latency_s_bucket{le="0.1"} 2',
        'ray_latency_s_bucket{le="1.0"} 3',
        'ray_latency_s_bucket{le="+Inf"} 4',
        "ray_latency_s_sum 7.65",
        "ray_latency_s_count 4",
        "# HELP ray_queue_depth queue_depth",
        "# TYPE ray_queue_depth gauge",
        "ray_queue_depth 3.0",
        "# HELP ray_requests served requests",
        "# TYPE ray_requests counter",
        'ray_requests{route="a"} 3.0',
    ]) + "\n"


def test_a_workers_reports_merge_into_the_drivers_registry() -> None:
    worker, driver = Registry(), Registry()
    counter = MetricSpec("jobs", MetricKind.COUNTER)
    histogram = MetricSpec("sizes", MetricKind.HISTOGRAM, "", (10.0,))
    worker.record(counter, (), 4)
    worker.record(histogram, (), 3)
    driver.merge(worker.drain())
    assert worker.drain() == []  # what was reported is not reported twice
    worker.record(counter, (), 1)
    worker.record(histogram, (), 30)
    driver.merge(worker.drain())
    assert {spec.name: value for spec, _, value in driver.samples()} == {"jobs": 5.0, "sizes": ([1, 1], 33.0, 2)}


def test_malformed_report_points_are_skipped() -> None:
    driver = Registry()
    driver.merge([["x"], ["n", "no-such-kind", "", [], [], 1], ["h", "histogram", "", [1.0], [], [[1], 1, 1]],
                  ["ok", "gauge", "", [], [["k", "v"]], 2.5]])
    assert [(spec.name, tags, value) for spec, tags, value in driver.samples()] == [("ok", (("k", "v"),), 2.5)]


def test_label_values_are_escaped() -> None:
    registry = Registry()
    registry.record(MetricSpec("g", MetricKind.GAUGE), (("path", 'a"b\\c\nd'),), 1)
    assert 'ray_g{path="a\\"b\\\\c\\nd"} 1.0' in prometheus_text(registry)


@fray_ray.remote
def count(name: str, n: int) -> int:
    counter = metrics.Counter(name, description="counted in a task", tag_keys=("where",))
    for _ in range(n):
        counter.inc(1, tags={"where": "task"})
    return n


@fray_ray.remote
class Gauger:
    def set(self, name: str, value: float) -> None:
        metrics.Gauge(name).set(value)


def test_values_recorded_in_tasks_and_actors_reach_the_driver(cluster_session: fray_ray.RayContext) -> None:
    suffix = uuid.uuid4().hex[:8]
    counter_name, gauge_name = f"tasks_counted_{suffix}", f"actor_gauge_{suffix}"
    assert fray_ray.get([count.remote(counter_name, 2), count.remote(counter_name, 3)]) == [2, 3]
    gauger = Gauger.remote()
    fray_ray.get(gauger.set.remote(gauge_name, 7.5))
    metrics.Counter(counter_name, tag_keys=("where",)).inc(10, tags={"where": "driver"})
    expected = [f'ray_{counter_name}{{where="task"}} 5.0', f'ray_{counter_name}{{where="driver"}} 10.0',
                f"ray_{gauge_name} 7.5"]
    deadline = time.monotonic() + DEADLINE_S
    while not all(line in prometheus_text(process_registry()) for line in expected):
        assert time.monotonic() < deadline, prometheus_text(process_registry())
        time.sleep(0.1)
