"""The table of every Ray option fray_ray takes: type, check, default and where it is honoured.

This is the one place that says which keywords exist, what they accept, what they default to
and what fray_ray does with them. The rows are grouped as Ray groups them, because Ray's error
messages list the keywords in that order: `COMMON` rows serve functions and classes, and
`TASK_ONLY`/`ACTOR_ONLY` add keywords or re-specify a common one for one kind (`num_cpus`,
`object_store_memory`). `METHOD` rows serve `@method` and a method's `.options()`, which also
takes `METHOD_CALL_ONLY`. `FRAY` rows are fray_ray's own keywords for gangs of hosts.

`docs/ray_options.md` is rendered from these rows by `scripts/options_table.py`, and
`help(fray_ray.remote)` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

import fray_ray._private.options.checks as checks
import fray_ray._private.options.labels as labels
from fray_ray._private.core.placement_group_handle import PlacementGroup
from fray_ray._private.core.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)
from fray_ray._private.options.model import UNSET, Context, Default, Kind, Option, Where

__all__ = [
    "ACTOR_OPTION_KEYS",
    "ALL_OPTION_KEYS",
    "FRAY_OPTION_KEYS",
    "METHOD_OPTION_KEYS",
    "TASK_OPTION_KEYS",
    "all_rows",
    "default",
    "rows_for",
]

_NoneType = type(None)
_NUMBER: Final = (float, int, _NoneType)
_INT: Final = (int, _NoneType)
_STR: Final = (str, _NoneType)
_BOOL: Final = (bool, _NoneType)
_DICT: Final = (dict, _NoneType)
_STRATEGIES: Final = (
    _NoneType,
    str,
    PlacementGroupSchedulingStrategy,
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
)

_TASK: Final = frozenset({Kind.TASK})
_ACTOR: Final = frozenset({Kind.ACTOR})
_BOTH: Final = frozenset({Kind.TASK, Kind.ACTOR})
_METHOD: Final = frozenset({Kind.METHOD})
_EMPTY: Final = Default(MappingProxyType({}), shown="{}")

_ACTOR_STORE: Final = Option(
    "object_store_memory", _ACTOR, _INT, checks.actor_object_store_memory,
    note="Deprecated in Ray (it reserves nothing there either); warns.",
)
_NO_LABELS: Final = (
    "fray_ray does not schedule by node labels; NodeAffinitySchedulingStrategy pins a node."
)
_EVENTS: Final = "False: its attempts are left out of list_tasks, the timeline and the dashboard."
_NO_BACKPRESSURE: Final = "Streamed items are sent as they are produced; there is no backpressure."
_PLACED: Final = (Where.DRIVER_SCHEDULER,)
_DEPRECATED_PG: Final = (
    "Ray's deprecated placement-group keyword: without a scheduling_strategy it places the call "
    "as PlacementGroupSchedulingStrategy(placement_group, placement_group_bundle_index, "
    "placement_group_capture_child_tasks) would (`_private/core/placement_capture.py`)."
)


def _by_target(plain: Any, special: Any, trait: str) -> Default:
    """A default that is `special` for generator functions or async actors (`trait`)."""
    shown = f"{plain!r} ({special!r} for {'generators' if trait == 'is_generator' else 'async actors'})"
    return Default(UNSET, lambda ctx: special if getattr(ctx, trait) else plain, shown)


_RETURNS: Final = _by_target(1, "streaming", "is_generator")


def _per_kind(*, task: tuple[Where, ...], actor: tuple[Where, ...]) -> Mapping[Kind, tuple[Where, ...]]:
    """Where a common option acts, when that differs between functions and classes."""
    return MappingProxyType({Kind.TASK: task, Kind.ACTOR: actor})


# Resources a task holds while it runs (and its pool is keyed by) or an actor holds while alive.
_HELD: Final = _per_kind(
    task=(Where.RESOURCE_LEDGER, Where.EXECUTOR_POOL_KEY, Where.IRIS_JOB_FIELD),
    actor=(Where.RESOURCE_LEDGER, Where.IRIS_JOB_FIELD),
)

# Valid for both remote functions and actors, in the order Ray lists them.
COMMON: Final[tuple[Option, ...]] = (
    Option("label_selector", _BOTH, _DICT, labels.label_selector, note=_NO_LABELS),
    Option("fallback_strategy", _BOTH, (list, _NoneType), labels.fallback_strategy, note=_NO_LABELS),
    Option("accelerator_type", _BOTH, _STR, where=_per_kind(
               task=(Where.EXECUTOR_POOL_KEY, Where.IRIS_JOB_FIELD), actor=(Where.IRIS_JOB_FIELD,)),
           note="The GPU variant asked of Iris for processes that hold GPUs."),
    Option("memory", _BOTH, _NUMBER, checks.quantity, Default(0), _HELD, "Bytes to reserve."),
    Option("name", _BOTH, _STR, where=_per_kind(task=(Where.DRIVER_SUBMIT,), actor=(Where.ACTOR_REGISTRY,)),
           note="A task's display name; an actor's name in its namespace."),
    Option("num_cpus", _ACTOR, _NUMBER, checks.quantity,
           Default(UNSET, shown="1 to place, 0 held while alive; 1 throughout if any resource is given"),
           (Where.RESOURCE_LEDGER, Where.IRIS_JOB_FIELD), "Ray 2.60's actor CPU rule."),
    Option("num_gpus", _BOTH, _NUMBER, checks.quantity, Default(0.0, shown="0"), _HELD),
    _ACTOR_STORE,
    Option("placement_group", _BOTH, (_NoneType, str, PlacementGroup), where=_PLACED, note=_DEPRECATED_PG),
    Option("placement_group_bundle_index", _BOTH, (int,), default=Default(-1), where=_PLACED, note=_DEPRECATED_PG),
    Option("placement_group_capture_child_tasks", _BOTH, _BOOL, where=_PLACED, note=_DEPRECATED_PG),
    Option("resources", _BOTH, _DICT, checks.resources, _EMPTY, _per_kind(
               task=(Where.RESOURCE_LEDGER, Where.EXECUTOR_POOL_KEY, Where.IRIS_JOB_FIELD),
               actor=(Where.RESOURCE_LEDGER, Where.IRIS_JOB_FIELD)),
           'Custom resources; as in Ray, {"TPU-<pod type>-head": 1} runs on host 0 of a TPU slice and '
           '{<slice name>: 1} on a host of that slice (one call; `tpu=` runs on every host).'),
    Option("runtime_env", _BOTH, _DICT, checks.runtime_env, where=_per_kind(
               task=(Where.EXECUTOR_POOL_KEY, Where.WORKER_PROCESS), actor=(Where.WORKER_PROCESS,)),
           note="env_vars, working_dir, py_modules, pip/uv are applied where the code runs."),
    Option("scheduling_strategy", _BOTH, _STRATEGIES, checks.scheduling_strategy,
           where=(Where.DRIVER_SCHEDULER,)),
    Option("enable_task_events", _BOTH, (bool,), default=Default(True), where=(Where.TASK_EVENTS,),
           note=_EVENTS + " An actor's value is its methods' default."),
    Option("_labels", _BOTH, _DICT, note="Ray's private task and actor labels; fray_ray records none."),
)

# Remote functions only (num_cpus and object_store_memory are re-specified for tasks).
TASK_ONLY: Final[tuple[Option, ...]] = (
    Option("max_calls", _TASK, _INT, checks.NON_NEGATIVE, Default(0, shown="0 (no limit)"),
           (Where.EXECUTOR_POOL_KEY,),
           "Calls per worker process before it is replaced; a task holding GPUs gets its own process."),
    Option("max_retries", _TASK, _INT, checks.RETRY_COUNT, Default(3), (Where.DRIVER_RETRY_LOOP,),
           "Retries after the process running the task dies (-1: no limit); Iris is told not to retry."),
    Option("num_cpus", _TASK, _NUMBER, checks.quantity, Default(1.0, shown="1"),
           (Where.RESOURCE_LEDGER, Where.EXECUTOR_POOL_KEY, Where.IRIS_JOB_FIELD)),
    Option("num_returns", _TASK, (int, str, _NoneType), checks.num_returns, _RETURNS, (Where.DRIVER_SUBMIT,)),
    Option("object_store_memory", _TASK, _INT, checks.task_object_store_memory,
           note="Refused for tasks, as in Ray."),
    Option("retry_exceptions", _TASK, (bool, list, tuple), checks.retry_exceptions, Default(False),
           (Where.DRIVER_RETRY_LOOP,), "User exceptions that are retried too, under max_retries."),
    Option("_generator_backpressure_num_objects", _TASK, _INT, checks.generator_backpressure,
           note=_NO_BACKPRESSURE),
    Option("_num_objects_per_yield", _TASK, _INT, checks.objects_per_yield, note=_NO_BACKPRESSURE),
)

# Actors only (object_store_memory is re-specified: allowed but deprecated).
ACTOR_ONLY: Final[tuple[Option, ...]] = (
    Option("concurrency_groups", _ACTOR, (list, dict, _NoneType), checks.concurrency_groups, _EMPTY,
           (Where.ACTOR_HOST,), "Named call queues with their own concurrency."),
    Option("enable_tensor_transport", _ACTOR, _BOOL, default=Default(False), note="No device-to-device object transport."),
    Option("lifetime", _ACTOR, _STR, checks.lifetime, where=(Where.ACTOR_REGISTRY, Where.IRIS_JOB_FIELD),
           note='"detached": a root Iris job that outlives the driver.'),
    Option("max_concurrency", _ACTOR, _INT, checks.NON_NEGATIVE, _by_target(1, 1000, "is_async"),
           (Where.ACTOR_HOST,), "Threads (or concurrent coroutines) running calls; 0 means the default."),
    Option("max_restarts", _ACTOR, _INT, checks.max_restarts, Default(0),
           (Where.IRIS_JOB_FIELD, Where.ACTOR_REGISTRY), "Iris reruns the actor's job; -1: no limit."),
    Option("max_task_retries", _ACTOR, _INT, checks.RETRY_COUNT, Default(0), (Where.DRIVER_RETRY_LOOP,),
           "Retries of a call cut short by the actor's death (-1: no limit)."),
    Option("max_pending_calls", _ACTOR, _INT, checks.RETRY_COUNT, Default(-1, shown="-1 (no limit)"),
           note="Calls queue without a limit."),
    Option("namespace", _ACTOR, _STR, where=(Where.ACTOR_REGISTRY,)),
    Option("get_if_exists", _ACTOR, (bool,), default=Default(False), where=(Where.ACTOR_REGISTRY,)),
    Option("allow_out_of_order_execution", _ACTOR, _BOOL, default=Default(False),
           note="Calls run in submission order (per concurrency group)."),
    Option("_actor_generator_backpressure_num_objects", _ACTOR, _INT, checks.actor_generator_backpressure,
           note=_NO_BACKPRESSURE),
    _ACTOR_STORE,
)

# `@method(...)` keywords; `.options()` on an actor method also takes `name`.
METHOD: Final[tuple[Option, ...]] = (
    Option("num_returns", _METHOD, (int, str, _NoneType), checks.method_num_returns, _RETURNS,
           (Where.DRIVER_SUBMIT,)),
    Option("concurrency_group", _METHOD, _STR, where=(Where.ACTOR_HOST,)),
    Option("max_task_retries", _METHOD, _INT, checks.RETRY_COUNT,
           Default(UNSET, shown="the actor's max_task_retries"), (Where.DRIVER_RETRY_LOOP,)),
    # Any type reaches the check: Ray reports every bad value here with an AssertionError.
    Option("retry_exceptions", _METHOD, (object,), checks.method_retry_exceptions, Default(False),
           (Where.DRIVER_RETRY_LOOP,), "User exceptions that are retried, under max_task_retries."),
    Option("_generator_backpressure_num_objects", _METHOD, _INT, checks.generator_backpressure,
           note=_NO_BACKPRESSURE),
    Option("_num_objects_per_yield", _METHOD, _INT, checks.objects_per_yield, note=_NO_BACKPRESSURE),
    Option("enable_task_events", _METHOD, (bool,), default=Default(UNSET, shown="the actor's enable_task_events"),
           where=(Where.TASK_EVENTS,), note=_EVENTS),
    Option("tensor_transport", _METHOD, _STR, note="No device-to-device object transport."),
)
METHOD_CALL_ONLY: Final[tuple[Option, ...]] = (
    Option("name", _METHOD, _STR, where=(Where.DRIVER_SUBMIT,), note="The call's name in list_tasks and the timeline."),
)

# fray_ray's own keywords (gangs of hosts); accepted everywhere, not listed in Ray's messages.
FRAY: Final[tuple[Option, ...]] = (
    Option("tpu", _BOTH, _STR, checks.tpu_variant, where=(Where.GANG_PLACEMENT,), fray_only=True,
           note='A TPU slice variant, e.g. "v5p-16": run on every host of the slice.'),
    Option("num_slices", _BOTH, _INT, checks.positive, Default(1), (Where.GANG_PLACEMENT,),
           "How many slices of `tpu` (multislice).", fray_only=True),
    Option("gpu", _BOTH, _STR, where=(Where.GANG_PLACEMENT,), fray_only=True,
           note='A GPU variant, e.g. "H100", with num_gpus per host.'),
    Option("num_hosts", _BOTH, _INT, checks.positive, Default(1), (Where.GANG_PLACEMENT,),
           "How many GPU hosts one call spans (a gang).", fray_only=True),
    Option("_gang", _BOTH, (bytes, _NoneType), where=(Where.GANG_PLACEMENT,), fray_only=True,
           note="A reserved slice (SlicePlacementGroup) to run on."),
)


def _keyed(*groups: Iterable[Option]) -> dict[str, Option]:
    """Rows by keyword; a later group's row replaces an earlier one of the same keyword."""
    return {row.name: row for group in groups for row in group}


TASK_ROWS: Final = MappingProxyType(_keyed(COMMON, TASK_ONLY, FRAY))
ACTOR_ROWS: Final = MappingProxyType(_keyed(COMMON, ACTOR_ONLY, FRAY))
METHOD_ROWS: Final = MappingProxyType(_keyed(METHOD))
METHOD_CALL_ROWS: Final = MappingProxyType(_keyed(METHOD, METHOD_CALL_ONLY))

FRAY_OPTION_KEYS: Final = tuple(row.name for row in FRAY)
"""fray_ray's own option keywords: `tpu`, `num_slices`, `gpu`, `num_hosts`."""
TASK_OPTION_KEYS: Final = tuple(_keyed(COMMON, TASK_ONLY))
"""Keywords `@remote`/`.options()` accept for functions, in the order Ray's errors list them."""
ACTOR_OPTION_KEYS: Final = tuple(_keyed(COMMON, ACTOR_ONLY))
"""Keywords `@remote`/`.options()` accept for classes, in the order Ray's errors list them."""
METHOD_OPTION_KEYS: Final = tuple(METHOD_ROWS)
"""Keywords `@method` accepts; an actor method's `.options()` also takes `name`."""
ALL_OPTION_KEYS: Final = tuple(_keyed(TASK_ONLY, ACTOR_ONLY, COMMON))
"""Every `@remote` keyword (for functions or classes), in the order Ray's usage error lists them."""


def rows_for(kind: Kind, *, in_options: bool = False) -> Mapping[str, Option]:
    """The rows one kind of target accepts (for a method's `.options()`, `in_options=True`)."""
    if kind is Kind.TASK:
        return TASK_ROWS
    if kind is Kind.ACTOR:
        return ACTOR_ROWS
    return METHOD_CALL_ROWS if in_options else METHOD_ROWS


def default(kind: Kind, name: str, ctx: Context | None = None) -> Any:
    """The default of option `name` for `kind` (UNSET where it depends on the target and no
    `ctx` is given)."""
    row = rows_for(kind, in_options=True)[name]
    return row.default.value if ctx is None else row.default.for_target(ctx)


def all_rows() -> tuple[Option, ...]:
    """Every row, each once: the table as the documentation shows it."""
    seen: dict[tuple[str, frozenset[Kind]], Option] = {}
    for row in (*COMMON, *TASK_ONLY, *ACTOR_ONLY, *METHOD, *METHOD_CALL_ONLY, *FRAY):
        seen.setdefault((row.name, row.kinds), row)
    return tuple(seen.values())
