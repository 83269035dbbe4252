"""The name Ray gives a remote function or actor class: `module.qualname`.

`get_runtime_context().get_task_function_name()` reports it (`"my_script.f"`,
`"my_script.Counter.incr"`), unlike `get_task_name()`, which a task's `name` option replaces.
As in Ray, code defined in the script being run (`__main__`) is named after the script's file.
"""

from __future__ import annotations

import inspect
from typing import Any


def module_name_of(obj: Any) -> str:
    """The module `obj` was defined in; for `__main__`, the running script's module name."""
    module = getattr(obj, "__module__", None) or ""
    if module == "__main__":
        try:
            from_file = inspect.getmodulename(inspect.getfile(obj))
        except (TypeError, OSError):
            from_file = None
        if from_file:
            module = from_file
    return module


def qualified_name(obj: Any) -> str:
    """`module.qualname` of a function or class, as Ray's function descriptors spell it."""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "")
    module = module_name_of(obj)
    return f"{module}.{qualname}" if module else qualname


def actor_display_name(instance: Any, class_name: str) -> str:
    """What Ray shows for an actor in its log prefix: the repr its class defines, else the
    class name (read once, after `__init__`)."""
    if type(instance).__repr__ is object.__repr__:
        return class_name
    try:
        return repr(instance)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not fail the actor
        return class_name
