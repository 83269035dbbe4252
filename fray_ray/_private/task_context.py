"""The task or actor call running in this context: what `get_runtime_context()` and nested
submissions read.

A module of its own so that the API, the worker loops and log forwarding can all reach the
current task without importing one another.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
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


@dataclass
class TaskContext:
    """What `get_runtime_context()` reports inside a running task or actor call."""

    task_id: bytes | None = None
    function_name: str = ""
    actor_id: bytes | None = None
    actor_name: str | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    cancelled: CancelFlag = field(default_factory=CancelFlag)
    placement_group_id: str | None = None
    capture_child_tasks: bool = False  # tasks and actors started here join the placement group
    actor_handle: Any = None
    actor_given_name: str | None = None  # the name a named actor was created with
    actor_restarted: bool = False  # this actor instance is a restart (max_restarts)
    qualified_name: str | None = None  # `module.qualname` of the function or method


current_task: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("fray_ray_task", default=None)
