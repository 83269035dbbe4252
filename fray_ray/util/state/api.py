"""The state API: list and summarize what a session runs, as Ray's `ray.util.state` does.

Every function blocks only to read the driver's tables (and, for nodes and jobs, to ask the
cluster's controller once) and returns records of `fray_ray.util.state.common`. Filters are
Ray's: `[(column, "=" or "!=", value)]`, all must hold, strings compare case-insensitively,
only filterable columns may be named. `limit` keeps the first rows after sorting by id, as
Ray does. `detail=True` fills the detail columns (timings, error messages, death causes...).

Scope: tasks, actor calls, actors, objects and placement groups are the current session's
(the driver's own records); nodes and jobs come from the controller and cover the cluster.
The state API is called from the driver; inside a task or actor it raises
`RayStateApiException`.

>>> import fray_ray as ray
>>> from fray_ray.util.state import list_tasks
>>> ray.init(num_cpus=1)  # doctest: +SKIP
>>> list_tasks(filters=[("state", "=", "FAILED")], detail=True)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from fray_ray._private.core import runtime_state
from fray_ray._private.driver import state_source
from fray_ray.util.state.common import (
    DEFAULT_LIMIT,
    DEFAULT_RPC_TIMEOUT,
    ActorState,
    JobState,
    NodeState,
    ObjectState,
    PlacementGroupState,
    StateSchema,
    TaskState,
)
from fray_ray.util.state.exception import RayStateApiException

Filter = tuple[str, str, Any]


def _driver() -> Any:
    runtime = runtime_state.current()
    if not getattr(runtime, "is_driver", False):
        raise RayStateApiException(
            "fray_ray's state API answers from the driver's records: call it from the driver, not from inside a "
            "task or actor."
        )
    return runtime


def _check_options(filters: Sequence[Filter] | None, limit: int) -> list[Filter]:
    filters = list(filters or [])
    for item in filters:
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise ValueError(f"A filter is (column, predicate, value); got {item!r}")
        if item[1] not in ("=", "!="):
            raise ValueError(f"Unsupported filter predicate {item[1]} is given. Available predicates: =, !=.")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
    return filters


def _conflicting(filters: list[Filter]) -> bool:
    """Two `=` filters on one column with different values: nothing can match (Ray warns)."""
    equal: dict[str, Any] = {}
    for column, predicate, value in filters:
        if predicate != "=":
            continue
        if column in equal and equal[column] != value:
            warnings.warn(
                f"There are multiple '=' filters with the same key '{column}' but different values"
                f"'{equal[column]}' & '{value}'. Empty result set will be returned", UserWarning, stacklevel=4,
            )
            return True
        equal.setdefault(column, value)
    return False


def _as_bool(value: Any) -> Any:
    if isinstance(value, str):
        if value in ("True", "true", "1"):
            return True
        if value in ("False", "false", "0"):
            return False
    return value


def row_matches(row: dict[str, Any], column: str, predicate: str, value: Any) -> bool:
    """Whether `row[column] <predicate> value` holds, by Ray's rules (strings compare
    case-insensitively; a string value is read as the column's bool or int)."""
    actual = row.get(column)
    if isinstance(actual, str) and isinstance(value, str):
        equal = actual.lower() == value.lower()
    elif isinstance(actual, bool):
        equal = actual == _as_bool(value)
    elif isinstance(actual, int) and isinstance(value, str):
        try:
            equal = actual == int(value)
        except ValueError:
            equal = False
    else:
        equal = actual == value
    return equal if predicate == "=" else not equal


def _select(
    rows: list[dict[str, Any]], schema: type[StateSchema], key: str, filters: list[Filter], limit: int, detail: bool
) -> list[Any]:
    filterable = schema.filterable_columns()
    for column, _, _ in filters:
        if column.lower() not in filterable:
            raise RayStateApiException(
                f"The given filter column {column.lower()} is not supported. Supported filter columns: {filterable}"
            )
    chosen = [r for r in rows if all(row_matches(r, c.lower(), p, v) for c, p, v in filters)]
    chosen.sort(key=lambda r: r.get(key) or "")
    columns = schema.list_columns(detail=detail)
    return [schema(**{c: row.get(c) for c in columns}) for row in chosen[:limit]]


def _list(
    source: Callable[[Any], list[dict[str, Any]]], schema: type[StateSchema], key: str,
    filters: Sequence[Filter] | None, limit: int, detail: bool,
) -> list[Any]:
    checked = _check_options(filters, limit)
    if _conflicting(checked):
        return []
    return _select(source(_driver()), schema, key, checked, limit, detail)


# The unused parameters keep Ray's signatures: code passing them runs unchanged.


def list_actors(
    address: str | None = None, filters: Sequence[Filter] | None = None, limit: int = DEFAULT_LIMIT,
    timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
    _explain: bool = False,
) -> list[ActorState]:
    """The session's actors, dead ones included: `ActorState` records sorted by actor id."""
    return _list(state_source.actor_rows, ActorState, "actor_id", filters, limit, detail)


def list_tasks(
    address: str | None = None, filters: Sequence[Filter] | None = None, limit: int = DEFAULT_LIMIT,
    timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
    _explain: bool = False,
) -> list[TaskState]:
    """The session's task attempts (tasks, actor calls, actor creations): `TaskState` records.

    Finished attempts are kept up to `RAY_task_events_max_num_task_in_gcs` (default 10,000)."""
    return _list(state_source.task_rows, TaskState, "task_id", filters, limit, detail)


def list_objects(
    address: str | None = None, filters: Sequence[Filter] | None = None, limit: int = DEFAULT_LIMIT,
    timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
    _explain: bool = False,
) -> list[ObjectState]:
    """The objects the session owns and something still refers to: `ObjectState` records."""
    return _list(state_source.object_rows, ObjectState, "object_id", filters, limit, detail)


def list_nodes(
    address: str | None = None, filters: Sequence[Filter] | None = None, limit: int = DEFAULT_LIMIT,
    timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
    _explain: bool = False,
) -> list[NodeState]:
    """The cluster's nodes (its worker hosts, lost ones DEAD), from the controller."""
    return _list(state_source.node_rows, NodeState, "node_id", filters, limit, detail)


def list_jobs(
    address: str | None = None, filters: Sequence[Filter] | None = None, limit: int = DEFAULT_LIMIT,
    timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
    _explain: bool = False,
) -> list[JobState]:
    """This driver's job and the cluster's other drivers and submitted jobs, from the controller."""
    return _list(lambda d: state_source.job_rows(d, d.started_at), JobState, "job_id", filters, limit, detail)


def list_placement_groups(
    address: str | None = None, filters: Sequence[Filter] | None = None, limit: int = DEFAULT_LIMIT,
    timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
    _explain: bool = False,
) -> list[PlacementGroupState]:
    """The session's placement groups, removed ones included."""
    return _list(state_source.placement_group_rows, PlacementGroupState, "placement_group_id", filters, limit, detail)


def get_actor(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
              _explain: bool = False) -> ActorState | None:
    """The actor with this hex id (all columns), or None."""
    found = _list(state_source.actor_rows, ActorState, "actor_id", [("actor_id", "=", id)], 1, True)
    return found[0] if found else None


def get_task(id: Any, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> TaskState | list[TaskState] | None:
    """The task with this hex id (or producing this ObjectRef): None if unknown, its record if
    it ran once, the list of its attempts if it was retried (as Ray returns)."""
    task_id = id if isinstance(id, str) else id.task_id().hex()
    if not isinstance(task_id, str):
        task_id = task_id.hex()
    found = _list(state_source.task_rows, TaskState, "task_id", [("task_id", "=", task_id)], 10_000, True)
    if not found:
        return None
    found.sort(key=lambda t: t.attempt_number)
    return found[0] if len(found) == 1 else found


def summarize_tasks(address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                    raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Task counts by name and state: `{"cluster": {"summary": {name: {"func_or_class_name",
    "type", "state_counts"}}, "total_tasks", "total_actor_tasks", "total_actor_scheduled",
    "summary_by": "func_name"}}`, as Ray returns."""
    return summarize_task_rows(state_source.task_rows(_driver()))


def summarize_task_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`summarize_tasks`'s answer for these task rows (of one session or several)."""
    summary: dict[str, dict[str, Any]] = {}
    totals = {"NORMAL_TASK": 0, "ACTOR_TASK": 0, "ACTOR_CREATION_TASK": 0}
    for row in rows:
        key = row["name"] or row["func_or_class_name"]
        entry = summary.setdefault(key, {"func_or_class_name": key, "type": row["type"], "state_counts": {}})
        entry["state_counts"][row["state"]] = entry["state_counts"].get(row["state"], 0) + 1
        totals[row["type"]] = totals.get(row["type"], 0) + 1
    return {"cluster": {
        "summary": summary,
        "total_tasks": totals["NORMAL_TASK"],
        "total_actor_tasks": totals["ACTOR_TASK"],
        "total_actor_scheduled": totals["ACTOR_CREATION_TASK"],
        "summary_by": "func_name",
    }}


def summarize_actors(address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                     raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Actor counts by class and state: `{"cluster": {"summary": {class: {"class_name",
    "state_counts"}}, "total_actors", "summary_by": "class"}}`, as Ray returns."""
    return summarize_actor_rows(state_source.actor_rows(_driver()))


def summarize_actor_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`summarize_actors`'s answer for these actor rows (of one session or several)."""
    summary: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = summary.setdefault(row["class_name"], {"class_name": row["class_name"], "state_counts": {}})
        entry["state_counts"][row["state"]] = entry["state_counts"].get(row["state"], 0) + 1
    return {"cluster": {"summary": summary, "total_actors": len(rows), "summary_by": "class"}}
