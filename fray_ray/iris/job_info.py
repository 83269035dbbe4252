"""The task runtime contract: what a process started by an Iris worker finds in its environment."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from fray_ray.iris.names import JobName, TaskAttempt, resolve_job_user

#: Environment variable carrying the embedded cluster's bearer token into tasks.
TOKEN_ENV = "IRIS_AUTH_TOKEN"
#: Where a bundle's extra modules (Ray's `py_modules`) sit in the workdir; workers put
#: `$IRIS_WORKDIR/<this>` on their path.
PY_MODULES_DIR = ".fray-ray/py_modules"


@dataclass(frozen=True)
class JobInfo:
    """The identity and surroundings of the current task attempt."""

    task_attempt: TaskAttempt
    num_tasks: int
    controller_address: str | None
    advertise_host: str = "127.0.0.1"
    bind_host: str = "0.0.0.0"
    ports: Mapping[str, int] = field(default_factory=dict)
    workdir: str | None = None
    worker_id: str | None = None
    job_env: Mapping[str, str] = field(default_factory=dict)
    token: str | None = None

    @property
    def job_id(self) -> JobName:
        return self.task_attempt.task.job

    @property
    def task_index(self) -> int:
        return self.task_attempt.task.index

    @property
    def attempt_id(self) -> int:
        return self.task_attempt.attempt_id

    @property
    def user(self) -> str:
        return self.job_id.user

    def get_port(self, name: str) -> int:
        """The port the worker allocated for `name`; KeyError with a hint if none was requested."""
        try:
            return self.ports[name.lower()]
        except KeyError:
            raise KeyError(
                f"no port named {name!r} was allocated to this task; request it with ports=[{name!r}] "
                f"when launching the job (allocated: {sorted(self.ports) or 'none'})"
            ) from None


def job_info_from_env(environ: Mapping[str, str] | None = None) -> JobInfo | None:
    """Parse the Iris task environment; None when this process is not an Iris task."""
    env = os.environ if environ is None else environ
    wire = env.get("IRIS_TASK_ID")
    if not wire:
        return None
    ports = {
        key[len("IRIS_PORT_") :].lower(): int(value)
        for key, value in env.items()
        if key.startswith("IRIS_PORT_") and value.isdigit()
    }
    try:
        job_env = json.loads(env.get("IRIS_JOB_ENV", "{}")) or {}
    except json.JSONDecodeError:
        job_env = {}
    return JobInfo(
        task_attempt=TaskAttempt.from_wire(wire),
        num_tasks=int(env.get("IRIS_NUM_TASKS", "1") or 1),
        controller_address=env.get("IRIS_CONTROLLER_ADDRESS") or env.get("IRIS_CONTROLLER_URL") or None,
        advertise_host=_local_host(env.get("IRIS_ADVERTISE_HOST") or "127.0.0.1"),
        bind_host=env.get("IRIS_BIND_HOST") or "0.0.0.0",
        ports=ports,
        workdir=env.get("IRIS_WORKDIR"),
        worker_id=env.get("IRIS_WORKER_ID"),
        job_env={str(k): str(v) for k, v in dict(job_env).items()},
        token=env.get(TOKEN_ENV) or None,
    )


def _local_host(host: str) -> str:
    # Old docker-on-laptop setups advertise host.docker.internal; outside a container that is us.
    return "localhost" if host == "host.docker.internal" and not os.path.exists("/.dockerenv") else host


_cached: tuple[str | None, JobInfo | None] | None = None


def get_job_info() -> JobInfo | None:
    """The current task's `JobInfo` (cached per IRIS_TASK_ID), or None outside a task."""
    global _cached
    wire = os.environ.get("IRIS_TASK_ID")
    if _cached is None or _cached[0] != wire:
        _cached = (wire, job_info_from_env())
    return _cached[1]


def default_user() -> str:
    """The user segment for new root jobs: IRIS_USER, the current task's user, the OS user."""
    if os.environ.get("IRIS_USER"):
        return resolve_job_user()
    info = get_job_info()
    return info.user if info is not None else resolve_job_user()
