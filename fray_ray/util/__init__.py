"""Ray's utility modules and helpers (`ray.util`): actor pools, queues, placement groups, ...

The names users import from `ray.util` are here, defined in the modules listed below.
Submodules, as in Ray: `actor_pool` (`ActorPool`), `queue` (`Queue`, `Empty`, `Full`),
`placement_group`, `scheduling_strategies`, `accelerators`, `tpu`, `multiprocessing` (`Pool`)
and `joblib` (`register_ray`, which needs joblib installed). The placement-group functions and
the `queue`, `placement_group`, `tpu`, `multiprocessing` and `joblib` submodules are loaded on
first use.

Helpers: `as_completed`, `map_unordered`, `list_named_actors`, `get_node_ip_address`,
`get_node_instance_id`, `inspect_serializability`, `register_serializer`,
`deregister_serializer`, and the warn-once trio `log_once`, `disable_log_once_globally`,
`enable_periodic_logging`.

Not provided: Ray Client (`connect`, `disconnect`, `client`), the remote debuggers (`pdb`,
`rpdb`, `debugpy`), `collective` and a few more (see
`fray_ray.util._unsupported`). They import, so code that only mentions them keeps working,
and calling them raises `NotImplementedError` saying what to use instead.

>>> import fray_ray.util.collective as collective
>>> collective.allreduce([1.0])
Traceback (most recent call last):
...
NotImplementedError: fray_ray.util.collective.allreduce is not supported by fray_ray. ...
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Final

from fray_ray.util import accelerators, actor_pool, scheduling_strategies
from fray_ray.util._cluster_info import get_node_instance_id, get_node_ip_address, list_named_actors
from fray_ray.util._completion import as_completed, map_unordered
from fray_ray.util._log_once import disable_log_once_globally, enable_periodic_logging, log_once
from fray_ray.util._serialization import deregister_serializer, inspect_serializability, register_serializer
from fray_ray.util._unsupported import UNSUPPORTED_MODULES, connect, disconnect, install_module_finder
from fray_ray.util.actor_pool import ActorPool

__all__ = [
    "ActorPool",
    "PlacementGroup",
    "accelerators",
    "actor_pool",
    "as_completed",
    "connect",
    "deregister_serializer",
    "disable_log_once_globally",
    "disconnect",
    "enable_periodic_logging",
    "get_current_placement_group",
    "get_node_instance_id",
    "get_node_ip_address",
    "get_placement_group",
    "inspect_serializability",
    "list_named_actors",
    "log_once",
    "map_unordered",
    "placement_group",
    "placement_group_table",
    "register_serializer",
    "remove_placement_group",
    "scheduling_strategies",
]

for _function in (
    as_completed,
    map_unordered,
    list_named_actors,
    get_node_ip_address,
    get_node_instance_id,
    inspect_serializability,
    register_serializer,
    deregister_serializer,
    log_once,
    disable_log_once_globally,
    enable_periodic_logging,
):
    _function.__module__ = __name__  # show `fray_ray.util.as_completed`, not the private module
del _function

_PLACEMENT_GROUP_NAMES: Final = frozenset(
    {
        "PlacementGroup",
        "get_current_placement_group",
        "get_placement_group",
        "placement_group",
        "placement_group_table",
        "remove_placement_group",
    }
)
"""Names defined by `fray_ray.util.placement_group`, imported from it on first use."""

_LAZY_SUBMODULES: Final = frozenset({"joblib", "multiprocessing", "placement_group", "queue", "tpu"})

install_module_finder()


def __getattr__(name: str) -> Any:
    """Load the placement-group names and the lazy or unsupported submodules on first use."""
    if name in _PLACEMENT_GROUP_NAMES:
        return getattr(importlib.import_module(f"{__name__}.placement_group"), name)
    if name in _LAZY_SUBMODULES or name in UNSUPPORTED_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _PLACEMENT_GROUP_NAMES | _LAZY_SUBMODULES)


class _Package(types.ModuleType):
    """This package's module type; it keeps `placement_group` the function, as in Ray."""

    def __setattr__(self, name: str, value: Any) -> None:
        # Importing a submodule sets it as an attribute of its package. `placement_group` is
        # the name of a submodule and of the function users call, and the function must win
        # (Ray's `ray.util.placement_group` is the function whatever was imported before).
        if name == "placement_group" and isinstance(value, types.ModuleType):
            value = getattr(value, "placement_group", value)
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by name, as a plain module is: cloudpickle knows plain modules only, so a
        # function or class that names `ray.util` (say `ray.util.queue.Empty` in a method of an
        # actor class defined in the driver's script) could not be shipped otherwise.
        return (importlib.import_module, (self.__name__,))


sys.modules[__name__].__class__ = _Package
