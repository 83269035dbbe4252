"""Ray's single-node scalability envelope as shapes: many object arguments to one task, many
returns from one task, many objects in one `get`, many tasks queued behind busy CPUs, and one
large object put and got back. Written once against a `ray`-like module passed in, like
`workloads`; the sizes are parameters (`shapes.EnvelopeSizes`), Ray's published ones where
this machine holds them.

Each shape times only the step the envelope is about: the objects an argument or `get` shape
needs are put before the clock starts.
"""

from __future__ import annotations

import time
from types import ModuleType, SimpleNamespace
from typing import Any

from procs import mem_available_bytes
from shapes import EnvelopeSizes
from workloads import GIB, ShapeStopped, ok


def make_remotes(ray: ModuleType, sizes: EnvelopeSizes) -> SimpleNamespace:
    """The envelope's remote functions for one module (defined here: pickled by value, and
    closing over plain ints only, so workers need not import these files)."""
    returns, list_ints = sizes.returns, sizes.list_ints

    @ray.remote
    def total_length(*lists: list[int]) -> int:
        return sum(len(items) for items in lists)

    @ray.remote(num_returns=returns)
    def many_lists() -> tuple[list[int], ...]:
        return tuple(list(range(list_ints)) for _ in range(returns))

    @ray.remote(num_cpus=0)
    class Gate:
        def __init__(self) -> None:
            self.opened = False

        def open(self) -> None:
            self.opened = True

        def is_open(self) -> bool:
            return self.opened

    @ray.remote(num_cpus=1)
    def hold_a_cpu(gate: Any) -> None:
        while not ray.get(gate.is_open.remote()):
            time.sleep(0.05)

    @ray.remote(num_cpus=1)
    def noop() -> None:
        return None

    return SimpleNamespace(total_length=total_length, many_lists=many_lists, Gate=Gate, hold_a_cpu=hold_a_cpu, noop=noop)


def _deadline_check(start: float, timeout_s: float, what: str) -> None:
    if time.perf_counter() - start > timeout_s:
        raise ShapeStopped("timeout", f"{what} took longer than {timeout_s:.0f} s")


def many_args(ray: ModuleType, remotes: SimpleNamespace, sizes: EnvelopeSizes) -> dict[str, Any]:
    """One task given `args` refs to lists of `list_ints` ints: the call and its result."""
    refs = [ray.put(list(range(sizes.list_ints))) for _ in range(sizes.args)]
    start = time.perf_counter()
    got = ray.get(remotes.total_length.remote(*refs))
    elapsed = time.perf_counter() - start
    if got != sizes.args * sizes.list_ints:
        raise AssertionError(f"the task saw {got} ints, expected {sizes.args * sizes.list_ints}")
    return ok({"envelope_args_s": elapsed}, args=sizes.args, list_ints=sizes.list_ints)


def many_returns(ray: ModuleType, remotes: SimpleNamespace, sizes: EnvelopeSizes) -> dict[str, Any]:
    """One task returning `returns` lists of `list_ints` ints: the call and the get of them all."""
    start = time.perf_counter()
    values = ray.get(list(remotes.many_lists.remote()))
    elapsed = time.perf_counter() - start
    if len(values) != sizes.returns or any(len(v) != sizes.list_ints for v in values):
        raise AssertionError("the returns came back wrong")
    return ok({"envelope_returns_s": elapsed}, returns=sizes.returns, list_ints=sizes.list_ints)


def many_gets(ray: ModuleType, sizes: EnvelopeSizes) -> dict[str, Any]:
    """`get` of `get` objects (lists of `list_ints` ints) put before."""
    refs = [ray.put(list(range(sizes.list_ints))) for _ in range(sizes.get)]
    start = time.perf_counter()
    values = ray.get(refs)
    elapsed = time.perf_counter() - start
    if len(values) != sizes.get or len(values[-1]) != sizes.list_ints:
        raise AssertionError("the objects came back wrong")
    return ok({"envelope_get_s": elapsed}, objects=sizes.get, list_ints=sizes.list_ints)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def queued(ray: ModuleType, remotes: SimpleNamespace, sizes: EnvelopeSizes, timeout_s: float) -> dict[str, Any]:
    """Every CPU held by a task, `queued` no-op tasks submitted behind them, then the CPUs freed
    and every result got: the seconds from the first submission to the last result, and what
    each queued task cost the driver's memory."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    gate = remotes.Gate.remote()
    ray.get(gate.is_open.remote())
    holders = [remotes.hold_a_cpu.remote(gate) for _ in range(cpus)]
    rss_before = _rss_bytes()
    start = time.perf_counter()
    refs = [remotes.noop.remote() for _ in range(sizes.queued)]
    submitted = time.perf_counter() - start
    rss_queued = _rss_bytes()
    _deadline_check(start, timeout_s, f"submitting {sizes.queued:,} tasks")
    ray.get(gate.open.remote())
    try:
        ray.get(holders, timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
        values = ray.get(refs, timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
    except Exception as exc:  # a GetTimeoutError of either backend
        if "Timeout" not in type(exc).__name__:
            raise
        raise ShapeStopped("timeout", f"{sizes.queued:,} queued tasks not all done after {timeout_s:.0f} s",
                           submit_s=submitted) from exc
    elapsed = time.perf_counter() - start
    if len(values) != sizes.queued or any(v is not None for v in values):
        raise AssertionError("a queued task returned something else")
    return ok({"envelope_queued_s": elapsed,
               "envelope_queued_driver_bytes_per_task": max(0, rss_queued - rss_before) / sizes.queued},
              tasks=sizes.queued, submit_s=submitted)


def large_object(ray: ModuleType, sizes: EnvelopeSizes) -> dict[str, Any]:
    """One numpy array of `large_gib` GiB put, then got back: GB/s of the two together."""
    import numpy as np

    nbytes = int(sizes.large_gib * GIB)
    if mem_available_bytes() < 3 * nbytes:  # the array, its stored copy, and room for the rest of the machine
        raise ShapeStopped("memory", f"MemAvailable {mem_available_bytes() / GIB:.1f} GiB < 3 x {sizes.large_gib} GiB")
    array = np.ones(nbytes, dtype=np.int8)  # every page written
    start = time.perf_counter()
    ref = ray.put(array)
    del array
    back = ray.get(ref)
    elapsed = time.perf_counter() - start
    if back.nbytes != nbytes or int(back[-1]) != 1:
        raise AssertionError("get returned a different array")
    del back, ref
    return ok({"envelope_large_gbps": nbytes / 1e9 / elapsed}, gib=sizes.large_gib, seconds=elapsed)
