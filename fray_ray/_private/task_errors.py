"""How a task's exception crosses processes even when its class cannot.

A RayTaskError carries its cause (the user's exception) as a pickle of its own, next to the
cause's class name, so a cause that fails to load does not take the whole error with it:

- A cause that cannot be pickled where it was raised (it holds a lock, its `__reduce__`
  raises, ...) is replaced there by a RayError holding its text, and the reader gets a plain
  RayTaskError, as in Ray 2.60.
- A cause that cannot be rebuilt where the error is read (its `__init__` wants other
  arguments, its module is not importable there, ...) arrives as UnrebuildableTaskError: Ray's
  UnserializableException (what Ray raises then), and also a RayTaskError with the function
  name, the class name and the traceback text.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

from fray_ray.exceptions import RayError, RayTaskError, UnserializableException

#: (the cause's class as "module.qualname", its pickle with the wrapper's extra attributes or
#: None when it could not be pickled, why it could not be)
PackedCause = tuple[str, bytes | None, str | None]


def pack_cause(cause: Any, extra: dict[str, Any] | None) -> PackedCause:
    """Pickle a RayTaskError's cause (and the wrapper's other attributes) on their own."""
    kind = type(cause)
    type_name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        return type_name, cloudpickle.dumps((cause, extra or None)), None
    except Exception as exc:  # noqa: BLE001 - any refusal: the text of the cause still travels
        return type_name, None, f"{type(exc).__name__}: {exc}"


def rebuild_task_error(fields: dict[str, Any], dual: bool, packed: PackedCause) -> RayTaskError:
    """The reader's RayTaskError: with its cause when the cause can be rebuilt here."""
    type_name, blob, problem = packed
    if blob is None:
        cause = RayError(
            f"Exception {type_name} isn't serializable: {problem}.\n"
            f"Original exception details:\n{fields['traceback_str']}"
        )
        return RayTaskError(cause=cause, **fields)
    try:
        cause, extra = pickle.loads(blob)
    except Exception as exc:  # noqa: BLE001 - whatever the class needs, it is not here
        return UnrebuildableTaskError(type_name, f"{type(exc).__name__}: {exc}", **fields)
    error = RayTaskError(cause=cause, **fields)
    if dual:
        error = error.as_instanceof_cause()
    if extra:
        error.__dict__.update(extra)
    return error


class UnrebuildableTaskError(UnserializableException, RayTaskError):
    """A task raised an exception whose class cannot be rebuilt here.

    It is Ray's UnserializableException (its message starts "Failed to deserialize exception")
    and a RayTaskError: `function_name`, `traceback_str` (ending with the original class name
    and message) and `type_name` (the class as "module.qualname") are kept; `cause` is a
    RayError with that text.
    """

    def __init__(
        self,
        type_name: str,
        problem: str,
        function_name: str,
        traceback_str: str,
        proctitle: str | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
        actor_id: str | None = None,
    ) -> None:
        cause = RayError(
            f"Exception {type_name} could not be rebuilt here ({problem}).\n"
            f"Original exception details:\n{traceback_str}"
        )
        RayTaskError.__init__(self, function_name, traceback_str, cause, proctitle, pid, ip, actor_repr, actor_id)
        self.type_name = type_name
        self.problem = problem
        self._original_stack_trace = RayTaskError.__str__(self)

    def as_instanceof_cause(self) -> RayTaskError:
        return self  # there is no cause type to combine with

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.type_name, self.problem, self.function_name, self.traceback_str,
                             self.proctitle, self.pid, self.ip, self.actor_repr, self.actor_id))
