"""A pool of actors that work is spread over (`ray.util.ActorPool`).

The pool hands each submission to an idle actor and queues it when every actor is busy. Results
come back in submission order (`get_next`, `map`) or as they finish (`get_next_unordered`,
`map_unordered`). It is plain Python over the public API (`wait`, `get` and actor handles), so
the same file runs on fray_ray and on Ray itself.

Every example below uses this setup:

>>> import fray_ray as ray
>>> @ray.remote(num_cpus=0)
... class Doubler:
...     def double(self, value):
...         return 2 * value
>>> def double(actor, value):
...     return actor.double.remote(value)
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import fray_ray as ray

if TYPE_CHECKING:
    from fray_ray.actor import ActorProxy

__all__ = ["ActorPool"]

V = TypeVar("V")
SubmitFn = Callable[["ActorProxy[Any]", V], Any]
"""`fn(actor, value)`: starts one call on `actor` and returns its ObjectRef (or list of refs)."""


class ActorPool:
    """Spread calls over a fixed set of actors, one call per actor at a time.

    `fn(actor, value)` must start a method call and return what `.remote()` returned: one
    ObjectRef, or a list of them for a method with `num_returns > 1` (its result is then the
    list of values). An actor counts as busy until its call's result has been taken from the
    pool. If the actor died during the call, it leaves the pool; if the call merely raised, the
    actor is reused.

    >>> pool = ActorPool([Doubler.remote(), Doubler.remote()])
    >>> list(pool.map(double, [1, 2, 3]))
    [2, 4, 6]
    """

    def __init__(self, actors: Iterable[ActorProxy[Any]]) -> None:
        # Actors with no call from the pool running; ready for the next submission.
        self._idle_actors: list[ActorProxy[Any]] = list(actors)
        # Submissions waiting for an actor, oldest first. Non-empty only while none is idle.
        self._pending_submits: collections.deque[tuple[SubmitFn[Any], Any]] = collections.deque()
        # Started calls whose results have not been taken: the ref waited on -> (the actor
        # running the call, what fn returned). Dict order is submission order, so the first
        # entry is the oldest outstanding call.
        self._in_flight: dict[ray.ObjectRef[Any], tuple[ActorProxy[Any], Any]] = {}

    # ---- submitting ------------------------------------------------------------------------

    def submit(self, fn: SubmitFn[V], value: V) -> None:
        """Run `fn(actor, value)` on an idle actor now, or as soon as one is free.

        Returns immediately. Take the result later with `get_next` or `get_next_unordered`.

        Args:
            fn: `fn(actor, value)` starts one call on `actor` and returns what `.remote()` returned.
            value: the value to hand to `fn`.

        >>> pool = ActorPool([Doubler.remote()])
        >>> pool.submit(double, 1)
        >>> pool.submit(double, 2)  # waits in the pool until the actor is free
        >>> pool.get_next(), pool.get_next()
        (2, 4)
        """
        self._pending_submits.append((fn, value))
        self._start_pending()

    def map(self, fn: SubmitFn[V], values: Iterable[V]) -> Iterator[Any]:
        """Submit `fn(actor, value)` for every value; iterate the results in the values' order.

        All values are submitted before this returns; iterating blocks for each result and
        raises a call's error when its turn comes. Results of earlier submissions that were
        not taken yet are dropped first, so they never mix into this map's results.

        Args:
            fn: `fn(actor, value)` starts one call on `actor` and returns what `.remote()` returned.
            values: the values, one call each.

        Returns:
            An iterator over the results, in the order of `values`.

        >>> pool = ActorPool([Doubler.remote(), Doubler.remote()])
        >>> list(pool.map(double, [1, 2, 3, 4]))
        [2, 4, 6, 8]
        """
        self._discard_outstanding()
        for value in values:
            self.submit(fn, value)
        return self._drain(self.get_next)

    def map_unordered(self, fn: SubmitFn[V], values: Iterable[V]) -> Iterator[Any]:
        """Like `map`, but iterate the results in the order the calls finish.

        Args:
            fn: `fn(actor, value)` starts one call on `actor` and returns what `.remote()` returned.
            values: the values, one call each.

        Returns:
            An iterator over the results, in the order the calls finish.

        >>> pool = ActorPool([Doubler.remote(), Doubler.remote()])
        >>> sorted(pool.map_unordered(double, [1, 2, 3, 4]))
        [2, 4, 6, 8]
        """
        self._discard_outstanding()
        for value in values:
            self.submit(fn, value)
        return self._drain(self.get_next_unordered)

    # ---- taking results --------------------------------------------------------------------

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Return the result of the oldest call whose result has not been taken yet.

        Blocks until that call finishes, for at most `timeout` seconds (None: no limit).

        Args:
            timeout: seconds to wait at most; None waits as long as it takes.
            ignore_if_timedout: on a timeout, drop the call's result instead of keeping it.

        Returns:
            The call's result (a list of values for a call that returned a list of refs).

        Raises:
            StopIteration: no call is outstanding (`has_next()` is False).
            TimeoutError: the call did not finish in time. It stays in the pool for a later
                `get_next`, unless `ignore_if_timedout` is true: then its result is dropped
                and its actor takes new work (queued behind the running call).
            The call's own error (e.g. `RayTaskError`, `ActorDiedError`) if it failed.

        >>> pool = ActorPool([Doubler.remote()])
        >>> pool.submit(double, 21)
        >>> pool.get_next(timeout=60)
        42
        """
        oldest = self._oldest()
        ready, _ = ray.wait([oldest], timeout=timeout)
        if not ready:
            self._raise_timeout(oldest, ignore_if_timedout)
        return self._collect(oldest)

    def get_next_unordered(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Return the result of whichever outstanding call finishes first.

        Blocks for at most `timeout` seconds (None: no limit). Raises as `get_next` does; on a
        timeout with `ignore_if_timedout`, the oldest outstanding call is the one dropped.

        Args:
            timeout: seconds to wait at most; None waits as long as it takes.
            ignore_if_timedout: on a timeout, drop the oldest call's result instead of keeping it.

        Returns:
            The first finished call's result.

        >>> pool = ActorPool([Doubler.remote(), Doubler.remote()])
        >>> pool.submit(double, 1)
        >>> pool.submit(double, 2)
        >>> sorted([pool.get_next_unordered(), pool.get_next_unordered()])
        [2, 4]
        """
        oldest = self._oldest()
        ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=timeout)
        if not ready:
            self._raise_timeout(oldest, ignore_if_timedout)
        return self._collect(ready[0])

    # ---- inspecting and resizing -----------------------------------------------------------

    def has_next(self) -> bool:
        """Whether a started call's result is waiting to be taken. Does not block.

        Submissions still waiting for an actor do not count.

        >>> pool = ActorPool([Doubler.remote()])
        >>> pool.has_next()
        False
        >>> pool.submit(double, 1)
        >>> pool.has_next()
        True
        """
        return bool(self._in_flight)

    def has_free(self) -> bool:
        """Whether a new submission would start at once: an actor is idle and nothing queues.

        >>> pool = ActorPool([Doubler.remote()])
        >>> pool.submit(double, 1)
        >>> pool.has_free()
        False
        >>> pool.get_next()
        2
        >>> pool.has_free()
        True
        """
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self) -> ActorProxy[Any] | None:
        """Take an idle actor out of the pool and return it; None if no actor is idle.

        >>> actor = Doubler.remote()
        >>> pool = ActorPool([actor])
        >>> pool.pop_idle() == actor
        True
        >>> pool.pop_idle() is None
        True
        """
        return self._idle_actors.pop() if self._idle_actors else None

    def push(self, actor: ActorProxy[Any]) -> None:
        """Add an actor to the pool; it starts the oldest waiting submission, if any.

        Args:
            actor: a handle to the actor to add.

        Raises:
            ValueError: the actor is already in the pool (idle or busy).

        >>> pool = ActorPool([])
        >>> pool.submit(double, 5)  # no actor yet: the submission waits
        >>> pool.push(Doubler.remote())
        >>> pool.get_next(timeout=60)
        10
        """
        busy = (running for running, _ in self._in_flight.values())
        if actor in self._idle_actors or any(actor == running for running in busy):
            raise ValueError(f"{actor!r} already belongs to this ActorPool")
        self._return_actor(actor)

    # ---- internals -------------------------------------------------------------------------

    def _start_pending(self) -> None:
        """Start waiting submissions, oldest first, while actors are idle."""
        while self._idle_actors and self._pending_submits:
            fn, value = self._pending_submits.popleft()
            actor = self._idle_actors.pop()
            try:
                future = fn(actor, value)
            except BaseException:
                self._idle_actors.append(actor)  # fn failed before anything ran on the actor
                raise
            refs = list(future) if isinstance(future, (list, tuple)) else [future]
            if not refs or not all(isinstance(ref, ray.ObjectRef) for ref in refs):
                self._idle_actors.append(actor)
                raise TypeError(
                    "ActorPool: fn(actor, value) must return the ObjectRef (or list of ObjectRefs) "
                    f"of an actor call, got {future!r}"
                )
            # The refs of one call become ready together; the first one stands for the call.
            self._in_flight[refs[0]] = (actor, future if len(refs) == 1 else refs)

    def _oldest(self) -> ray.ObjectRef[Any]:
        if not self._in_flight:
            raise StopIteration("No more results to get: the ActorPool has no outstanding call")
        return next(iter(self._in_flight))

    def _raise_timeout(self, key: ray.ObjectRef[Any], ignore: bool) -> NoReturn:
        """Raise TimeoutError for a wait that expired; drop the call `key` first if `ignore`."""
        if not ignore:
            raise TimeoutError("Timed out waiting for a result from the ActorPool")
        actor, _ = self._in_flight.pop(key)
        self._return_actor(actor)
        raise TimeoutError(f"Timed out waiting for a result from the ActorPool; the call {key} was dropped")

    def _collect(self, key: ray.ObjectRef[Any]) -> Any:
        """Take the finished call `key` out of the pool and return its value (or raise its error)."""
        actor, future = self._in_flight.pop(key)
        alive = True
        try:
            return ray.get(future)
        except ray.exceptions.RayActorError as error:
            # A RayTaskError that wraps an actor error was raised by the method's own code
            # (it called a dead actor): this actor itself is fine.
            alive = isinstance(error, ray.exceptions.RayTaskError)
            raise
        finally:
            self._return_actor(actor, alive=alive)

    def _return_actor(self, actor: ActorProxy[Any], alive: bool = True) -> None:
        """Make `actor` available again, unless its call failed because the actor is gone.

        A dead actor must not go back to the idle list: every later submission on it would
        fail, and the pool would keep handing work to it.
        """
        if alive:
            self._idle_actors.append(actor)
            self._start_pending()

    def _discard_outstanding(self) -> None:
        """Drop the results of every started or waiting submission, without waiting for them.

        Waiting submissions still run (each one starts as the drop frees its actor); only
        their results are ignored.
        """
        while self._in_flight:
            actor, _ = self._in_flight.pop(next(iter(self._in_flight)))
            self._return_actor(actor)

    def _drain(self, take: Callable[[], Any]) -> Iterator[Any]:
        while self.has_next():
            yield take()
