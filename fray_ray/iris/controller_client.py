"""A synchronous client for an Iris controller: jobs, tasks, workers, endpoints and logs.

It speaks `iris.cluster.ControllerService` over Connect (binary protobuf, uncompressed
requests) and sends what real controllers require: today's `client_revision_date`, explicit
`replicas` and `max_retries_preemption`, full `/user/job` names. Logs come through finelog's
FetchLogs (`fray_ray.iris.logs`), or GetTaskLogs from controllers older than finelog. Errors
come out as `fray_ray.iris.errors` exceptions.
"""

from __future__ import annotations

import datetime
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence

from fray_ray.iris.addresses import normalize_address
from fray_ray.iris.errors import NotFound, Unavailable, translate_connect_errors
from fray_ray.iris.http_clients import http_client_for
from fray_ray.iris.logs import LogReader, LogSelection, LogsNotServed
from fray_ray.iris.names import JobName
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.rpc.controller_connect import ControllerServiceClientSync
from fray_ray.iris.transport import bearer_headers
from fray_ray.iris.types import EndpointInfo, JobInfoSnapshot, JobSpec, JobState, LogLine, TaskInfo, WorkerInfo

Controller = controller_pb2.Controller

#: LaunchJob may wait for a replaced job to drain; real controllers allow it 120 s.
LAUNCH_JOB_TIMEOUT_S = 180.0
DEFAULT_RPC_TIMEOUT_S = 30.0


def today() -> str:
    """The UTC date in ISO form, as `client_revision_date` expects."""
    return datetime.datetime.now(datetime.UTC).date().isoformat()


class Backoff:
    """Exponential delays from `initial` to `maximum`, for polling loops."""

    def __init__(self, initial: float = 0.05, maximum: float = 2.0, factor: float = 1.5) -> None:
        self._next = initial
        self._maximum = maximum
        self._factor = factor

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._maximum, self._next * self._factor)
        return delay


class ControllerClient:
    """Calls to one controller. Thread-safe; close() it (or use `with`) when done."""

    def __init__(self, address: str, *, token: str | None = None, timeout: float = DEFAULT_RPC_TIMEOUT_S) -> None:
        self.address = normalize_address(address)
        self._headers = bearer_headers(token)
        self._timeout_ms = int(timeout * 1000)
        self._stub = ControllerServiceClientSync(
            self.address, accept_compression=None, send_compression=None, timeout_ms=self._timeout_ms,
            http_client=http_client_for(self.address),
        )
        self._logs = LogReader(self.address, headers=self._headers, timeout_ms=self._timeout_ms)
        self._bundle_lock = threading.Lock()  # guards the two fields below
        self._bundles_sent: set[str] = set()  # bundle ids this controller has received from us
        self._bundle_sends: dict[str, threading.Lock] = {}  # one lock per bundle: its first send

    def close(self) -> None:
        self._stub.close()
        self._logs.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- jobs ----------------------------------------------------------------------------

    def launch_job(self, spec: JobSpec) -> str:
        """Submit a job; returns the controller's job id (always use it, not the name sent).

        A workspace bundle goes inline (`bundle_blob`) with the first job that carries it and
        by id with every later one: the controller stores bundles by content id. Launches of
        a bundle not yet sent wait for the one sending it, so none can name it too early.
        """
        bundle = spec.bundle
        if bundle is None or not bundle.blob:
            return self._launch(spec.to_proto(client_revision_date=today()))
        with self._bundle_lock:
            lock = self._bundle_sends.setdefault(bundle.bundle_id, threading.Lock())
        with lock:
            if bundle.bundle_id in self._bundles_sent:
                return self._launch(spec.to_proto(client_revision_date=today(), send_blob=False))
            job_id = self._launch(spec.to_proto(client_revision_date=today(), send_blob=True))
            with self._bundle_lock:
                self._bundles_sent.add(bundle.bundle_id)
            return job_id

    def _launch(self, request: Controller.LaunchJobRequest) -> str:
        with translate_connect_errors("LaunchJob"):
            response = self._stub.launch_job(
                request, headers=self._headers, timeout_ms=int(LAUNCH_JOB_TIMEOUT_S * 1000)
            )
        return response.job_id

    def job_states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        """States of several jobs in one call; unknown ids are missing from the result."""
        with translate_connect_errors("GetJobState"):
            response = self._stub.get_job_state(Controller.GetJobStateRequest(job_ids=list(job_ids)), headers=self._headers)
        return {job_id: JobState(state) for job_id, state in response.states.items()}

    def job_state(self, job_id: str) -> JobState:
        """One job's state; NotFound if the controller does not know it."""
        states = self.job_states([job_id])
        if job_id not in states:
            raise NotFound(f"job {job_id} not found", method="GetJobState")
        return states[job_id]

    def job_status(self, job_id: str) -> JobInfoSnapshot:
        with translate_connect_errors("GetJobStatus"):
            response = self._stub.get_job_status(Controller.GetJobStatusRequest(job_id=job_id), headers=self._headers)
        return JobInfoSnapshot.from_proto(response.job)

    def wait_for_job(self, job_id: str, timeout: float | None = None, *, poll_cap: float = 2.0) -> JobInfoSnapshot:
        """Block until the job finishes; returns its final status. TimeoutError on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(0.05, poll_cap)
        while True:
            if self.job_state(job_id).finished:
                return self.job_status(job_id)
            delay = backoff.next_delay()
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"job {job_id} still running after {timeout} s")
                delay = min(delay, remaining)
            time.sleep(delay)

    def list_jobs(self, prefix: str = "", *, limit: int = 500) -> list[JobInfoSnapshot]:
        query = Controller.JobQuery(job_id_prefix=prefix, limit=limit)
        with translate_connect_errors("ListJobs"):
            response = self._stub.list_jobs(Controller.ListJobsRequest(query=query), headers=self._headers)
        return [JobInfoSnapshot.from_proto(job) for job in response.jobs]

    def terminate_job(self, job_id: str) -> None:
        """Kill a job and all its descendants."""
        with translate_connect_errors("TerminateJob"):
            self._stub.terminate_job(Controller.TerminateJobRequest(job_id=job_id), headers=self._headers)

    # ---- tasks ---------------------------------------------------------------------------

    def list_tasks(self, job_id: str) -> list[TaskInfo]:
        """The job's tasks, ordered by index."""
        with translate_connect_errors("ListTasks"):
            response = self._stub.list_tasks(Controller.ListTasksRequest(job_id=job_id), headers=self._headers)
        return [TaskInfo.from_proto(task) for task in response.tasks]

    def task_status(self, task_id: str) -> TaskInfo:
        with translate_connect_errors("GetTaskStatus"):
            response = self._stub.get_task_status(Controller.GetTaskStatusRequest(task_id=task_id), headers=self._headers)
        return TaskInfo.from_proto(response.task)

    def task_logs(
        self,
        id: str,
        *,
        max_lines: int = 0,
        tail: bool = True,
        include_children: bool = False,
        attempt_id: int = -1,
        since_ms: int = 0,
    ) -> list[LogLine]:
        """Captured output of a job's tasks, one task (`/user/job/0`) or one attempt
        (`/user/job/0:1`), oldest first; an id the controller does not know has none.

        `max_lines` bounds the total (0 means all); with `tail` the newest lines are kept. A
        job's read covers its child jobs on the controller's side, so with `max_lines` and
        without `include_children` fewer lines than asked may come back when children printed.
        ValueError if `id` is not a job, task or attempt id.
        """
        selection = LogSelection.of(id, attempt_id=attempt_id, include_children=include_children)
        try:
            return self._logs.read(selection, max_lines=max_lines, tail=tail, since_ms=since_ms)
        except LogsNotServed:
            pass  # a controller from before finelog
        request = Controller.GetTaskLogsRequest(
            id=id,
            max_total_lines=max_lines,
            tail=tail,
            include_children=include_children,
            attempt_id=attempt_id,
            since_ms=since_ms,
        )
        try:
            with translate_connect_errors("GetTaskLogs"):
                response = self._stub.get_task_logs(request, headers=self._headers)
        except NotFound:
            return []
        lines = [LogLine.from_proto(batch.task_id, entry) for batch in response.task_logs for entry in batch.logs]
        lines.sort(key=lambda line: line.timestamp_ms)
        return lines

    def task_logs_after(self, id: str, cursor: int = 0, *, include_children: bool = False) -> tuple[list[LogLine], int]:
        """Output of a job, task or attempt stored after `cursor` (0: all of it), oldest first,
        and the cursor to ask from next time. For following a running job:

            lines, cursor = client.task_logs_after(job_id)
            ...
            more, cursor = client.task_logs_after(job_id, cursor)
        """
        selection = LogSelection.of(id, include_children=include_children)
        try:
            return self._logs.read_after(selection, cursor)
        except LogsNotServed:
            pass  # a controller from before finelog
        request = Controller.GetTaskLogsRequest(id=id, include_children=include_children, attempt_id=-1, cursor=cursor)
        try:
            with translate_connect_errors("GetTaskLogs"):
                response = self._stub.get_task_logs(request, headers=self._headers)
        except NotFound:
            return [], cursor
        lines = [LogLine.from_proto(batch.task_id, entry) for batch in response.task_logs for entry in batch.logs]
        lines.sort(key=lambda line: line.timestamp_ms)
        return lines, max(cursor, response.cursor)

    # ---- workers -------------------------------------------------------------------------

    def list_workers(self, contains: str = "") -> list[WorkerInfo]:
        """The controller's workers (those whose id or address contains `contains`), every page
        of them when the controller pages its answer."""
        workers: list[WorkerInfo] = []
        while True:
            query = Controller.WorkerQuery(contains=contains, offset=len(workers))
            with translate_connect_errors("ListWorkers"):
                response = self._stub.list_workers(Controller.ListWorkersRequest(query=query), headers=self._headers)
            workers += [WorkerInfo.from_proto(worker) for worker in response.workers]
            if not response.has_more or not response.workers:
                return workers

    # ---- endpoints -----------------------------------------------------------------------

    def register_endpoint(
        self,
        name: str,
        address: str,
        *,
        task_id: str,
        attempt_id: int,
        metadata: dict[str, str] | None = None,
        endpoint_id: str = "",
    ) -> str:
        """Register `name` → `address` for a live task attempt; returns the endpoint id.

        Registering again with the same `endpoint_id` replaces the entry (renews the lease).
        """
        request = Controller.RegisterEndpointRequest(
            name=name,
            address=address,
            task_id=task_id,
            attempt_id=attempt_id,
            metadata=metadata or {},
            endpoint_id=endpoint_id,
        )
        with translate_connect_errors("RegisterEndpoint"):
            response = self._stub.register_endpoint(request, headers=self._headers)
        return response.endpoint_id

    def unregister_endpoint(self, endpoint_id: str) -> None:
        with translate_connect_errors("UnregisterEndpoint"):
            self._stub.unregister_endpoint(Controller.UnregisterEndpointRequest(endpoint_id=endpoint_id), headers=self._headers)

    def list_endpoints(self, prefix: str, *, exact: bool = False, task_ids: Sequence[str] = ()) -> list[EndpointInfo]:
        """Endpoints named exactly `prefix` (exact=True) or starting with it."""
        request = Controller.ListEndpointsRequest(prefix=prefix, exact=exact, task_ids=list(task_ids))
        with translate_connect_errors("ListEndpoints"):
            response = self._stub.list_endpoints(request, headers=self._headers)
        return [EndpointInfo.from_proto(endpoint) for endpoint in response.endpoints]

    # ---- liveness ------------------------------------------------------------------------

    def healthy(self, timeout: float = 2.0) -> bool:
        """True when `GET /health` answers 200."""
        try:
            with urllib.request.urlopen(f"{self.address}/health", timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def check_reachable(self) -> None:
        """Raise `Unavailable` with the address when nothing answers there."""
        try:
            self.job_states([])
        except Unavailable as exc:
            raise Unavailable(f"no Iris controller answers at {self.address}: {exc.message}") from exc


def child_job_name(parent: JobName | str, name: str) -> JobName:
    parent_name = parent if isinstance(parent, JobName) else JobName.from_wire(parent)
    return parent_name.child(name)
