"""The records the state API returns, with Ray's names, fields and column rules.

Each record is a dataclass whose fields are Ray's columns. As in Ray, a record also reads like
a dict (`task["state"]`, `task.get("node_id")`, `task.asdict()`), columns marked *detail* are
None unless the listing asked for `detail=True`, and only *filterable* columns may be used in
`filters`. `list_columns()`, `filterable_columns()`, `base_columns()` and `detail_columns()`
answer which is which.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_LIMIT = 100
DEFAULT_RPC_TIMEOUT = 30


def state_column(*, filterable: bool, detail: bool = False) -> Any:
    """A column: `filterable` may be used in filters; `detail` is filled only with detail=True."""
    return field(default=None, metadata={"filterable": filterable, "detail": detail})


class StateSchema:
    """Dict-like access and the column rules, shared by every record type."""

    @classmethod
    def list_columns(cls, detail: bool = True) -> list[str]:
        return [f.name for f in fields(cls) if detail or not f.metadata.get("detail", False)]  # type: ignore[arg-type]

    @classmethod
    def columns(cls) -> set[str]:
        return set(cls.list_columns(detail=True))

    @classmethod
    def filterable_columns(cls) -> set[str]:
        return {f.name for f in fields(cls) if f.metadata.get("filterable", False)}  # type: ignore[arg-type]

    @classmethod
    def base_columns(cls) -> set[str]:
        return set(cls.list_columns(detail=False))

    @classmethod
    def detail_columns(cls) -> set[str]:
        return set(cls.list_columns(detail=True))

    def asdict(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self))  # type: ignore[call-overload]

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


@dataclass
class ActorState(StateSchema):
    """One actor of the session (dead ones included)."""

    actor_id: str = state_column(filterable=True)
    class_name: str = state_column(filterable=True)
    #: PENDING_CREATION, ALIVE, RESTARTING or DEAD
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    name: str | None = state_column(filterable=True)
    node_id: str | None = state_column(filterable=True)
    #: the actor's process id; 0 until it has one
    pid: int | None = state_column(filterable=True)
    ray_namespace: str | None = state_column(filterable=True)
    serialized_runtime_env: str | None = state_column(filterable=False, detail=True)
    required_resources: dict[str, Any] | None = state_column(filterable=False, detail=True)
    #: why it died: {"actor_died_error_context": {"error_message": ..., ...}}; None while alive
    death_cause: dict[str, Any] | None = state_column(filterable=False, detail=True)
    is_detached: bool | None = state_column(filterable=False, detail=True)
    placement_group_id: str | None = state_column(filterable=True, detail=True)
    repr_name: str | None = state_column(filterable=True, detail=True)
    num_restarts: int | None = state_column(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: int | None = state_column(filterable=False, detail=True)
    num_restarts_due_to_node_preemption: int | None = state_column(filterable=False, detail=True)
    call_site: str | None = state_column(filterable=False, detail=True)
    label_selector: dict[str, Any] | None = state_column(filterable=False, detail=True)
    fallback_strategy: dict[str, Any] | None = state_column(filterable=False, detail=True)


@dataclass
class TaskState(StateSchema):
    """One attempt of a task, actor call or actor creation."""

    task_id: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    name: str = state_column(filterable=True)
    #: PENDING_ARGS_AVAIL, PENDING_NODE_ASSIGNMENT, SUBMITTED_TO_WORKER, RUNNING, FINISHED, FAILED, ...
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    actor_id: str | None = state_column(filterable=True)
    #: NORMAL_TASK, ACTOR_CREATION_TASK or ACTOR_TASK
    type: str = state_column(filterable=True)
    func_or_class_name: str = state_column(filterable=True)
    parent_task_id: str = state_column(filterable=True)
    node_id: str | None = state_column(filterable=True)
    worker_id: str | None = state_column(filterable=True)
    worker_pid: int | None = state_column(filterable=True)
    #: Ray's error type name (TASK_EXECUTION_EXCEPTION, WORKER_DIED, ...) when it failed
    error_type: str | None = state_column(filterable=True)
    language: str | None = state_column(filterable=True, detail=True)
    required_resources: dict[str, Any] | None = state_column(filterable=False, detail=True)
    runtime_env_info: dict[str, Any] | None = state_column(filterable=False, detail=True)
    placement_group_id: str | None = state_column(filterable=True, detail=True)
    #: [{"state": ..., "created_ms": ...}] for the states the driver saw
    events: list[Any] | None = state_column(filterable=False, detail=True)
    profiling_data: dict[str, Any] | None = state_column(filterable=False, detail=True)
    creation_time_ms: int | None = state_column(filterable=False, detail=True)
    start_time_ms: int | None = state_column(filterable=False, detail=True)
    end_time_ms: int | None = state_column(filterable=False, detail=True)
    task_log_info: dict[str, Any] | None = state_column(filterable=False, detail=True)
    error_message: str | None = state_column(filterable=False, detail=True)
    is_debugger_paused: bool | None = state_column(filterable=True, detail=True)
    call_site: str | None = state_column(filterable=False, detail=True)
    label_selector: dict[str, Any] | None = state_column(filterable=False, detail=True)
    fallback_strategy: dict[str, Any] | None = state_column(filterable=False, detail=True)


@dataclass
class ObjectState(StateSchema):
    """One object the session owns, with how it is referenced."""

    object_id: str = state_column(filterable=True)
    #: bytes; -1 while the task producing it has not finished
    object_size: int = state_column(filterable=True)
    task_status: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    #: LOCAL_REFERENCE, USED_BY_PENDING_TASK, CAPTURED_IN_OBJECT, ...
    reference_type: str = state_column(filterable=True)
    call_site: str = state_column(filterable=True)
    #: the owner's worker type (the driver owns every object: DRIVER)
    type: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    ip: str = state_column(filterable=True)


@dataclass
class NodeState(StateSchema):
    """One node (a worker host of the cluster)."""

    node_id: str = state_column(filterable=True)
    node_ip: str = state_column(filterable=True)
    is_head_node: bool = state_column(filterable=True)
    #: ALIVE or DEAD
    state: str = state_column(filterable=True)
    state_message: str | None = state_column(filterable=False)
    node_name: str = state_column(filterable=True)
    resources_total: dict[str, Any] = state_column(filterable=False)
    labels: dict[str, Any] = state_column(filterable=False)
    start_time_ms: int | None = state_column(filterable=False, detail=True)
    end_time_ms: int | None = state_column(filterable=False, detail=True)


@dataclass
class PlacementGroupState(StateSchema):
    """One placement group of the session."""

    placement_group_id: str = state_column(filterable=True)
    name: str = state_column(filterable=True)
    creator_job_id: str = state_column(filterable=True)
    #: PENDING, CREATED or REMOVED
    state: str = state_column(filterable=True)
    bundles: list[Any] | None = state_column(filterable=False, detail=True)
    is_detached: bool | None = state_column(filterable=True, detail=True)
    stats: dict[str, Any] | None = state_column(filterable=False, detail=True)
    topology_strategy: dict[str, Any] | None = state_column(filterable=False, detail=True)
    topology_assignments: dict[str, Any] | None = state_column(filterable=False, detail=True)


_JOB_BASE = ("job_id", "submission_id", "entrypoint", "type", "status", "message", "error_type", "driver_info")


def _job_column(name: str) -> Any:
    return field(default=None, metadata={"filterable": name in {"job_id", "type", "status", "submission_id"},
                                         "detail": name not in _JOB_BASE})


@dataclass
class JobState(StateSchema):
    """One job: this session's driver, and the jobs the cluster's controller reports."""

    type: str = _job_column("type")  # DRIVER or SUBMISSION
    job_id: str | None = _job_column("job_id")
    submission_id: str | None = _job_column("submission_id")
    driver_info: dict[str, Any] | None = _job_column("driver_info")
    #: PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED
    status: str = _job_column("status")
    entrypoint: str = _job_column("entrypoint")
    message: str | None = _job_column("message")
    error_type: str | None = _job_column("error_type")
    #: epoch milliseconds
    start_time: int | None = _job_column("start_time")
    end_time: int | None = _job_column("end_time")
    metadata: dict[str, Any] | None = _job_column("metadata")
    runtime_env: dict[str, Any] | None = _job_column("runtime_env")
    driver_agent_http_address: str | None = _job_column("driver_agent_http_address")
    driver_node_id: str | None = _job_column("driver_node_id")
    driver_exit_code: int | None = _job_column("driver_exit_code")
