"""What the benchmark measures: shapes, the metrics each one reports, and their targets.

A *shape* is one thing a backend is asked to do (run 10,000 queued tasks, create 100 actors);
shapes of one *batch* share one `run_one.py` process and session, and each repetition of a
batch is a fresh process. A shape reports one value per repetition for each of its *metrics*
(creating 100 actors reports the seconds, the seconds per actor, and RSS and PSS per actor).
`compare.py` adds *derived* metrics computed from a backend's own metrics repetition by
repetition (a synchronous actor call in multiples of the socket floor, how the cost per item
grows along a curve). Each shape's target, a ratio to Ray in the same run, sits beside it here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Kind(enum.Enum):
    """How `run_one.py` runs a shape."""

    FLOOR = "floor"  # no session at all: two plain processes and a socket
    LIFECYCLE = "lifecycle"  # the first (cold) session of a fresh interpreter
    SESSION = "session"  # inside one `init(num_cpus=2)` session shared by the batch
    CROSS_DRIVER = "cross_driver"  # a session a second driver process can join
    NODES = "nodes"  # a head and two simulated nodes (`cluster_utils.Cluster`)
    MULTI_NODE = "multi_node"  # a head and two simulated nodes of `cluster_utils.Cluster` (`multi_node.py`)


@dataclass(frozen=True)
class Curves:
    """Sizes of the two curves: queued tasks and actors alive at once."""

    tasks: tuple[int, ...] = (1_000, 10_000, 100_000)
    actors: tuple[int, ...] = (10, 100, 500)

    @classmethod
    def quick(cls) -> Curves:
        return cls(tasks=(100, 1_000, 3_000), actors=(2, 5, 10))


@dataclass(frozen=True)
class EnvelopeSizes:
    """Sizes of the envelope shapes (`envelope.py`). Ray publishes 10,000 arguments, 3,000
    returns, 10,000 objects in one get and 1,000,000 queued tasks; the defaults keep those
    where a run of both backends on a 2-core machine stays within minutes (queued tasks:
    100,000, `--envelope queued=1000000` for Ray's size) and a 4 GiB object."""

    args: int = 10_000
    returns: int = 3_000
    get: int = 10_000
    queued: int = 100_000
    large_gib: float = 4.0
    list_ints: int = 10_000  # each argument, return and object is a list of this many ints

    @classmethod
    def quick(cls) -> EnvelopeSizes:
        return cls(args=1_000, returns=300, get=1_000, queued=3_000, large_gib=0.25, list_ints=1_000)

    @classmethod
    def parse(cls, text: str | None, base: EnvelopeSizes) -> EnvelopeSizes:
        """`base` with the `name=value` pairs of `text` ("args=100,queued=1000000"); ValueError if wrong."""
        if not text:
            return base
        values: dict[str, Any] = dict(vars(base))
        for item in text.split(","):
            name, _, raw = item.partition("=")
            name = name.strip()
            if name not in values:
                raise ValueError(f"unknown envelope size {name!r}; known: {', '.join(values)}")
            number = float(raw) if name == "large_gib" else int(raw)
            if number <= 0:
                raise ValueError(f"envelope size {name} must be positive, got {raw!r}")
            values[name] = number
        return cls(**values)

    def text(self) -> str:
        return ",".join(f"{name}={value}" for name, value in vars(self).items())


@dataclass(frozen=True)
class Shape:
    name: str
    kind: Kind
    batch: str
    timeout_s: float
    description: str
    metrics: tuple[str, ...]
    size: int = 0  # the curve point's size (0: not a curve point)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "higher" | "lower"
    description: str
    ratio_to_ray: bool = True  # False: a backend's own figure (floors, growth along a curve)
    fray_only: bool = False


class TargetKind(enum.Enum):
    RATIO = "ratio"  # median ratio to Ray (>1: fray_ray better) at least `value`
    AT_MOST = "at_most"  # fray_ray's own median at most `value`
    COMPLETES = "completes"  # fray_ray finished every repetition


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    value: float
    text: str


def size_label(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


RATE_SHAPES: tuple[tuple[str, str, str], ...] = (
    ("tasks_sync", "ops/s", "submit one no-op task and get it"),
    ("tasks_batch_1000", "tasks/s", "submit 1000 no-op tasks, get the list"),
    ("actor_calls_sync", "ops/s", "call + get, one at a time, num_cpus=0 actor"),
    ("actor_calls_async", "calls/s", "1000 pipelined calls, then get them all"),
    ("async_actor_calls_sync", "ops/s", "call + get on an `async def` method"),
    ("async_actor_calls_async", "calls/s", "1000 pipelined calls on an `async def` method"),
    ("put_get_small", "ops/s", "get(put(0))"),
    ("put_100mb_gbps", "GB/s", "put of a 100 MB numpy array"),
    ("get_100mb_gbps", "GB/s", "get of a 100 MB numpy array already put (zero-copy: call overhead)"),
    ("task_arg_1mb_gbps", "GB/s", "a 1 MB numpy array passed to a task that sums it; get the sum"),
    ("task_arg_100mb_gbps", "GB/s", "a 100 MB numpy array passed to a task that sums it; get the sum"),
)

# Derived metrics: name -> (unit, description); computed in compare.py per backend and repetition.
DERIVED: dict[str, tuple[str, str]] = {
    "tasks_sync_vs_floor": ("× floor", "one synchronous task round trip in socket round trips"),
    "actor_call_sync_vs_floor": ("× floor", "one synchronous actor call in socket round trips"),
    "queued_tasks_cost_growth": ("×", "largest cost per task along the curve / cost at its smallest size"),
    "actors_time_cost_growth": ("×", "largest seconds per actor along the curve / at its smallest size"),
    "actors_pss_cost_growth": ("×", "largest PSS per actor along the curve / at its smallest size"),
}

BASE_TARGETS: dict[str, Target] = {
    "init_to_first_result": Target(TargetKind.RATIO, 5.0, "≥ 5× faster"),
    "idle_memory_mib": Target(TargetKind.RATIO, 4.0, "≤ 1/4 of Ray's"),
    "shutdown": Target(TargetKind.RATIO, 5.0, "≥ 5× faster"),
    "tasks_sync": Target(TargetKind.RATIO, 8.0, "≥ 8× rate"),
    "tasks_batch_1000": Target(TargetKind.RATIO, 5.0, "≥ 5× rate"),
    "actor_calls_sync": Target(TargetKind.RATIO, 5.0, "≥ 5× rate"),
    "actor_calls_async": Target(TargetKind.RATIO, 5.0, "≥ 5× rate"),
    "async_actor_calls_sync": Target(TargetKind.RATIO, 5.0, "≥ 5× rate"),
    "async_actor_calls_async": Target(TargetKind.RATIO, 5.0, "≥ 5× rate"),
    "put_100mb_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "get_100mb_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "task_arg_100mb_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "actors_100": Target(TargetKind.RATIO, 10.0, "≥ 10× faster"),
    "actors_100_pss_total": Target(TargetKind.RATIO, 4.0, "≤ 1/4 of Ray's"),
    "actor_call_sync_vs_floor": Target(TargetKind.AT_MOST, 3.0, "≤ 3× floor"),
    "queued_tasks_cost_growth": Target(TargetKind.AT_MOST, 1.25, "≤ 1.25 (flat)"),
    "actors_time_cost_growth": Target(TargetKind.AT_MOST, 1.25, "≤ 1.25 (flat)"),
    "actors_pss_cost_growth": Target(TargetKind.AT_MOST, 1.25, "≤ 1.25 (flat)"),
    "envelope_args_s": Target(TargetKind.RATIO, 1.0, "≥ Ray's speed"),
    "envelope_returns_s": Target(TargetKind.RATIO, 1.0, "≥ Ray's speed"),
    "envelope_get_s": Target(TargetKind.RATIO, 1.0, "≥ Ray's speed"),
    "envelope_queued_s": Target(TargetKind.RATIO, 1.0, "≥ Ray's speed"),
    "envelope_large_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "node_task_to_actor_calls": Target(TargetKind.RATIO, 3.0, "≥ 3× rate"),
    "node_task_to_actor_driver_us": Target(TargetKind.AT_MOST, 5.0, "≤ 5 µs"),
    "node_actor_to_actor_calls": Target(TargetKind.RATIO, 3.0, "≥ 3× rate"),
    "node_actor_to_actor_driver_us": Target(TargetKind.AT_MOST, 5.0, "≤ 5 µs"),
    "node_generator_items": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_generator_driver_us": Target(TargetKind.AT_MOST, 5.0, "≤ 5 µs"),
    "node_pass_on_steps": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_keep_steps": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_relay_steps": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_pass_large_steps": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_chain_steps": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_sample_steps": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_nested_tasks": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_nested_batch_tasks": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "node_to_node_100mb_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "node_to_node_driver_cpu_s_per_gb": Target(TargetKind.AT_MOST, 0.1, "≤ 0.1 s per GB"),
    "node_to_node_driver_peak_rss_mib": Target(TargetKind.AT_MOST, 100.0, "≤ 100 MiB above idle"),
    "actor_to_actor_100mb_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "actor_to_actor_driver_cpu_s_per_gb": Target(TargetKind.AT_MOST, 0.1, "≤ 0.1 s per GB"),
    "actor_to_actor_driver_peak_rss_mib": Target(TargetKind.AT_MOST, 100.0, "≤ 100 MiB above idle"),
    "stream_to_node_100mb_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "stream_to_node_driver_cpu_s_per_gb": Target(TargetKind.AT_MOST, 0.1, "≤ 0.1 s per GB"),
    "stream_to_node_driver_peak_rss_mib": Target(TargetKind.AT_MOST, 100.0, "≤ 100 MiB above idle"),
    "parallel_puts_gbps": Target(TargetKind.RATIO, 1.0, "≥ Ray's GB/s"),
    "wait_one_of_1k": Target(TargetKind.RATIO, 1.0, "≥ Ray's rate"),
    "broadcast_512mib_4_s": Target(TargetKind.RATIO, 1.0, "≥ Ray's speed"),
    "broadcast_512mib_4_origin_x": Target(TargetKind.AT_MOST, 2.01, "≤ 2× the array (and its pickle header)"),
    "broadcast_1gib_8_s": Target(TargetKind.RATIO, 1.0, "≥ Ray's speed"),
    "broadcast_1gib_8_origin_x": Target(TargetKind.AT_MOST, 2.01, "≤ 2× the array (and its pickle header)"),
}


@dataclass(frozen=True)
class Catalog:
    """Every shape, metric and target for one choice of curve sizes."""

    curves: Curves
    envelope: EnvelopeSizes
    shapes: dict[str, Shape]
    metrics: dict[str, Metric]
    targets: dict[str, Target]
    groups: dict[str, tuple[str, ...]]  # names `--shapes` accepts for several shapes at once

    def select(self, names: list[str]) -> list[str]:
        """Shape names for a list of shape and group names, in catalog order; ValueError if unknown."""
        wanted: set[str] = set()
        for name in names:
            if name in self.shapes:
                wanted.add(name)
            elif name in self.groups:
                wanted.update(self.groups[name])
            else:
                raise ValueError(f"unknown shape {name!r}; known shapes: {', '.join(self.shapes)}; groups: {', '.join(self.groups)}")
        return [s for s in self.shapes if s in wanted]


def catalog(curves: Curves, timeout_scale: float = 1.0, envelope: EnvelopeSizes | None = None) -> Catalog:
    shapes: list[Shape] = []
    metrics: list[Metric] = []

    def add(shape: Shape, *shape_metrics: Metric) -> None:
        shapes.append(Shape(shape.name, shape.kind, shape.batch, shape.timeout_s * timeout_scale, shape.description,
                            tuple(m.name for m in shape_metrics), shape.size))
        metrics.extend(shape_metrics)

    add(Shape("floor", Kind.FLOOR, "floor", 120, "plain framed-socket round trip between two Python processes", ()),
        Metric("floor_socket_rtt_us", "µs", "lower", "64-byte framed message and its echo over loopback TCP", ratio_to_ray=False),
        Metric("floor_socket_threaded_rtt_us", "µs", "lower", "the same, a reader thread handing each reply to the caller",
               ratio_to_ray=False),
        Metric("floor_socket_spin_rtt_us", "µs", "lower", "the first round trip, both ends spinning up to 200 µs before they sleep",
               ratio_to_ray=False),
        Metric("floor_socket_100mb_gbps", "GB/s", "higher", "one 100 MB frame over the same socket, acknowledged", ratio_to_ray=False),
        Metric("floor_protocol_rtt_us", "µs", "lower", "the same round trip through fray_ray's stream protocol",
               ratio_to_ray=False, fray_only=True))
    add(Shape("init_to_first_result", Kind.LIFECYCLE, "lifecycle", 180, "init() to the first no-op task's result, cold", ()),
        Metric("init_to_first_result", "s", "lower", "init() to the first task's result"))
    add(Shape("idle_memory", Kind.LIFECYCLE, "lifecycle", 180, "memory of the idle session after one task", ()),
        Metric("idle_memory_mib", "MiB", "lower", "RSS summed over the session's processes"),
        Metric("idle_pss_mib", "MiB", "lower", "PSS summed over the session's processes"))
    add(Shape("shutdown", Kind.LIFECYCLE, "lifecycle", 180, "shutdown() of a session that ran one task", ()),
        Metric("shutdown", "s", "lower", "the shutdown() call"))
    for name, unit, text in RATE_SHAPES:
        add(Shape(name, Kind.SESSION, "rates", 120, text, ()), Metric(name, unit, "higher", text))
    for n in curves.tasks:
        label = size_label(n)
        add(Shape(f"queued_tasks_{label}", Kind.SESSION, "queued_tasks", 60 + n * 0.005,
                  f"{n:,} no-op tasks submitted, then all got", (), n),
            Metric(f"queued_tasks_{label}", "tasks/s", "higher", f"{n:,} queued tasks"),
            Metric(f"queued_tasks_{label}_us_per_task", "µs", "lower", "wall time per task"))
    for n in curves.actors:
        label = size_label(n)
        add(Shape(f"actors_{label}", Kind.SESSION, f"actors_{label}", 60 + n * 2.0,
                  f"{n} num_cpus=0 actors created and called once", (), n),
            Metric(f"actors_{label}", "s", "lower", f"create {n} actors, one call each answered"),
            Metric(f"actors_{label}_ms_per_actor", "ms", "lower", "creation time per actor"),
            Metric(f"actors_{label}_rss_per_actor", "MiB", "lower", "session RSS added per actor"),
            Metric(f"actors_{label}_pss_per_actor", "MiB", "lower", "session PSS added per actor"),
            Metric(f"actors_{label}_pss_total", "MiB", "lower", f"session PSS with {n} actors alive"))
    env = envelope or EnvelopeSizes()
    add(Shape("envelope_args", Kind.SESSION, "envelope", 60 + env.args * env.list_ints * 5e-6,
              f"{env.args:,} refs to lists of {env.list_ints:,} ints as one task's arguments", ()),
        Metric("envelope_args_s", "s", "lower", "the call and its result (the objects put before)"))
    add(Shape("envelope_returns", Kind.SESSION, "envelope", 60 + env.returns * env.list_ints * 5e-6,
              f"one task returning {env.returns:,} lists of {env.list_ints:,} ints", ()),
        Metric("envelope_returns_s", "s", "lower", "the call and the get of every return"))
    add(Shape("envelope_get", Kind.SESSION, "envelope", 60 + env.get * env.list_ints * 5e-6,
              f"one get of {env.get:,} objects, lists of {env.list_ints:,} ints", ()),
        Metric("envelope_get_s", "s", "lower", "the get (the objects put before)"))
    add(Shape("envelope_queued", Kind.SESSION, "envelope_queued", 120 + env.queued * 0.005,
              f"{env.queued:,} no-op tasks queued behind tasks holding every CPU", ()),
        Metric("envelope_queued_s", "s", "lower", "first submission to last result"),
        Metric("envelope_queued_driver_bytes_per_task", "B", "lower", "driver RSS added per queued task"))
    add(Shape("envelope_large", Kind.SESSION, "envelope_large", 120 + env.large_gib * 30,
              f"a {env.large_gib:g} GiB numpy array put and got back", ()),
        Metric("envelope_large_gbps", "GB/s", "higher", "put + get"))
    add(Shape("cross_driver_calls", Kind.CROSS_DRIVER, "cross_driver", 180,
              "a second driver process calls a named actor the first one created", ()),
        Metric("cross_driver_calls", "calls/s", "higher", "call + get from the second driver, one at a time"))
    add(Shape("node_calls", Kind.NODES, "node_calls", 240,
              "a head and two simulated nodes: node B calls an actor on node A, call + get, one at a time, "
              "reads its generator's items, and passes each of its results on to a second actor as a ref", ()),
        Metric("node_task_to_actor_calls", "calls/s", "higher", "a task on node B calling the actor"),
        Metric("node_task_to_actor_driver_us", "µs", "lower", "the driver's CPU per such call"),
        Metric("node_actor_to_actor_calls", "calls/s", "higher", "an actor on node B calling the actor"),
        Metric("node_actor_to_actor_driver_us", "µs", "lower", "the driver's CPU per such call"),
        Metric("node_generator_items", "items/s", "higher", "a task on node B reading the actor's generator items"),
        Metric("node_generator_driver_us", "µs", "lower", "the driver's CPU per such item"),
        Metric("node_pass_on_steps", "steps/s", "higher", "a task on node B passing each result of the actor on to another"),
        Metric("node_pass_on_driver_us", "µs", "lower", "the driver's CPU per such step (it counts the borrows)"),
        Metric("node_keep_steps", "steps/s", "higher", "the same steps to an actor that keeps the last 100 refs"),
        Metric("node_keep_driver_us", "µs", "lower", "the driver's CPU per such step"),
        Metric("node_relay_steps", "steps/s", "higher", "the same steps through an actor on node A that passes each ref on"),
        Metric("node_relay_driver_us", "µs", "lower", "the driver's CPU per such step"),
        Metric("node_pass_large_steps", "steps/s", "higher", "1 MiB results passed on to an actor on node A that reads them"),
        Metric("node_pass_large_driver_us", "µs", "lower", "the driver's CPU per such step"),
        Metric("node_chain_steps", "steps/s", "higher", "each result passed as the argument of a call to another actor"),
        Metric("node_chain_driver_us", "µs", "lower", "the driver's CPU per such step"),
        Metric("node_sample_steps", "steps/s", "higher", "each result kept by a buffer, then sampled from it by a learner on node B"),
        Metric("node_sample_driver_us", "µs", "lower", "the driver's CPU per such step"),
        Metric("node_nested_tasks", "tasks/s", "higher", "a task on node B submitting tasks to node A, one at a time"),
        Metric("node_nested_task_driver_us", "µs", "lower", "the driver's CPU per such task (it schedules them)"),
        Metric("node_nested_batch_tasks", "tasks/s", "higher", "a task on node B submitting 1,000 tasks at once to node A"))
    add(Shape("node_to_node_100mb", Kind.MULTI_NODE, "multi_node", 300,
              "8 × 100 MB arrays made by tasks on node A, summed by tasks on node B", ()),
        Metric("node_to_node_100mb_gbps", "GB/s", "higher", "bytes moved A → B per second"),
        Metric("node_to_node_driver_cpu_s_per_gb", "s", "lower", "the driver's CPU per GB moved"),
        Metric("node_to_node_driver_peak_rss_mib", "MiB", "lower", "the driver's peak RSS above its start"))
    add(Shape("actor_to_actor_100mb", Kind.MULTI_NODE, "multi_node", 300,
              "the driver passes 8 × 100 MB arrays made by an actor on node A, unread, to an actor on node B", ()),
        Metric("actor_to_actor_100mb_gbps", "GB/s", "higher", "bytes moved A → B per second"),
        Metric("actor_to_actor_driver_cpu_s_per_gb", "s", "lower", "the driver's CPU per GB moved"),
        Metric("actor_to_actor_driver_peak_rss_mib", "MiB", "lower", "the driver's peak RSS above its start"))
    add(Shape("stream_to_node_100mb", Kind.MULTI_NODE, "multi_node", 300,
              "the driver passes 8 × 100 MB items of a streaming task on node A, unread, to tasks on node B", ()),
        Metric("stream_to_node_100mb_gbps", "GB/s", "higher", "bytes moved A → B per second"),
        Metric("stream_to_node_driver_cpu_s_per_gb", "s", "lower", "the driver's CPU per GB moved"),
        Metric("stream_to_node_driver_peak_rss_mib", "MiB", "lower", "the driver's peak RSS above its start"))
    add(Shape("parallel_puts", Kind.MULTI_NODE, "multi_node", 300,
              "4 tasks on two nodes each ray.put a 100 MB array at once", ()),
        Metric("parallel_puts_gbps", "GB/s", "higher", "bytes put per second"))
    add(Shape("wait_one_of_1k", Kind.MULTI_NODE, "multi_node", 300,
              "ray.wait(num_returns=1) loop over 1,000 pending tasks", ()),
        Metric("wait_one_of_1k", "refs/s", "higher", "ready refs taken per second"))
    for name, text in (("broadcast_512mib_4", "a 512 MiB array put by an actor on one node, read on 4 others"),
                       ("broadcast_1gib_8", "a 1 GiB array put by an actor on one node, read on 8 others")):
        add(Shape(name, Kind.MULTI_NODE, "multi_node", 600, text, ()),
            Metric(f"{name}_s", "s", "lower", "first read submitted to last sum"),
            Metric(f"{name}_origin_x", "×", "lower", "bytes the origin sent, in arrays", ratio_to_ray=False, fray_only=True))
    for name, (unit, text) in DERIVED.items():
        metrics.append(Metric(name, unit, "lower", text, ratio_to_ray=False))

    shape_map = {s.name: s for s in shapes}
    metric_map = {m.name: m for m in metrics}
    targets = {k: v for k, v in BASE_TARGETS.items() if k in metric_map}
    for s in shapes:
        if s.size:
            targets.setdefault(s.metrics[0], Target(TargetKind.COMPLETES, 0.0, "completes"))
    groups = {
        "lifecycle": tuple(s.name for s in shapes if s.kind is Kind.LIFECYCLE),
        "rates": tuple(name for name, _, _ in RATE_SHAPES),
        "task_args": ("task_arg_1mb_gbps", "task_arg_100mb_gbps"),
        "queued_tasks": tuple(s.name for s in shapes if s.batch == "queued_tasks"),
        "actors": tuple(s.name for s in shapes if s.name.startswith("actors_")),
        "curves": tuple(s.name for s in shapes if s.size),
        "envelope": tuple(s.name for s in shapes if s.name.startswith("envelope_")),
        "multi_node": tuple(s.name for s in shapes if s.kind is Kind.MULTI_NODE and not s.name.startswith("broadcast_")),
        "broadcast": tuple(s.name for s in shapes if s.name.startswith("broadcast_")),
    }
    return Catalog(curves, env, shape_map, metric_map, targets, groups)
