"""Serialization tools (`ray.util`): finding what cannot be pickled, and custom serializers.

fray_ray pickles task arguments, results and `put` values with cloudpickle, so both tools
work at that level: `inspect_serializability` tries cloudpickle on an object and then on its
parts, and `register_serializer` adds a reducer to the `copyreg` table that cloudpickle (and
the stdlib pickle) consult.
"""

from __future__ import annotations

import copyreg
import dataclasses
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import IO, Any

import cloudpickle

__all__ = ["FailureTuple", "deregister_serializer", "inspect_serializability", "register_serializer"]


@dataclasses.dataclass(frozen=True, eq=False)
class FailureTuple:
    """One object that cannot be pickled, as found by `inspect_serializability`.

    Compared and hashed by identity, so any object (even an unhashable one) can be reported.
    """

    obj: Any
    """The object that failed to pickle."""
    path: tuple[str, ...]
    """Names leading to it from the inspected object, e.g. `("holder", "lock")`."""
    parent: Any
    """The object that holds it (None for the inspected object itself)."""

    @property
    def name(self) -> str:
        """The last name of `path`, or "unknown" for an unnamed inspected object."""
        return self.path[-1] if self.path else "unknown"


def inspect_serializability(
    base_obj: Any, name: str | None = None, depth: int = 3, print_file: IO[str] | None = None
) -> tuple[bool, set[FailureTuple]]:
    """Find what keeps `base_obj` from being pickled. Blocks while it pickles the parts.

    Tries to pickle `base_obj`; if that fails, tries its parts (a function's closure and
    globals, an object's attributes, a container's items), `depth` levels down, and reports
    the deepest parts that still fail. Prints what it finds to `print_file` (stdout by
    default). Returns (True, empty set) when `base_obj` pickles, else (False, failures).

    Args:
        base_obj: the object to check.
        name: what to call it in the report (default: its repr).
        depth: how many levels of parts to look into.
        print_file: where to print the report (default: stdout).

    Returns:
        (whether it pickles, the failing parts found).

    >>> import io, threading
    >>> from fray_ray.util import inspect_serializability
    >>> class Holder:
    ...     def __init__(self):
    ...         self.lock = threading.Lock()
    >>> ok, failures = inspect_serializability(Holder(), name="holder", print_file=io.StringIO())
    >>> ok, [failure.path for failure in failures]
    (False, [('holder', 'lock')])
    >>> inspect_serializability([1, "two"], print_file=io.StringIO())
    (True, set())
    """
    out = sys.stdout if print_file is None else print_file
    failures: set[FailureTuple] = set()
    label = name or type(base_obj).__name__
    print(f"Checking whether {label} ({_short_repr(base_obj)}) can be serialized", file=out)
    path = (name,) if name else ()
    ok = _check(base_obj, path, None, depth, failures, set(), out, 1)
    if ok:
        print(f"{label} can be serialized.", file=out)
    else:
        print(f"{label} cannot be serialized; {len(failures)} part(s) failed:", file=out)
        for failure in failures:
            where = " -> ".join(failure.path) or label
            print(f"    {where}: {_short_repr(failure.obj)}", file=out)
        print(
            "Create such objects inside the task or actor instead of capturing them, or give "
            "their class a __reduce__ (or fray_ray.util.register_serializer).",
            file=out,
        )
    return ok, failures


def _check(
    obj: Any,
    path: tuple[str, ...],
    parent: Any,
    depth: int,
    failures: set[FailureTuple],
    seen: set[int],
    out: IO[str],
    indent: int,
) -> bool:
    """True if `obj` pickles; otherwise record its deepest failing parts and return False."""
    seen.add(id(obj))
    try:
        cloudpickle.dumps(obj)
        return True
    except Exception as error:  # anything pickling raises means "cannot be serialized"
        print(f"{'    ' * indent}FAIL {' -> '.join(path) or type(obj).__name__}: {error}", file=out)
    failing_part = False
    if depth > 0:
        for part_name, part in _parts(obj):
            if id(part) in seen:
                continue
            if not _check(part, (*path, part_name), obj, depth - 1, failures, seen, out, indent + 1):
                failing_part = True
    if not failing_part:
        # No smaller piece explains the failure: the object itself is the culprit.
        failures.add(FailureTuple(obj, path, parent))
    return False


def _parts(obj: Any) -> Iterator[tuple[str, Any]]:
    """The named pieces cloudpickle would pickle along with `obj`."""
    if isinstance(obj, types.MethodType):
        yield "__self__", obj.__self__
        yield "__func__", obj.__func__
    elif isinstance(obj, types.FunctionType):
        try:
            captured = inspect.getclosurevars(obj)
        except (TypeError, ValueError):
            return
        yield from captured.nonlocals.items()
        yield from ((n, v) for n, v in captured.globals.items() if not isinstance(v, types.ModuleType))
    elif isinstance(obj, dict):
        yield from ((f"[{key!r}]", value) for key, value in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        yield from ((f"[{index}]", item) for index, item in enumerate(obj))
    elif isinstance(obj, type):
        yield from ((n, v) for n, v in vars(obj).items() if not (n.startswith("__") and n.endswith("__")))
    else:
        yield from getattr(obj, "__dict__", {}).items()
        for slot in getattr(type(obj), "__slots__", ()):
            if isinstance(slot, str) and hasattr(obj, slot):
                yield slot, getattr(obj, slot)


def _short_repr(obj: Any, limit: int = 80) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- custom serializers ----------------------------------------------------------------------

# The reducers this module put in copyreg's process-wide table, so deregistering never removes
# an entry someone else made. Guarded by the lock, as copyreg's table is shared by all threads.
_registered: dict[type, Callable[[Any], Any]] = {}
_registered_lock = threading.Lock()


def register_serializer(cls: type, *, serializer: Callable[[Any], Any], deserializer: Callable[[Any], Any]) -> None:
    """Pickle instances of `cls` as `serializer(obj)`, rebuilt by `deserializer(data)`.

    Applies to everything this process pickles (task arguments, results, `put` values, and
    plain `pickle`), from now on. Like in Ray, it is per process: register it in the workers
    that serialize such objects too. `deserializer` itself must be picklable. Replaces an
    earlier registration for `cls`.

    Args:
        cls: the class whose instances to pickle this way.
        serializer: turns an instance into picklable data.
        deserializer: rebuilds an instance from that data.

    >>> import threading
    >>> import fray_ray as ray
    >>> from fray_ray.util import deregister_serializer, register_serializer
    >>> class Guarded:
    ...     def __init__(self, value):
    ...         self.value, self.lock = value, threading.Lock()
    >>> register_serializer(Guarded, serializer=lambda g: g.value, deserializer=Guarded)
    >>> ray.get(ray.put(Guarded(7))).value
    7
    >>> deregister_serializer(Guarded)
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_serializer() takes a class, got {cls!r}")

    def reduce(obj: Any) -> tuple[Callable[[Any], Any], tuple[Any]]:
        return deserializer, (serializer(obj),)

    with _registered_lock:
        copyreg.pickle(cls, reduce)
        _registered[cls] = reduce


def deregister_serializer(cls: type) -> None:
    """Undo `register_serializer(cls, ...)`; does nothing if none is registered.

    >>> from fray_ray.util import deregister_serializer
    >>> deregister_serializer(int)
    """
    with _registered_lock:
        reduce = _registered.pop(cls, None)
        if reduce is not None and copyreg.dispatch_table.get(cls) is reduce:
            del copyreg.dispatch_table[cls]
