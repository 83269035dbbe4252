"""Jobs on an Iris controller as Fray sees them (`IrisJobHandle`), and the errors the backend raises.

Errors the controller reports are translated here, once, for the whole Iris backend::

    FrayError (fray_ray.fray.client)
     └── IrisBackendError          the controller refused a request or could not be reached
          ├── ControllerUnavailableError (ConnectionError)  nothing answers at the address
          ├── CredentialsRejected (PermissionError)  the controller refused the token
          └── JobRejected (ValueError)   LaunchJob refused the request, e.g. resources no
               │                         worker has, a finished parent, a stale client
               └── JobUnschedulable      ... because no live worker could ever place it: a
                                         worker that fits may still join (or be added)
"""

from __future__ import annotations

from typing import Any

from fray_ray.fray._iris_conversions import fray_status
from fray_ray.fray._iris_registry import IrisClientCore, ambient_client, bound_client
from fray_ray.fray.client import JobFailed
from fray_ray.fray.errors import FrayError
from fray_ray.fray.types import JobStatus
from fray_ray.iris.errors import (
    FailedPrecondition,
    InvalidArgument,
    IrisError,
    IrisRpcError,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from fray_ray.iris.types import JobState

__all__ = [
    "TERMINATE_WAIT",
    "ControllerUnavailableError",
    "CredentialsRejected",
    "IrisBackendError",
    "IrisJobHandle",
    "JobRejected",
    "JobUnschedulable",
    "translate_iris_error",
]

#: How long `terminate()` and `shutdown()` wait for the controller to report jobs ended.
TERMINATE_WAIT = 30.0


class IrisBackendError(FrayError):
    """The Iris controller refused a request or could not be reached; `address` names it."""

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message)
        self.address = address

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.address))


class ControllerUnavailableError(IrisBackendError, ConnectionError):
    """Nothing answers at the controller address (or it is shutting down)."""


class CredentialsRejected(IrisBackendError, PermissionError):
    """The controller refused the bearer token (none given, or not its own); `reason` is its word."""

    def __init__(self, message: str, address: str = "", reason: str = "") -> None:
        super().__init__(message, address)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.address, self.reason))


class JobRejected(IrisBackendError, ValueError):
    """LaunchJob refused the request: it can never run (no worker has the resources or
    attributes it needs), its parent job has finished, or the request is malformed."""


class JobUnschedulable(JobRejected):
    """LaunchJob refused the job because no live worker (or, with an autoscaler, no scale
    group) could ever place it. On a cluster whose workers come and go this can pass: a
    caller that already knows the work is feasible may wait for a worker and ask again."""


#: How the controller words a refusal for lack of a fitting worker (Iris: "... is unschedulable ...").
_UNSCHEDULABLE_WORDS = ("unschedulable", "cannot be scheduled")


def translate_iris_error(exc: IrisError, action: str, address: str) -> IrisBackendError:
    """The Fray error for an Iris client error raised while doing `action`."""
    message = exc.message if isinstance(exc, IrisRpcError) else str(exc)
    if isinstance(exc, Unavailable):
        return ControllerUnavailableError(
            f"cannot {action}: no Iris controller answers at {address} ({message}); "
            "check the address and that the cluster is running",
            address,
        )
    if isinstance(exc, (Unauthenticated, PermissionDenied)):
        return CredentialsRejected(
            f"cannot {action}: the controller at {address} refused the credentials ({message}); "
            "pass the cluster's token with FrayIrisClient(address, token=...)",
            address,
            message,
        )
    if isinstance(exc, FailedPrecondition) and any(words in message for words in _UNSCHEDULABLE_WORDS):
        return JobUnschedulable(f"cannot {action}: {message}", address)
    if isinstance(exc, (FailedPrecondition, InvalidArgument)):
        return JobRejected(f"cannot {action}: {message}", address)
    return IrisBackendError(f"cannot {action}: {exc}", address)


class IrisJobHandle:
    """A job on an Iris controller, as its submitter sees it (the `JobHandle` protocol).

    Picklable: it travels as its job id and, once unpickled, uses the ambient client.
    """

    def __init__(self, client: IrisClientCore, job_id: str) -> None:
        self._client = client
        self._job_id = job_id

    @property
    def job_id(self) -> str:
        """The controller's wire id, `/<user>/<name>` or `<parent>/<name>`."""
        return self._job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_job_handle, (self._job_id,))

    def __repr__(self) -> str:
        return f"IrisJobHandle({self._job_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IrisJobHandle) and other._job_id == self._job_id

    def __hash__(self) -> int:
        return hash(("IrisJobHandle", self._job_id))

    def _owner(self) -> IrisClientCore:
        self._client = bound_client(self._client)
        return self._client

    def _state(self) -> JobState:
        client = self._owner()
        states = client._call_controller(
            f"read the state of job {self._job_id}", lambda c: c.job_states([self._job_id])
        )
        if self._job_id not in states:
            raise IrisBackendError(
                f"job {self._job_id} is unknown to the controller at {client.address}", client.address
            )
        return states[self._job_id]

    def status(self) -> JobStatus:
        """The job's status now: one GetJobState call. IrisBackendError if the controller
        does not know the job (never submitted, or forgotten long after it finished)."""
        return fray_status(self._state())

    def wait(self, timeout: float | None = None, *, raise_on_failure: bool = True) -> JobStatus:
        """Block until the job finishes; return its final status.

        Polls GetJobState with backoff (50 ms up to 1 s), then reads the final status once. A
        FAILED job raises `JobFailed` when `raise_on_failure` (with the controller's error text
        attached as a note); STOPPED is returned, not raised. TimeoutError when `timeout`
        seconds pass first; IrisBackendError if the controller does not know the job.
        """
        client = self._owner()
        final = client._call_controller(
            f"wait for job {self._job_id}", lambda c: c.wait_for_job(self._job_id, timeout, poll_cap=1.0)
        )
        status = fray_status(final.state)
        if status is JobStatus.FAILED and raise_on_failure:
            error = JobFailed(self._job_id, status)
            if final.error:
                error.add_note("controller: " + "\n".join(final.error.strip().splitlines()[-20:]))
            raise error
        return status

    def logs(self, max_lines: int = 0) -> tuple[str, ...]:
        """The last `max_lines` lines the job's own tasks printed, oldest first (0: all kept).

        Read through finelog's FetchLogs (GetTaskLogs on controllers from before finelog); a
        controller that serves neither gives `()`.
        """
        client = self._owner()
        try:
            lines = client._controller.task_logs(self._job_id, max_lines=max_lines, tail=True)
        except NotFound:
            return ()
        except IrisRpcError as exc:
            if exc.code == "unimplemented":
                return ()
            raise translate_iris_error(exc, f"read the logs of job {self._job_id}", client.address) from exc
        except IrisError as exc:
            raise translate_iris_error(exc, f"read the logs of job {self._job_id}", client.address) from exc
        return tuple(line.data for line in lines)

    def error(self) -> str:
        """Why the job failed, in the controller's words: the job's error, then each failed
        task's (a worker's error holds its exit code and the end of its stderr). '' while the
        job runs, once it succeeded, or when the controller says nothing. Two controller calls;
        IrisBackendError if the controller cannot be asked."""
        client = self._owner()
        try:
            status = client._call_controller(f"read job {self._job_id}", lambda c: c.job_status(self._job_id))
            if not status.state.finished or status.state is JobState.SUCCEEDED:
                return ""
            tasks = client._call_controller(f"list the tasks of {self._job_id}", lambda c: c.list_tasks(self._job_id))
        except IrisBackendError:
            raise
        parts = [status.error.strip()] if status.error.strip() else []
        for task in tasks:
            errors = [a.error for a in task.attempts if a.error] or ([task.error] if task.error else [])
            for text in errors[-1:]:
                if text.strip() and text.strip() not in parts:
                    parts.append(f"{task.task_id}: {text.strip()}")
        return "\n".join(parts)

    def terminate(self) -> None:
        """Kill the job (and its child jobs) and block until the controller reports it ended
        (at most TERMINATE_WAIT seconds). Does nothing for a finished or unknown job."""
        client = self._owner()
        try:
            client._call_controller(
                f"terminate job {self._job_id}", lambda c: c.terminate_job(self._job_id), not_found=True
            )
        except NotFound:
            return
        client._wait_finished([self._job_id], TERMINATE_WAIT)


def _restore_job_handle(job_id: str) -> IrisJobHandle:
    return IrisJobHandle(ambient_client(), job_id)
