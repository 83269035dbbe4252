"""The task or actor call running in this context: what `get_runtime_context()` and nested
submissions read.

A module of its own so that the API, the worker loops and log forwarding can all reach the
current task without importing one another.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any


class CancelFlag:
    """Set when the running task or call is cancelled (`is_canceled()` reads it). A plain flag,
    not a `threading.Event`: one is made for every call, and nothing waits on it."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class TaskContext:
    """What `get_runtime_context()` reports inside a running task or actor call. A plain class
    with slots: every task and call makes one."""

    __slots__ = ("task_id", "function_name", "actor_id", "actor_name", "resources", "cancelled",
                 "placement_group_id", "capture_child_tasks", "actor_handle", "actor_given_name",
                 "actor_restarted", "qualified_name")

    def __init__(
        self,
        task_id: bytes | None = None,
        function_name: str = "",
        actor_id: bytes | None = None,
        actor_name: str | None = None,
        resources: Mapping[str, float] | None = None,
        cancelled: CancelFlag | None = None,
        placement_group_id: str | None = None,
        capture_child_tasks: bool = False,  # tasks and actors started here join the placement group
        actor_handle: Any = None,
        actor_given_name: str | None = None,  # the name a named actor was created with
        actor_restarted: bool = False,  # this actor instance is a restart (max_restarts)
        qualified_name: str | None = None,  # `module.qualname` of the function or method
    ) -> None:
        self.task_id = task_id
        self.function_name = function_name
        self.actor_id = actor_id
        self.actor_name = actor_name
        self.resources: Mapping[str, float] = {} if resources is None else resources
        self.cancelled = CancelFlag() if cancelled is None else cancelled
        self.placement_group_id = placement_group_id
        self.capture_child_tasks = capture_child_tasks
        self.actor_handle = actor_handle
        self.actor_given_name = actor_given_name
        self.actor_restarted = actor_restarted
        self.qualified_name = qualified_name

    def __repr__(self) -> str:
        return f"TaskContext(task_id={self.task_id!r}, function_name={self.function_name!r}, actor_id={self.actor_id!r})"


current_task: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("fray_ray_task", default=None)


def reset_quietly(reset: Any, token: Any) -> None:
    """Reset a ContextVar; a coroutine torn down elsewhere (loop stopping) may not be able to."""
    try:
        reset(token)
    except ValueError:
        pass
