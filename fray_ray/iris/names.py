"""Iris job, task and attempt names: `/user/job[/child...]`, `/user/job/<i>`, `/user/job/<i>:<n>`."""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass

_SEGMENT = re.compile(r"^[^/\s:][^/\s]*$")


def validate_segment(segment: str) -> str:
    """Return `segment` if it can be one path segment of a job name, else raise ValueError.

    Iris rejects empty or whitespace-only segments and slashes; we also reject any whitespace
    and a leading `:` (which would read as an attempt suffix).
    """
    if not isinstance(segment, str) or not _SEGMENT.match(segment):
        raise ValueError(
            f"invalid job name segment {segment!r}: use a non-empty name without '/', spaces or a leading ':'"
        )
    return segment


@dataclass(frozen=True, order=True)
class JobName:
    """A job's wire id, e.g. `/alice/train` (root) or `/alice/train/eval` (child)."""

    segments: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.segments) < 2:
            raise ValueError(f"a job name needs a user and a job: /<user>/<job>, got {self.wire!r}")
        for segment in self.segments:
            validate_segment(segment)

    @classmethod
    def from_wire(cls, wire: str) -> JobName:
        """Parse `/user/job[/child...]`; raise ValueError on anything else."""
        if not isinstance(wire, str) or not wire.startswith("/"):
            raise ValueError(f"a job name starts with '/': /<user>/<job>, got {wire!r}")
        return cls(tuple(wire[1:].split("/")))

    @classmethod
    def root(cls, user: str, name: str) -> JobName:
        return cls((user, name))

    @property
    def wire(self) -> str:
        return "/" + "/".join(self.segments)

    @property
    def user(self) -> str:
        return self.segments[0]

    @property
    def name(self) -> str:
        """The last segment."""
        return self.segments[-1]

    @property
    def is_root(self) -> bool:
        return len(self.segments) == 2

    @property
    def depth(self) -> int:
        """1 for a root job, 2 for its children, and so on."""
        return len(self.segments) - 1

    @property
    def parent(self) -> JobName | None:
        return None if self.is_root else JobName(self.segments[:-1])

    @property
    def root_job(self) -> JobName:
        return JobName(self.segments[:2])

    @property
    def namespace(self) -> str:
        """Relative endpoint names live under the root job: `/<user>/<root-job>`."""
        return self.root_job.wire

    def child(self, name: str) -> JobName:
        return JobName((*self.segments, validate_segment(name)))

    def task(self, index: int) -> TaskName:
        return TaskName(self, index)

    def is_ancestor_of(self, other: JobName) -> bool:
        return len(other.segments) > len(self.segments) and other.segments[: len(self.segments)] == self.segments

    def __str__(self) -> str:
        return self.wire


@dataclass(frozen=True, order=True)
class TaskName:
    """One replica of a job: `/alice/train/3`. The index is the last path segment."""

    job: JobName
    index: int

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"task index must be >= 0, got {self.index}")

    @classmethod
    def from_wire(cls, wire: str) -> TaskName:
        job_wire, _, index = wire.rpartition("/")
        if not index.isdigit() or not job_wire:
            raise ValueError(f"a task name is /<user>/<job>/<index>, got {wire!r}")
        return cls(JobName.from_wire(job_wire), int(index))

    @property
    def wire(self) -> str:
        return f"{self.job.wire}/{self.index}"

    def attempt(self, attempt_id: int) -> TaskAttempt:
        return TaskAttempt(self, attempt_id)

    def __str__(self) -> str:
        return self.wire


@dataclass(frozen=True, order=True)
class TaskAttempt:
    """One run of a task: `/alice/train/3:1`. A retry is a new attempt."""

    task: TaskName
    attempt_id: int

    @classmethod
    def from_wire(cls, wire: str) -> TaskAttempt:
        """Parse `/user/job/<i>:<n>`; a missing `:<n>` (older Iris) means attempt 0."""
        task_wire, sep, attempt = wire.partition(":")
        if sep and not attempt.isdigit():
            raise ValueError(f"a task attempt is /<user>/<job>/<index>:<attempt>, got {wire!r}")
        return cls(TaskName.from_wire(task_wire), int(attempt) if sep else 0)

    @property
    def wire(self) -> str:
        return f"{self.task.wire}:{self.attempt_id}"

    def __str__(self) -> str:
        return self.wire


def resolve_job_user() -> str:
    """The user segment for root jobs: IRIS_USER, else the OS user, else `root`."""
    user = os.environ.get("IRIS_USER")
    if not user:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "root"
    user = re.sub(r"[/\s:]", "_", user) or "root"
    return user
