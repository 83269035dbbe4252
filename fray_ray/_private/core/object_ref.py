"""ObjectRef: a reference to a value the session owns, usable as a future."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from fray_ray._private.core import runtime_slot
from fray_ray._private.objects.ids import JOB_ID_HEX
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.serialization import note_contained_ref
from fray_ray._private.objects.unique_ids import JobID, TaskID

if TYPE_CHECKING:
    import asyncio  # imported on first use: `import fray_ray` does not load asyncio

T = TypeVar("T")

#: Told the id of every ref pickled in this process (a ref leaving it); None: nobody listens.
_escape_hook: Callable[[bytes], None] | None = None
_held = threading.local()  # .ids: the refs pickled on this thread within `escapes_held`


def set_escape_hook(hook: Callable[[bytes], None] | None) -> None:
    """Have `hook(object_id)` called as each ref is pickled: a worker hands the objects it
    holds itself to the driver before a ref to one can reach another process."""
    global _escape_hook
    _escape_hook = hook


def escapes_held() -> contextlib.AbstractContextManager[None]:
    """The escape hook is not told of refs pickled on this thread meanwhile: an actor call's
    arguments wait until the call is routed (a worker lends its own results to a host it calls
    directly, `take_held_escapes`). Those not taken are told as the block ends."""
    return _NOTHING_HELD if _escape_hook is None else _HoldingEscapes()


_NOTHING_HELD = contextlib.nullcontext()  # nobody listens (the driver): nothing to hold


class _HoldingEscapes:
    """`escapes_held` where a hook listens (a class: every actor call's answer enters one)."""

    __slots__ = ("_outer", "_held")

    def __enter__(self) -> None:
        self._outer = getattr(_held, "ids", None)
        self._held: list[bytes] = []
        _held.ids = self._held

    def __exit__(self, *exc_info: object) -> None:
        _held.ids = self._outer
        hook = _escape_hook
        if hook is not None:
            for object_id in self._held:
                hook(object_id)


def take_held_escapes() -> list[bytes]:
    """The refs pickled so far within this thread's `escapes_held` block, which no longer tells them."""
    held: list[bytes] | None = getattr(_held, "ids", None)
    if not held:
        return []
    taken = list(held)
    held.clear()
    return taken


class RefRuntime(Protocol):
    """What a ref asks of the runtime of the process it is in (every `runtime.CoreRuntime` has it)."""

    references: LocalReferenceCounter

    def object_future(self, ref: ObjectRef[Any]) -> concurrent.futures.Future[Any]: ...


class ObjectRef(Generic[T]):
    """A handle to a (possibly not yet computed) object. Pass it to tasks, `get` it, await it.

    Equal refs have equal ids; refs are hashable, picklable (a pickled ref keeps its object
    alive wherever it lands) and can be nested inside other values. `ObjectRef[int]` is a ref
    to an int: `get` and `await` give back the type the ref was made with, and a type checker
    reports a ref used where its value is meant.

    Args:
        object_id: the 28-byte id of the object (refs are made by the runtime, `put` and
            `from_binary`, rarely by hand).

    >>> ref = fray_ray.put(41)
    >>> fray_ray.get(ref) + 1
    42
    """

    __slots__ = ("_id", "_counter", "__weakref__")

    def __init__(self, object_id: bytes, *, _register: bool = True, _announced: bool = False) -> None:
        self._id = object_id
        #: the reference counter this ref was counted in (released there, whichever thread
        #: or runtime the garbage collector happens to run in)
        self._counter = None
        if _register:
            runtime: RefRuntime | None = runtime_slot.current_or_none()
            if runtime is not None:
                if _announced:
                    runtime.references.add_announced(object_id)
                else:
                    runtime.references.add(object_id)
                self._counter = runtime.references

    def __del__(self) -> None:
        if self._counter is not None:
            self._counter.release_later(self._id)

    def __reduce__(self) -> tuple[Any, ...]:
        note_contained_ref(self._id)
        if _escape_hook is not None:
            held = getattr(_held, "ids", None)
            if held is None:
                _escape_hook(self._id)
            else:
                held.append(self._id)
        return (_rebuild_ref, (self._id,))

    # ---- identity ------------------------------------------------------------------------

    def binary(self) -> bytes:
        """Returns:
            The object's id as bytes (what `from_binary` takes back).
        """
        return self._id

    def hex(self) -> str:
        """Returns:
            The object's id as hex, as Ray prints it.
        """
        return self._id.hex()

    def task_id(self) -> TaskID:
        """Returns:
            The id of the task that produces this object (its first 24 bytes); `.hex()` is
            how the state API shows it.
        """
        return TaskID(self._id[:24])

    def job_id(self) -> JobID:
        """Returns:
            The id of the job (driver) the object belongs to.
        """
        return JobID.from_hex(JOB_ID_HEX)

    def is_nil(self) -> bool:
        """Returns:
            True for the all-zero id of `ObjectRef.nil()`.
        """
        return not any(self._id)

    @classmethod
    def nil(cls) -> ObjectRef[Any]:
        """Returns:
            A ref with the all-zero id that refers to nothing (not counted, never resolves).
        """
        return cls(bytes(28), _register=False)

    @classmethod
    def from_binary(cls, binary: bytes) -> ObjectRef[Any]:
        """Rebuild a ref from `binary()`; the value's type is unknown, so annotate it.

        Args:
            binary: an id returned by `ObjectRef.binary()`.

        Returns:
            A ref to that object, counted like any other.
        """
        return cls(binary)

    @classmethod
    def from_hex(cls, hex_id: str) -> ObjectRef[Any]:
        """Rebuild a ref from `hex()`.

        Args:
            hex_id: an id returned by `ObjectRef.hex()`.

        Returns:
            A ref to that object, counted like any other.

        Raises:
            ValueError: `hex_id` is not hexadecimal.
        """
        return cls(bytes.fromhex(hex_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return f"ObjectRef({self._id.hex()})"

    # ---- futures -------------------------------------------------------------------------

    def future(self) -> concurrent.futures.Future[T]:
        """Bridge to code written against `concurrent.futures` (e.g. `as_completed`).

        Returns:
            A future that resolves to the value, or raises the task's error.
        """
        runtime: RefRuntime = runtime_slot.current()
        future: concurrent.futures.Future[T] = runtime.object_future(self)
        return future

    def as_future(self) -> asyncio.Future[T]:
        """Bridge to asyncio code that wants a future rather than an awaitable.

        Returns:
            An asyncio future on the running event loop that resolves to the value.

        Raises:
            RuntimeError: no event loop is running in this thread.
        """
        import asyncio

        return asyncio.wrap_future(self.future())

    def __await__(self) -> Generator[Any, None, T]:
        return self.as_future().__await__()

    def _on_completed(self, py_callback: Callable[[Any], None]) -> None:
        """Call `py_callback(value)` once the object is ready (at once if it is), on a
        runtime thread; for a failed task the value is its exception. Returns immediately."""
        from fray_ray._private.objects.completion_callbacks import call_when_completed

        call_when_completed(self.future(), py_callback)


def _rebuild_ref(object_id: bytes) -> ObjectRef[Any]:
    return ObjectRef(object_id)


ObjectID = ObjectRef
