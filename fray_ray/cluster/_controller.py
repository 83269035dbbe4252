"""The embedded Iris controller: cluster state behind one lock, event-driven scheduling, and
the local workers that run what it places.

Every operation takes the lock, moves `ClusterState`, and releases it before carrying out the
resulting effects (launching and killing processes). The scheduler thread sleeps on a
condition until something could change a placement (a submission, an exit, a revived worker)
or the next timeout is due, so a task starts as soon as there is room; there is no polling tick.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fray_ray.cluster._bundle_store import BundleStore
from fray_ray.cluster._cgroups import MemoryCgroups
from fray_ray.cluster._config import LOOPBACK, WorkerSpec
from fray_ray.cluster._host_memory import HostMemoryDirs
from fray_ray.cluster._jobs import JobRecord
from fray_ray.cluster._log_query import LogQuery, answer, line_level
from fray_ray.cluster._logs import LogStore
from fray_ray.cluster._process import ProcessSupervisor
from fray_ray.cluster._state import ClusterState, Effect, ForgetLogs, Kill
from fray_ray.cluster._wire import job_status_proto, redacted_request, task_status_proto, worker_health_proto
from fray_ray.cluster._worker import AttemptLaunch, LocalWorker, PortAllocator, TaskContract
from fray_ray.iris.rpc import controller_pb2, finelog_logging_pb2, job_pb2, logging_pb2, time_pb2

logger = logging.getLogger(__name__)

Controller = controller_pb2.Controller
T = TypeVar("T")

LIST_JOBS_MAX_LIMIT = 500
LIST_JOBS_MAX_OFFSET = 5000
ERROR_TAIL_LINES = 10
ERROR_TAIL_CHARS = 4000


class ControllerState(enum.Enum):
    NEW = "new"  # built; the scheduler thread is not running
    RUNNING = "running"  # scheduling
    STOPPED = "stopped"  # the scheduler thread is joined; no more launches


@dataclass(frozen=True)
class WorkerStatus:
    """A worker as the controller sees it now."""

    spec: WorkerSpec
    alive: bool
    free_cpu_millicores: int
    running_attempts: int
    address: str = ""
    running_job_ids: tuple[str, ...] = ()


# ListWorkers sort orders; LAST_HEARTBEAT has nothing to sort by here (local workers never miss one).
_WORKER_SORT_KEYS: dict[int, Callable[[WorkerStatus], object]] = {
    Controller.WORKER_SORT_FIELD_WORKER_ID: lambda w: w.spec.worker_id,
    Controller.WORKER_SORT_FIELD_DEVICE_TYPE: lambda w: (w.spec.device_type, w.spec.worker_id),
}


class EmbeddedController:
    """Owns the cluster state, the scheduler thread and the local workers."""

    def __init__(
        self,
        workers: Sequence[WorkerSpec],
        *,
        root_dir: str,
        supervisor: ProcessSupervisor,
        logs: LogStore,
        task_python: str,
        token: str | None,
        worker_hosts: Mapping[str, str] | None = None,
        client_freshness_days: int | None = None,
        inherit_env: bool = True,
        keep_workdirs: bool = False,
        max_finished_jobs: int = 10_000,
        memory_cgroups: MemoryCgroups | None = None,
        run_setup_scripts: bool = True,
        host_memory: HostMemoryDirs | None = None,
    ) -> None:
        """`worker_hosts`: the address each worker advertises and binds (default 127.0.0.1);
        `host_memory`: the shared-memory directory of each simulated host."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._state = ClusterState(
            workers,
            client_freshness_days=client_freshness_days,
            worker_hosts=self._hosts(workers, worker_hosts),
            max_finished_roots=max_finished_jobs,
        )
        self._lifecycle = ControllerState.NEW
        self._thread: threading.Thread | None = None
        self._supervisor = supervisor
        self._logs = logs
        self._bundles = BundleStore()
        self._ports = PortAllocator()
        self._root_dir = root_dir
        self._specs = [_with_slice_hostnames(spec, workers, self._state.worker_address) for spec in workers]
        self._contract_args = dict(
            token=token,
            python=task_python,
            inherit_env=inherit_env,
            keep_workdirs=keep_workdirs,
            memory_cgroups=memory_cgroups,
            run_setup_scripts=run_setup_scripts,
            host_memory=host_memory,
        )
        self._workers: dict[str, LocalWorker] = {}
        self._contract: TaskContract | None = None  # what tasks are told; set by start()

    @staticmethod
    def _hosts(workers: Sequence[WorkerSpec], hosts: Mapping[str, str] | None) -> dict[str, str]:
        given = dict(hosts or {})
        return {w.worker_id: given.get(w.worker_id) or w.host or LOOPBACK for w in workers}

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self, controller_url: str) -> None:
        """Start scheduling; tasks will reach the controller at `controller_url`."""
        contract = TaskContract(controller_url=controller_url, **self._contract_args)  # type: ignore[arg-type]
        with self._lock:
            if self._lifecycle != ControllerState.NEW:
                raise RuntimeError(f"controller is {self._lifecycle.value}")
            self._contract = contract
            self._workers = {spec.worker_id: self._local_worker(spec) for spec in self._specs}
            self._lifecycle = ControllerState.RUNNING
            self._thread = threading.Thread(target=self._run, name="fray-ray-scheduler", daemon=True)
            self._thread.start()

    def _local_worker(self, spec: WorkerSpec) -> LocalWorker:
        assert self._contract is not None
        return LocalWorker(
            spec,
            host=self._state.worker_address(spec.worker_id),
            root_dir=self._root_dir,
            contract=self._contract,
            supervisor=self._supervisor,
            logs=self._logs,
            ports=self._ports,
            bundles=self._bundles,
            listener=self,
        )

    def add_worker(self, spec: WorkerSpec, address: str) -> None:
        """A new local worker (a simulated host at `address`) joins the running cluster.

        Raises ValueError when its id is taken, RuntimeError when the controller is not running."""
        with self._lock:
            if self._lifecycle != ControllerState.RUNNING:
                raise RuntimeError(f"controller is {self._lifecycle.value}")
            self._state.add_worker(spec, address)
            self._workers[spec.worker_id] = self._local_worker(spec)
            self._changed.notify()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduling and join the scheduler thread. Processes are the supervisor's."""
        with self._lock:
            self._lifecycle = ControllerState.STOPPED
            self._changed.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._lifecycle != ControllerState.RUNNING:
                        return
                    deadline = self._state.next_deadline()
                    now = time.monotonic()
                    if self._state.wants_pass or (deadline is not None and deadline <= now):
                        break
                    self._changed.wait(None if deadline is None else deadline - now)
                try:
                    effects = self._state.expire()
                    effects.extend(self._state.schedule())
                except Exception:  # noqa: BLE001 - keep scheduling whatever one bad job does
                    logger.exception("scheduling pass failed")
                    effects = []
            self._apply(effects)

    def _apply(self, effects: Iterable[Effect]) -> None:
        """Carry out effects; called without the lock."""
        for effect in effects:
            try:
                if isinstance(effect, Kill):
                    self._supervisor.kill(effect.uid)
                elif isinstance(effect, AttemptLaunch):
                    self._workers[effect.worker_id].launch(effect)
                elif isinstance(effect, ForgetLogs):
                    self._logs.forget(effect.uids)
            except Exception:  # noqa: BLE001
                logger.exception("applying %r failed", effect)

    def read(self, view: Callable[[ClusterState], T]) -> T:
        """`view(state)` under the lock, for a consistent read (the dashboard's); `view` only reads."""
        with self._lock:
            return view(self._state)

    def _mutate(self, change: Callable[[ClusterState], tuple[T, list[Effect]]]) -> T:
        """Run `change(state)` under the lock; apply the effects it returns after releasing it."""
        with self._lock:
            result, effects = change(self._state)
            self._changed.notify()
        self._apply(effects)
        return result

    # ---- attempt events (from workers) ------------------------------------------------------

    def attempt_started(self, uid: int, ports: dict[str, int]) -> None:
        with self._lock:
            self._state.attempt_started(uid, ports)

    def attempt_exited(self, uid: int, returncode: int, error: str) -> None:
        if returncode != 0 and not error:
            error = self._describe_exit(uid, returncode)
        self._mutate(lambda state: (None, state.attempt_exited(uid, returncode, error)))

    def _describe_exit(self, uid: int, returncode: int) -> str:
        if returncode < 0:
            try:
                head = f"killed by signal {signal.Signals(-returncode).name}"
            except ValueError:
                head = f"killed by signal {-returncode}"
        else:
            head = f"exit code {returncode}"
        tail = "\n".join(self._logs.tail(uid, ERROR_TAIL_LINES))
        if len(tail) > ERROR_TAIL_CHARS:
            tail = "..." + tail[-ERROR_TAIL_CHARS:]
        return f"{head}\n{tail}" if tail else head

    # ---- jobs -------------------------------------------------------------------------------

    def launch_job(self, request: Controller.LaunchJobRequest) -> str:
        if request.bundle_blob:
            # Content-addressed, as in Iris: the id is the blob's digest, whatever was sent.
            bundle_id = hashlib.sha256(request.bundle_blob).hexdigest()
            self._bundles.put(bundle_id, bytes(request.bundle_blob))
            request.bundle_id = bundle_id
            request.ClearField("bundle_blob")
        return self._mutate(lambda state: state.submit(request))

    def terminate_job(self, job_id: str) -> None:
        self._mutate(lambda state: (None, state.terminate(job_id)))

    def job_states(self, job_ids: Iterable[str]) -> dict[str, int]:
        with self._lock:
            jobs = self._state.jobs
            return {job_id: int(jobs[job_id].state) for job_id in job_ids if job_id in jobs}

    def job_status(self, job_id: str) -> Controller.GetJobStatusResponse:
        with self._lock:
            job = self._state.job(job_id)
            status = job_status_proto(job)
            request = job.request
        return Controller.GetJobStatusResponse(job=status, request=redacted_request(request))

    def list_jobs(self, query: Controller.JobQuery) -> Controller.ListJobsResponse:
        with self._lock:
            matches = [job for job in self._state.jobs.values() if _matches_query(job, query)]
            total = len(matches)
            offset = min(max(query.offset, 0), LIST_JOBS_MAX_OFFSET)
            limit = query.limit if 0 < query.limit <= LIST_JOBS_MAX_LIMIT else LIST_JOBS_MAX_LIMIT
            page = [job_status_proto(job) for job in matches[offset : offset + limit]]
        return Controller.ListJobsResponse(jobs=page, total_count=total, has_more=offset + len(page) < total)

    def list_tasks(self, job_id: str) -> list[job_pb2.TaskStatus]:
        with self._lock:
            job = self._state.job(job_id)
            return [
                task_status_proto(t, self._state.worker_address(t.current.worker_id if t.current else ""))
                for t in job.tasks
            ]

    def task_status(self, task_id: str) -> Controller.GetTaskStatusResponse:
        with self._lock:
            task = self._state.task(task_id)
            status = task_status_proto(task, self._state.worker_address(task.current.worker_id if task.current else ""))
            resources = task.job.request.resources
        return Controller.GetTaskStatusResponse(task=status, job_resources=resources)

    # ---- endpoints --------------------------------------------------------------------------

    def register_endpoint(
        self, request: Controller.RegisterEndpointRequest, *, default_lease_s: float
    ) -> Controller.RegisterEndpointResponse:
        with self._lock:
            endpoint_id, lease = self._state.register_endpoint(request, default_lease_s=default_lease_s)
        return Controller.RegisterEndpointResponse(
            endpoint_id=endpoint_id, lease_duration=time_pb2.Duration(milliseconds=int(lease * 1000))
        )

    def unregister_endpoint(self, endpoint_id: str) -> None:
        with self._lock:
            self._state.unregister_endpoint(endpoint_id)

    def list_endpoints(self, request: Controller.ListEndpointsRequest) -> Controller.ListEndpointsResponse:
        with self._lock:
            records = self._state.list_endpoints(request.prefix, exact=request.exact, task_ids=request.task_ids)
        return Controller.ListEndpointsResponse(
            endpoints=[
                Controller.Endpoint(
                    endpoint_id=r.endpoint_id,
                    name=r.name,
                    address=r.address,
                    task_id=r.task_id,
                    metadata=dict(r.metadata),
                    access=r.access,
                )
                for r in records
            ]
        )

    # ---- logs -------------------------------------------------------------------------------

    def task_logs(self, request: Controller.GetTaskLogsRequest) -> Controller.GetTaskLogsResponse:
        with self._lock:
            targets, children = self._state.log_targets(
                request.id, attempt_id=request.attempt_id, include_children=request.include_children
            )
            child_statuses = [job_status_proto(child) for child in children]
        batches = []
        for target in targets:
            attempt_ids = dict(target.attempts)
            records = self._logs.read(
                attempt_ids, since_ms=request.since_ms, after_seq=request.cursor, substring=request.substring
            )
            batches.append((target, attempt_ids, records))
        every = sorted((r.seq for _, _, records in batches for r in records))
        truncated = 0 < request.max_total_lines < len(every)
        if truncated:
            limit = request.max_total_lines
            kept = set(every[-limit:] if request.tail else every[:limit])
            batches = [(t, ids, [r for r in records if r.seq in kept]) for t, ids, records in batches]
        response = Controller.GetTaskLogsResponse(
            truncated=truncated, child_job_statuses=child_statuses, cursor=max(every, default=request.cursor)
        )
        if truncated:
            response.cursor = max((r.seq for _, _, records in batches for r in records), default=request.cursor)
        for target, _, records in batches:
            batch = response.task_logs.add(task_id=target.task_id, worker_id=target.worker_id)
            for record in records:
                batch.logs.append(
                    logging_pb2.LogEntry(
                        timestamp=time_pb2.Timestamp(epoch_ms=record.timestamp_ms),
                        source=record.source,
                        data=record.data,
                        attempt_id=record.attempt_id,
                        level=int(line_level(record.source, record.data)),
                        key=f"{target.task_id}:{record.attempt_id}",
                    )
                )
        return response

    def fetch_logs(self, request: finelog_logging_pb2.FetchLogsRequest) -> finelog_logging_pb2.FetchLogsResponse:
        """finelog's FetchLogs over every remembered attempt, keyed `/user/job/<index>:<attempt>`."""
        query = LogQuery.from_proto(request)
        selects = query.key_matcher()
        with self._lock:
            keys = {
                attempt.uid: key
                for task in self._state.tasks.values()
                for attempt in task.attempts
                if selects(key := f"{task.wire}:{attempt.attempt_id}")
            }
        return answer(query, ((keys[uid], record) for uid, record in self._logs.read_attempts(keys)))

    # ---- workers ----------------------------------------------------------------------------

    def kill_worker(self, worker_id: str) -> None:
        self._mutate(lambda state: (None, state.kill_worker(worker_id)))

    def revive_worker(self, worker_id: str) -> None:
        self._mutate(lambda state: (state.revive_worker(worker_id), []))

    def list_workers(self, query: Controller.WorkerQuery) -> Controller.ListWorkersResponse:
        """ListWorkers: every local worker (filtered, sorted and paged as `query` asks)."""
        needle = query.contains.lower()
        matches = [
            w
            for w in self.workers()
            if (not needle or needle in w.spec.worker_id.lower() or needle in w.address.lower())
            and not query.backend_id  # local workers belong to no named backend
        ]
        sort_key = _WORKER_SORT_KEYS.get(query.sort_field)
        if sort_key is not None:
            matches.sort(key=sort_key)  # type: ignore[arg-type]
        if query.sort_direction == Controller.SORT_DIRECTION_DESC:
            matches.reverse()
        offset = max(query.offset, 0)
        page = matches[offset : offset + query.limit] if query.limit > 0 else matches[offset:]
        return Controller.ListWorkersResponse(
            workers=[
                worker_health_proto(w.spec, alive=w.alive, address=w.address, running_job_ids=w.running_job_ids)
                for w in page
            ],
            total_count=len(matches),
            has_more=offset + len(page) < len(matches),
        )

    def workers(self) -> list[WorkerStatus]:
        with self._lock:
            running: dict[str, int] = {}
            jobs: dict[str, dict[str, None]] = {}
            for attempt in self._state.attempts.values():
                running[attempt.worker_id] = running.get(attempt.worker_id, 0) + 1
                if attempt.active:
                    jobs.setdefault(attempt.worker_id, {})[attempt.task.job.wire] = None
            return [
                WorkerStatus(
                    c.spec,
                    c.alive,
                    c.free_cpu,
                    running.get(worker_id, 0),
                    address=self._state.worker_address(worker_id),
                    running_job_ids=tuple(jobs.get(worker_id, ())),
                )
                for worker_id, c in self._state.capacities.items()
            ]


def _matches_query(job: JobRecord, query: Controller.JobQuery) -> bool:
    scope = query.scope
    if scope == Controller.JOB_QUERY_SCOPE_ROOTS and not job.name.is_root:
        return False
    if scope == Controller.JOB_QUERY_SCOPE_CHILDREN and job.name.is_root:
        return False
    if query.parent_job_id:
        parent = job.name.parent
        if parent is None or parent.wire != query.parent_job_id:
            return False
    if query.name_filter and query.name_filter not in job.wire:
        return False
    if query.state_filter and job.state.name.lower() != query.state_filter.lower():
        return False
    if query.job_id_prefix and not job.wire.startswith(query.job_id_prefix):
        return False
    return True


def _with_slice_hostnames(spec: WorkerSpec, workers: Sequence[WorkerSpec], host_of: Callable[[str], str]) -> WorkerSpec:
    """A TPU host's TPU_WORKER_HOSTNAMES naming the addresses its slice's hosts really have."""
    if spec.tpu is None or "TPU_WORKER_HOSTNAMES" not in spec.device_env:
        return spec
    members = sorted(
        (w for w in workers if w.tpu is not None and w.tpu.slice_name == spec.tpu.slice_name),
        key=lambda w: w.tpu.worker_index,  # type: ignore[union-attr]
    )
    env = dict(spec.device_env, TPU_WORKER_HOSTNAMES=",".join(host_of(w.worker_id) for w in members))
    return dataclasses.replace(spec, device_env=env)
