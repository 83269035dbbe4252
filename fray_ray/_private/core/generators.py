"""ObjectRefGenerator: the refs a streaming generator task yields, one at a time.

>>> @fray_ray.remote
... def count(n):
...     for i in range(n):
...         yield i
>>> [fray_ray.get(ref) for ref in count.remote(3)]
[0, 1, 2]
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Protocol

from fray_ray._private.core import runtime_slot
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.objects.refcount import LocalReferenceCounter


class StreamRuntime(Protocol):
    """What a generator asks of the runtime of the process it is in (every `runtime.CoreRuntime` has it)."""

    references: LocalReferenceCounter

    def stream_next_future(self, stream_id: bytes, index: int) -> concurrent.futures.Future[Any]: ...

    def stream_ready(self, stream_id: bytes, index: int) -> str: ...


class ObjectRefGenerator:
    """Iterates (sync or async) the ObjectRefs of a streaming generator's items as they come.

    An error in the generator arrives as one last ref whose `get` raises it. Not picklable.
    """

    def __init__(self, stream_id: bytes, *, _register: bool = True) -> None:
        self._stream_id = stream_id
        self._next_index = 1
        self._counter = None  # the reference counter this generator is counted in
        if _register:
            runtime: StreamRuntime | None = runtime_slot.current_or_none()
            if runtime is not None:
                runtime.references.add(stream_id)
                self._counter = runtime.references

    def __del__(self) -> None:
        counter = getattr(self, "_counter", None)
        if counter is not None:
            counter.release_later(self._stream_id)

    def __reduce__(self) -> Any:
        raise TypeError(
            "You cannot return or pass a generator to other task. Serializing a ObjectRefGenerator is not allowed."
        )

    def __iter__(self) -> ObjectRefGenerator:
        return self

    def __next__(self) -> ObjectRef[Any]:
        runtime: StreamRuntime = runtime_slot.current()
        runtime.references.flush()  # the owner may free what this process dropped while it waits
        ref: ObjectRef[Any] | None = runtime.stream_next_future(self._stream_id, self._next_index).result()
        if ref is None:
            raise StopIteration
        self._next_index += 1
        return ref

    def __aiter__(self) -> ObjectRefGenerator:
        return self

    async def __anext__(self) -> ObjectRef[Any]:
        import asyncio

        runtime: StreamRuntime = runtime_slot.current()
        future = runtime.stream_next_future(self._stream_id, self._next_index)
        ref: ObjectRef[Any] | None = await asyncio.wrap_future(future)
        if ref is None:
            raise StopAsyncIteration
        self._next_index += 1
        return ref

    def is_finished(self) -> bool:
        """True once every item has been handed out and the stream has ended."""
        runtime: StreamRuntime = runtime_slot.current()
        return runtime.stream_ready(self._stream_id, self._next_index) == "end"

    def _task_id_binary(self) -> bytes:
        return self._stream_id

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({self._stream_id.hex()})"


class DynamicObjectRefGenerator:
    """What `get` returns for a `num_returns="dynamic"` task: an iterable of item refs."""

    def __init__(self, refs: list[ObjectRef[Any]]) -> None:
        self._refs = list(refs)

    def __iter__(self) -> Any:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)
