"""Application metrics (`fray_ray.util.metrics`): one registry per process, the session's in the driver.

A worker's registry keeps what was recorded since it last reported; a thread of the worker
sends that to the driver once a second (`MetricsReport`), where it is merged into the driver's
registry: counters and histograms add up, a gauge keeps the last value set. The driver's
registry is the session's, shown by the dashboard and served as Prometheus text
(`prometheus_text`), with Ray's `ray_` prefix on every name as Ray's exporter writes them.
"""

from __future__ import annotations

import bisect
import enum
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MetricKind", "MetricSpec", "Registry", "process_registry", "prometheus_text"]

REPORT_INTERVAL_S = 1.0
_PREFIX = "ray_"


class MetricKind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricSpec:
    """What a metric is: its name, kind, help text and (histograms) bucket boundaries."""

    name: str
    kind: MetricKind
    description: str = ""
    boundaries: tuple[float, ...] = ()


Tags = tuple[tuple[str, str], ...]


class _Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size  # one per boundary, then the overflow (+Inf)
        self.sum = 0.0
        self.count = 0


class Registry:
    """Recorded values by (metric, tags). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, MetricSpec] = {}
        self._values: dict[tuple[str, Tags], Any] = {}  # float, or _Histogram

    def record(self, spec: MetricSpec, tags: Tags, value: float) -> None:
        key = (spec.name, tags)
        with self._lock:
            self._specs.setdefault(spec.name, spec)
            if spec.kind is MetricKind.COUNTER:
                self._values[key] = self._values.get(key, 0.0) + value
            elif spec.kind is MetricKind.GAUGE:
                self._values[key] = value
            else:
                histogram = self._values.get(key)
                if histogram is None:
                    histogram = self._values[key] = _Histogram(len(spec.boundaries) + 1)
                histogram.buckets[bisect.bisect_left(spec.boundaries, value)] += 1
                histogram.sum += value
                histogram.count += 1

    def drain(self) -> list[list[Any]]:
        """Everything recorded since the last drain, as report points; forgets it."""
        with self._lock:
            values, self._values = self._values, {}
            specs = dict(self._specs)
        return [_point(specs[name], tags, value) for (name, tags), value in values.items()]

    def merge(self, points: Iterable[Sequence[Any]]) -> None:
        """Add a worker's report (see `drain`); malformed points are skipped."""
        for point in points:
            try:
                name, kind, description, boundaries, tags, value = point
                spec = MetricSpec(str(name), MetricKind(kind), str(description), tuple(float(b) for b in boundaries))
                tag_pairs = tuple((str(k), str(v)) for k, v in tags)
            except (TypeError, ValueError):
                continue
            self._merge_one(spec, tag_pairs, value)

    def _merge_one(self, spec: MetricSpec, tags: Tags, value: Any) -> None:
        key = (spec.name, tags)
        with self._lock:
            known = self._specs.setdefault(spec.name, spec)
            if known.kind is not spec.kind:
                return  # two metrics of one name and different kinds: the first one stays
            if spec.kind is MetricKind.HISTOGRAM:
                if not isinstance(value, (list, tuple)) or len(value) != 3 or len(value[0]) != len(known.boundaries) + 1:
                    return
                histogram = self._values.get(key)
                if histogram is None:
                    histogram = self._values[key] = _Histogram(len(known.boundaries) + 1)
                for i, count in enumerate(value[0]):
                    histogram.buckets[i] += int(count)
                histogram.sum += float(value[1])
                histogram.count += int(value[2])
            elif isinstance(value, (int, float)):
                self._values[key] = self._values.get(key, 0.0) + value if spec.kind is MetricKind.COUNTER else value

    def samples(self) -> list[tuple[MetricSpec, Tags, Any]]:
        """(spec, tags, value) of every series: a float, or (bucket counts, sum, count)."""
        with self._lock:
            return [
                (self._specs[name], tags, (list(v.buckets), v.sum, v.count) if isinstance(v, _Histogram) else v)
                for (name, tags), v in sorted(self._values.items())
            ]


def _point(spec: MetricSpec, tags: Tags, value: Any) -> list[Any]:
    wire = [list(value.buckets), value.sum, value.count] if isinstance(value, _Histogram) else value
    return [spec.name, spec.kind.value, spec.description, list(spec.boundaries), [list(t) for t in tags], wire]


def prometheus_text(registry: Registry) -> str:
    """The registry in Prometheus's text exposition format (version 0.0.4)."""
    lines: list[str] = []
    described: set[str] = set()
    for spec, tags, value in registry.samples():
        name = _PREFIX + spec.name
        if name not in described:
            described.add(name)
            lines.append(f"# HELP {name} {_escape_help(spec.description or spec.name)}")
            lines.append(f"# TYPE {name} {spec.kind.value}")
        if spec.kind is MetricKind.HISTOGRAM:
            buckets, total, count = value
            cumulative = 0
            for bound, bucket in zip([*spec.boundaries, math.inf], buckets, strict=True):
                cumulative += bucket
                lines.append(f"{name}_bucket{_labels(tags, le=_number(bound))} {cumulative}")
            lines.append(f"{name}_sum{_labels(tags)} {_number(total)}")
            lines.append(f"{name}_count{_labels(tags)} {count}")
        else:
            lines.append(f"{name}{_labels(tags)} {_number(value)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _labels(tags: Tags, **extra: str) -> str:
    pairs = [*tags, *extra.items()]
    if not pairs:
        return ""
    return "{" + ",".join(f'{key}="{_escape_label(val)}"' for key, val in pairs) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


_registry = Registry()


def process_registry() -> Registry:
    """This process's registry: the session's in the driver, pending reports in a worker."""
    return _registry


class Reporter:
    """A worker's thread that sends its registry's news to the driver once a second."""

    def __init__(self, registry: Registry, send: Callable[[list[list[Any]]], None]) -> None:
        self._registry = registry
        self._send = send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fray-ray-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(REPORT_INTERVAL_S):
            self.flush()

    def flush(self) -> None:
        points = self._registry.drain()
        if points:
            try:
                self._send(points)
            except Exception:  # noqa: BLE001 - the driver is gone: the worker ends soon too
                self._stop.set()

    def stop(self) -> None:
        self._stop.set()


_reporters: dict[int, Reporter] = {}  # id(worker runtime) -> its reporter
_reporters_lock = threading.Lock()


def report_from(runtime: Any) -> None:
    """Make sure a worker runtime's reporter runs (one per runtime, started on first record)."""
    with _reporters_lock:
        if id(runtime) not in _reporters:
            _reporters[id(runtime)] = Reporter(process_registry(), runtime.report_metrics)


def stop_reporting(runtime: Any) -> None:
    """Send what the runtime's reporter still holds and stop it (its session is closing)."""
    with _reporters_lock:
        reporter = _reporters.pop(id(runtime), None)
    if reporter is not None:
        reporter.stop()
        reporter.flush()
