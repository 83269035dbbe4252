"""What a `Pool` hands back: `AsyncResult` and the `imap` iterators.

Both are fed by completion, never by polling: each batch's ref is turned into a future whose
done-callback records the batch. The runtime thread that completes a future only records it;
the user's `callback` and `error_callback` run on the pool's callback thread (one per pool, so
they never run at the same time, as with `multiprocessing.Pool`), and an `AsyncResult` is
ready once they have run.

A batch is a list of results in which a call that raised stands as a `PoolTaskError`; a batch
whose actor died stands as `[the error]`. As in Ray 2.60, any `Exception` among the results
counts as a failure.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import TimeoutError
from typing import Any, Protocol

import fray_ray as ray
from fray_ray.util.multiprocessing._workers import PoolTaskError

__all__ = ["AsyncResult", "IMapIterator", "OrderedIMapIterator", "UnorderedIMapIterator"]

Batch = list[Any]
Callback = Callable[[Any], object]

logger = logging.getLogger("fray_ray.util.multiprocessing.pool")  # reported under the public module


def logged(fn: Callable[[], object]) -> Callable[[], None]:
    """`fn`, with what it raises logged instead of lost on the callback thread."""

    def run() -> None:
        try:
            fn()
        except Exception:
            logger.exception("a pool callback raised")

    return run


def batch_of(future: concurrent.futures.Future[Any]) -> Batch:
    """The batch's results, or `[error]` when the batch itself failed (e.g. its actor died)."""
    error = future.exception()
    if error is not None:
        return [error]
    results: Batch = future.result()
    return results


def first_failure(batch: Batch) -> Exception | None:
    return next((result for result in batch if isinstance(result, Exception)), None)


def raise_failure(batch: Batch) -> None:
    failure = first_failure(batch)
    if isinstance(failure, PoolTaskError):
        raise failure.underlying
    if failure is not None:
        raise failure


class CallbackRunner(Protocol):
    def __call__(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the pool's callback thread, after everything handed over before it."""


class AsyncResult:
    """The result of `apply_async`, `map_async` or `starmap_async`.

    Built by the pool, not by users.
    """

    def __init__(
        self,
        refs: list[ray.ObjectRef[Any]],
        run_callback: CallbackRunner,
        callback: Callback | None = None,
        error_callback: Callback | None = None,
        single_result: bool = False,
    ) -> None:
        self._single_result = single_result
        self._callback = callback
        self._error_callback = error_callback
        self._run_callback = run_callback
        self._batches: list[Batch | None] = [None] * len(refs)
        self._remaining = len(refs)
        self._failed = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        if not refs:
            self._finish()
        for index, ref in enumerate(refs):
            ref.future().add_done_callback(functools.partial(self._arrived, index))

    def _arrived(self, index: int, future: concurrent.futures.Future[Any]) -> None:
        batch = batch_of(future)
        failure = first_failure(batch)
        with self._lock:
            self._batches[index] = batch
            self._remaining -= 1
            first_error = failure is not None and not self._failed
            self._failed = self._failed or failure is not None
            last = self._remaining == 0
        if first_error and self._error_callback is not None:
            error_callback = self._error_callback

            def fail() -> None:
                error_callback(failure)

            self._run_callback(fail)
        if last:
            self._finish()

    def _finish(self) -> None:
        if self._callback is None or self._failed:
            if self._error_callback is None:
                self._ready.set()
            else:  # ready only after the error callback has run
                self._run_callback(self._ready.set)
            return
        callback, values = self._callback, self._values()

        def succeed() -> None:
            try:
                logged(lambda: callback(values[0] if self._single_result else values))()
            finally:
                self._ready.set()

        self._run_callback(succeed)

    def _values(self) -> list[Any]:
        return [result for batch in self._batches if batch is not None for result in batch]

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the result is ready, or `timeout` seconds have passed (no error then)."""
        self._ready.wait(timeout)

    def get(self, timeout: float | None = None) -> Any:
        """The result: one value for `apply_async`, else the list of values in input order.

        Raises:
            multiprocessing.TimeoutError: not ready within `timeout` seconds.
            The exception a call raised (the first in input order), or the error of a batch
            whose actor died (e.g. `ActorDiedError` after `terminate()`).
        """
        if not self._ready.wait(timeout):
            raise TimeoutError
        for batch in self._batches:
            raise_failure(batch or [])
        values = self._values()
        return values[0] if self._single_result else values

    def ready(self) -> bool:
        """True once every call has finished (and the callbacks have run)."""
        return self._ready.is_set()

    def successful(self) -> bool:
        """True if no call failed.

        Raises:
            ValueError: the result is not ready yet.
        """
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return not self._failed


class ChunkSource(Protocol):
    """What an imap iterator needs of its pool."""

    def __len__(self) -> int:
        """How many processes the pool has."""

    def send_chunk(self, slot: int, func: Callable[..., Any], items: list[Any]) -> ray.ObjectRef[Any]:
        """Run `func` on each item in the slot's process."""

    def default_chunksize(self, count: int) -> int:
        """The chunk size `map` would choose for `count` items."""


class IMapIterator:
    """Results of `imap` or `imap_unordered`, each chunk sent only as earlier ones finish.

    One chunk per process is in flight: reading the input is as lazy as the results are. A
    call that raised is yielded as its `PoolTaskError` (as in Ray 2.60), not raised.
    `next(timeout)` raises `multiprocessing.TimeoutError` when no result comes in time.
    """

    def __init__(self, pool: ChunkSource, func: Callable[..., Any], iterable: Any, chunksize: int | None) -> None:
        self._pool = pool
        self._func = func
        if isinstance(iterable, Iterator) or not hasattr(iterable, "__len__"):
            self._chunksize = chunksize or 1
        else:
            self._chunksize = chunksize or pool.default_chunksize(len(iterable))
        self._source = iter(iterable)
        self._exhausted = False
        self._sent = 0  # chunks sent, numbered in input order
        self._taken = 0  # chunks whose results were handed to `_ready`
        self._free_slots = collections.deque(range(len(pool)))
        self._slot_of: dict[int, int] = {}  # chunk in flight -> its slot
        self._arrivals: queue.SimpleQueue[tuple[int, Batch]] = queue.SimpleQueue()
        self._ready: collections.deque[Any] = collections.deque()
        while self._free_slots and not self._exhausted:
            self._send_next()

    def _send_next(self) -> None:
        items: list[Any] = []
        for item in self._source:
            items.append(item)
            if len(items) == self._chunksize:
                break
        else:
            self._exhausted = True
        if not items:
            return
        index, slot = self._sent, self._free_slots.popleft()
        self._sent += 1
        self._slot_of[index] = slot
        future = self._pool.send_chunk(slot, self._func, items).future()
        future.add_done_callback(lambda done: self._arrivals.put((index, batch_of(done))))

    def _next_arrival(self, deadline: float | None) -> tuple[int, Batch]:
        """The next chunk to finish; its slot gets the next chunk of input."""
        try:
            if deadline is None:
                index, batch = self._arrivals.get()
            else:
                index, batch = self._arrivals.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None
        self._free_slots.append(self._slot_of.pop(index))
        if not self._exhausted:
            self._send_next()
        return index, batch

    def _finished(self) -> bool:
        return self._exhausted and self._taken == self._sent

    def __iter__(self) -> IMapIterator:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, timeout: float | None = None) -> Any:
        """The next result; StopIteration after the last."""
        if not self._ready:
            if self._finished():
                raise StopIteration
            deadline = None if timeout is None else time.monotonic() + timeout
            self._take(deadline)
        return self._ready.popleft()

    def _take(self, deadline: float | None) -> None:
        raise NotImplementedError


class OrderedIMapIterator(IMapIterator):
    """`imap`'s results, in input order."""

    def __init__(self, pool: ChunkSource, func: Callable[..., Any], iterable: Any, chunksize: int | None) -> None:
        self._early: dict[int, Batch] = {}  # chunks that finished before the ones ahead of them
        super().__init__(pool, func, iterable, chunksize)

    def _take(self, deadline: float | None) -> None:
        while self._taken not in self._early:
            index, batch = self._next_arrival(deadline)
            self._early[index] = batch
        while self._taken in self._early:
            self._ready.extend(self._early.pop(self._taken))
            self._taken += 1


class UnorderedIMapIterator(IMapIterator):
    """`imap_unordered`'s results, chunk by chunk as they finish."""

    def _take(self, deadline: float | None) -> None:
        _, batch = self._next_arrival(deadline)
        self._ready.extend(batch)
        self._taken += 1
