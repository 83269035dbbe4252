"""The shapes, written once against a `ray`-like module passed in.

The same functions run on fray_ray (`import fray_ray as ray`) and on Ray itself. One call of a
shape is one repetition: rate shapes run a warm-up of about `warmup_s` and then one timed round
of about `round_s`; curve points run their N tasks or actors once. Repetitions come from
`compare.py` starting fresh processes, so that each one sees a fresh session.

Every shape returns `{"status": "ok", "metrics": {name: value}, "extra": {...}}`. A curve point
that runs out of time, or that would leave the machine short of memory, raises `ShapeStopped`,
which `run_one.py` records with its status ("timeout" or "memory") and what was reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

from procs import (
    mem_available_bytes,
    memory_snapshot,
    session_pids,
    settle_processes,
    wait_children_gone,
)

MB = 1_000_000
BIG_BYTES = 100 * MB
GIB = 1024**3


@dataclass
class Timing:
    warmup_s: float = 0.5
    round_s: float = 1.0

    @classmethod
    def quick(cls) -> Timing:
        return cls(warmup_s=0.1, round_s=0.2)


@dataclass
class Backend:
    """A `ray`-like module and how to start a session on it."""

    name: str
    ray: ModuleType
    init_kwargs: dict[str, Any] = field(default_factory=dict)

    def init(self) -> None:
        self.ray.init(**self.init_kwargs)


class ShapeStopped(Exception):
    """A shape ended early on purpose: `status` is "timeout" or "memory"."""

    def __init__(self, status: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


def ok(metrics: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {"status": "ok", "metrics": metrics, "extra": extra}


def timed_round(fn: Callable[[], Any], timing: Timing, multiplier: float = 1.0) -> float:
    """Call `fn` for a warm-up (at least once), then for one round; `multiplier * calls / s`.

    The round is at least one call, so a call slower than `round_s` still yields a value.
    """
    clock = time.perf_counter
    warm_end = clock() + timing.warmup_s
    fn()
    while clock() < warm_end:
        fn()
    calls, start = 0, clock()
    while True:
        fn()
        calls += 1
        elapsed = clock() - start
        if elapsed >= timing.round_s:
            return multiplier * calls / elapsed


# ---- remote code -------------------------------------------------------------------------------


def make_remotes(ray: ModuleType) -> SimpleNamespace:
    """The remote functions and classes the shapes use, built for one module.

    Defined inside a function so that both backends pickle them by value: their worker processes
    need not import this file.
    """

    @ray.remote
    def noop() -> None:
        return None

    @ray.remote
    def total(array: Any) -> int:
        return int(array.sum())  # reads every byte of the argument

    @ray.remote(num_cpus=0)
    class SyncActor:
        def ping(self) -> bytes:
            return b"ok"

    @ray.remote(num_cpus=0)
    class AsyncActor:
        async def ping(self) -> bytes:
            return b"ok"

    return SimpleNamespace(noop=noop, total=total, SyncActor=SyncActor, AsyncActor=AsyncActor)


# ---- lifecycle -------------------------------------------------------------------------------


def run_lifecycle(backend: Backend, wanted: list[str]) -> dict[str, dict[str, Any]]:
    """One fresh session: init, first result, idle memory, shutdown. One value per shape."""
    ray = backend.ray
    remotes = make_remotes(ray)
    out: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    backend.init()
    t_init = time.perf_counter()
    ray.get(remotes.noop.remote())
    t_first = time.perf_counter()
    if "init_to_first_result" in wanted:
        out["init_to_first_result"] = ok({"init_to_first_result": t_first - t0}, init_s=t_init - t0, first_task_s=t_first - t_init)
    if "idle_memory" in wanted:
        pids, settled = settle_processes()
        snap = memory_snapshot(pids)
        out["idle_memory"] = ok({"idle_memory_mib": snap["rss_mib"], "idle_pss_mib": snap["pss_mib"]},
                                processes=snap["processes"], settle_s=settled, by_process=snap["by_process"][:8])
    t0 = time.perf_counter()
    ray.shutdown()
    t_down = time.perf_counter() - t0
    gone = wait_children_gone(timeout_s=15.0)
    if "shutdown" in wanted:
        out["shutdown"] = ok({"shutdown": t_down}, until_no_processes_s=t_down + gone if gone is not None else None)
    return out


# ---- rate shapes -------------------------------------------------------------------------------


def _int64_array(nbytes: int) -> Any:
    import numpy as np

    return np.arange(nbytes // 8, dtype=np.int64)  # every page written


def rate_shapes(ray: ModuleType, remotes: SimpleNamespace) -> dict[str, Callable[[Timing], dict[str, Any]]]:
    """name -> function(timing) -> result, inside an initialized session."""

    def one(name: str, fn: Callable[[], Any], t: Timing, multiplier: float = 1.0) -> dict[str, Any]:
        return ok({name: timed_round(fn, t, multiplier)})

    def _actor(name: str, cls: Any, pipelined: bool, t: Timing) -> dict[str, Any]:
        actor = cls.remote()
        ray.get(actor.ping.remote())
        try:
            if pipelined:
                return one(name, lambda: ray.get([actor.ping.remote() for _ in range(1000)]), t, 1000)
            return one(name, lambda: ray.get(actor.ping.remote()), t)
        finally:
            ray.kill(actor)

    def put_100mb_gbps(t: Timing) -> dict[str, Any]:
        arr = _int64_array(BIG_BYTES)
        return one("put_100mb_gbps", lambda: ray.put(arr), t, BIG_BYTES / 1e9)

    def get_100mb_gbps(t: Timing) -> dict[str, Any]:
        arr = _int64_array(BIG_BYTES)
        ref = ray.put(arr)
        del arr
        back = ray.get(ref)
        if back.nbytes != BIG_BYTES or int(back[-1]) != BIG_BYTES // 8 - 1:
            raise AssertionError("get returned a different array")
        del back
        return one("get_100mb_gbps", lambda: ray.get(ref), t, BIG_BYTES / 1e9)

    def task_arg(name: str, nbytes: int, t: Timing) -> dict[str, Any]:
        arr = _int64_array(nbytes)
        expected = int(arr.sum())

        def call() -> None:
            got = ray.get(remotes.total.remote(arr))
            if got != expected:
                raise AssertionError(f"the task summed {got}, expected {expected}")

        return one(name, call, t, nbytes / 1e9)

    noop = remotes.noop
    return {
        "tasks_sync": lambda t: one("tasks_sync", lambda: ray.get(noop.remote()), t),
        "tasks_batch_1000": lambda t: one("tasks_batch_1000", lambda: ray.get([noop.remote() for _ in range(1000)]), t, 1000),
        "actor_calls_sync": lambda t: _actor("actor_calls_sync", remotes.SyncActor, False, t),
        "actor_calls_async": lambda t: _actor("actor_calls_async", remotes.SyncActor, True, t),
        "async_actor_calls_sync": lambda t: _actor("async_actor_calls_sync", remotes.AsyncActor, False, t),
        "async_actor_calls_async": lambda t: _actor("async_actor_calls_async", remotes.AsyncActor, True, t),
        "put_get_small": lambda t: one("put_get_small", lambda: ray.get(ray.put(0)), t),
        "put_100mb_gbps": put_100mb_gbps,
        "get_100mb_gbps": get_100mb_gbps,
        "task_arg_1mb_gbps": lambda t: task_arg("task_arg_1mb_gbps", MB, t),
        "task_arg_100mb_gbps": lambda t: task_arg("task_arg_100mb_gbps", BIG_BYTES, t),
    }


# ---- curve points ------------------------------------------------------------------------------


def queued_tasks(ray: ModuleType, remotes: SimpleNamespace, name: str, n: int, timeout_s: float) -> dict[str, Any]:
    """`n` no-op tasks submitted at once, then all got: tasks/s and µs per task."""
    noop = remotes.noop
    start = time.perf_counter()
    refs = [noop.remote() for _ in range(n)]
    submitted = time.perf_counter() - start
    try:
        if submitted >= timeout_s:
            raise TimeoutError("submitting took longer than the timeout")
        values = ray.get(refs, timeout=timeout_s - submitted)
    except TimeoutError as exc:
        raise ShapeStopped("timeout", f"{n:,} tasks not all done after {time.perf_counter() - start:.0f} s",
                           tasks=n, submit_s=submitted) from exc
    elapsed = time.perf_counter() - start
    if len(values) != n or any(v is not None for v in values):
        raise AssertionError(f"got {len(values)} results for {n} tasks, or a wrong one")
    return ok({name: n / elapsed, f"{name}_us_per_task": elapsed / n * 1e6}, tasks=n, seconds=elapsed, submit_s=submitted)


def memory_guard_bytes(total_bytes: int, guard_gib: float | None) -> int:
    """MemAvailable below which a curve point stops: `guard_gib`, or max(3 GiB, 15% of RAM).

    The machine is shared: the guard leaves room for everything else running on it.
    """
    if guard_gib is not None:
        return int(guard_gib * GIB)
    return max(3 * GIB, total_bytes * 15 // 100)


def _wait_all(ray: ModuleType, refs: list[Any], deadline: float, guard_bytes: int) -> None:
    """Wait for every ref; ShapeStopped when the deadline passes or memory runs short."""
    pending = list(refs)
    while pending:
        available = mem_available_bytes()
        if available < guard_bytes:
            raise ShapeStopped("memory", f"MemAvailable {available / GIB:.1f} GiB < guard {guard_bytes / GIB:.1f} GiB",
                               ready=len(refs) - len(pending))
        left = deadline - time.perf_counter()
        if left <= 0:
            raise ShapeStopped("timeout", "deadline passed", ready=len(refs) - len(pending))
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(0.5, left))


def actors(ray: ModuleType, remotes: SimpleNamespace, name: str, n: int, timeout_s: float, guard_bytes: int) -> dict[str, Any]:
    """`n` num_cpus=0 actors created at once and called once each; time and memory per actor.

    Memory is summed over every process of the session (smaps_rollup), with the actors alive,
    minus the same sum just before they were created.
    """
    before_pids, _ = settle_processes(min_settle_s=0.3, stable_s=0.7, max_s=10.0)
    before = memory_snapshot(before_pids)
    start = time.perf_counter()
    handles = [remotes.SyncActor.remote() for _ in range(n)]
    pings = [a.ping.remote() for a in handles]
    try:
        try:
            _wait_all(ray, pings, start + timeout_s, guard_bytes)
        except ShapeStopped as stop:
            elapsed = time.perf_counter() - start
            ready = stop.extra["ready"]
            snap = memory_snapshot(session_pids())
            raise ShapeStopped(stop.status, f"{ready}/{n} actors ready after {elapsed:.0f} s: {stop}",
                               ready=ready, actors=n, seconds=elapsed, processes=snap["processes"],
                               pss_mib=snap["pss_mib"], pss_mib_before=before["pss_mib"]) from None
        elapsed = time.perf_counter() - start
        if ray.get(pings) != [b"ok"] * n:
            raise AssertionError("an actor answered wrongly")
        with_actors = memory_snapshot(session_pids())
    finally:
        for a in handles:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - an actor that never started cannot be killed; the session ends anyway
                pass
    rss_added = with_actors["rss_mib"] - before["rss_mib"]
    pss_added = with_actors["pss_mib"] - before["pss_mib"]
    return ok({
        name: elapsed,
        f"{name}_ms_per_actor": elapsed / n * 1e3,
        f"{name}_rss_per_actor": rss_added / n,
        f"{name}_pss_per_actor": pss_added / n,
        f"{name}_pss_total": with_actors["pss_mib"],
    }, actors=n, processes_before=before["processes"], processes=with_actors["processes"],
        rss_mib=with_actors["rss_mib"], pss_mib=with_actors["pss_mib"],
        pss_mib_before=before["pss_mib"], largest=with_actors["by_process"][:4])
