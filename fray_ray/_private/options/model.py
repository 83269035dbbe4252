"""The vocabulary of the options table: what an option is, who takes it and where it acts.

An `Option` is one row of the table in `table.py`: a keyword, the kinds of remote object that
accept it (`Kind`), the types it takes, its value check, its default and where fray_ray honours
it (`Where`). Everything else (validation, the parsed values the runtime reads, the generated
documentation) is derived from those rows.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeAlias

__all__ = [
    "UNSET",
    "Check",
    "Context",
    "Default",
    "Kind",
    "NumReturns",
    "Option",
    "RetryExceptions",
    "Unset",
    "Where",
]


class Unset(enum.Enum):
    """Type of `UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = Unset.UNSET
"""An option that was not given, as opposed to one given as None."""

NumReturns: TypeAlias = int | Literal["streaming", "dynamic"]
RetryExceptions: TypeAlias = bool | tuple[type[BaseException], ...]


class Kind(enum.Enum):
    """What an option is given to."""

    TASK = "task"
    """`@remote` on a function, and the function's `.options()`."""
    ACTOR = "actor"
    """`@remote` on a class, and the class's `.options()`."""
    METHOD = "method"
    """`@method(...)` on an actor method, and the method's `.options()`."""


class Where(enum.Enum):
    """Where fray_ray acts on an option's value (`meaning` says what that is)."""

    DRIVER_RETRY_LOOP = "driver retry loop"
    EXECUTOR_POOL_KEY = "executor pool key"
    RESOURCE_LEDGER = "resource ledger"
    IRIS_JOB_FIELD = "Iris job field"
    DRIVER_SUBMIT = "driver at submit"
    DRIVER_SCHEDULER = "driver scheduler"
    ACTOR_REGISTRY = "actor registry"
    ACTOR_HOST = "actor host"
    GANG_PLACEMENT = "gang placement"
    WORKER_PROCESS = "worker process"
    TASK_EVENTS = "task events"
    VALIDATED_ONLY = "validated only"

    @property
    def meaning(self) -> str:
        """One sentence on what this place is, with the files that hold it."""
        return _MEANINGS[self]


_MEANINGS: Final[dict[Where, str]] = {
    Where.DRIVER_RETRY_LOOP: (
        "The driver resubmits a failed task or actor call itself; Iris is told not to retry "
        "(`_private/driver/scheduler.py`, `_private/driver/gangs.py`, `_private/driver/actor_restarts.py`)."
    ),
    Where.EXECUTOR_POOL_KEY: (
        "Part of the key that picks the warm worker processes a task runs in "
        "(`remote_function.pool_key`, `_private/task_spec.PoolKey`)."
    ),
    Where.RESOURCE_LEDGER: (
        "Reserved in the session's ledger of what each host has free while the task or actor "
        "holds it (`_private/driver/resources.py`, `_private/driver/cluster_ledger.py`)."
    ),
    Where.IRIS_JOB_FIELD: (
        "Sent to Iris in the request that starts the process: its resources, restarts, parent "
        "(`_private/driver/launcher.py`)."
    ),
    Where.DRIVER_SUBMIT: (
        "Read by the driver when the call is submitted: return ids, display names "
        "(`remote_function.py`, `actor.py`)."
    ),
    Where.DRIVER_SCHEDULER: (
        "Chooses the host or placement-group bundle a task or actor runs on "
        "(`_private/driver/scheduler.py`, `_private/driver/placement_groups.py`)."
    ),
    Where.ACTOR_REGISTRY: (
        "Names, namespaces, lifetimes and restarts of actors, kept by the driver and the "
        "session (`_private/driver/actors.py`)."
    ),
    Where.ACTOR_HOST: (
        "The process that runs the actor: its call queues, threads and event loop "
        "(`_private/workers/actor_host.py`)."
    ),
    Where.GANG_PLACEMENT: (
        "Reserves every host of a TPU slice or GPU group and runs one member on each "
        "(`_private/driver/gangs.py`)."
    ),
    Where.WORKER_PROCESS: (
        "Applied in the process that runs the code: environment variables, working directory, "
        "packages (`_private/core/runtime_env.py`, `_private/driver/launcher.py`)."
    ),
    Where.TASK_EVENTS: (
        "Whether the driver records the task's attempts for the state API, the timeline and "
        "the dashboard (`_private/observe/task_events.py`)."
    ),
    Where.VALIDATED_ONLY: (
        "Checked as Ray checks it, then not acted on; the note says why. Nothing is dropped "
        "without this row saying so."
    ),
}


@dataclasses.dataclass(frozen=True)
class Context:
    """What a check may need to know besides the value."""

    is_generator: bool = False
    is_async: bool = False


Check: TypeAlias = Callable[[str, Any, Context], None]


@dataclasses.dataclass(frozen=True)
class Default:
    """An option's default: a value, or one that depends on the target (`resolve`)."""

    value: Any = None
    """The value used when the option is not given (or given as None)."""
    resolve: Callable[[Context], Any] | None = None
    """For defaults that depend on the target: generator functions, async actors."""
    shown: str | None = None
    """How the documentation writes the default when `repr(value)` would not say it."""

    def for_target(self, ctx: Context) -> Any:
        """The default for a target with these traits."""
        return self.value if self.resolve is None else self.resolve(ctx)

    def describe(self) -> str:
        """The default as the generated documentation shows it."""
        return self.shown if self.shown is not None else repr(self.value)


@dataclasses.dataclass(frozen=True)
class Option:
    """One row of the options table: a keyword as one kind of target takes it."""

    name: str
    kinds: frozenset[Kind]
    types: tuple[type, ...]
    """The types the keyword takes, in the order Ray's TypeError lists them."""
    check: Check | None = None
    default: Default = Default()
    where: tuple[Where, ...] | Mapping[Kind, tuple[Where, ...]] = (Where.VALIDATED_ONLY,)
    """Where the value is acted on; a mapping when that differs between kinds."""
    note: str = ""
    """What the option does here, and why when it is only validated."""
    fray_only: bool = False
    """fray_ray's own keyword (gangs of hosts): accepted, but absent from Ray's error lists."""

    def where_for(self, kind: Kind) -> tuple[Where, ...]:
        """Where the value is acted on for targets of `kind`."""
        return self.where.get(kind, ()) if isinstance(self.where, Mapping) else self.where

    def validate(self, value: Any, ctx: Context) -> None:
        """Raise as Ray does if `value` has the wrong type or fails the check."""
        types = self.types
        if not isinstance(value, types):
            shown = types[0] if len(types) == 1 else types
            raise TypeError(
                f"The type of keyword '{self.name}' must be {shown}, but received type {type(value)}"
            )
        if self.check is not None:
            self.check(self.name, value, ctx)
