"""The cluster's state machine: jobs, tasks, attempts, worker capacity, endpoints and timers.

`ClusterState` does no I/O and starts nothing. Each transition returns the effects it implies
(`AttemptLaunch`, `Kill`, `ForgetLogs`), which the controller carries out after releasing its
lock. That keeps every rule of Iris's job model in one place and testable without processes:

- a job expands into `replicas` tasks; each placement of a task is a new attempt;
- a non-zero exit is retried under `max_retries_failure`, a lost worker under
  `max_retries_preemption` (free while the attempt was only ASSIGNED); a task that fails for
  good counts against the job's `max_task_failures`;
- a coscheduled job (`group_by`) is placed all at once; when one member fails or loses its
  worker, the running siblings are killed (COSCHED_FAILED) and the whole gang restarts as new
  attempts; one crashed round counts as one failure;
- the job state is rolled up from task states (`roll_up`); once terminal it is frozen, the
  remaining tasks are killed, and unless it SUCCEEDED its child jobs are killed too;
- `scheduling_timeout` makes pending tasks UNSCHEDULABLE, `timeout` kills a running task.

To keep a long session's memory bounded, a finished job drops its workdir file contents (its
GetJobStatus `request` keeps the file names), and beyond `max_finished_roots` the oldest
finished root jobs are forgotten with their subtrees and logs. What the handlers look up by id,
and the endpoints tasks register, are in `_state_lookups.py` (a base of `ClusterState`).
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fray_ray.cluster._config import WorkerSpec
from fray_ray.cluster._endpoints import EndpointRegistry
from fray_ray.cluster._jobs import PRESERVE_CHILDREN, AttemptRecord, JobRecord, TaskRecord, roll_up
from fray_ray.cluster._placement import eligible_workers, pending_reason, pick_gang, pick_worker, unsatisfiable_reason
from fray_ray.cluster._resources import WorkerCapacity
from fray_ray.cluster._state_lookups import StateLookups
from fray_ray.cluster._wire import parse_launch_request
from fray_ray.cluster._worker import AttemptLaunch
from fray_ray.iris.errors import AlreadyExists, FailedPrecondition, NotFound
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.types import ExistingJobPolicy, GpuDevice, JobState, TaskState

Controller = controller_pb2.Controller

#: Iris reads an empty client_revision_date as this day (when the check was introduced).
EMPTY_REVISION_DATE = datetime.date(2026, 4, 22)


@dataclass(frozen=True)
class Kill:
    """SIGKILL the process group of attempt `uid` (its outcome is already recorded)."""

    uid: int


@dataclass(frozen=True)
class ForgetLogs:
    """Drop the captured output of attempts whose job was replaced."""

    uids: tuple[int, ...]


Effect = AttemptLaunch | Kill | ForgetLogs


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ClusterState(StateLookups):
    """Everything the controller knows. Not thread-safe: the controller's lock guards it."""

    def __init__(
        self,
        workers: Sequence[WorkerSpec],
        *,
        client_freshness_days: int | None = None,
        worker_hosts: Mapping[str, str] | None = None,
        max_finished_roots: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.capacities: dict[str, WorkerCapacity] = {w.worker_id: WorkerCapacity(w) for w in workers}
        self.jobs: dict[str, JobRecord] = {}
        self.tasks: dict[str, TaskRecord] = {}
        self.attempts: dict[int, AttemptRecord] = {}  # attempts whose process has not been reaped
        self.endpoints = EndpointRegistry()
        self.wants_pass = False  # something changed that may let a pending task be placed
        self._pending: dict[str, JobRecord] = {}  # jobs with PENDING tasks
        self._timers: list[tuple[float, int, str, object, object]] = []
        self._timer_seq = itertools.count()
        self._job_seq = itertools.count()
        self._finished_roots: deque[JobRecord] = deque()  # in finishing order, for forgetting
        self._max_finished_roots = max_finished_roots
        self._freshness_days = client_freshness_days
        self._worker_hosts = dict(worker_hosts or {})
        self._clock = clock
        self._wall_ms = wall_ms

    # ---- submission -----------------------------------------------------------------------

    def submit(self, request: Controller.LaunchJobRequest) -> tuple[str, list[Effect]]:
        """Accept a LaunchJob request; returns the job id and the effects of replacing a job.

        Raises InvalidArgument, AlreadyExists or FailedPrecondition (stale client, dead parent, a
        request no worker could ever satisfy).
        """
        definition = parse_launch_request(request)
        name = definition.name
        wire = name.wire
        if name.is_root:
            self._check_freshness(definition.client_revision_date)
        existing = self.jobs.get(wire)
        policy = definition.existing_job_policy
        if existing is not None:
            if policy == ExistingJobPolicy.ERROR:
                raise AlreadyExists(f"job {wire} already exists ({existing.state.name})")
            if not existing.state.finished:
                if policy == ExistingJobPolicy.KEEP:
                    return wire, []
                if policy == ExistingJobPolicy.UNSPECIFIED:
                    raise AlreadyExists(
                        f"job {wire} is still {existing.state.name}; terminate it first or submit with "
                        "existing_job_policy KEEP or RECREATE"
                    )
        parent = None
        if not name.is_root:
            parent_name = name.parent
            assert parent_name is not None
            parent = self.jobs.get(parent_name.wire)
            if parent is None:
                raise FailedPrecondition(f"parent job {parent_name} of {wire} does not exist")
            if parent.state.finished:
                raise FailedPrecondition(
                    f"parent job {parent_name} of {wire} has already finished ({parent.state.name})"
                )
        reason = unsatisfiable_reason(definition.placement, list(self.capacities.values()), wire)
        if reason is not None:
            raise FailedPrecondition(reason)
        effects: list[Effect] = []
        if existing is not None:
            effects.extend(self._remove_subtree(existing))
        now = self._clock()
        job = JobRecord(definition, request, next(self._job_seq), parent, now, self._wall_ms())
        self.jobs[wire] = job
        if parent is not None:
            parent.children[wire] = job
        for task in job.tasks:
            self.tasks[task.wire] = task
            self._arm_scheduling_timeout(task)
        self._pending[wire] = job
        self.wants_pass = True
        return wire, effects

    def _check_freshness(self, revision: str) -> None:
        if self._freshness_days is None:
            return
        try:
            date = datetime.date.fromisoformat(revision) if revision else EMPTY_REVISION_DATE
        except ValueError:
            raise FailedPrecondition(f"client is too old: unreadable client_revision_date {revision!r}") from None
        today = datetime.datetime.now(datetime.UTC).date()
        if (today - date).days > self._freshness_days:
            raise FailedPrecondition(
                f"client is too old: client_revision_date {date.isoformat()} is more than "
                f"{self._freshness_days} days before {today.isoformat()}; upgrade the client"
            )

    def _remove_subtree(self, job: JobRecord) -> list[Effect]:
        """Kill what still runs under `job` and forget the whole subtree (name reuse)."""
        effects = self._kill_tree(job, f"replaced by a new job named {job.wire}")
        effects.extend(self._forget(job))
        return effects

    def _forget(self, job: JobRecord) -> list[Effect]:
        """Drop the records, endpoints and logs of `job`'s subtree."""
        uids: list[int] = []
        for member in job.subtree():
            self.jobs.pop(member.wire, None)
            self._pending.pop(member.wire, None)
            for task in member.tasks:
                self.tasks.pop(task.wire, None)
                uids.extend(a.uid for a in task.attempts)
        if job.parent is not None:
            job.parent.children.pop(job.wire, None)
        self.endpoints.remove_attempts(uids)
        return [ForgetLogs(tuple(uids))]

    def _prune_finished(self) -> list[Effect]:
        effects: list[Effect] = []
        for _ in range(len(self._finished_roots)):
            if len(self._finished_roots) <= self._max_finished_roots:
                break
            root = self._finished_roots.popleft()
            if self.jobs.get(root.wire) is not root:
                continue  # already replaced
            if any(not member.state.finished for member in root.subtree()):
                self._finished_roots.append(root)  # a child still runs: try again later
                continue
            effects.extend(self._forget(root))
        return effects

    # ---- placement ------------------------------------------------------------------------

    def schedule(self) -> list[Effect]:
        """One placement pass over pending tasks; returns the attempts to launch."""
        self.wants_pass = False
        launches: list[Effect] = []
        if not self._pending:
            return launches
        blocked = set()  # placement shapes that found no room this pass
        for job in sorted(self._pending.values(), key=JobRecord.queue_key):
            pending = [t for t in job.tasks if t.state == TaskState.PENDING]
            if not pending:
                del self._pending[job.wire]
                continue
            placement = job.definition.placement
            if job.candidates is None:
                job.candidates = eligible_workers(placement, list(self.capacities.values()))
            if job.definition.coscheduled:
                chosen = pick_gang(placement, job.candidates, len(pending))
                if chosen is None:
                    job.pending_reason = pending_reason(placement, job.candidates)
                    continue
                launches.extend(self._assign(task, capacity) for task, capacity in zip(pending, chosen))
            else:
                if placement in blocked:
                    continue
                for task in pending:
                    capacity = pick_worker(placement, job.candidates)
                    if capacity is None:
                        job.pending_reason = pending_reason(placement, job.candidates)
                        blocked.add(placement)
                        break
                    launches.append(self._assign(task, capacity))
            if not any(t.state == TaskState.PENDING for t in job.tasks):
                del self._pending[job.wire]
                job.pending_reason = ""
            self._update_job(job)
        return launches

    def _assign(self, task: TaskRecord, capacity: WorkerCapacity) -> AttemptLaunch:
        job = task.job
        definition = job.definition
        allocation = capacity.take(definition.placement.demand)
        attempt = AttemptRecord(task, len(task.attempts), allocation, self._wall_ms())
        task.attempts.append(attempt)
        task.state = TaskState.ASSIGNED
        self.attempts[attempt.uid] = attempt
        if definition.timeout_s is not None:
            self._push_timer(self._clock() + definition.timeout_s, "run", attempt, attempt.uid)
        return AttemptLaunch(
            uid=attempt.uid,
            worker_id=capacity.worker_id,
            task_id=task.wire,
            attempt_id=attempt.attempt_id,
            num_tasks=definition.replicas,
            argv=definition.argv,
            workdir_files=definition.workdir_files,
            env_vars=definition.env_vars,
            ports=definition.ports,
            gpu_indices=allocation.gpu_indices,
            uses_gpu=isinstance(definition.resources.device, GpuDevice),
            uses_tpu=definition.placement.demand.tpu,
            setup_scripts=definition.setup_scripts,
            bundle_id=definition.bundle_id,
            resources=definition.resources,
        )

    # ---- attempt lifecycle ------------------------------------------------------------------

    def attempt_started(self, uid: int, ports: dict[str, int]) -> None:
        """The attempt's process is running."""
        attempt = self.attempts.get(uid)
        if attempt is None or attempt.state != TaskState.ASSIGNED:
            return
        now_ms = self._wall_ms()
        attempt.state = TaskState.RUNNING
        attempt.started_at_ms = now_ms
        attempt.ports = dict(ports)
        task = attempt.task
        if task.current is attempt and task.state == TaskState.ASSIGNED:
            task.state = TaskState.RUNNING
            task.started_at_ms = task.started_at_ms or now_ms
            job = task.job
            job.started_at_ms = job.started_at_ms or now_ms
            self._update_job(job)

    def attempt_exited(self, uid: int, returncode: int, error: str = "") -> list[Effect]:
        """The attempt's process is gone: free its resources and judge its outcome."""
        attempt = self.attempts.pop(uid, None)
        if attempt is None:
            return []
        attempt.process_gone = True
        capacity = self.capacities.get(attempt.worker_id)
        if capacity is not None:
            capacity.give(attempt.allocation)
        self.wants_pass = True
        if not attempt.active:  # we ended it ourselves; the outcome is already recorded
            attempt.finished_at_ms = attempt.finished_at_ms or self._wall_ms()
            return []
        if returncode == 0:
            return self._finish_attempt(attempt, TaskState.SUCCEEDED, 0, "")
        exit_code = returncode if returncode > 0 else 128 - returncode
        detail = error or f"exit code {exit_code}"
        return self._finish_attempt(attempt, TaskState.FAILED, exit_code, detail)

    def _finish_attempt(
        self, attempt: AttemptRecord, state: TaskState, exit_code: int, error: str, *, worker_failure: bool = False
    ) -> list[Effect]:
        task = attempt.task
        job = task.job
        was_assigned = attempt.state == TaskState.ASSIGNED
        attempt.state = state
        attempt.exit_code = exit_code
        attempt.error = error
        attempt.finished_at_ms = self._wall_ms()
        attempt.is_worker_failure = worker_failure
        self.endpoints.remove_attempt(attempt.uid)
        if task.current is not attempt or job.state.finished or self.jobs.get(job.wire) is not job:
            return []
        task.exit_code = exit_code
        task.error = error
        definition = job.definition
        effects: list[Effect] = []
        if state == TaskState.SUCCEEDED:
            self._settle(task, TaskState.SUCCEEDED)
        elif state == TaskState.FAILED:
            job.failure_count += 1
            if definition.coscheduled:
                effects.extend(self._gang_round_ended(task, preempted=False, free=False))
            elif task.failure_retries < definition.max_retries_failure:
                task.failure_retries += 1
                self._requeue(task)
            else:
                self._settle(task, TaskState.FAILED)
                job.task_failures += 1
        elif state in (TaskState.WORKER_FAILED, TaskState.PREEMPTED):
            job.preemption_count += 1
            if definition.coscheduled:
                effects.extend(self._gang_round_ended(task, preempted=True, free=was_assigned))
            elif was_assigned:
                self._requeue(task)  # lost before it ever ran: retried for free
            elif task.preemption_retries < definition.max_retries_preemption:
                task.preemption_retries += 1
                self._requeue(task)
            else:
                self._settle(task, state)
        else:
            self._settle(task, state)
        effects.extend(self._update_job(job))
        return effects

    def _gang_round_ended(self, task: TaskRecord, *, preempted: bool, free: bool) -> list[Effect]:
        """One member of a coscheduled job failed or lost its worker: end the round for all."""
        job = task.job
        definition = job.definition
        effects: list[Effect] = []
        cause = "lost its worker" if preempted else "failed"
        for sibling in job.tasks:
            current = sibling.current
            if sibling is task or current is None or not current.active:
                continue
            current.state = TaskState.COSCHED_FAILED
            current.error = f"coscheduled sibling {task.wire} {cause}"
            current.finished_at_ms = self._wall_ms()
            self.endpoints.remove_attempt(current.uid)
            sibling.error = current.error
            effects.append(Kill(current.uid))
        if preempted:
            if not free:
                job.gang_preempted_rounds += 1
            retry = free or job.gang_preempted_rounds <= definition.max_retries_preemption
        else:
            job.gang_failed_rounds += 1
            retry = job.gang_failed_rounds <= definition.max_retries_failure
            if not retry:
                job.task_failures += 1  # one crashed round is one failure
                retry = job.task_failures <= definition.max_task_failures
        if retry:
            for member in job.tasks:
                self._requeue(member)
        else:
            current = task.current
            self._settle(task, current.state if current is not None else TaskState.FAILED)
            for member in job.tasks:
                if member is not task and not member.state.finished:
                    self._settle(member, TaskState.COSCHED_FAILED)
        return effects

    def _settle(self, task: TaskRecord, state: TaskState) -> None:
        task.state = state
        task.finished_at_ms = self._wall_ms()

    def _requeue(self, task: TaskRecord) -> None:
        task.state = TaskState.PENDING
        task.pending_since = self._clock()
        task.finished_at_ms = 0
        self._pending[task.job.wire] = task.job
        self._arm_scheduling_timeout(task)
        self.wants_pass = True

    # ---- job outcome ------------------------------------------------------------------------

    def _update_job(self, job: JobRecord) -> list[Effect]:
        if job.state.finished:
            return []
        state = roll_up(job)
        if state == job.state:
            return []
        job.state = state
        if state == JobState.RUNNING and not job.started_at_ms:
            job.started_at_ms = self._wall_ms()
        return self._finalize(job) if state.finished else []

    def _finalize(self, job: JobRecord) -> list[Effect]:
        """The job reached a terminal state: explain it, kill leftovers, cascade to children."""
        job.finished_at_ms = self._wall_ms()
        self._pending.pop(job.wire, None)
        culprit_state = {
            JobState.FAILED: (TaskState.FAILED, TaskState.COSCHED_FAILED),
            JobState.UNSCHEDULABLE: (TaskState.UNSCHEDULABLE,),
            JobState.KILLED: (TaskState.KILLED,),
            JobState.WORKER_FAILED: (TaskState.WORKER_FAILED, TaskState.PREEMPTED),
        }.get(job.state, ())
        culprit = next((t for wanted in culprit_state for t in job.tasks if t.state == wanted), None)
        if culprit is not None and not job.error:
            job.exit_code = culprit.exit_code
            verb = "failed" if job.state == JobState.FAILED else job.state.name.lower()
            job.error = (
                f"task {culprit.wire} {verb}: {culprit.error}" if culprit.error else f"task {culprit.wire} {verb}"
            )
        effects = self._kill_unfinished_tasks(job, f"job {job.wire} ended {job.state.name}", keep_errors=True)
        preserve = job.state == JobState.WORKER_FAILED and job.definition.preemption_policy == PRESERVE_CHILDREN
        if job.state != JobState.SUCCEEDED and not preserve:
            for child in list(job.children.values()):
                effects.extend(self._kill_tree(child, f"parent job {job.wire} ended {job.state.name}"))
        self._slim(job)
        if job.parent is None:
            self._finished_roots.append(job)
            effects.extend(self._prune_finished())
        return effects

    @staticmethod
    def _slim(job: JobRecord) -> None:
        """A finished job never runs again: drop its (possibly large) workdir file contents."""
        files = job.request.entrypoint.workdir_files
        for name in list(files):
            files[name] = b""
        job.definition = dataclasses.replace(job.definition, workdir_files={})

    def _stop_attempt(self, attempt: AttemptRecord, state: TaskState, reason: str) -> Kill:
        attempt.state = state
        attempt.error = reason
        attempt.finished_at_ms = self._wall_ms()
        self.endpoints.remove_attempt(attempt.uid)
        return Kill(attempt.uid)

    def _kill_unfinished_tasks(self, job: JobRecord, reason: str, *, keep_errors: bool) -> list[Effect]:
        """Stop the running attempt of every unfinished task of `job` and settle the task KILLED
        with `reason` as its error (unless `keep_errors` and it already has one)."""
        effects: list[Effect] = []
        for task in job.tasks:
            if task.state.finished:
                continue
            current = task.current
            if current is not None and current.active:
                effects.append(self._stop_attempt(current, TaskState.KILLED, reason))
            self._settle(task, TaskState.KILLED)
            if not (keep_errors and task.error):
                task.error = reason
        return effects

    def _kill_tree(self, job: JobRecord, reason: str) -> list[Effect]:
        """Kill `job` and its descendants, children first."""
        effects: list[Effect] = []
        for child in list(job.children.values()):
            effects.extend(self._kill_tree(child, reason))
        if job.state.finished:
            return effects
        effects.extend(self._kill_unfinished_tasks(job, reason, keep_errors=False))
        job.state = JobState.KILLED
        job.error = reason
        effects.extend(self._finalize(job))
        return effects

    def terminate(self, job_id: str) -> list[Effect]:
        """TerminateJob: kill the job and all its descendants. NotFound if unknown."""
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return self._kill_tree(job, f"job {job_id} was terminated")

    # ---- timers -----------------------------------------------------------------------------

    def _push_timer(self, deadline: float, kind: str, ref: object, token: object) -> None:
        heapq.heappush(self._timers, (deadline, next(self._timer_seq), kind, ref, token))

    def _arm_scheduling_timeout(self, task: TaskRecord) -> None:
        timeout = task.job.definition.scheduling_timeout_s
        if timeout is not None:
            self._push_timer(task.pending_since + timeout, "schedule", task, task.pending_since)

    def next_deadline(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def expire(self) -> list[Effect]:
        """Apply every timeout that has passed: UNSCHEDULABLE pending tasks, KILLED slow ones."""
        now = self._clock()
        effects: list[Effect] = []
        while self._timers and self._timers[0][0] <= now:
            _, _, kind, ref, token = heapq.heappop(self._timers)
            if kind == "schedule":
                assert isinstance(ref, TaskRecord)
                effects.extend(self._scheduling_timed_out(ref, token))
            else:
                assert isinstance(ref, AttemptRecord)
                if self.attempts.get(ref.uid) is ref and ref.active:
                    seconds = ref.task.job.definition.timeout_s
                    effects.append(Kill(ref.uid))
                    effects.extend(self._finish_attempt(ref, TaskState.KILLED, 137, f"timed out after {seconds:g} s"))
        return effects

    def _scheduling_timed_out(self, task: TaskRecord, token: object) -> list[Effect]:
        job = task.job
        if task.state != TaskState.PENDING or task.pending_since != token or self.jobs.get(job.wire) is not job:
            return []
        seconds = job.definition.scheduling_timeout_s
        targets = [t for t in job.tasks if t.state == TaskState.PENDING] if job.definition.coscheduled else [task]
        why = job.pending_reason or "no worker had room"
        for target in targets:
            self._settle(target, TaskState.UNSCHEDULABLE)
            target.error = f"not scheduled within {seconds:g} s: {why}"
        return self._update_job(job)

    # ---- workers ------------------------------------------------------------------------------

    def _capacity(self, worker_id: str) -> WorkerCapacity:
        capacity = self.capacities.get(worker_id)
        if capacity is None:
            raise NotFound(f"worker {worker_id} not found (workers: {', '.join(sorted(self.capacities))})")
        return capacity

    def kill_worker(self, worker_id: str) -> list[Effect]:
        """The worker died: its attempts become WORKER_FAILED and retry elsewhere."""
        capacity = self._capacity(worker_id)
        capacity.alive = False
        effects: list[Effect] = []
        victims = [a for a in self.attempts.values() if a.worker_id == worker_id and a.active]
        for attempt in victims:
            if not attempt.active:  # ended by a gang sibling handled earlier in this loop
                continue
            effects.append(Kill(attempt.uid))
            effects.extend(
                self._finish_attempt(
                    attempt, TaskState.WORKER_FAILED, 137, f"worker {worker_id} died", worker_failure=True
                )
            )
        self.wants_pass = True
        return effects

    def revive_worker(self, worker_id: str) -> None:
        self._capacity(worker_id).alive = True
        self.wants_pass = True

    def add_worker(self, spec: WorkerSpec, address: str) -> None:
        """A worker joins: a new host at `address`. Raises ValueError when its id is taken."""
        if spec.worker_id in self.capacities:
            raise ValueError(f"worker {spec.worker_id} already exists")
        self.capacities[spec.worker_id] = WorkerCapacity(spec)
        self._worker_hosts[spec.worker_id] = address
        self.wants_pass = True
