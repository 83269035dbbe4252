"""A first-in, first-out queue that tasks and actors share (`ray.util.queue.Queue`).

The items live in one async actor that holds an `asyncio.Queue`; a `Queue` object is a small
handle to that actor, so it can be passed to tasks and actors (it pickles) and every copy
talks to the same items. Blocking and timeouts happen inside the actor, so a waiting `get`
costs no polling. A failed `get` raises `Empty` and a failed `put` raises `Full`; both
subclass the stdlib exceptions of the same name.

>>> from fray_ray.util.queue import Queue
>>> q = Queue(maxsize=2)
>>> q.put("a")
>>> q.put_nowait("b")
>>> q.full(), q.qsize()
(True, 2)
>>> q.get(), q.get_nowait()
('a', 'b')
>>> q.shutdown()
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import fray_ray as ray

if TYPE_CHECKING:
    from fray_ray.actor import ActorHandle

__all__ = ["Empty", "Full", "Queue"]


class Empty(queue.Empty):
    """Raised by `get` and its variants when no item came in time (or at all, without blocking)."""


class Full(queue.Full):
    """Raised by `put` and its variants when there was no room in time (or at all, without blocking)."""


@ray.remote(num_cpus=0)
class _QueueActor:
    """Holds the items. Every method reports failure in its return value rather than raising,
    so the caller can raise a plain `Empty`/`Full` instead of a task error wrapping one."""

    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)

    async def qsize(self) -> int:
        return self.queue.qsize()

    async def put(self, item: Any, block: bool, timeout: float | None) -> bool:
        """Add `item`; with `block`, wait at most `timeout` seconds for room. False: no room."""
        if not block:
            try:
                self.queue.put_nowait(item)
            except asyncio.QueueFull:
                return False
            return True
        try:
            # A deadline, not wait_for: with timeout=0 a queue that has room still succeeds.
            async with asyncio.timeout(timeout):
                await self.queue.put(item)
        except TimeoutError:
            return False
        return True

    async def get(self, block: bool, timeout: float | None) -> tuple[bool, Any]:
        """(True, item) for the oldest item; (False, None) if none came in time."""
        if not block:
            try:
                return True, self.queue.get_nowait()
            except asyncio.QueueEmpty:
                return False, None
        try:
            async with asyncio.timeout(timeout):
                return True, await self.queue.get()
        except TimeoutError:
            return False, None

    async def put_batch(self, items: list[Any]) -> bool:
        """Add all of `items` at once, or none of them (False) if they do not all fit."""
        room = self.queue.maxsize - self.queue.qsize()
        if self.queue.maxsize > 0 and len(items) > room:
            return False
        for item in items:
            self.queue.put_nowait(item)
        return True

    async def get_batch(self, count: int) -> tuple[bool, Any]:
        """(True, the `count` oldest items), or (False, current size) if there are fewer."""
        if count > self.queue.qsize():
            return False, self.queue.qsize()
        return True, [self.queue.get_nowait() for _ in range(count)]


class Queue:
    """A FIFO queue held by one actor; pass it to tasks and actors to share items.

    `maxsize <= 0` means unbounded. `actor_options` are passed to the actor's `.options()`
    (for example `{"num_cpus": 1}` or `{"name": "jobs"}`); by default the actor reserves no
    CPU. With several producers waiting on a full queue (or several consumers on an empty
    one), which of them goes first is not defined.

    After `shutdown()`, a method of this handle raises AttributeError and one of a copy
    raises `RayActorError`, as in Ray.

    >>> q = Queue()
    >>> @ray.remote
    ... def produce(queue, n):
    ...     for i in range(n):
    ...         queue.put(i)
    >>> ray.get(produce.remote(q, 3))
    >>> [q.get(timeout=60) for _ in range(3)]
    [0, 1, 2]
    """

    def __init__(self, maxsize: int = 0, actor_options: Mapping[str, Any] | None = None) -> None:
        self.maxsize = maxsize
        if actor_options is not None and not isinstance(actor_options, Mapping):
            # Ray passes them on as `.options(**actor_options)`, which refuses a non-mapping so.
            raise TypeError(f"actor_options must be a mapping of actor options, not {type(actor_options).__name__}")
        options = dict(actor_options or {})
        # @ray.remote turned the class into an actor class, which type checkers cannot see.
        self.actor: ActorHandle[Any] | None = _QueueActor.options(**options).remote(maxsize)  # type: ignore[attr-defined]
        """The actor holding the items; None once this handle has shut the queue down."""

    def __len__(self) -> int:
        return self.size()

    # ---- size --------------------------------------------------------------------------------

    def qsize(self) -> int:
        """The number of items in the queue now. Blocks for one round trip to the actor.

        >>> q = Queue()
        >>> q.put("x")
        >>> q.qsize()
        1
        """
        size: int = ray.get(self._handle("qsize").qsize.remote())
        return size

    def size(self) -> int:
        """The same as `qsize()`.

        >>> Queue().size()
        0
        """
        return self.qsize()

    def empty(self) -> bool:
        """Whether the queue holds no item now.

        >>> Queue().empty()
        True
        """
        self._handle("empty")
        return self.qsize() == 0

    def full(self) -> bool:
        """Whether the queue is at `maxsize` now (never, for an unbounded queue).

        >>> q = Queue(maxsize=1)
        >>> q.put(1)
        >>> q.full()
        True
        """
        self._handle("full")
        return self.maxsize > 0 and self.qsize() >= self.maxsize

    # ---- put -------------------------------------------------------------------------------

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Add `item` at the end of the queue.

        With `block` (the default), waits for room, for at most `timeout` seconds (None: no
        limit); otherwise fails at once when the queue is full. An ObjectRef given as the item
        is stored as its value, as for any actor call argument.

        Args:
            item: the item (an ObjectRef is stored as its value).
            block: wait for room instead of failing at once.
            timeout: seconds to wait at most when blocking; None waits as long as it takes.

        Raises:
            Full: no room (in time).
            ValueError: `timeout` is negative (checked only when blocking).

        >>> q = Queue(maxsize=1)
        >>> q.put("first")
        >>> q.put("second", timeout=0.1)
        Traceback (most recent call last):
        ...
        fray_ray.util.queue.Full: ...
        """
        _check_timeout(block, timeout)
        if not ray.get(self._handle("put").put.remote(item, block, timeout)):
            raise Full(_full_message(self.maxsize, block, timeout))

    async def put_async(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """`put` as a coroutine, for use in an event loop (a driver's or an async actor's).

        Args:
            item: the item.
            block: wait for room instead of failing at once.
            timeout: seconds to wait at most when blocking.

        Raises:
            Full: no room (in time).

        >>> import asyncio
        >>> q = Queue()
        >>> asyncio.run(q.put_async("x"))
        >>> q.get()
        'x'
        """
        _check_timeout(block, timeout)
        if not await self._handle("put").put.remote(item, block, timeout):
            raise Full(_full_message(self.maxsize, block, timeout))

    def put_nowait(self, item: Any) -> None:
        """`put(item, block=False)`: add `item` or raise `Full` at once.

        Args:
            item: the item.

        Raises:
            Full: the queue is full.

        >>> q = Queue()
        >>> q.put_nowait(1)
        >>> q.get()
        1
        """
        self._handle("put_nowait")
        self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable[Any]) -> None:
        """Add all of `items`, in order, in one call; if they do not all fit, add none.

        Args:
            items: the items, oldest first.

        Raises:
            Full: there is not room for every item.
            TypeError: `items` is not iterable.

        >>> q = Queue(maxsize=3)
        >>> q.put_nowait_batch([1, 2, 3, 4])
        Traceback (most recent call last):
        ...
        fray_ray.util.queue.Full: ...
        >>> q.put_nowait_batch([1, 2])
        >>> q.qsize()
        2
        """
        if not isinstance(items, Iterable):
            raise TypeError(f"put_nowait_batch() takes an iterable of items, got {type(items).__name__}")
        items = list(items)
        if not ray.get(self._handle("put_nowait_batch").put_batch.remote(items)):
            raise Full(f"Cannot add {len(items)} items to a queue with maxsize {self.maxsize}: not enough room")

    # ---- get -------------------------------------------------------------------------------

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return the oldest item.

        With `block` (the default), waits for an item, for at most `timeout` seconds (None: no
        limit); otherwise fails at once when the queue is empty.

        Args:
            block: wait for an item instead of failing at once.
            timeout: seconds to wait at most when blocking; None waits as long as it takes.

        Returns:
            The oldest item.

        Raises:
            Empty: no item (in time).
            ValueError: `timeout` is negative (checked only when blocking).

        >>> q = Queue()
        >>> q.put("x")
        >>> q.get(timeout=1)
        'x'
        >>> q.get(timeout=0.1)
        Traceback (most recent call last):
        ...
        fray_ray.util.queue.Empty: ...
        """
        _check_timeout(block, timeout)
        found, item = ray.get(self._handle("get").get.remote(block, timeout))
        if not found:
            raise Empty(_empty_message(block, timeout))
        return item

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        """`get` as a coroutine, for use in an event loop (a driver's or an async actor's).

        Args:
            block: wait for an item instead of failing at once.
            timeout: seconds to wait at most when blocking.

        Returns:
            The oldest item.

        Raises:
            Empty: no item (in time).

        >>> import asyncio
        >>> q = Queue()
        >>> q.put("x")
        >>> asyncio.run(q.get_async())
        'x'
        """
        _check_timeout(block, timeout)
        found, item = await self._handle("get").get.remote(block, timeout)
        if not found:
            raise Empty(_empty_message(block, timeout))
        return item

    def get_nowait(self) -> Any:
        """`get(block=False)`: remove and return the oldest item, or raise `Empty` at once.

        >>> q = Queue()
        >>> q.put(1)
        >>> q.get_nowait()
        1
        """
        self._handle("get_nowait")
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Remove and return the `num_items` oldest items, in order, in one call.

        Args:
            num_items: how many items to take.

        Returns:
            The items, oldest first.

        Raises:
            Empty: fewer than `num_items` items are queued (then none is removed).
            TypeError: `num_items` is not an int.
            ValueError: `num_items` is negative.

        >>> q = Queue()
        >>> q.put_nowait_batch(["a", "b", "c"])
        >>> q.get_nowait_batch(2)
        ['a', 'b']
        >>> q.get_nowait_batch(2)
        Traceback (most recent call last):
        ...
        fray_ray.util.queue.Empty: ...
        """
        if not isinstance(num_items, int) or isinstance(num_items, bool):
            raise TypeError(f"get_nowait_batch() takes an int num_items, got {type(num_items).__name__}")
        if num_items < 0:
            raise ValueError(f"get_nowait_batch() takes a non-negative num_items, got {num_items}")
        found, items = ray.get(self._handle("get_nowait_batch").get_batch.remote(num_items))
        if not found:
            raise Empty(f"Cannot get {num_items} items: the queue holds {items}")
        batch: list[Any] = items
        return batch

    # ---- lifecycle -------------------------------------------------------------------------

    def shutdown(self, force: bool = False, grace_period_s: float = 5) -> None:
        """Stop the queue's actor; its items are lost. A second call does nothing.

        Unless `force`, the actor is first asked to exit and given `grace_period_s` seconds to
        do so; then it is killed. Blocks until then. Afterwards, as in Ray, a call on this
        handle raises AttributeError (its `actor` is None) and one on a copy of the handle
        (passed to a task or an actor) raises `RayActorError`.

        Args:
            force: kill the actor at once instead of asking it to exit first.
            grace_period_s: seconds the actor has to exit before it is killed.

        >>> q = Queue()
        >>> q.shutdown()
        >>> q.qsize()
        Traceback (most recent call last):
        ...
        AttributeError: 'NoneType' object has no attribute 'qsize' (this Queue was shut down)
        """
        actor, self.actor = self.actor, None
        if actor is None:
            return
        if not force:
            exited = actor.__ray_terminate__.remote()
            ray.wait([exited], timeout=grace_period_s)
        ray.kill(actor)

    def _handle(self, method: str) -> ActorHandle[Any]:
        """The queue's actor. Once this handle shut the queue down, Ray 2.60 leaves `actor` as
        None and each method fails reaching for its own method on it: the same AttributeError
        here (copies of the handle still reach the dead actor: `RayActorError`)."""
        if self.actor is None:
            raise AttributeError(f"'NoneType' object has no attribute '{method}' (this Queue was shut down)")
        return self.actor


def _check_timeout(block: bool, timeout: float | None) -> None:
    if block and timeout is not None and timeout < 0:
        raise ValueError(f"'timeout' must be a non-negative number, got {timeout}")


def _full_message(maxsize: int, block: bool, timeout: float | None) -> str:
    waited = f" after waiting {timeout}s" if block and timeout is not None else ""
    return f"The queue is full (maxsize {maxsize}){waited}"


def _empty_message(block: bool, timeout: float | None) -> str:
    waited = f" after waiting {timeout}s" if block and timeout is not None else ""
    return f"The queue is empty{waited}"
