"""The processes of a `Pool`: one actor per process, each running batches of calls.

A pool keeps a fixed number of slots. Each slot holds one live `PoolActor` (a process running
the pool's initializer once, when it starts) and counts the batches sent to it; with
`maxtasksperchild`, an actor that has been sent that many batches is asked to exit once they
are done and a fresh actor takes its slot, as in Ray (Ray counts batches, not single calls).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import fray_ray as ray

__all__ = ["CallKind", "PoolActor", "PoolTaskError", "Workers", "chunksize_for"]

CallKind = Literal["map", "starmap", "apply"]
"""How a batch's items become calls: `f(item)`, `f(*item)`, or `f(*args, **kwargs)`."""


class PoolTaskError(Exception):
    """What the function raised, carried back as a value inside its batch's results.

    `AsyncResult.get()` raises `underlying`; `error_callback` and the `imap` iterators hand
    out the `PoolTaskError` itself, as Ray 2.60 does.
    """

    def __init__(self, underlying: BaseException) -> None:
        super().__init__(underlying)
        self.underlying = underlying


def chunksize_for(count: int, processes: int) -> int:
    """Ray's choice when no chunk size is given: about four chunks per process."""
    return -(-count // (processes * 4))


def _call(func: Callable[..., Any], kind: CallKind, item: Any) -> Any:
    if kind == "map":
        return func(item)
    if kind == "starmap":
        return func(*item)
    args, kwargs = item
    return func(*(args or ()), **(kwargs or {}))


@ray.remote(num_cpus=0)
class PoolActor:
    """One process of a pool: runs the initializer once, then batches of calls in order."""

    def __init__(self, initializer: Callable[..., Any] | None = None, initargs: Iterable[Any] | None = None) -> None:
        if initializer is not None:
            initializer(*(initargs or ()))

    def run_batch(self, func: Callable[..., Any], kind: CallKind, items: Sequence[Any]) -> list[Any]:
        """Each item's result, or a `PoolTaskError` for an item whose call raised."""
        results: list[Any] = []
        for item in items:
            try:
                results.append(_call(func, kind, item))
            except Exception as error:  # noqa: BLE001 - the caller's error is the result
                results.append(PoolTaskError(error))
        return results


class Workers:
    """The pool's actors, by slot; sends batches and replaces actors that reached their limit."""

    def __init__(
        self,
        processes: int,
        initializer: Callable[..., Any] | None,
        initargs: Iterable[Any] | None,
        max_batches: int | None,
        remote_args: dict[str, Any],
    ) -> None:
        pool_actor: Any = PoolActor  # an actor class (the decorator's result), not a plain class
        self._actor_class: Any = pool_actor.options(**remote_args) if remote_args else pool_actor
        self._initializer = initializer
        self._initargs = tuple(initargs) if initargs is not None else None
        self._max_batches = max_batches
        self._slots: list[Any] = []  # the live actor of each slot
        self._batches: list[int] = []  # batches sent to that actor
        self._stopping: list[ray.ObjectRef[Any]] = []  # exits of actors asked to end
        self._retired: list[Any] = []  # actors asked to end, killed too by `kill`
        self._rotation = 0
        self._lock = threading.Lock()  # callbacks may send work (joblib does) while the owner does
        try:
            for _ in range(processes):
                self._slots.append(self._start())
                self._batches.append(0)
            ray.get([actor.__ray_ready__.remote() for actor in self._slots])
        except BaseException:
            self.kill()  # an initializer that failed in one process fails the pool
            raise

    def __len__(self) -> int:
        return len(self._slots)

    def _start(self) -> Any:
        return self._actor_class.remote(self._initializer, self._initargs)

    def next_slot(self) -> int:
        """Slots in turn, for calls that are not tied to a slot."""
        with self._lock:
            self._rotation = (self._rotation + 1) % len(self._slots)
            return self._rotation

    def run(self, slot: int, func: Callable[..., Any], kind: CallKind, items: Sequence[Any]) -> ray.ObjectRef[Any]:
        """Send one batch to the slot's actor; its ref resolves to the batch's results."""
        with self._lock:
            actor = self._slots[slot]
            ref: ray.ObjectRef[Any] = actor.run_batch.remote(func, kind, items)
            self._batches[slot] += 1
            if self._max_batches is not None and self._batches[slot] >= self._max_batches:
                self._stop(actor)
                self._slots[slot] = self._start()
                self._batches[slot] = 0
            return ref

    def send_chunk(self, slot: int, func: Callable[..., Any], items: list[Any]) -> ray.ObjectRef[Any]:
        """Run `func(item)` for each item in the slot's process (what `imap` sends)."""
        return self.run(slot, func, "map", items)

    def default_chunksize(self, count: int) -> int:
        return chunksize_for(count, len(self._slots))

    def _stop(self, actor: Any) -> None:
        # The exit call waits behind the batches already sent, so they still finish.
        self._stopping.append(actor.__ray_terminate__.remote())
        self._retired.append(actor)
        self.wait_stopped(timeout=0)

    def stop(self) -> None:
        """Ask every actor to exit once its batches are done."""
        for actor in self._slots:
            self._stop(actor)

    def wait_stopped(self, timeout: float | None = None) -> None:
        """Wait (up to `timeout` seconds) for the actors asked to exit to be gone."""
        if not self._stopping:
            return
        _, self._stopping = ray.wait(self._stopping, num_returns=len(self._stopping), timeout=timeout)
        if not self._stopping:
            self._retired.clear()

    def kill(self) -> None:
        """End every actor now; batches still running fail with ActorDiedError."""
        for actor in [*self._slots, *self._retired]:
            ray.kill(actor)
        self._retired.clear()
