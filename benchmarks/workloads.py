"""Benchmark shapes, written once against a `ray`-like module passed in.

The same functions run on fray_ray (`import fray_ray as ray`) and on Ray itself, so numbers from
one run can be compared shape by shape. The shapes follow Ray's microbenchmark (see
shared/reference/ray-api.md §3) with a shorter timing scheme: a warm-up of about `warmup_s`,
then `rounds` rounds of about `round_s` each; each rate is reported as mean and stdev over the
rounds.

Three kinds of shape:

- lifecycle (`init_to_first_result`, `idle_memory_mib`, `shutdown`): measured on a fresh
  session, once per session (run a fresh interpreter per sample for cold numbers);
- rate (`tasks_sync`, `tasks_batch_1000`, actor calls, `put_get_small`, 100 MB put/get): timed
  rounds inside one running session;
- scale (`queued_tasks_10k`, `actors_100`): one timed run each, to show cost stays linear.

Every result is a dict: `unit`, `better` ("higher" or "lower"), `mean`, `stdev`, `values` (one
per round or session) and optional `extra` details.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

MB = 1_000_000
BIG_BYTES = 100 * MB

# Environment variable that marks every process started by one benchmark run; children inherit
# it, so compare.py (and idle_memory_mib) can find them even after they are re-parented.
MARK_ENV = "FRAY_BENCH_MARK"


@dataclass
class Timing:
    warmup_s: float = 0.5
    round_s: float = 1.0
    rounds: int = 4

    @classmethod
    def quick(cls) -> "Timing":
        return cls(warmup_s=0.05, round_s=0.1, rounds=2)


@dataclass
class Backend:
    """A `ray`-like module and how to start a session on it."""

    name: str
    ray: ModuleType
    init_kwargs: dict[str, Any] = field(default_factory=dict)

    def init(self) -> None:
        self.ray.init(**self.init_kwargs)


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "lifecycle" | "rate" | "scale"
    unit: str
    better: str  # "higher" | "lower"
    description: str


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in [
        Shape("init_to_first_result", "lifecycle", "s", "lower", "init() to the first task's result, fresh session"),
        Shape("idle_memory_mib", "lifecycle", "MiB", "lower", "RSS of driver + all descendants, idle after one task"),
        Shape("shutdown", "lifecycle", "s", "lower", "shutdown() of a session that ran one task"),
        Shape("tasks_sync", "rate", "ops/s", "higher", "submit one no-op task and get it"),
        Shape("tasks_batch_1000", "rate", "tasks/s", "higher", "submit 1000 no-op tasks, get the list"),
        Shape("actor_calls_sync", "rate", "ops/s", "higher", "1:1 call + get, num_cpus=0 actor"),
        Shape("actor_calls_async", "rate", "calls/s", "higher", "1000 pipelined calls, then get"),
        Shape("async_actor_calls_sync", "rate", "ops/s", "higher", "call + get on an async def actor"),
        Shape("async_actor_calls_async", "rate", "calls/s", "higher", "1000 pipelined calls on an async def actor"),
        Shape("put_get_small", "rate", "ops/s", "higher", "get(put(0))"),
        Shape("put_100mb_gbps", "rate", "GB/s", "higher", "put of a 100 MB numpy array"),
        Shape("get_100mb_gbps", "rate", "GB/s", "higher", "get of a 100 MB numpy array already put"),
        Shape("queued_tasks_10k", "scale", "tasks/s", "higher", "10,000 no-op tasks submitted at once, all got"),
        Shape("actors_100", "scale", "s", "lower", "create 100 actors (num_cpus=0) and call each once"),
    ]
}

LIFECYCLE = [n for n, s in SHAPES.items() if s.kind == "lifecycle"]
RATE = [n for n, s in SHAPES.items() if s.kind == "rate"]
SCALE = [n for n, s in SHAPES.items() if s.kind == "scale"]


# ---- results -----------------------------------------------------------------------------------


def result(name: str, values: list[float], **extra: Any) -> dict[str, Any]:
    shape = SHAPES[name]
    out: dict[str, Any] = {
        "unit": shape.unit,
        "better": shape.better,
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }
    if extra:
        out["extra"] = extra
    return out


def timed_rounds(fn: Callable[[], Any], timing: Timing, multiplier: float = 1.0) -> list[float]:
    """Call `fn` for a warm-up, then for `timing.rounds` rounds; `multiplier * calls / s` per round.

    A round is at least one call, so a call slower than `round_s` still yields one sample.
    """
    clock = time.perf_counter
    warm_end = clock() + timing.warmup_s
    fn()
    while clock() < warm_end:
        fn()
    rates = []
    for _ in range(timing.rounds):
        calls = 0
        start = clock()
        while True:
            fn()
            calls += 1
            elapsed = clock() - start
            if elapsed >= timing.round_s:
                break
        rates.append(multiplier * calls / elapsed)
    return rates


# ---- remote code -------------------------------------------------------------------------------


def make_remotes(ray: ModuleType) -> SimpleNamespace:
    """The remote functions and classes the shapes use, built for one module.

    Defined inside a function so that both backends pickle them by value: their worker processes
    need not import this file.
    """

    @ray.remote
    def noop() -> None:
        return None

    @ray.remote(num_cpus=0)
    class SyncActor:
        def ping(self) -> bytes:
            return b"ok"

    @ray.remote(num_cpus=0)
    class AsyncActor:
        async def ping(self) -> bytes:
            return b"ok"

    return SimpleNamespace(noop=noop, SyncActor=SyncActor, AsyncActor=AsyncActor)


# ---- processes (/proc, no psutil) --------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None if it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    rest = text[text.rfind(")") + 2 :].split()
    return rest[0], int(rest[1])


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> set[int]:
    """`root` and every live (non-zombie) process below it."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        st = _stat(pid)
        if st and st[0] != "Z":
            children.setdefault(st[1], []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def marked_pids(mark: str, exclude: set[int] = frozenset()) -> set[int]:
    """Live processes whose environment carries MARK_ENV=mark (needs same user or root)."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = set()
    for pid in all_pids():
        if pid in exclude:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            st = _stat(pid)
            if st and st[0] != "Z":
                found.add(pid)
    return found


def session_pids() -> set[int]:
    """This driver and every process it started, directly or through re-parented daemons."""
    pids = descendants(os.getpid())
    mark = os.environ.get(MARK_ENV)
    if mark:
        pids |= marked_pids(mark)
    return pids


def _status_kib(pid: int, key: str) -> int:
    text = _read(f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _pss_kib(pid: int) -> int:
    text = _read(f"/proc/{pid}/smaps_rollup") or ""
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def process_name(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline") or ""
    parts = [p for p in raw.split("\0") if p]
    if not parts:
        return (_read(f"/proc/{pid}/comm") or "?").strip()
    name = os.path.basename(parts[0])
    if name.startswith("python") and len(parts) > 1:
        arg = parts[2] if parts[1] in ("-u", "-m") and len(parts) > 2 else parts[1]
        name = f"{name} {os.path.basename(arg)}"
    return name[:60]


def memory_snapshot(pids: set[int]) -> dict[str, Any]:
    rss = {pid: _status_kib(pid, "VmRSS") for pid in pids}
    return {
        "rss_mib": sum(rss.values()) / 1024,
        "pss_mib": sum(_pss_kib(pid) for pid in pids) / 1024,
        "processes": len(pids),
        "by_process": sorted(((process_name(pid), round(kib / 1024, 1)) for pid, kib in rss.items()), key=lambda x: -x[1]),
    }


def settle_processes(min_settle_s: float = 1.0, stable_s: float = 1.5, poll_s: float = 0.25, max_s: float = 20.0) -> tuple[set[int], float]:
    """Wait at least `min_settle_s`, then until the process set is unchanged for `stable_s`."""
    start = time.perf_counter()
    time.sleep(min_settle_s)
    last, since = session_pids(), time.perf_counter()
    while time.perf_counter() - start < max_s:
        time.sleep(poll_s)
        now = session_pids()
        if now != last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= stable_s:
            break
    return last, time.perf_counter() - start


# ---- lifecycle -------------------------------------------------------------------------------


def run_lifecycle(backend: Backend, wanted: list[str]) -> dict[str, dict[str, Any]]:
    """One fresh session: init, first result, (idle memory), shutdown. One sample per shape."""
    ray = backend.ray
    remotes = make_remotes(ray)
    out: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    backend.init()
    t_init = time.perf_counter()
    ray.get(remotes.noop.remote())
    t_first = time.perf_counter()
    if "init_to_first_result" in wanted:
        out["init_to_first_result"] = result(
            "init_to_first_result", [t_first - t0], init_s=t_init - t0, first_task_s=t_first - t_init
        )
    if "idle_memory_mib" in wanted:
        pids, settled = settle_processes()
        snap = memory_snapshot(pids)
        out["idle_memory_mib"] = result(
            "idle_memory_mib",
            [snap["rss_mib"]],
            pss_mib=snap["pss_mib"],
            processes=snap["processes"],
            settle_s=settled,
            by_process=snap["by_process"],
        )
    t0 = time.perf_counter()
    ray.shutdown()
    t_down = time.perf_counter() - t0
    gone = _wait_children_gone(timeout_s=15.0)
    if "shutdown" in wanted:
        out["shutdown"] = result("shutdown", [t_down], until_no_processes_s=t_down + gone if gone is not None else None)
    return out


def _wait_children_gone(timeout_s: float) -> float | None:
    """Seconds until no process of this session but the driver is left; None on timeout."""
    start = time.perf_counter()
    me = os.getpid()
    while time.perf_counter() - start < timeout_s:
        if session_pids() <= {me}:
            return time.perf_counter() - start
        time.sleep(0.02)
    return None


# ---- rate shapes -------------------------------------------------------------------------------


def rate_shapes(ray: ModuleType, remotes: SimpleNamespace) -> dict[str, Callable[[Timing], dict[str, Any]]]:
    """name -> function(timing) -> result, inside an initialized session."""

    def tasks_sync(t: Timing) -> dict[str, Any]:
        noop = remotes.noop
        return result("tasks_sync", timed_rounds(lambda: ray.get(noop.remote()), t))

    def tasks_batch_1000(t: Timing) -> dict[str, Any]:
        noop = remotes.noop
        return result("tasks_batch_1000", timed_rounds(lambda: ray.get([noop.remote() for _ in range(1000)]), t, 1000))

    def _actor_sync(name: str, cls: Any, t: Timing) -> dict[str, Any]:
        actor = cls.remote()
        ray.get(actor.ping.remote())
        try:
            return result(name, timed_rounds(lambda: ray.get(actor.ping.remote()), t))
        finally:
            ray.kill(actor)

    def _actor_async(name: str, cls: Any, t: Timing) -> dict[str, Any]:
        actor = cls.remote()
        ray.get(actor.ping.remote())
        try:
            return result(name, timed_rounds(lambda: ray.get([actor.ping.remote() for _ in range(1000)]), t, 1000))
        finally:
            ray.kill(actor)

    def put_get_small(t: Timing) -> dict[str, Any]:
        return result("put_get_small", timed_rounds(lambda: ray.get(ray.put(0)), t))

    def _big() -> Any:
        import numpy as np

        return np.arange(BIG_BYTES // 8, dtype=np.int64)  # every page written

    def put_100mb_gbps(t: Timing) -> dict[str, Any]:
        arr = _big()
        return result("put_100mb_gbps", timed_rounds(lambda: ray.put(arr), t, BIG_BYTES / 1e9))

    def get_100mb_gbps(t: Timing) -> dict[str, Any]:
        arr = _big()
        ref = ray.put(arr)
        del arr
        back = ray.get(ref)
        if back.nbytes != BIG_BYTES or int(back[-1]) != BIG_BYTES // 8 - 1:
            raise AssertionError("get returned a different array")
        del back
        return result("get_100mb_gbps", timed_rounds(lambda: ray.get(ref), t, BIG_BYTES / 1e9))

    return {
        "tasks_sync": tasks_sync,
        "tasks_batch_1000": tasks_batch_1000,
        "actor_calls_sync": lambda t: _actor_sync("actor_calls_sync", remotes.SyncActor, t),
        "actor_calls_async": lambda t: _actor_async("actor_calls_async", remotes.SyncActor, t),
        "async_actor_calls_sync": lambda t: _actor_sync("async_actor_calls_sync", remotes.AsyncActor, t),
        "async_actor_calls_async": lambda t: _actor_async("async_actor_calls_async", remotes.AsyncActor, t),
        "put_get_small": put_get_small,
        "put_100mb_gbps": put_100mb_gbps,
        "get_100mb_gbps": get_100mb_gbps,
    }


# ---- scale shapes ------------------------------------------------------------------------------


def scale_shapes(ray: ModuleType, remotes: SimpleNamespace) -> dict[str, Callable[[bool], dict[str, Any]]]:
    """name -> function(quick) -> result; one timed run each (smaller counts when quick)."""

    def queued_tasks_10k(quick: bool) -> dict[str, Any]:
        n = 500 if quick else 10_000
        noop = remotes.noop
        start = time.perf_counter()
        refs = [noop.remote() for _ in range(n)]
        submitted = time.perf_counter() - start
        values = ray.get(refs)
        elapsed = time.perf_counter() - start
        if len(values) != n:
            raise AssertionError(f"got {len(values)} results for {n} tasks")
        return result("queued_tasks_10k", [n / elapsed], tasks=n, seconds=elapsed, submit_s=submitted)

    def actors_100(quick: bool) -> dict[str, Any]:
        n = 10 if quick else 100
        start = time.perf_counter()
        actors = [remotes.SyncActor.remote() for _ in range(n)]
        answers = ray.get([a.ping.remote() for a in actors])
        elapsed = time.perf_counter() - start
        if answers != [b"ok"] * n:
            raise AssertionError("an actor answered wrongly")
        pids = session_pids()
        snap = memory_snapshot(pids)
        for a in actors:
            ray.kill(a)
        return result("actors_100", [elapsed], actors=n, rss_mib_with_actors=snap["rss_mib"], processes=snap["processes"])

    return {"queued_tasks_10k": queued_tasks_10k, "actors_100": actors_100}
