"""Shapes on several nodes: a head and two simulated nodes made with `cluster_utils.Cluster`
(raylets of their own on Ray, simulated hosts on fray_ray), custom resources pinning work.

- `node_to_node_100mb`: tasks on node A make 100 MB arrays, tasks on node B sum them: GB/s, the
  driver's CPU seconds per GB moved, and the driver's peak RSS above where it started.
- `actor_to_actor_100mb`: the driver calls an actor on node A for 100 MB arrays and passes each
  ref, unread, to an actor on node B that sums it (rollout workers feeding a learner): the same
  three measures.
- `stream_to_node_100mb`: a streaming task on node A yields 100 MB arrays; the driver passes each
  item's ref, unread, to a task on node B that sums it (a data loader feeding trainers): the
  same three measures.
- `parallel_puts`: four tasks (two per node) each `ray.put` a 100 MB array at once and return
  the ref; the driver waits for the refs (the values stay put): GB/s.
- `wait_one_of_1k`: 1,000 short tasks are submitted, then `ray.wait(refs, num_returns=1)`
  takes one ready ref at a time until none is left: refs/s.
- `broadcast_512mib_4` and `broadcast_1gib_8`: a head, an origin node and 4 (8) reader nodes;
  an actor on the origin `ray.put`s the array and one task per reader node sums it: the
  seconds from submitting the reads to the last sum, and (fray_ray only) the bytes the
  origin's process sent, in multiples of the array (each host fetches once, from any host that
  has a copy, so at most 2).

The driver is this process: its CPU is `time.process_time()` (fray_ray's embedded controller
runs here too, so its CPU counts against fray_ray), its RSS is sampled every 10 ms.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from workloads import ok

MB100 = 100 * 1000 * 1000
TRANSFERS = 8  # arrays moved from A to B per repetition
PUTTERS = 4
WAIT_TASKS = 1_000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The highest RSS of this process while it runs (sampled)."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.start = _rss_bytes()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval_s,), daemon=True)
        self._thread.start()

    def _sample(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.peak = max(self.peak, _rss_bytes())

    def stop(self) -> float:
        """MiB above the RSS at the start."""
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())
        return (self.peak - self.start) / (1 << 20)


@contextmanager
def simulated_nodes(backend: str, ray: Any, nodes: list[dict[str, Any]], head: dict[str, Any]) -> Iterator[None]:
    """A `cluster_utils.Cluster` of a head (`head`'s node arguments) and `nodes`, connected."""
    root = tempfile.mkdtemp(prefix="mn-", dir="/tmp")  # Ray's unix sockets want a short path
    os.environ["RAY_TMPDIR"] = root
    cluster_utils = importlib.import_module(f"{backend}.cluster_utils")
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=head)
    try:
        for node in nodes:
            cluster.add_node(**node)
        cluster.connect()
        yield
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.pop("RAY_TMPDIR", None)
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def three_nodes(backend: str, ray: Any) -> Any:
    """A head and nodes A and B (custom resources `node_a`, `node_b`)."""
    nodes = [{"num_cpus": 2, "resources": {"node_a": 4}}, {"num_cpus": 2, "resources": {"node_b": 4}}]
    return simulated_nodes(backend, ray, nodes, {"num_cpus": 1})


def node_to_node(ray: Any) -> dict[str, Any]:
    import numpy as np

    @ray.remote(resources={"node_a": 1})
    def make(seed: int) -> Any:
        return np.full(MB100, seed % 250, np.uint8)

    @ray.remote(resources={"node_b": 1})
    def consume(array: Any) -> int:
        return int(array[::4096].sum())

    ray.get([consume.remote(make.remote(i)) for i in range(4)])  # warm every worker of both nodes
    return _transfers("node_to_node", lambda: ray.get([consume.remote(make.remote(i)) for i in range(TRANSFERS)]))


def _transfers(name: str, move_all: Callable[[], list[Any]]) -> dict[str, Any]:
    """Time `move_all()`, which moves `TRANSFERS` arrays from node A to node B: GB/s, the
    driver's CPU per GB and its peak RSS above where it started."""
    peak = PeakRss()
    cpu0, t0 = time.process_time(), time.perf_counter()
    results = move_all()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    growth = peak.stop()
    assert len(results) == TRANSFERS
    gb = TRANSFERS * MB100 / 1e9
    return ok({f"{name}_100mb_gbps": gb / wall, f"{name}_driver_cpu_s_per_gb": cpu / gb,
               f"{name}_driver_peak_rss_mib": growth})


def actor_to_actor(ray: Any) -> dict[str, Any]:
    import numpy as np

    @ray.remote(resources={"node_a": 1})
    class Producer:
        def make(self, seed: int) -> Any:
            return np.full(MB100, seed % 250, np.uint8)

    @ray.remote(resources={"node_b": 1})
    class Consumer:
        def consume(self, array: Any) -> int:
            return int(array[::4096].sum())

    producer, consumer = Producer.remote(), Consumer.remote()
    ray.get([consumer.consume.remote(producer.make.remote(i)) for i in range(2)])  # warm both
    return _transfers("actor_to_actor",
                      lambda: ray.get([consumer.consume.remote(producer.make.remote(i)) for i in range(TRANSFERS)]))


def stream_to_node(ray: Any) -> dict[str, Any]:
    import numpy as np

    @ray.remote(resources={"node_a": 1}, num_returns="streaming")
    def produce(count: int) -> Any:
        for seed in range(count):
            yield np.full(MB100, seed % 250, np.uint8)

    @ray.remote(resources={"node_b": 1})
    def consume(array: Any) -> int:
        return int(array[::4096].sum())

    ray.get([consume.remote(item) for item in produce.remote(2)])  # warm both nodes' workers
    return _transfers("stream_to_node", lambda: ray.get([consume.remote(item) for item in produce.remote(TRANSFERS)]))


def parallel_puts(ray: Any) -> dict[str, Any]:
    import numpy as np

    def putter(resource: str) -> Callable[..., Any]:
        @ray.remote(resources={resource: 1})
        def put_one(seed: int) -> list[Any]:
            return [ray.put(np.full(MB100, seed % 250, np.uint8))]

        return put_one

    on_a, on_b = putter("node_a"), putter("node_b")
    ray.get([on_a.remote(0), on_b.remote(0)])  # warm
    t0 = time.perf_counter()
    refs = ray.get([(on_a if i % 2 else on_b).remote(i) for i in range(PUTTERS)])
    wall = time.perf_counter() - t0
    assert len(refs) == PUTTERS
    del refs
    return ok({"parallel_puts_gbps": PUTTERS * MB100 / 1e9 / wall})


def wait_one_of_1k(ray: Any) -> dict[str, Any]:
    @ray.remote(num_cpus=0.25)
    def tick(i: int) -> int:
        return i

    ray.get([tick.remote(i) for i in range(50)])  # warm
    t0 = time.perf_counter()
    pending = [tick.remote(i) for i in range(WAIT_TASKS)]
    taken = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        taken += len(ready)
    wall = time.perf_counter() - t0
    assert taken == WAIT_TASKS
    return ok({"wait_one_of_1k": WAIT_TASKS / wall})


SHAPES: dict[str, Callable[[Any], dict[str, Any]]] = {
    "node_to_node_100mb": node_to_node,
    "actor_to_actor_100mb": actor_to_actor,
    "stream_to_node_100mb": stream_to_node,
    "parallel_puts": parallel_puts,
    "wait_one_of_1k": wait_one_of_1k,
}


#: broadcast shape -> (array bytes, reader nodes)
BROADCASTS = {"broadcast_512mib_4": (512 << 20, 4), "broadcast_1gib_8": (1 << 30, 8)}


def broadcast_nodes(backend: str, ray: Any, size: int, readers: int) -> Any:
    """A head, an `origin` node and `readers` nodes (`reader_<i>`), each store sized for the array."""
    store = {"object_store_memory": size * 2 + (256 << 20)} if backend == "ray" else {}
    nodes = [{"num_cpus": 1, "resources": {"origin": 1}, **store}]
    nodes += [{"num_cpus": 1, "resources": {f"reader_{index}": 1}, **store} for index in range(readers)]
    return simulated_nodes(backend, ray, nodes, {"num_cpus": 1, **store})


def broadcast(name: str, backend: str, ray: Any) -> dict[str, Any]:
    import numpy as np

    size, readers = BROADCASTS[name]

    @ray.remote(resources={"origin": 1})
    class Origin:
        def make(self) -> list[Any]:
            self.ref = ray.put(np.full(size, 7, np.uint8))
            return [self.ref]

        def sent_bytes(self) -> int:
            if backend != "fray_ray":
                return 0
            from fray_ray._private.workers.held_results import WORKER_HOLDER

            held = WORKER_HOLDER.held
            return 0 if held is None else held.served_bytes

    def reader(index: int) -> Any:
        @ray.remote(resources={f"reader_{index}": 1})
        def total(box: list[Any]) -> int:
            return int(ray.get(box[0])[:: 1 << 16].sum())

        return total

    tasks = [reader(i) for i in range(readers)]
    ray.get([t.remote([ray.put(np.zeros(1 << 16, np.uint8))]) for t in tasks])  # warm a worker on every node
    origin = Origin.remote()
    (ref,) = ray.get(origin.make.remote())
    t0 = time.perf_counter()
    sums = ray.get([t.remote([ref]) for t in tasks])
    wall = time.perf_counter() - t0
    assert sums == [7 * (size >> 16)] * readers, sums
    metrics = {f"{name}_s": wall}
    if backend == "fray_ray":
        metrics[f"{name}_origin_x"] = ray.get(origin.sent_bytes.remote()) / size
    return ok(metrics)


def run(name: str, backend: str, ray: Any) -> dict[str, Any]:
    """One repetition of shape `name` on a fresh cluster (three nodes, or a broadcast's)."""
    if name in BROADCASTS:
        size, readers = BROADCASTS[name]
        with broadcast_nodes(backend, ray, size, readers):
            return broadcast(name, backend, ray)
    with three_nodes(backend, ray):
        return SHAPES[name](ray)
