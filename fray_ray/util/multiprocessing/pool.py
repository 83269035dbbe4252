"""`multiprocessing.Pool`'s interface over actors (`ray.util.multiprocessing.pool`).

Code written for `multiprocessing.Pool` runs on the cluster by changing its import. Each
process of the pool is an actor (`PoolActor`, `num_cpus=0` unless `ray_remote_args` say
otherwise) that runs the `initializer` once when it starts; work goes to the actors in chunks,
and results come back through `AsyncResult` and the `imap` iterators. Behaviour follows Ray
2.60's pool, including where it differs from the standard library's:

- `Pool()` starts a cluster (or joins `ray_address`, or RAY_ADDRESS) when none is running,
  and `processes` defaults to the cluster's CPUs, of which it may not ask more;
- `maxtasksperchild` counts batches (one `apply`, one chunk of `map`), not single calls;
- `imap` and `imap_unordered` yield a call's error as a `PoolTaskError` value, and
  `error_callback` receives the `PoolTaskError`; `get()` raises the original exception;
- with `Pool() as p:`, leaving the block terminates the pool; use after `close()` raises
  `ValueError("Pool not running")`.

>>> from fray_ray.util.multiprocessing import Pool
>>> with Pool(processes=2) as pool:
...     pool.map(abs, [-1, -2, 3])
[1, 2, 3]
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections.abc import Callable, Iterable
from multiprocessing import TimeoutError
from typing import Any

import fray_ray as ray
from fray_ray.util._log_once import log_once
from fray_ray.util.multiprocessing._results import (
    AsyncResult,
    Callback,
    IMapIterator,
    OrderedIMapIterator,
    UnorderedIMapIterator,
    logged,
)
from fray_ray.util.multiprocessing._workers import CallKind, PoolActor, PoolTaskError, Workers, chunksize_for

__all__ = [
    "AsyncResult",
    "IMapIterator",
    "OrderedIMapIterator",
    "Pool",
    "PoolActor",
    "PoolTaskError",
    "TimeoutError",
    "UnorderedIMapIterator",
]

logger = logging.getLogger(__name__)

for _public in (AsyncResult, IMapIterator, OrderedIMapIterator, UnorderedIMapIterator, PoolTaskError):
    _public.__module__ = __name__  # shown (and pickled) under the public module path, as Ray's
del _public

_ADDRESS_VARIABLES = ("RAY_ADDRESS", "FRAY_RAY_ADDRESS")


def _check_count(name: str, value: object) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__} {value!r}")


def _start_ray(processes: int | None, ray_address: str | None) -> int:
    """Start or join a cluster if none is running (as Ray's pool does); the pool's size."""
    if processes is not None and processes <= 0:
        raise ValueError("Processes in the pool must be >0.")
    if not ray.is_initialized():
        address = ray_address
        if address is None:
            address = next((os.environ[name] for name in _ADDRESS_VARIABLES if os.environ.get(name)), None)
        if address is None or address == "local":
            ray.init(address=address, num_cpus=processes)
        else:
            ray.init(address=address)
    cluster_cpus = int(ray.cluster_resources().get("CPU", 0))
    if processes is None:
        processes = cluster_cpus
    if processes <= 0:
        raise ValueError("Processes in the pool must be >0.")
    if cluster_cpus < processes:
        raise ValueError(
            f"Tried to start a pool with {processes} processes on an existing ray cluster, "
            f"but there are only {cluster_cpus} CPUs in the ray cluster."
        )
    return processes


class Pool:
    """A pool of actor processes with `multiprocessing.Pool`'s methods.

    Args:
        processes: how many actors; default the cluster's CPUs. At most that many.
        initializer: called as `initializer(*initargs)` once in each actor when it starts.
        initargs: the initializer's arguments.
        maxtasksperchild: replace an actor after it was sent this many batches (None or a
            number below 1: never).
        context: accepted for `multiprocessing.Pool`'s signature; ignored with a warning (the
            cluster starts the processes).
        ray_address: the cluster to join when none is running (else RAY_ADDRESS, else a new
            local cluster of `processes` CPUs).
        ray_remote_args: options of the actors, as for `ray.remote` (e.g. `{"num_cpus": 1}`).

    Raises:
        ValueError: `processes` below 1 or above the cluster's CPUs, or an invalid option in
            `ray_remote_args`.
        TypeError: `processes` or `maxtasksperchild` is not an int.
        ActorDiedError: the initializer raised in an actor.
    """

    def __init__(
        self,
        processes: int | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] | None = None,
        maxtasksperchild: int | None = None,
        context: Any = None,
        ray_address: str | None = None,
        ray_remote_args: dict[str, Any] | None = None,
    ) -> None:
        _check_count("processes", processes)
        _check_count("maxtasksperchild", maxtasksperchild)
        if ray_remote_args is not None and not isinstance(ray_remote_args, dict):
            raise TypeError(f"ray_remote_args must be a dict, got {type(ray_remote_args).__name__}")
        self._closed = True  # until the actors are up: a pool that failed to start is not running
        if context is not None and log_once("fray_ray_pool_context"):
            logger.warning("Pool ignores the 'context' argument: the cluster starts the pool's processes.")
        processes = _start_ray(processes, ray_address)
        # Callbacks run here, one at a time; the thread ends once the pool and its results are gone.
        self._callbacks = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fray-ray-pool-callbacks")
        max_batches = maxtasksperchild if maxtasksperchild is not None and maxtasksperchild > 0 else None
        self._workers = Workers(processes, initializer, initargs, max_batches, dict(ray_remote_args or {}))
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"<{type(self).__module__}.{type(self).__qualname__} state={state} pool_size={len(self._workers)}>"

    # ---- running work ----------------------------------------------------------------------

    def apply(self, func: Callable[..., Any], args: tuple[Any, ...] | None = None, kwargs: dict[str, Any] | None = None) -> Any:
        """`func(*args, **kwargs)` in one of the processes; its result (or its exception)."""
        return self.apply_async(func, args, kwargs).get()

    def apply_async(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> AsyncResult:
        """Start `func(*args, **kwargs)` in one of the processes.

        `callback(result)` runs if it succeeds, `error_callback(PoolTaskError)` if it raises.
        """
        self._check_running()
        ref = self._workers.run(self._workers.next_slot(), func, "apply", [(args, kwargs)])
        return AsyncResult([ref], self._run_callback, callback, error_callback, single_result=True)

    def map(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None = None) -> list[Any]:
        """`[func(item) for item in iterable]`, in chunks spread over the processes.

        Raises the first exception (in input order) that a call raised.
        """
        results: list[Any] = self._map_async(func, iterable, chunksize, "map").get()
        return results

    def map_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Any],
        chunksize: int | None = None,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> AsyncResult:
        """Start `map`; `callback(list of results)` once all succeed, else `error_callback`
        with the first failure to arrive."""
        return self._map_async(func, iterable, chunksize, "map", callback, error_callback)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]], chunksize: int | None = None) -> list[Any]:
        """`[func(*args) for args in iterable]`, as `map` runs it."""
        results: list[Any] = self._map_async(func, iterable, chunksize, "starmap").get()
        return results

    def starmap_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        callback: Callback | None = None,
        error_callback: Callback | None = None,
        *,
        chunksize: int | None = None,
    ) -> AsyncResult:
        """Start `starmap`. As in Ray, the third positional argument is `callback`
        (`multiprocessing`'s `chunksize` may be given by keyword)."""
        return self._map_async(func, iterable, chunksize, "starmap", callback, error_callback)

    def imap(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None = 1) -> OrderedIMapIterator:
        """`func(item)` for each item, in input order, reading the input as results are taken."""
        self._check_running()
        _check_chunksize(chunksize)
        return OrderedIMapIterator(self._workers, func, iterable, chunksize)

    def imap_unordered(
        self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: int | None = 1
    ) -> UnorderedIMapIterator:
        """As `imap`, but each chunk's results as soon as it finishes."""
        self._check_running()
        _check_chunksize(chunksize)
        return UnorderedIMapIterator(self._workers, func, iterable, chunksize)

    def _map_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Any],
        chunksize: int | None,
        kind: CallKind,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
    ) -> AsyncResult:
        self._check_running()
        _check_chunksize(chunksize)
        items = iterable if isinstance(iterable, list | tuple) else list(iterable)
        size = chunksize or max(1, chunksize_for(len(items), len(self._workers)))
        refs = [
            self._workers.run(number % len(self._workers), func, kind, items[start : start + size])
            for number, start in enumerate(range(0, len(items), size))
        ]
        return AsyncResult(refs, self._run_callback, callback, error_callback)

    def _run_callback(self, fn: Callable[[], None]) -> None:
        self._callbacks.submit(logged(fn))

    # ---- ending ----------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._closed:
            raise ValueError("Pool not running")

    def close(self) -> None:
        """Take no more work; the processes exit once the work already given is done."""
        if not self._closed:
            self._workers.stop()
        self._closed = True

    def terminate(self) -> None:
        """Take no more work and end the processes now; unfinished results fail."""
        self.close()
        self._workers.kill()

    def join(self) -> None:
        """Wait for the processes of a closed pool to exit.

        Raises:
            ValueError: the pool is still running (call `close` or `terminate` first).
        """
        if not self._closed:
            raise ValueError("Pool is still running")
        self._workers.wait_stopped()

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.terminate()


def _check_chunksize(chunksize: object) -> None:
    _check_count("chunksize", chunksize)
    if isinstance(chunksize, int) and chunksize < 1:
        raise ValueError(f"chunksize must be 1 or more, got {chunksize}")
