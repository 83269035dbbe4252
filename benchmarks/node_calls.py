"""Calls made on one simulated node to an actor on another: the driver should not be on the path.

A head and two simulated nodes (`cluster_utils.Cluster` on both backends), node A and node B
told apart by a custom resource each. An actor lives on node A; a task pinned to node B, and
then an actor pinned to node B, call it synchronously (call + get, one at a time) for a
warm-up and one round, and report how many calls they made. Then a task on node B reads the
items of the actor's generator method (100 small items a call, each `get` as it comes), and
passes the result of each call to the actor on to a second actor on node A, as a ref (a
pipeline step: the second actor borrows the object, so its owner counts it), and again to an
actor that keeps the last 100 refs it was passed (a replay buffer: its borrows outlive the call), and to an actor
on node A that passes each on to the second one (a pipeline stage: a borrower lending on), and, for 1 MiB results,
to an actor that reads each (over the 100 KiB a call carries: the reader fetches it), and passes each result, as the
argument itself, to the second actor's call (`sink.length.remote(target.make.remote(8))`: call chaining), and to the
replay buffer again, from which a learner actor on node B samples the newest ref and reads it (the buffer passes on a
ref it borrows, in its answer). Last, a task on
node B submits no-op tasks pinned to node A, one at a time (submit + get), then 1,000 at once
(submit all, get all): nested tasks, which fray_ray's driver still schedules (Ray's submitting
worker leases workers itself). The
driver only waits for that task's (or method's) result meanwhile, so its CPU time over the
round, per call, is what each such call costs it (Ray: none; fray_ray sent every call through its driver before workers
called actors directly).
"""

from __future__ import annotations

import importlib
import time
from typing import Any

NODE_A = "bench_node_a"
NODE_B = "bench_node_b"
NESTED_BATCH = 1_000  # tasks a task on node B submits at once
LARGE_RESULT = 1 << 20  # bytes of each result passed on in `node_pass_large_steps`


def _cluster(backend_name: str) -> Any:
    module = importlib.import_module("ray.cluster_utils" if backend_name == "ray" else "fray_ray.cluster_utils")
    cluster = module.Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1, resources={NODE_A: 1})
    cluster.add_node(num_cpus=1, resources={NODE_B: 1})
    return cluster


def _remotes(ray: Any) -> Any:
    class Target:
        def ping(self) -> int:
            return 1

        def make(self, size: int) -> bytes:
            return b"x" * size

        def read(self, refs: list[Any]) -> int:
            return sum(len(value) for value in ray.get(refs))

        def length(self, value: bytes) -> int:
            return len(value)

        def stream(self, count: int) -> Any:
            for item in range(count):  # noqa: UP028 - Ray 2.60 actor generators fail on `yield from range(...)`
                yield item

        def take(self, refs: list[Any]) -> int:
            return len(refs)

        def set_next(self, following: Any) -> None:
            self.__dict__["following"] = following

        def relay(self, refs: list[Any]) -> int:
            """Pass the refs on to the next actor (`set_next`), as a pipeline stage does."""
            return ray.get(self.__dict__["following"].take.remote(refs))

        def keep(self, refs: list[Any]) -> int:
            """Keep the last 100 refs passed (a replay buffer): older ones are let go."""
            kept = self.__dict__.setdefault("kept", [])
            kept.extend(refs)
            del kept[:-100]
            return len(kept)

        def sample(self, count: int) -> list[Any]:
            """The newest `count` refs kept, unread (a replay buffer's batch)."""
            return self.__dict__.get("kept", [])[-count:]

    def call_for(target: Any, seconds: float) -> int:
        """Sync calls to `target` for `seconds`; how many."""
        calls, end = 0, time.perf_counter() + seconds
        while calls == 0 or time.perf_counter() < end:
            ray.get(target.ping.remote())
            calls += 1
        return calls

    def read_for(target: Any, seconds: float) -> int:
        """Items of `target.stream` read for `seconds`; how many."""
        items, end = 0, time.perf_counter() + seconds
        while items == 0 or time.perf_counter() < end:
            for ref in target.stream.remote(100):
                ray.get(ref)
                items += 1
        return items

    def pass_on_for(target: Any, sink: Any, seconds: float, method: str = "take") -> int:
        """Steps of `target.ping` → `sink.<method>([its result])` for `seconds`; how many."""
        steps, end = 0, time.perf_counter() + seconds
        passed = getattr(sink, method)
        while steps == 0 or time.perf_counter() < end:
            ray.get(passed.remote([target.ping.remote()]))
            steps += 1
        return steps

    def pass_large_for(target: Any, sink: Any, seconds: float) -> int:
        """Steps of `target.make(1 MiB)` → `sink.read([its result])` for `seconds`; how many."""
        steps, end = 0, time.perf_counter() + seconds
        while steps == 0 or time.perf_counter() < end:
            ray.get(sink.read.remote([target.make.remote(LARGE_RESULT)]))
            steps += 1
        return steps

    def chain_for(target: Any, sink: Any, seconds: float) -> int:
        """Steps of `sink.length(target.make(8))`, the result passed as the argument, for `seconds`."""
        steps, end = 0, time.perf_counter() + seconds
        while steps == 0 or time.perf_counter() < end:
            ray.get(sink.length.remote(target.make.remote(8)))
            steps += 1
        return steps

    def submit_for(work: Any, seconds: float) -> int:
        """Sync tasks `work` submitted from here for `seconds`; how many."""
        tasks, end = 0, time.perf_counter() + seconds
        while tasks == 0 or time.perf_counter() < end:
            ray.get(work.remote())
            tasks += 1
        return tasks

    def noop() -> int:
        return 1

    def batch_of(work: Any, count: int) -> float:
        """Tasks/s of `count` tasks `work` submitted at once from here, then all got."""
        start = time.perf_counter()
        assert sum(ray.get([work.remote() for _ in range(count)])) == count
        return count / (time.perf_counter() - start)

    class Caller:
        def __init__(self, target: Any) -> None:
            self.target = target

        def call_for(self, seconds: float) -> int:
            return call_for(self.target, seconds)

    class Learner:
        def __init__(self, buffer: Any) -> None:
            self.buffer = buffer

        def ping(self) -> int:
            return 1

        def train(self) -> int:
            """Sample the newest ref the buffer keeps, and read it."""
            (ref,) = ray.get(self.buffer.sample.remote(1))
            return len(ray.get(ref))

    def sample_for(target: Any, buffer: Any, learner: Any, seconds: float) -> int:
        """Steps of `target.make(8)` → `buffer.keep([its result])` → `learner.train()` (which
        samples that ref from the buffer and reads it) for `seconds`; how many."""
        steps, end = 0, time.perf_counter() + seconds
        while steps == 0 or time.perf_counter() < end:
            ray.get(buffer.keep.remote([target.make.remote(8)]))
            assert ray.get(learner.train.remote()) == 8
            steps += 1
        return steps

    return (ray.remote(num_cpus=0, resources={NODE_A: 0.01})(Target),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(call_for),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(Caller),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(read_for),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(pass_on_for),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(pass_large_for),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(chain_for),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(submit_for),
            ray.remote(num_cpus=0, resources={NODE_A: 0.01})(noop),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(batch_of),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(Learner),
            ray.remote(num_cpus=0, resources={NODE_B: 0.01})(sample_for))


def _measured(ray: Any, run: Any, timing: Any) -> tuple[float, float]:
    """(calls/s, driver CPU µs per call) of `run(seconds)` (a ref to a count of calls or
    items), after a warm-up."""
    ray.get(run(timing.warmup_s))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    calls = ray.get(run(timing.round_s))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return calls / wall, cpu / calls * 1e6


def run(backend_name: str, ray: Any, timing: Any) -> dict[str, Any]:
    """Every shape in one session: one value of each metric."""
    cluster = _cluster(backend_name)
    try:
        cluster.connect()
        (target_cls, call_for, caller_cls, read_for, pass_on_for, pass_large_for, chain_for, submit_for, noop,
         batch_of, learner_cls, sample_for) = _remotes(ray)
        target, sink = target_cls.remote(), target_cls.remote()
        ray.get([target.ping.remote(), sink.ping.remote()])
        task_rate, task_cpu = _measured(ray, lambda s: call_for.remote(target, s), timing)
        caller = caller_cls.remote(target)
        actor_rate, actor_cpu = _measured(ray, lambda s: caller.call_for.remote(s), timing)
        item_rate, item_cpu = _measured(ray, lambda s: read_for.remote(target, s), timing)
        pass_rate, pass_cpu = _measured(ray, lambda s: pass_on_for.remote(target, sink, s), timing)
        kept_rate, kept_cpu = _measured(ray, lambda s: pass_on_for.remote(target, sink, s, "keep"), timing)
        relay = target_cls.remote()
        ray.get(relay.set_next.remote(sink))
        relay_rate, relay_cpu = _measured(ray, lambda s: pass_on_for.remote(target, relay, s, "relay"), timing)
        large_rate, large_cpu = _measured(ray, lambda s: pass_large_for.remote(target, sink, s), timing)
        chain_rate, chain_cpu = _measured(ray, lambda s: chain_for.remote(target, sink, s), timing)
        learner = learner_cls.remote(sink)
        ray.get(learner.ping.remote())
        sample_rate, sample_cpu = _measured(ray, lambda s: sample_for.remote(target, sink, learner, s), timing)
        nested_rate, nested_cpu = _measured(ray, lambda s: submit_for.remote(noop, s), timing)
        ray.get(batch_of.remote(noop, 100))  # warm
        batch_rate = ray.get(batch_of.remote(noop, NESTED_BATCH))
        return {"status": "ok", "metrics": {
            "node_task_to_actor_calls": task_rate, "node_task_to_actor_driver_us": task_cpu,
            "node_actor_to_actor_calls": actor_rate, "node_actor_to_actor_driver_us": actor_cpu,
            "node_generator_items": item_rate, "node_generator_driver_us": item_cpu,
            "node_pass_on_steps": pass_rate, "node_pass_on_driver_us": pass_cpu,
            "node_keep_steps": kept_rate, "node_keep_driver_us": kept_cpu,
            "node_relay_steps": relay_rate, "node_relay_driver_us": relay_cpu,
            "node_pass_large_steps": large_rate, "node_pass_large_driver_us": large_cpu,
            "node_chain_steps": chain_rate, "node_chain_driver_us": chain_cpu,
            "node_sample_steps": sample_rate, "node_sample_driver_us": sample_cpu,
            "node_nested_tasks": nested_rate, "node_nested_task_driver_us": nested_cpu,
            "node_nested_batch_tasks": batch_rate,
        }, "extra": {}}
    finally:
        ray.shutdown()
        cluster.shutdown()
