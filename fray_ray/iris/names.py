"""Iris job, task, attempt and endpoint names: `/user/job[/child...]`, `/user/job/<i>`,
`/user/job/<i>:<n>`, `/user/job/actor-0`.

Names travel over the network and the embedded cluster turns job and task names into
directories, so every segment is checked here: not empty, not `.` or `..`, printable characters
only (no NUL, control, format or line-separator characters), at most `MAX_SEGMENT_BYTES` bytes of
UTF-8; a whole job name is at most `MAX_JOB_NAME_BYTES`, an endpoint name `MAX_ENDPOINT_NAME_BYTES`.
Job segments also hold no whitespace and do not start with `:` (that would read as an attempt
suffix); endpoint segments may hold inner spaces and `:` but are never whitespace only.
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass

#: One segment, in bytes of UTF-8: a directory name on common filesystems (NAME_MAX).
MAX_SEGMENT_BYTES = 255
#: A whole job name (`/user/job/child...`) in bytes of UTF-8; a task name adds `/<index>:<attempt>`.
MAX_JOB_NAME_BYTES = 1024
#: A whole endpoint name in bytes of UTF-8 (a job name plus an actor name and index fit easily).
MAX_ENDPOINT_NAME_BYTES = 2048
#: Task indices and attempt ids: plain ASCII digits, at most this many.
MAX_INDEX_DIGITS = 9

_JOB_SEGMENT = re.compile(r"^[^/\s:][^/\s]*$")


def _common_problem(segment: str) -> str | None:
    """What makes `segment` unusable as any name segment, or None."""
    if not segment:
        return "it is empty"
    if segment in (".", ".."):
        return "'.' and '..' are not names"
    if len(segment) > MAX_SEGMENT_BYTES or len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
        return f"it is longer than {MAX_SEGMENT_BYTES} bytes"
    if not segment.isprintable():  # ASCII space counts as printable here
        return "it holds a control or other non-printable character"
    return None


def _shown(text: str, limit: int = 80) -> str:
    """`text` for an error message: repr'd, and cut short so a huge name cannot flood a log."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def validate_segment(segment: str) -> str:
    """Return `segment` if it can be one path segment of a job name, else raise ValueError.

    Iris rejects empty or whitespace-only segments and slashes; we also reject any whitespace,
    a leading `:` (which would read as an attempt suffix), `.`/`..`, non-printable characters
    and segments over `MAX_SEGMENT_BYTES`.
    """
    if not isinstance(segment, str):
        raise ValueError(f"invalid job name segment {segment!r}: a name segment is a string")
    problem = _common_problem(segment)
    if problem is None and not _JOB_SEGMENT.match(segment):
        problem = "use a name without '/', whitespace or a leading ':'"
    if problem is not None:
        raise ValueError(f"invalid job name segment {_shown(segment)}: {problem}")
    return segment


def validate_endpoint_name(name: str) -> str:
    """Return `name` if it can be an endpoint name, else raise ValueError.

    Absolute names (`/user/job/actor-0`, `/system/log-server`) and relative ones
    (`my-actor`, `_workerpool_x:worker-0`, placed under a namespace by resolvers) are both
    accepted; every `/`-separated segment must be a real name (see the module docstring).
    """
    if not isinstance(name, str) or not name:
        raise ValueError("an endpoint name is a non-empty string")
    if len(name) > MAX_ENDPOINT_NAME_BYTES or len(name.encode("utf-8", "surrogatepass")) > MAX_ENDPOINT_NAME_BYTES:
        raise ValueError(f"endpoint name {_shown(name)} is longer than {MAX_ENDPOINT_NAME_BYTES} bytes")
    segments = name[1:].split("/") if name.startswith("/") else name.split("/")
    for segment in segments:
        problem = _common_problem(segment)
        if problem is None and not segment.strip():
            problem = "it is whitespace only"
        if problem is not None:
            raise ValueError(f"invalid endpoint name {_shown(name)}: segment {_shown(segment)}: {problem}")
    return name


def _decimal(text: str) -> bool:
    return 0 < len(text) <= MAX_INDEX_DIGITS and text.isascii() and text.isdigit()


@dataclass(frozen=True, order=True)
class JobName:
    """A job's wire id, e.g. `/alice/train` (root) or `/alice/train/eval` (child)."""

    segments: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.segments) < 2:
            raise ValueError(f"a job name needs a user and a job: /<user>/<job>, got {_shown(self.wire)}")
        for segment in self.segments:
            validate_segment(segment)
        size = sum(len(segment.encode("utf-8", "surrogatepass")) + 1 for segment in self.segments)
        if size > MAX_JOB_NAME_BYTES:
            raise ValueError(f"job name {_shown(self.wire)} is longer than {MAX_JOB_NAME_BYTES} bytes")

    @classmethod
    def from_wire(cls, wire: str) -> JobName:
        """Parse `/user/job[/child...]`; raise ValueError on anything else."""
        if not isinstance(wire, str) or not wire.startswith("/"):
            raise ValueError(f"a job name starts with '/': /<user>/<job>, got {_shown(str(wire))}")
        if len(wire) > MAX_JOB_NAME_BYTES:  # before splitting: a huge name costs nothing more
            raise ValueError(f"job name {_shown(wire)} is longer than {MAX_JOB_NAME_BYTES} bytes")
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
        """Parse `/user/job[/child...]/<index>`; raise ValueError on anything else."""
        if not isinstance(wire, str):
            raise ValueError(f"a task name is a string /<user>/<job>/<index>, got {type(wire).__name__}")
        job_wire, _, index = wire.rpartition("/")
        if not _decimal(index) or not job_wire:
            raise ValueError(f"a task name is /<user>/<job>/<index>, got {_shown(wire)}")
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
        if not isinstance(wire, str):
            raise ValueError(f"a task attempt is a string /<user>/<job>/<index>:<attempt>, got {type(wire).__name__}")
        task_wire, sep, attempt = wire.rpartition(":")
        if not sep or "/" in attempt:  # no suffix; any ':' belongs to a job segment
            return cls(TaskName.from_wire(wire), 0)
        if not _decimal(attempt):
            raise ValueError(f"a task attempt is /<user>/<job>/<index>:<attempt>, got {_shown(wire)}")
        return cls(TaskName.from_wire(task_wire), int(attempt))

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
    user = "".join(c if c.isprintable() else "_" for c in re.sub(r"[/\s:]", "_", user)) or "root"
    return user
