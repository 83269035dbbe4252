"""The cluster state machine alone: no processes, a fake clock, effects checked directly."""

from __future__ import annotations

import dataclasses

import pytest

from fray_ray.cluster import cpu_worker, tpu_slice
from fray_ray.cluster._jobs import roll_up
from fray_ray.cluster._state import ClusterState, ForgetLogs, Kill
from fray_ray.cluster._worker import AttemptLaunch
from fray_ray.iris.controller_client import today
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from fray_ray.iris.names import JobName
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.types import (
    ExistingJobPolicy,
    JobSpec,
    JobState,
    ResourceSpec,
    TaskState,
    TpuDevice,
)

Controller = controller_pb2.Controller


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(name: str = "/u/j", **kwargs: object) -> JobSpec:
    kwargs.setdefault("resources", ResourceSpec(cpu_millicores=1000))
    return JobSpec(name=JobName.from_wire(name), entrypoint=command_entrypoint(["true"]), **kwargs)  # type: ignore[arg-type]


def request(name: str = "/u/j", date: str | None = None, **kwargs: object) -> Controller.LaunchJobRequest:
    return spec(name, **kwargs).to_proto(client_revision_date=today() if date is None else date)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> ClusterState:
    return ClusterState(
        [cpu_worker("a", cpu=2, memory="4g", disk="1g"), cpu_worker("b", cpu=2, memory="4g", disk="1g")], clock=clock
    )


def launches(effects: list) -> list[AttemptLaunch]:
    return [e for e in effects if isinstance(e, AttemptLaunch)]


def run_all(state: ClusterState) -> list[AttemptLaunch]:
    """Schedule and mark every launched attempt started."""
    started = launches(state.schedule())
    for launch in started:
        state.attempt_started(launch.uid, {})
    return started


def test_replicas_expand_into_indexed_tasks(state: ClusterState) -> None:
    job_id, _ = state.submit(request(replicas=3))
    assert job_id == "/u/j"
    assert [t.wire for t in state.job(job_id).tasks] == ["/u/j/0", "/u/j/1", "/u/j/2"]
    assert all(t.state == TaskState.PENDING for t in state.job(job_id).tasks)
    started = run_all(state)
    assert sorted(l.task_id for l in started) == ["/u/j/0", "/u/j/1", "/u/j/2"]
    assert {l.attempt_wire for l in started} == {"/u/j/0:0", "/u/j/1:0", "/u/j/2:0"}
    assert state.job(job_id).state == JobState.RUNNING


def test_packing_respects_cpu(state: ClusterState) -> None:
    state.submit(request(replicas=5))  # 4 CPUs in total, 1 each
    assert len(run_all(state)) == 4
    job = state.job("/u/j")
    assert sum(t.state == TaskState.PENDING for t in job.tasks) == 1
    assert "cpu" in job.pending_reason
    first = job.tasks[0].current
    assert first is not None
    state.attempt_exited(first.uid, 0)
    assert len(run_all(state)) == 1


def test_retry_on_failure_makes_new_attempts(state: ClusterState) -> None:
    state.submit(request(max_retries_failure=2))
    for attempt in range(3):
        (launch,) = run_all(state)
        assert launch.attempt_id == attempt
        state.attempt_exited(launch.uid, 1)
    task = state.task("/u/j/0")
    assert task.state == TaskState.FAILED
    assert [a.attempt_id for a in task.attempts] == [0, 1, 2]
    job = state.job("/u/j")
    assert job.state == JobState.FAILED and job.failure_count == 3
    assert "exit code 1" in job.error


def test_max_task_failures_tolerates_failed_tasks(state: ClusterState) -> None:
    state.submit(request(replicas=3, max_task_failures=1))
    first, second, third = sorted(run_all(state), key=lambda l: l.task_id)
    state.attempt_exited(second.uid, 2)
    assert state.job("/u/j").state == JobState.RUNNING
    state.attempt_exited(first.uid, 0)
    state.attempt_exited(third.uid, 0)
    assert state.job("/u/j").state == JobState.SUCCEEDED


def test_job_failure_kills_remaining_tasks(state: ClusterState) -> None:
    state.submit(request(replicas=2))
    first, second = sorted(run_all(state), key=lambda l: l.task_id)
    effects = state.attempt_exited(first.uid, 3)
    assert Kill(second.uid) in effects
    job = state.job("/u/j")
    assert job.state == JobState.FAILED and job.exit_code == 3
    assert job.tasks[1].state == TaskState.KILLED


def test_worker_loss_retries_under_preemption_budget(state: ClusterState) -> None:
    state.submit(request(max_retries_preemption=1, resources=ResourceSpec(cpu_millicores=2000)))
    (launch,) = run_all(state)
    effects = state.kill_worker(launch.worker_id)
    assert Kill(launch.uid) in effects
    task = state.task("/u/j/0")
    assert task.attempts[0].state == TaskState.WORKER_FAILED and task.attempts[0].is_worker_failure
    (retry,) = run_all(state)
    assert retry.worker_id != launch.worker_id and retry.attempt_id == 1
    state.kill_worker(retry.worker_id)
    assert task.state == TaskState.WORKER_FAILED
    assert state.job("/u/j").state == JobState.WORKER_FAILED
    assert state.job("/u/j").preemption_count == 2


def test_worker_loss_before_start_retries_for_free(state: ClusterState) -> None:
    state.submit(request(max_retries_preemption=0))
    (launch,) = launches(state.schedule())  # ASSIGNED, never started
    state.kill_worker(launch.worker_id)
    (retry,) = run_all(state)
    assert retry.attempt_id == 1


def test_roll_up_precedence(state: ClusterState) -> None:
    state.submit(request(replicas=4, max_task_failures=5))
    job = state.job("/u/j")
    states = [TaskState.SUCCEEDED, TaskState.UNSCHEDULABLE, TaskState.KILLED, TaskState.RUNNING]
    for task, task_state in zip(job.tasks, states):
        task.state = task_state
    assert roll_up(job) == JobState.UNSCHEDULABLE
    job.tasks[1].state = TaskState.PENDING
    assert roll_up(job) == JobState.KILLED
    job.tasks[2].state = TaskState.PENDING
    assert roll_up(job) == JobState.RUNNING
    job.tasks[3].state = TaskState.PENDING
    assert roll_up(job) == JobState.PENDING
    for task in job.tasks:
        task.state = TaskState.SUCCEEDED
    assert roll_up(job) == JobState.SUCCEEDED
    job.tasks[0].state = TaskState.WORKER_FAILED
    assert roll_up(job) == JobState.WORKER_FAILED
    job.task_failures = 6
    assert roll_up(job) == JobState.FAILED


def test_existing_job_policies(state: ClusterState) -> None:
    state.submit(request())
    with pytest.raises(AlreadyExists):
        state.submit(request())  # UNSPECIFIED while running
    with pytest.raises(AlreadyExists):
        state.submit(request(existing_job_policy=ExistingJobPolicy.ERROR))
    job_id, effects = state.submit(request(existing_job_policy=ExistingJobPolicy.KEEP))
    assert job_id == "/u/j" and effects == []
    original = state.job("/u/j")
    (launch,) = run_all(state)
    _, effects = state.submit(request(existing_job_policy=ExistingJobPolicy.RECREATE))
    assert Kill(launch.uid) in effects and any(isinstance(e, ForgetLogs) for e in effects)
    assert original.state == JobState.KILLED and state.job("/u/j") is not original
    (relaunch,) = run_all(state)
    assert relaunch.attempt_id == 0
    state.attempt_exited(launch.uid, -9)  # the old attempt's exit changes nothing now
    assert state.job("/u/j").state == JobState.RUNNING
    state.attempt_exited(relaunch.uid, 0)
    with pytest.raises(AlreadyExists):
        state.submit(request(existing_job_policy=ExistingJobPolicy.ERROR))  # finished, still ERROR
    finished = state.job("/u/j")
    state.submit(request())  # UNSPECIFIED replaces a finished job
    assert state.job("/u/j") is not finished
    state.terminate("/u/j")
    state.submit(request(existing_job_policy=ExistingJobPolicy.KEEP))  # KEEP replaces a finished job
    assert state.job("/u/j").state == JobState.PENDING


def test_children_need_a_live_parent_and_die_with_it(state: ClusterState) -> None:
    with pytest.raises(FailedPrecondition, match="does not exist"):
        state.submit(request("/u/p/c"))
    state.submit(request("/u/p"))
    state.submit(request("/u/p/c"))
    state.submit(request("/u/p/c/g"))
    effects = state.terminate("/u/p")
    assert state.job("/u/p/c/g").state == JobState.KILLED
    assert state.job("/u/p/c").state == JobState.KILLED
    assert effects == [] or all(isinstance(e, Kill) for e in effects)
    with pytest.raises(FailedPrecondition, match="already finished"):
        state.submit(request("/u/p/d"))


def test_failed_parent_cancels_children_but_succeeded_parent_does_not(state: ClusterState) -> None:
    state.submit(request("/u/p", resources=ResourceSpec(cpu_millicores=100)))
    state.submit(request("/u/p/c", resources=ResourceSpec(cpu_millicores=100)))
    launched = {l.task_id: l for l in run_all(state)}
    state.attempt_exited(launched["/u/p/0"].uid, 0)
    assert state.job("/u/p").state == JobState.SUCCEEDED
    assert state.job("/u/p/c").state == JobState.RUNNING
    state.submit(request("/u/q", resources=ResourceSpec(cpu_millicores=100)))
    state.submit(request("/u/q/c", resources=ResourceSpec(cpu_millicores=100)))
    launched = {l.task_id: l for l in run_all(state)}
    effects = state.attempt_exited(launched["/u/q/0"].uid, 1)
    assert state.job("/u/q").state == JobState.FAILED
    assert state.job("/u/q/c").state == JobState.KILLED
    assert Kill(launched["/u/q/c/0"].uid) in effects


def test_unsatisfiable_requests_are_rejected_naming_the_resource(state: ClusterState) -> None:
    with pytest.raises(FailedPrecondition, match="cpu"):
        state.submit(request(resources=ResourceSpec(cpu_millicores=64000)))
    with pytest.raises(FailedPrecondition, match="memory"):
        state.submit(request(resources=ResourceSpec(memory_bytes=1 << 40)))
    with pytest.raises(FailedPrecondition, match="device-type"):
        state.submit(request(resources=ResourceSpec(device=TpuDevice("v5p-16"))))
    with pytest.raises(FailedPrecondition, match="has attribute .tpu-name."):
        state.submit(request(coscheduling_group_by="tpu-name", replicas=2))


def test_invalid_requests(state: ClusterState) -> None:
    bad = request()
    bad.name = ""
    with pytest.raises(InvalidArgument):
        state.submit(bad)
    bad.name = "no-slash"
    with pytest.raises(InvalidArgument):
        state.submit(bad)
    bad = request()
    bad.entrypoint.run_command.ClearField("argv")
    with pytest.raises(InvalidArgument):
        state.submit(bad)
    bad = request()
    bad.max_retries_failure = -1
    with pytest.raises(InvalidArgument):
        state.submit(bad)
    bad = request()
    bad.entrypoint.workdir_files["../escape"] = b"x"
    with pytest.raises(InvalidArgument):
        state.submit(bad)


def test_freshness_window(clock: Clock) -> None:
    strict = ClusterState([cpu_worker("a", cpu=1)], client_freshness_days=14, clock=clock)
    with pytest.raises(FailedPrecondition, match="client is too old"):
        strict.submit(request(date="2020-01-01"))
    with pytest.raises(FailedPrecondition, match="client is too old"):
        strict.submit(request(date=""))  # read as the introduction date, long ago
    strict.submit(request())
    strict.submit(request("/u/j/child", date="2020-01-01"))  # children are exempt
    lenient = ClusterState([cpu_worker("a", cpu=1)], clock=clock)
    lenient.submit(request(date="2020-01-01"))


def test_scheduling_timeout_makes_tasks_unschedulable(state: ClusterState, clock: Clock) -> None:
    state.submit(request("/u/big", resources=ResourceSpec(cpu_millicores=2000), replicas=2))
    run_all(state)
    state.submit(request(resources=ResourceSpec(cpu_millicores=2000), scheduling_timeout_s=5))
    run_all(state)
    clock.now += 4
    assert state.expire() == [] and state.job("/u/j").state == JobState.PENDING
    clock.now += 2
    state.expire()
    job = state.job("/u/j")
    assert job.state == JobState.UNSCHEDULABLE
    assert "not scheduled within 5 s" in job.error


def test_timeout_kills_running_task(state: ClusterState, clock: Clock) -> None:
    state.submit(request(timeout_s=3))
    (launch,) = run_all(state)
    clock.now += 3.5
    effects = state.expire()
    assert Kill(launch.uid) in effects
    job = state.job("/u/j")
    assert job.state == JobState.KILLED and "timed out" in job.error


def test_gang_is_all_or_nothing_and_restarts_together(clock: Clock) -> None:
    state = ClusterState(tpu_slice("v5p-16", "s"), clock=clock)
    tpu = ResourceSpec(cpu_millicores=1000, device=TpuDevice("v5p-16"))
    state.submit(request("/u/blocker", resources=tpu))
    (blocker,) = run_all(state)
    state.submit(request(replicas=2, resources=tpu, coscheduling_group_by="tpu-name", max_retries_failure=1))
    assert run_all(state) == []  # one host busy: neither task starts
    assert all(t.state == TaskState.PENDING for t in state.job("/u/j").tasks)
    state.attempt_exited(blocker.uid, 0)
    first_round = sorted(run_all(state), key=lambda l: l.task_id)
    assert [l.worker_id for l in first_round] == ["s-w0", "s-w1"]  # task i on host i
    effects = state.attempt_exited(first_round[1].uid, 1)
    assert Kill(first_round[0].uid) in effects
    job = state.job("/u/j")
    assert job.tasks[0].attempts[0].state == TaskState.COSCHED_FAILED
    assert run_all(state) == []  # the killed sibling still holds its host
    state.attempt_exited(first_round[0].uid, -9)
    second_round = run_all(state)
    assert sorted(l.attempt_id for l in second_round) == [1, 1]
    for launch in second_round:
        state.attempt_exited(launch.uid, 0)
    assert job.state == JobState.SUCCEEDED and job.task_failures == 0


def test_gang_failure_without_retries_fails_job(clock: Clock) -> None:
    state = ClusterState(tpu_slice("v5p-16", "s"), clock=clock)
    tpu = ResourceSpec(cpu_millicores=1000, device=TpuDevice("v5p-16"))
    state.submit(request(replicas=2, resources=tpu, coscheduling_group_by="tpu-name"))
    first, second = sorted(run_all(state), key=lambda l: l.task_id)
    state.attempt_exited(first.uid, 1)
    job = state.job("/u/j")
    assert job.state == JobState.FAILED
    assert [t.state for t in job.tasks] == [TaskState.FAILED, TaskState.COSCHED_FAILED]


def test_gang_round_counts_once_against_max_task_failures(clock: Clock) -> None:
    state = ClusterState(tpu_slice("v5p-16", "s"), clock=clock)
    tpu = ResourceSpec(cpu_millicores=1000, device=TpuDevice("v5p-16"))
    state.submit(request(replicas=2, resources=tpu, coscheduling_group_by="tpu-name", max_task_failures=1))
    first, second = run_all(state)
    state.attempt_exited(first.uid, 1)
    state.attempt_exited(second.uid, -9)
    job = state.job("/u/j")
    assert job.task_failures == 1 and job.state == JobState.PENDING  # tolerated: the gang restarts
    again = run_all(state)
    assert len(again) == 2
    state.attempt_exited(again[0].uid, 1)
    assert job.state == JobState.FAILED and job.task_failures == 2


def test_endpoint_registration_rules(state: ClusterState) -> None:
    def register(task_id: str, attempt: int, name: str = "/u/j/svc", endpoint_id: str = "") -> str:
        req = Controller.RegisterEndpointRequest(
            name=name, address="127.0.0.1:1", task_id=task_id, attempt_id=attempt, endpoint_id=endpoint_id
        )
        return state.register_endpoint(req, default_lease_s=60)[0]

    with pytest.raises(NotFound):
        register("/u/nope/0", 0)
    state.submit(request(max_retries_failure=1))
    (launch,) = run_all(state)
    endpoint_id = register("/u/j/0", 0)
    assert [r.endpoint_id for r in state.list_endpoints("/u/j/svc", exact=True)] == [endpoint_id]
    assert register("/u/j/0", 0, endpoint_id=endpoint_id) == endpoint_id
    assert len(state.list_endpoints("/u/j/", exact=False)) == 1
    state.attempt_exited(launch.uid, 1)  # retried: the attempt's endpoints go away
    assert state.list_endpoints("/u/j/", exact=False) == []
    (retry,) = run_all(state)
    with pytest.raises(FailedPrecondition, match="stale attempt"):
        register("/u/j/0", 0)
    register("/u/j/0", 1)
    state.attempt_exited(retry.uid, 0)
    with pytest.raises(FailedPrecondition, match="finished"):
        register("/u/j/0", 1)
    assert state.list_endpoints("/u/j/", exact=False) == []


def test_endpoint_lease_expires(state: ClusterState, clock: Clock) -> None:
    state.submit(request())
    run_all(state)
    req = Controller.RegisterEndpointRequest(name="/u/j/svc", address="a", task_id="/u/j/0", attempt_id=0)
    req.lease_duration.milliseconds = 10_000
    state.register_endpoint(req, default_lease_s=60)
    clock.now += 9
    assert len(state.list_endpoints("/u/j/svc", exact=True)) == 1
    clock.now += 2
    assert state.list_endpoints("/u/j/svc", exact=True) == []


def test_deeper_jobs_are_placed_first(clock: Clock) -> None:
    state = ClusterState([cpu_worker("a", cpu=1)], clock=clock)
    state.submit(request("/u/p", resources=ResourceSpec(cpu_millicores=0)))
    run_all(state)
    state.submit(request("/u/later", resources=ResourceSpec(cpu_millicores=1000)))
    state.submit(request("/u/p/child", resources=ResourceSpec(cpu_millicores=1000)))
    (launch,) = run_all(state)
    assert launch.task_id == "/u/p/child/0"


def test_definition_is_frozen(state: ClusterState) -> None:
    state.submit(request())
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.job("/u/j").definition.replicas = 5  # type: ignore[misc]


def test_old_finished_root_jobs_are_forgotten(clock: Clock) -> None:
    state = ClusterState([cpu_worker("a", cpu=4)], clock=clock, max_finished_roots=2)
    for name in ("/u/a", "/u/b", "/u/c"):
        state.submit(request(name))
        (launch,) = run_all(state)
        effects = state.attempt_exited(launch.uid, 0)
    assert sorted(state.jobs) == ["/u/b", "/u/c"]
    assert any(isinstance(e, ForgetLogs) for e in effects)
    assert state.job("/u/c").request.entrypoint.workdir_files == {} or all(
        v == b"" for v in state.job("/u/c").request.entrypoint.workdir_files.values()
    )


def test_preserve_children_policy_spares_children_of_a_preempted_parent(state: ClusterState) -> None:
    parent = request("/u/p", max_retries_preemption=0, resources=ResourceSpec(cpu_millicores=2000))
    parent.preemption_policy = 2  # PRESERVE_CHILDREN
    state.submit(parent)
    (launch,) = run_all(state)
    state.submit(request("/u/p/c", resources=ResourceSpec(cpu_millicores=100)))
    run_all(state)
    state.kill_worker(launch.worker_id)
    assert state.job("/u/p").state == JobState.WORKER_FAILED
    assert not state.job("/u/p/c").state.finished
