"""Running user code in a worker: resolving arguments, packaging results and errors."""

from __future__ import annotations

import inspect
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import fray_ray.exceptions as exceptions
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.task_spec import CallArguments
from fray_ray._private.objects.serialization import SerializedValue, deserialize, deserialize_all, serialize, serialize_error
from fray_ray.exceptions import ObjectStoreFullError

_HOSTNAME_IP: str | None = None


def node_ip() -> str:
    global _HOSTNAME_IP
    if _HOSTNAME_IP is None:
        _HOSTNAME_IP = os.environ.get("IRIS_ADVERTISE_HOST") or "127.0.0.1"
    return _HOSTNAME_IP


def resolve_arguments(
    arguments: SerializedValue, resolve: Callable[[Sequence[bytes]], Mapping[bytes, Any]], top_level: Sequence[bytes]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Unpickle `(args, kwargs)` and replace top-level ObjectRefs by their values.

    `resolve(ids)` returns the values (raising the first error) for the top-level ref ids.
    Refs nested inside containers are left as refs.
    """
    args, kwargs = deserialize(arguments)
    if not top_level:
        return args, kwargs
    values = resolve(top_level)
    args = tuple(values[a.binary()] if isinstance(a, ObjectRef) else a for a in args)
    kwargs = {k: values[v.binary()] if isinstance(v, ObjectRef) else v for k, v in kwargs.items()}
    return args, kwargs


def value_resolver(
    fetch: Callable[[Sequence[bytes], float | None], Mapping[bytes, SerializedValue]],
    inline: Mapping[bytes, SerializedValue],
) -> Callable[[Sequence[bytes]], dict[bytes, Any]]:
    """The `resolve` for `resolve_arguments` in a worker: values that came with the call are used
    as they are, the rest are fetched from their owner in one request; an error value raises."""

    def resolve(ids: Sequence[bytes]) -> dict[bytes, Any]:
        stored = dict(inline)
        missing = [i for i in ids if i not in stored]
        if missing:
            stored.update(fetch(missing, None))
        ordered = [stored[object_id] for object_id in ids]
        for value in ordered:
            if value.is_error:
                raise deserialize(value)
        return dict(zip(ids, deserialize_all(ordered)))

    return resolve


def resolve_call_arguments(
    arguments: CallArguments, fetch: Callable[[Sequence[bytes], float | None], Mapping[bytes, SerializedValue]]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`(args, kwargs)` of a call a worker received: inlined values used as they came, the other
    top-level refs fetched from their owner, and so are stored arguments."""
    value = arguments.value
    if arguments.stored is not None:
        value = arguments.inlined.get(arguments.stored) or fetch([arguments.stored], None)[arguments.stored]
        if value.is_error:
            raise deserialize(value)
    return resolve_arguments(value, value_resolver(fetch, arguments.inlined), arguments.top_level)


def make_task_error(
    exc: BaseException, function_name: str, actor_repr: str | None = None, actor_id: str | None = None
) -> BaseException:
    """The error a caller of a failed task sees: RayTaskError, dual-typed with the cause, whose
    traceback text shows the user's frames (fray_ray's own are left out, as Ray leaves out its)."""
    return exceptions.RayTaskError.from_exception(
        exc, function_name, pid=os.getpid(), ip=node_ip(), actor_repr=actor_repr, actor_id=actor_id
    )


def too_large_for_store(value: SerializedValue, limit: int, what: str) -> BaseException | None:
    """ObjectStoreFullError if `value` exceeds the driver's whole object store (0: no limit
    known), found before the bytes are sent for the driver to allocate and refuse."""
    if limit <= 0 or value.size <= limit:
        return None

    return ObjectStoreFullError(
        f"{what} is {value.size} bytes, larger than the whole object store "
        f"(object_store_memory={limit} bytes); it is refused rather than exceed the limit."
    )


def within_store(values: list[SerializedValue], limit: int, function_name: str) -> list[SerializedValue]:
    """`values` with any too large for the driver's object store replaced by that error."""
    checked = []
    for value in values:
        error = too_large_for_store(value, limit, f"A result of {function_name}")
        checked.append(value if error is None else serialize_error(error))
    return checked


def package_results(result: Any, num_returns: int | str, function_name: str) -> list[SerializedValue]:
    """Serialize a call's result into one value per declared return."""
    if num_returns == 1:
        return [serialize(result)]
    if num_returns == 0:
        return []
    if isinstance(num_returns, int):
        if inspect.isgenerator(result):
            # Items yielded before a failure are kept; the failure fills the rest.
            values: list[SerializedValue] = []
            try:
                for item in result:
                    values.append(serialize(item))
                    if len(values) == num_returns:
                        break
                if len(values) < num_returns:
                    raise ValueError(
                        f"Task {function_name} returned {len(values)} objects from its generator, "
                        f"but num_returns={num_returns}."
                    )
            except Exception as exc:  # noqa: BLE001 - becomes the value of the remaining returns
                error = serialize_error(make_task_error(exc, function_name))
                values += [error] * (num_returns - len(values))
            return values
        try:
            count = len(result)
        except TypeError:
            raise ValueError(
                f"Task {function_name} returned a {type(result).__name__}, but num_returns={num_returns} "
                "expects a sequence of that length."
            ) from None
        if count != num_returns:
            raise ValueError(f"Task {function_name} returned {count} objects, but num_returns={num_returns}.")
        return [serialize(item) for item in result]
    raise ValueError(f"unsupported num_returns={num_returns!r}")


def error_results(error: BaseException, count: int) -> list[SerializedValue]:
    value = serialize_error(error)
    return [value] * max(count, 1)


def hostname() -> str:
    return socket.gethostname()
