"""Iterating results as they finish: `as_completed` and `map_unordered` (`ray.util`).

Both are generators over the public `wait` and `get`. They take ready results a chunk at a
time (`chunk_size` is `wait`'s `num_returns`) and fetch each chunk with one `get`, so a failed
ref raises when its chunk comes up. Extra keyword arguments go to `wait` (`timeout`,
`fetch_local`); a `timeout` only bounds each wait, the iteration still runs to the end.

Arguments are checked when the function is called; the work itself happens while iterating.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import fray_ray as ray

if TYPE_CHECKING:
    from fray_ray.remote_function import RemoteFunction

__all__ = ["as_completed", "map_unordered"]


def as_completed(
    refs: Sequence[ray.ObjectRef[Any]], *, chunk_size: int = 10, yield_obj_refs: bool = False, **kwargs: Any
) -> Iterator[Any]:
    """Yield the values of `refs` as they become ready, up to `chunk_size` at a time.

    Each step waits until `chunk_size` refs (or all that remain) are ready and yields their
    values in the order of `refs`; so the order is by completion between chunks, by
    submission within one. With `yield_obj_refs`, the refs themselves are yielded (nothing
    is fetched). Blocks while iterating.

    Args:
        refs: the refs to follow.
        chunk_size: how many ready refs to wait for per step.
        yield_obj_refs: yield the refs instead of their values.
        **kwargs: passed to `wait` (e.g. `timeout`, `fetch_local`).

    Returns:
        An iterator over the values (or refs).

    Raises:
        ValueError: `chunk_size < 1`, `num_returns` passed (use `chunk_size`), or a ref
            appears twice.
        TypeError: `refs` is a single ref or holds something that is not an ObjectRef.
        The error of a failed ref (e.g. `RayTaskError`), when its chunk is fetched.

    >>> import fray_ray as ray
    >>> from fray_ray.util import as_completed
    >>> @ray.remote
    ... def square(x):
    ...     return x * x
    >>> sorted(as_completed([square.remote(i) for i in range(4)], chunk_size=2))
    [0, 1, 4, 9]
    """
    pending = _check_refs(refs)
    _check_chunking(chunk_size, kwargs)
    return _completed(pending, chunk_size, yield_obj_refs, kwargs)


def map_unordered(
    fn: RemoteFunction[..., Any],
    items: Iterable[Any],
    *,
    backpressure_size: int | None = 100,
    chunk_size: int = 10,
    yield_obj_refs: bool = False,
    **kwargs: Any,
) -> Iterator[Any]:
    """Run `fn.remote(item)` for each item and yield the results as they finish.

    At most `backpressure_size` tasks run at once (None: no limit): once that many are in
    flight, the next `chunk_size` finished ones are yielded before more are started. Tasks
    are started while iterating, never ahead of the consumer by more than the limit.
    Results come in no defined order; with `yield_obj_refs`, the refs are yielded.

    Args:
        fn: a remote function taking one item.
        items: the items, one task each.
        backpressure_size: how many tasks may run at once; None for no limit.
        chunk_size: how many finished tasks to wait for per step.
        yield_obj_refs: yield the refs instead of their values.
        **kwargs: passed to `wait`.

    Returns:
        An iterator over the results (or refs).

    Raises:
        ValueError: `backpressure_size < 1`, `chunk_size < 1`, or `num_returns` passed.
        The error of a failed task, when its chunk is fetched.

    >>> import fray_ray as ray
    >>> from fray_ray.util import map_unordered
    >>> @ray.remote
    ... def square(x):
    ...     return x * x
    >>> sorted(map_unordered(square, range(5), backpressure_size=2, chunk_size=1))
    [0, 1, 4, 9, 16]
    """
    if backpressure_size is not None and backpressure_size < 1:
        raise ValueError(f"backpressure_size must be at least 1 (or None for no limit), got {backpressure_size}")
    _check_chunking(chunk_size, kwargs)
    return _mapped(fn, items, backpressure_size, chunk_size, yield_obj_refs, kwargs)


def _check_refs(refs: Iterable[ray.ObjectRef[Any]]) -> list[ray.ObjectRef[Any]]:
    if isinstance(refs, ray.ObjectRef):
        raise TypeError("as_completed() takes a list of ObjectRefs, not a single ObjectRef; wrap it in a list")
    pending = list(refs)
    for ref in pending:
        if not isinstance(ref, ray.ObjectRef):
            raise TypeError(f"as_completed() takes a list of ObjectRefs, got a list containing {type(ref)}")
    return pending


def _check_chunking(chunk_size: int, wait_kwargs: dict[str, Any]) -> None:
    if "num_returns" in wait_kwargs:
        raise ValueError("Pass `chunk_size`, not `num_returns`: it is the number of refs waited for at a time")
    if chunk_size < 1:
        raise ValueError(f"`chunk_size` must be at least 1, got {chunk_size}")


def _next_chunk(
    pending: list[ray.ObjectRef[Any]], chunk_size: int, yield_obj_refs: bool, wait_kwargs: dict[str, Any]
) -> tuple[list[Any], list[ray.ObjectRef[Any]]]:
    """Wait for the next chunk of `pending`: (its values or refs, the refs still pending)."""
    ready, pending = ray.wait(pending, num_returns=min(chunk_size, len(pending)), **wait_kwargs)
    if yield_obj_refs or not ready:
        return ready, pending
    return ray.get(ready), pending


def _completed(
    pending: list[ray.ObjectRef[Any]], chunk_size: int, yield_obj_refs: bool, wait_kwargs: dict[str, Any]
) -> Iterator[Any]:
    while pending:
        chunk, pending = _next_chunk(pending, chunk_size, yield_obj_refs, wait_kwargs)
        yield from chunk


def _mapped(
    fn: RemoteFunction[..., Any],
    items: Iterable[Any],
    backpressure_size: int | None,
    chunk_size: int,
    yield_obj_refs: bool,
    wait_kwargs: dict[str, Any],
) -> Iterator[Any]:
    in_flight: list[ray.ObjectRef[Any]] = []
    for item in items:
        while backpressure_size is not None and len(in_flight) >= backpressure_size:
            chunk, in_flight = _next_chunk(in_flight, chunk_size, yield_obj_refs, wait_kwargs)
            yield from chunk
        in_flight.append(fn.remote(item))
    yield from _completed(in_flight, chunk_size, yield_obj_refs, wait_kwargs)
