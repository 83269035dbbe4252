"""`ray.cloudpickle`: the cloudpickle that fray_ray serialises functions and values with.

Ray ships its own copy of cloudpickle under this name; fray_ray uses the `cloudpickle`
package itself, so `ray.cloudpickle.dumps(obj)` gives what a task's arguments travel as.
`dumps_debug`/`dump_debug` add, as in Ray, a hint on failure (and with
`RAY_PICKLE_VERBOSE_DEBUG` set, a report of what inside the object cannot be pickled).

>>> import fray_ray.cloudpickle as cloudpickle
>>> cloudpickle.loads(cloudpickle.dumps(lambda x: x + 1))(1)
2
"""

from __future__ import annotations

import os
from pickle import PicklingError
from typing import Any

import cloudpickle as _cloudpickle
from cloudpickle import (  # noqa: F401 - re-exported
    CloudPickler,
    Pickler,
    dump,
    dumps,
    load,
    loads,
    register_pickle_by_value,
    unregister_pickle_by_value,
)

__version__: str = _cloudpickle.__version__

__all__ = [
    "CloudPickler",
    "Pickler",
    "PicklingError",
    "dump",
    "dump_debug",
    "dumps",
    "dumps_debug",
    "load",
    "loads",
    "register_pickle_by_value",
    "unregister_pickle_by_value",
]


def _explain(obj: Any, where: str, exc: BaseException) -> BaseException:
    if os.environ.get("RAY_PICKLE_VERBOSE_DEBUG"):
        from fray_ray.util import inspect_serializability

        inspect_serializability(obj)
        return exc
    return type(exc)(
        f"{where}({obj!s}) failed.\nTo see which captured variables cannot be serialized, "
        "run again with RAY_PICKLE_VERBOSE_DEBUG=1."
    )


def dumps_debug(obj: Any, *args: Any, **kwargs: Any) -> bytes:
    """`dumps`, with a hint (or a serializability report) when `obj` cannot be pickled."""
    try:
        return dumps(obj, *args, **kwargs)
    except (TypeError, PicklingError) as exc:
        raise _explain(obj, "ray.cloudpickle.dumps", exc) from exc


def dump_debug(obj: Any, *args: Any, **kwargs: Any) -> None:
    """`dump`, with a hint (or a serializability report) when `obj` cannot be pickled."""
    try:
        dump(obj, *args, **kwargs)
    except (TypeError, PicklingError) as exc:
        raise _explain(obj, "ray.cloudpickle.dump", exc) from exc
