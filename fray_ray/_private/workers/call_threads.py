"""The threads that run a synchronous actor's calls: a thread pool without futures.

An actor host hands every call from its session's reader thread to these threads. A
`ThreadPoolExecutor` would build a Future (a condition and a lock), a work item and a
semaphore round for each call, on the reader thread, although nothing ever reads the Future:
a call's result travels back on its own (`call_done`). This pool keeps what matters of it:
up to `size` threads, started only as calls need them (an actor with `max_concurrency=1000`
starts a thousand threads only if it gets that many calls at once), calls taken in arrival
order, and a shutdown that drops the calls not yet started.

A pool of one thread may be given its connection (`reader`): its thread then reads that
connection itself while no call waits (see `read_lending`), so a call read there runs at once,
on the same thread, as every call of that actor does.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger(__name__)

_STOP = None  # what a thread takes from the queue to end


class LendingReader(Protocol):
    """The part of a `Connection` a pool thread reads through while it waits."""

    def serve_until(self, done: Callable[[], bool], timeout: float | None = None) -> bool: ...

    def wake_lender(self) -> None: ...


class CallThreads:
    """Runs `submit`ted calls on at most `size` threads named `<name>_<n>`."""

    def __init__(self, size: int, name: str, reader: LendingReader | None = None) -> None:
        if size < 1:
            raise ValueError("a call pool needs at least one thread")
        if reader is not None and size != 1:
            raise ValueError("only a pool of one thread reads its connection")
        self._size = size
        self._name = name
        self._reader = reader
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards the three fields below
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a call, as far as submit can tell
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on a pool thread (in order of submission); RuntimeError once shut down."""
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run calls after shutdown")
            if self._idle:
                self._idle -= 1
                start = False
            else:
                start = len(self._threads) < self._size
                if start:
                    thread = threading.Thread(
                        target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
                    )
                    self._threads.append(thread)
            self._calls.put((fn, args))
        if start:
            thread.start()
        elif self._reader is not None:
            self._reader.wake_lender()  # a call from elsewhere than the connection (or nothing, from it)

    def backlog(self) -> int:
        """How many submitted calls no thread has taken yet (a moment ago)."""
        return self._calls.qsize()

    def _has_call(self) -> bool:
        return not self._calls.empty()

    def _work(self) -> None:
        while True:
            if self._reader is not None:
                self._reader.serve_until(self._has_call)  # read the connection until a call is there
            item = self._calls.get()
            if item is _STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - the call reports its own errors; the thread stays
                logger.exception("an actor call escaped its error handling")
            del item, fn, args  # hold nothing of a finished call while waiting for the next
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        """Drop the calls not yet started and let every thread end after its current call.
        Does not wait for them. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = len(self._threads)
        while True:
            try:
                self._calls.get_nowait()
            except queue.Empty:
                break
        for _ in range(threads):
            self._calls.put(_STOP)
        if self._reader is not None:
            self._reader.wake_lender()
