"""The Fray `Client` protocol: the seam between Ray-style code and a job backend.

A backend (`LocalClient` in this process, `FrayIrisClient` on an Iris cluster) implements
`Client` and `JobHandle`; no base class is needed. Code above this layer depends on these
protocols only, and each method's docstring is the contract both backends are tested against.
This module does not import any backend; `current_client.py` picks one.

Errors raised by this layer::

    RuntimeError
     └── FrayError                 (fray_ray.fray.errors) anything the Fray layer raises on its own account
          ├── JobFailed            a job ended FAILED or STOPPED (wait_all, backend waits)
          ├── JobAlreadyExists     a job of that name is still running and adopting was refused
          └── ActorUnavailableError  (fray_ray.fray.actor) an actor is gone or unreachable
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fray_ray.fray.errors import FrayError
from fray_ray.fray.types import ActorConfig, CapturedWorkspace, EnvironmentConfig, JobRequest, JobStatus, ResourceConfig

if TYPE_CHECKING:
    from fray_ray.fray.actor import ActorGroup, ActorHandle, HostedActor
    from fray_ray.fray.hosts import HostInfo
    from fray_ray.fray.job_listing import JobSummary

__all__ = ["Client", "FrayError", "JobAlreadyExists", "JobFailed", "JobHandle", "wait_all"]


class JobFailed(FrayError):
    """A job finished FAILED or STOPPED; carries `job_id` and `failed_status`."""

    def __init__(self, job_id: str, status: JobStatus) -> None:
        super().__init__(f"job {job_id} finished {status}")
        self.job_id = job_id
        self.failed_status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.failed_status))


class JobAlreadyExists(FrayError):
    """A job named `job_name` is still running; `handle` (when known) lets the caller adopt it."""

    def __init__(self, job_name: str, handle: JobHandle | None = None) -> None:
        hint = "; pass adopt_existing=True or use .handle to adopt it" if handle is not None else ""
        super().__init__(f"a job named {job_name!r} is already running{hint}")
        self.job_name = job_name
        self.handle = handle

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_name, self.handle))


@runtime_checkable
class JobHandle(Protocol):
    """A submitted job, seen by its submitter. Reader methods only, plus `terminate`."""

    @property
    def job_id(self) -> str:
        """The backend's unique id for the job; it contains the job's name. Never blocks."""
        ...

    def status(self) -> JobStatus:
        """The job's current status. Returns promptly (at most one controller call)."""
        ...

    def wait(self, timeout: float | None = None, *, raise_on_failure: bool = True) -> JobStatus:
        """Block until the job finishes; return its final status.

        Raises TimeoutError when `timeout` seconds pass first. With `raise_on_failure`, a
        FAILED job raises: backends that run the job's code in this process re-raise the
        job's own exception, others raise `JobFailed`. A STOPPED job (terminated or timed out)
        returns STOPPED without raising.
        """
        ...

    def logs(self, max_lines: int = 0) -> tuple[str, ...]:
        """The last `max_lines` lines of the job's output across its tasks (0: all kept).

        Returns promptly with what has been captured so far; never raises for a job that has
        no output.
        """
        ...

    def terminate(self) -> None:
        """Stop the job if it is still running; afterwards `status()` is STOPPED.

        Blocks until the stop has been carried out as far as the backend can (a process is
        killed, the controller acknowledged). Does nothing for a finished job.
        """
        ...


@runtime_checkable
class Client(Protocol):
    """Runs jobs and actors somewhere. `name`, `count`, `resources`, `environment` and
    `actor_config` are reserved keywords of the actor methods, so actor constructors cannot
    take arguments of those names.
    """

    def submit(self, request: JobRequest, adopt_existing: bool = True) -> JobHandle:
        """Start a job; returns immediately with its handle.

        When a job of the same name is still running, `adopt_existing=True` returns a handle
        to that job and `False` raises `JobAlreadyExists` carrying one. A finished job's name
        can be used again.
        """
        ...

    def host_actor(
        self, actor_class: type, *args: Any, name: str, actor_config: ActorConfig = ActorConfig(), **kwargs: Any
    ) -> HostedActor:
        """Construct `actor_class(*args, **kwargs)` in this process and serve it as an actor.

        Blocks until it is constructed and reachable; raises whatever the constructor raises.
        The caller owns the returned `HostedActor` and must call its `shutdown()`.
        """
        ...

    def create_actor(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> ActorHandle:
        """One actor: a group of one, waited for. Blocks until it is ready.

        Raises the constructor's exception if construction fails, TimeoutError if it does not
        become ready in the backend's time limit.
        """
        ...

    def create_actor_group(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        count: int,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> ActorGroup:
        """Start `count` actors of `actor_class(*args, **kwargs)`; returns immediately.

        Construction proceeds in the background; use `ActorGroup.wait_ready` for handles.
        """
        ...

    def find_actor(self, group_name: str, index: int = 0, *, parent_job: str | None = ...) -> ActorHandle | None:
        """A handle to replica `index` of the running actor group `group_name`, or None.

        `FrayIrisClient` looks on the controller (one call) for the group this client would
        create under `parent_job` (default: its own parent job; None: a root group), so it
        finds groups other clients created. `LocalClient` has no actors but its own: it finds
        its own live groups and ignores `parent_job`. Never raises for a group that is absent.
        """
        ...

    def list_hosts(self) -> list[HostInfo]:
        """The hosts this backend runs work on, as it knows them now (lost ones included, with
        `alive=False`), in the backend's order.

        Blocks for at most one controller call; raises the backend's error when the cluster
        cannot be asked (the caller decides whether to retry).
        """
        ...

    def list_jobs(self) -> list[JobSummary]:
        """Every job the backend knows now, of every client and user (`FrayIrisClient`: the
        controller's job list; `LocalClient`: its own unfinished jobs).

        Blocks for at most one controller call; raises the backend's error when the cluster
        cannot be asked.
        """
        ...

    @property
    def in_process(self) -> bool:
        """True when jobs and actors run on threads of this process (`LocalClient`): they share
        its interpreter, modules and environment variables, nothing is shipped to them, and
        nothing outlives the client. False when they run as processes of their own, perhaps
        on other hosts (`FrayIrisClient`). Never blocks."""
        ...

    @property
    def parent_job(self) -> str | None:
        """The job this client's jobs are children of (they end when it ends), or None when
        they are root jobs. A backend without a job tree (`LocalClient`) returns None."""
        ...

    def prepare_environment(self, environment: EnvironmentConfig) -> CapturedWorkspace | None:
        """Capture `environment`'s workspace and `py_modules` now, as later jobs with this
        environment will see them, and say how much that is (None when nothing is captured
        here). Blocks while the files are read; ValueError when they cannot be shipped. A
        backend whose jobs read the directories in place (`LocalClient`) has nothing to capture
        and returns None at once."""
        ...

    def detach_job(self, job_id: str) -> None:
        """Let the job or actor group `job_id` outlive this client: `shutdown()` leaves it
        running. Unknown ids are ignored. A backend where nothing can outlive the client
        (`LocalClient`, whose jobs are threads of this process) ignores the call, and its
        `shutdown()` still stops the job."""
        ...

    def shutdown(self, wait: bool = True) -> None:
        """Stop everything this client started (jobs, actors, threads, processes).

        With `wait`, blocks until they have stopped. The client accepts no work afterwards.
        """
        ...


# Polling cadence of wait_all: start fast, back off, never sleep longer than this.
_POLL_FIRST = 0.05
_POLL_FACTOR = 1.5
_POLL_MAX = 2.0


def wait_all(
    jobs: Iterable[JobHandle], *, timeout: float | None = None, raise_on_failure: bool = True
) -> list[JobStatus]:
    """Block until every job has finished; return their final statuses in input order.

    Polls each unfinished job's `status()` with backoff (0.05 s, x1.5, at most 2 s). Raises
    TimeoutError if `timeout` seconds pass first, and with `raise_on_failure`, `JobFailed`
    for the first job seen FAILED or STOPPED (the other jobs keep running).

    >>> wait_all([])
    []
    """
    handles: Sequence[JobHandle] = list(jobs)
    statuses: list[JobStatus | None] = [None] * len(handles)
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = _POLL_FIRST
    while True:
        for i, handle in enumerate(handles):
            if statuses[i] is not None:
                continue
            status = handle.status()
            if not status.finished():
                continue
            statuses[i] = status
            if raise_on_failure and status in (JobStatus.FAILED, JobStatus.STOPPED):
                raise JobFailed(handle.job_id, status)
        pending = [h.job_id for h, s in zip(handles, statuses, strict=True) if s is None]
        if not pending:
            return [s for s in statuses if s is not None]
        sleep = delay
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{len(pending)} of {len(handles)} jobs still running after {timeout} s: {', '.join(pending)}"
                )
            sleep = min(sleep, remaining)
        time.sleep(sleep)
        delay = min(delay * _POLL_FACTOR, _POLL_MAX)
