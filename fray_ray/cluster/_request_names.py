"""Names in requests, checked at the controller's door before anything is looked up or created.

Job, task and endpoint names arrive from the network and job and task names become directories
on the workers, so each one is parsed by the rules of `fray_ray.iris.names` (no `.`/`..`,
empty, non-printable or over-long segments). A bad name is `InvalidArgument`
(`invalid_argument`) naming the field; the controller never sees it.
"""

from __future__ import annotations

from collections.abc import Iterable

from fray_ray.iris.errors import InvalidArgument
from fray_ray.iris.names import JobName, TaskAttempt, validate_endpoint_name


def job_id_arg(value: str, field: str = "job_id") -> str:
    """The canonical wire form of job name `value`; InvalidArgument if it is not one."""
    if not value:
        raise InvalidArgument(f"{field} is empty: send the full wire name /<user>/<job>")
    try:
        return JobName.from_wire(value).wire
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def job_ids_arg(values: Iterable[str], field: str = "job_ids") -> list[str]:
    return [job_id_arg(value, field) for value in values]


def task_id_arg(value: str, field: str = "task_id") -> TaskAttempt:
    """Task name `value` (`/user/job/<i>`, optionally `:<attempt>`); InvalidArgument if malformed."""
    if not value:
        raise InvalidArgument(f"{field} is empty: send the task's wire name /<user>/<job>/<index>")
    try:
        return TaskAttempt.from_wire(value)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def task_ids_arg(values: Iterable[str], field: str = "task_ids") -> list[str]:
    return [task_id_arg(value, field).task.wire for value in values]


def job_or_task_arg(value: str, field: str = "id") -> str:
    """A GetTaskLogs id: a job name, a task name, or a task attempt; returned unchanged."""
    if not value:
        raise InvalidArgument(f"{field} is empty: send a job or task wire name")
    last = value.rpartition("/")[2]
    if ":" in last or last.isdigit():  # reads as a task or attempt (a job may also end in digits)
        try:
            TaskAttempt.from_wire(value)
            return value
        except ValueError:
            pass
    try:
        JobName.from_wire(value)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None
    return value


def endpoint_name_arg(value: str, field: str = "name") -> str:
    """Endpoint name `value`, unchanged; InvalidArgument if it is not a valid name."""
    try:
        return validate_endpoint_name(value)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def without_attempt(wire: str) -> str:
    """`/user/job/<i>` from `/user/job/<i>:<n>` (a ':' inside a job segment is not a suffix)."""
    head, sep, tail = wire.rpartition(":")
    return head if sep and "/" not in tail else wire
