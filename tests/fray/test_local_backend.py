"""LocalClient specifics: binary jobs and their processes, logs, timeouts, the actor registry,
max_concurrency, actor lifecycle (fail, restart, shutdown), and cleanup."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future
from pathlib import Path

import cloudpickle
import pytest

from fray_ray.fray import (
    ActorConfig,
    ActorUnavailableError,
    Client,
    Entrypoint,
    EnvironmentConfig,
    FrayError,
    JobRequest,
    JobStatus,
    LocalClient,
    current_actor,
    current_client,
    set_current_client,
)
from fray_ray.fray.local_backend import _CLIENTS, LocalActorHandle

DEADLINE = 20.0


def _callable_job(name: str, fn, *args, **kwargs) -> JobRequest:
    return JobRequest(name=name, entrypoint=Entrypoint.from_callable(fn, args=args), **kwargs)


def _python_job(name: str, code: str, **kwargs) -> JobRequest:
    return JobRequest(name=name, entrypoint=Entrypoint.from_binary(sys.executable, ["-u", "-c", code]), **kwargs)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie waiting for its reaper is gone as far as we are concerned
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


# -- callable jobs ------------------------------------------------------------------------------


def test_callable_job_sees_this_client_when_none_was_set(client: LocalClient) -> None:
    seen: list[object] = []
    client.submit(_callable_job("who", lambda: seen.append(current_client()))).wait(timeout=DEADLINE)
    assert seen == [client]


def test_callable_job_logs_capture_its_own_output(client: LocalClient, capsys: pytest.CaptureFixture[str]) -> None:
    stdout_before = sys.stdout

    def chatty() -> None:
        print("line one")
        print("to stderr", file=sys.stderr)
        print("unterminated", end="")

    job = client.submit(_callable_job("chatty", chatty))
    print("from the test thread")
    job.wait(timeout=DEADLINE)
    assert job.logs() == ("line one", "to stderr", "unterminated")
    assert job.logs(max_lines=1) == ("unterminated",)
    # The routing proxy stays (removing it under a concurrent print() can crash CPython) and
    # passes the test thread's text straight through to the stream it wraps.
    assert getattr(sys.stdout, "_target", sys.stdout) is stdout_before
    captured = capsys.readouterr()
    assert "line one" in captured.out and "from the test thread" in captured.out  # still reaches the stream


def test_callable_job_logs_do_not_mix(client: LocalClient) -> None:
    both_printing = threading.Barrier(2, timeout=DEADLINE)

    def speaker(word: str) -> None:
        both_printing.wait()
        for _ in range(20):
            print(word)

    a = client.submit(_callable_job("a", speaker, "alpha"))
    b = client.submit(_callable_job("b", speaker, "beta"))
    a.wait(timeout=DEADLINE)
    b.wait(timeout=DEADLINE)
    assert a.logs() == ("alpha",) * 20
    assert b.logs() == ("beta",) * 20


def test_callable_job_timeout_gives_stopped(client: LocalClient) -> None:
    gate = threading.Event()
    try:
        job = client.submit(_callable_job("late", gate.wait, DEADLINE, timeout=0.1))
        assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED
    finally:
        gate.set()


def test_system_exit_zero_is_success(client: LocalClient) -> None:
    def exit_ok() -> None:
        sys.exit(0)

    def exit_bad() -> None:
        sys.exit(3)

    assert client.submit(_callable_job("ok", exit_ok)).wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    bad = client.submit(_callable_job("bad", exit_bad))
    assert bad.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED


# -- binary jobs --------------------------------------------------------------------------------


def test_binary_job_succeeds_with_logs(client: LocalClient) -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); print('last')"
    job = client.submit(_python_job("bin-ok", code))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert set(job.logs()) == {"out", "err", "last"}
    assert len(job.logs(max_lines=2)) == 2


def test_binary_logs_keep_carriage_return_progress_in_one_line(client: LocalClient) -> None:
    job = client.submit(_python_job("progress", "import sys; sys.stdout.write('10%\\r50%\\r100%\\ndone\\n')"))
    job.wait(timeout=DEADLINE)
    assert job.logs() == ("10%\r50%\r100%", "done")


def test_binary_job_failure_raises_called_process_error(client: LocalClient) -> None:
    job = client.submit(_python_job("bin-bad", "import sys; print('dying'); sys.exit(7)"))
    with pytest.raises(subprocess.CalledProcessError) as info:
        job.wait(timeout=DEADLINE)
    assert info.value.returncode == 7
    assert job.status() is JobStatus.FAILED
    assert job.logs() == ("dying",)


def test_binary_job_missing_program_fails(client: LocalClient) -> None:
    request = JobRequest(name="nope", entrypoint=Entrypoint.from_binary("/nonexistent/program-xyz"))
    job = client.submit(request)
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    assert "program-xyz" in job.logs()[0]


def test_binary_job_gets_environment_variables(client: LocalClient, tmp_path: Path) -> None:
    env = EnvironmentConfig(workspace=str(tmp_path), env_vars={"FRAY_TEST_VALUE": "forty-two"})
    job = client.submit(_python_job("env", "import os; print(os.environ['FRAY_TEST_VALUE'])", environment=env))
    job.wait(timeout=DEADLINE)
    assert job.logs() == ("forty-two",)


_SPAWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])  # appears complete or not at all
    time.sleep(600)
    """
)


def _start_spawner(client: LocalClient, tmp_path: Path, eventually, **kwargs):
    pid_file = tmp_path / "pids"
    request = JobRequest(
        name="spawner", entrypoint=Entrypoint.from_binary(sys.executable, ["-c", _SPAWNER, str(pid_file)]), **kwargs
    )
    job = client.submit(request)
    eventually(pid_file.exists, "the job to write its pids")
    parent, child = (int(p) for p in pid_file.read_text().split())
    return job, parent, child


def test_terminate_kills_the_binary_jobs_process_group(client: LocalClient, tmp_path: Path, eventually) -> None:
    job, parent, child = _start_spawner(client, tmp_path, eventually)
    assert job.status() is JobStatus.RUNNING
    job.terminate()
    assert job.status() is JobStatus.STOPPED
    assert not _pid_alive(parent)  # the leader is killed and reaped before terminate() returns
    eventually(lambda: not _pid_alive(child), "the job's child process to die")
    assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED


def test_binary_job_timeout_kills_it(client: LocalClient, tmp_path: Path, eventually) -> None:
    job, parent, child = _start_spawner(client, tmp_path, eventually, timeout=1.0)
    assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED
    eventually(lambda: not _pid_alive(parent) and not _pid_alive(child), "the timed-out job's processes to die")


def test_shutdown_kills_running_binary_jobs(tmp_path: Path, eventually) -> None:
    local = LocalClient(max_threads=2)
    job, parent, child = _start_spawner(local, tmp_path, eventually)
    local.shutdown()
    assert job.status() is JobStatus.STOPPED
    eventually(lambda: not _pid_alive(parent) and not _pid_alive(child), "processes to die at shutdown")


def test_binary_log_files_are_removed(client: LocalClient) -> None:
    client.submit(_python_job("logs", "print('x')")).wait(timeout=DEADLINE)
    log_dir = client._log_dir
    assert log_dir is not None and os.path.isdir(log_dir)
    assert os.listdir(log_dir) == []  # a finished job's lines are kept in memory
    client.shutdown()
    assert not os.path.exists(log_dir)


# -- max_concurrency ----------------------------------------------------------------------------


class Recorder:
    """Records the order calls start and end, and how many overlap."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[str] = []
        self.active = 0
        self.most_active = 0

    def step(
        self,
        tag: str,
        gate: threading.Event | None = None,
        barrier: threading.Barrier | None = None,
        started: threading.Event | None = None,
    ) -> str:
        if started is not None:
            started.set()
        with self.lock:
            self.events.append(f"start {tag}")
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            if gate is not None:
                assert gate.wait(DEADLINE)
            if barrier is not None:
                barrier.wait()
        finally:
            with self.lock:
                self.active -= 1
                self.events.append(f"end {tag}")
        return tag

    def report(self) -> tuple[list[str], int]:
        with self.lock:
            return list(self.events), self.most_active


def test_default_max_concurrency_runs_calls_one_at_a_time_in_order(client: LocalClient) -> None:
    actor = client.create_actor(Recorder, name="serial")
    gate = threading.Event()
    first_started, second_started = threading.Event(), threading.Event()
    first = actor.step.remote("0", gate, None, first_started)
    results = [actor.step.remote("1", None, None, second_started)]
    results += [actor.step.remote(str(i)) for i in range(2, 10)]
    try:
        assert first_started.wait(DEADLINE)
        # While call 0 is held, call 1 must not start. (The short wait only gives a broken
        # implementation the chance to show itself; a correct one passes however slow the machine.)
        assert not second_started.wait(0.1)
    finally:
        gate.set()
    assert first.result(timeout=DEADLINE) == "0"
    assert [r.result(timeout=DEADLINE) for r in results] == [str(i) for i in range(1, 10)]
    events, most_active = actor.report()
    assert most_active == 1
    assert events == [f"{edge} {i}" for i in range(10) for edge in ("start", "end")]


def test_max_concurrency_allows_that_many_at_once(client: LocalClient) -> None:
    actor = client.create_actor(Recorder, name="wide", actor_config=ActorConfig(max_concurrency=3))
    rendezvous = threading.Barrier(3, timeout=DEADLINE)
    # Each round of three can only pass the barrier if all three run at the same time.
    futures = [actor.step.remote(str(i), None, rendezvous) for i in range(6)]
    assert [f.result(timeout=DEADLINE) for f in futures] == [str(i) for i in range(6)]
    _, most_active = actor.report()
    assert most_active == 3


def test_calls_queue_behind_a_slow_constructor(client: LocalClient) -> None:
    gate = threading.Event()

    class SlowStart:
        def __init__(self) -> None:
            assert gate.wait(DEADLINE)
            self.ready = True

        def is_ready(self) -> bool:
            return self.ready

    group = client.create_actor_group(SlowStart, name="slow", count=1)
    try:
        with pytest.raises(TimeoutError, match="slow"):
            group.wait_ready(timeout=0.05)
        handle = group.handles[0]  # usable before construction finishes
        pending = handle.is_ready.remote()
        assert not pending.done()
    finally:
        gate.set()
    assert pending.result(timeout=DEADLINE) is True
    assert len(group.wait_ready(timeout=DEADLINE)) == 1


# -- the registry and handle pickling -----------------------------------------------------------


def test_handles_pickle_to_endpoint_and_find_their_client(client: LocalClient) -> None:
    actor = client.create_actor(Recorder, name="pickled")
    payload = pickle.dumps(actor)
    assert len(payload) < 300  # an endpoint and a client id, not the actor
    copy = pickle.loads(payload)
    assert isinstance(copy, LocalActorHandle)
    assert copy == actor and hash(copy) == hash(actor)
    assert copy.step("via copy") == "via copy"
    assert cloudpickle.loads(cloudpickle.dumps(actor)).step("via cloudpickle") == "via cloudpickle"
    events, _ = actor.report()
    assert events == ["start via copy", "end via copy", "start via cloudpickle", "end via cloudpickle"]


def test_registries_belong_to_each_client(client: LocalClient) -> None:
    other = LocalClient(max_threads=1)
    try:
        mine = client.create_actor(Recorder, name="same-name")
        theirs = other.create_actor(Recorder, name="same-name")
        mine.step("mine")
        assert theirs.report()[0] == []  # separate actors despite the same name
        assert client._find_actor(theirs.endpoint) is None
        assert other._find_actor(theirs.endpoint) is not None
        payload = pickle.dumps(theirs)
    finally:
        other.shutdown()
    with pytest.raises(ActorUnavailableError, match="no actor"):
        pickle.loads(payload).step.remote("x").result(timeout=DEADLINE)


def test_client_registry_is_weak() -> None:
    local = LocalClient(max_threads=1)
    client_id = local.client_id
    assert _CLIENTS[client_id] is local
    local.shutdown()
    assert client_id not in _CLIENTS


def test_a_dropped_client_is_collected_and_its_pool_threads_exit(eventually) -> None:
    local = LocalClient(max_threads=1)
    client_id = local.client_id
    local.submit(_callable_job("once", lambda: None)).wait(timeout=DEADLINE)
    del local

    def collected() -> bool:
        gc.collect()  # the pool thread drops its last reference just after the job finishes
        return client_id not in _CLIENTS

    eventually(collected, "the dropped client to be collected (the registry holds clients weakly)")
    eventually(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("fray-local-job")],
        "the collected client's pool threads to exit",
    )


def test_actor_calls_see_the_creators_client(client: LocalClient) -> None:
    class Asks:
        def which(self):
            return current_client()

    chosen = LocalClient(max_threads=1)
    try:
        with set_current_client(chosen):
            actor = client.create_actor(Asks, name="asks")
        assert actor.which() is chosen
        default = client.create_actor(Asks, name="asks-default")
        assert default.which() is client
    finally:
        chosen.shutdown()


# -- actor lifecycle ----------------------------------------------------------------------------


class Lifecycle:
    def __init__(self) -> None:
        self.ctx = current_actor()
        self.calls = 0

    def count(self) -> int:
        self.calls += 1
        return self.calls

    def give_up(self, message: str) -> None:
        self.ctx.fail(RuntimeError(message))

    def finish(self) -> None:
        assert self.ctx.shutdown_event is not None
        self.ctx.shutdown_event.set()

    def event(self) -> threading.Event | None:
        return self.ctx.shutdown_event

    def hold(self, gate: threading.Event) -> None:
        assert gate.wait(DEADLINE)


def test_queued_calls_fail_when_the_group_shuts_down(client: LocalClient, eventually) -> None:
    group = client.create_actor_group(Lifecycle, name="busy", count=1)
    (actor,) = group.wait_ready(timeout=DEADLINE)
    gate = threading.Event()
    try:
        running = actor.hold.remote(gate)
        eventually(lambda: running.running(), "the first call to start")
        queued = actor.count.remote()
        group.shutdown()
        with pytest.raises(ActorUnavailableError):
            queued.result(timeout=DEADLINE)
    finally:
        gate.set()
    assert running.result(timeout=DEADLINE) is None  # a running call finishes normally


def test_group_shutdown_sets_the_actors_shutdown_event(client: LocalClient) -> None:
    group = client.create_actor_group(Lifecycle, name="evented", count=1)
    (actor,) = group.wait_ready(timeout=DEADLINE)
    event = actor.event()
    assert isinstance(event, threading.Event) and not event.is_set()
    group.shutdown()
    assert event.is_set()


def test_setting_shutdown_event_stops_the_actor(client: LocalClient) -> None:
    group = client.create_actor_group(Lifecycle, name="quitter", count=1)
    (actor,) = group.wait_ready(timeout=DEADLINE)
    actor.finish()
    assert group.is_done()
    with pytest.raises(ActorUnavailableError, match="stopped"):
        actor.count()


def test_fail_without_restarts_marks_the_actor_failed(client: LocalClient) -> None:
    group = client.create_actor_group(Lifecycle, name="failing", count=1)
    (actor,) = group.wait_ready(timeout=DEADLINE)
    actor.give_up("disk full")
    assert group.is_done()
    with pytest.raises(ActorUnavailableError, match="disk full"):
        actor.count()


def test_fail_restarts_with_fresh_state_when_allowed(client: LocalClient) -> None:
    group = client.create_actor_group(
        Lifecycle, name="phoenix", count=1, actor_config=ActorConfig(max_restarts=1)
    )
    (actor,) = group.wait_ready(timeout=DEADLINE)
    assert actor.count() == 1
    assert actor.count() == 2
    actor.give_up("first failure")
    assert actor.count() == 1  # a new instance: the count starts again
    actor.give_up("second failure")  # no restarts left
    with pytest.raises(ActorUnavailableError, match="second failure"):
        actor.count()


def test_failed_constructor_in_a_group_leaves_siblings_usable(client: LocalClient) -> None:
    class OddOneOut:
        def __init__(self) -> None:
            if current_actor().index == 1:
                raise ValueError("index 1 refuses")

        def ping(self) -> str:
            return "pong"

    group = client.create_actor_group(OddOneOut, name="odd", count=3)
    with pytest.raises(ValueError, match="index 1 refuses"):
        group.wait_ready(timeout=DEADLINE)
    handles = group.wait_ready(count=2, timeout=DEADLINE)
    assert [h.ping() for h in handles] == ["pong", "pong"]
    with pytest.raises(ActorUnavailableError, match="index 1 refuses"):
        group.handles[1].ping()


def test_wait_ready_after_shutdown_raises(client: LocalClient) -> None:
    group = client.create_actor_group(Lifecycle, name="closed", count=1)
    group.shutdown()
    with pytest.raises(ActorUnavailableError):
        group.wait_ready(timeout=DEADLINE)


# -- shutdown -----------------------------------------------------------------------------------


def test_shutdown_stops_everything_and_refuses_new_work() -> None:
    gate = threading.Event()
    local = LocalClient(max_threads=1)
    blocker = local.submit(_callable_job("blocker", gate.wait, DEADLINE))
    queued = local.submit(_callable_job("queued", lambda: None))
    group = local.create_actor_group(Lifecycle, name="svc", count=2)
    group.wait_ready(timeout=DEADLINE)
    gate.set()  # let the running job finish so shutdown(wait=True) can join its thread
    local.shutdown(wait=True)
    assert blocker.status() is JobStatus.SUCCEEDED
    assert queued.status() in (JobStatus.SUCCEEDED, JobStatus.STOPPED)
    assert group.is_done()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("fray-")]
    with pytest.raises(FrayError, match="shut down"):
        local.submit(_callable_job("late", lambda: None))
    with pytest.raises(FrayError, match="shut down"):
        local.create_actor(Lifecycle, name="late")
    local.shutdown()  # idempotent


def test_shutdown_stops_queued_jobs() -> None:
    gate = threading.Event()
    local = LocalClient(max_threads=1)
    try:
        running = local.submit(_callable_job("running", gate.wait, DEADLINE))
        queued = local.submit(_callable_job("never-runs", lambda: None))
        assert queued.status() is JobStatus.PENDING
        local.shutdown(wait=False)
        assert queued.status() is JobStatus.STOPPED
    finally:
        gate.set()
        local.shutdown(wait=True)
    assert running.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED


def test_shutdown_wait_after_shutdown_nowait_joins_threads(eventually) -> None:
    gate = threading.Event()
    local = LocalClient(max_threads=1)
    group = local.create_actor_group(Lifecycle, name="late-join", count=1)
    (actor,) = group.wait_ready(timeout=DEADLINE)
    held = actor.hold.remote(gate)
    job = local.submit(_callable_job("held", gate.wait, DEADLINE))
    eventually(lambda: held.running() and job.status() is JobStatus.RUNNING, "the call and the job to start")
    local.shutdown(wait=False)  # returns although a call and a job are still running
    gate.set()
    local.shutdown(wait=True)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("fray-")]
    assert job.status() is JobStatus.SUCCEEDED


def test_shutdown_from_inside_a_job_does_not_deadlock() -> None:
    local = LocalClient(max_threads=1)
    job = local.submit(_callable_job("suicide", lambda: local.shutdown(wait=True)))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    local.shutdown(wait=True)


def test_future_type_is_concurrent_future(client: LocalClient) -> None:
    actor = client.create_actor(Lifecycle, name="ft")
    assert isinstance(actor.count.remote(), Future)


# -- what the Ray layer asks of any Client ---------------------------------------------------------


def test_a_local_client_says_it_runs_everything_in_process(client: LocalClient, tmp_path: Path) -> None:
    assert isinstance(client, Client)
    assert client.in_process is True
    assert client.parent_job is None
    (tmp_path / "mod.py").write_text("X = 1\n")
    client.prepare_environment(EnvironmentConfig(workspace=str(tmp_path)))  # nothing to capture
    job = client.submit(_callable_job("after-prepare", print, "ran"))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED


def test_find_actor_finds_this_clients_live_groups(client: LocalClient) -> None:
    group = client.create_actor_group(Recorder, name="finder", count=2)
    first, second = group.wait_ready(timeout=DEADLINE)
    assert client.find_actor("finder") == first
    assert client.find_actor("finder", 1) == second
    assert client.find_actor("finder", 1, parent_job=None) == second  # no job tree: ignored
    assert client.find_actor("finder").step("found") == "found"
    assert client.find_actor("finder", 2) is None
    assert client.find_actor("find") is None
    assert client.find_actor("finder-0") is None
    newer = client.create_actor_group(Recorder, name="finder", count=1)
    (newest,) = newer.wait_ready(timeout=DEADLINE)
    assert client.find_actor("finder") == newest  # the newest group of that name
    newer.shutdown()
    assert client.find_actor("finder") == first
    group.shutdown()
    assert client.find_actor("finder") is None


def test_find_actor_does_not_see_another_clients_actors(client: LocalClient) -> None:
    with LocalClient() as other:
        other.create_actor_group(Recorder, name="theirs", count=1).wait_ready(timeout=DEADLINE)
        assert client.find_actor("theirs") is None
        assert other.find_actor("theirs") is not None


def test_detach_job_does_not_let_an_actor_outlive_a_local_client() -> None:
    local = LocalClient()
    group = local.create_actor_group(Recorder, name="detached", count=1)
    (handle,) = group.wait_ready(timeout=DEADLINE)
    local.detach_job(group.job_id)
    local.detach_job("no-such-job")  # unknown ids are ignored
    local.shutdown()
    with pytest.raises(ActorUnavailableError):
        handle.step.remote("late").result(timeout=DEADLINE)


class _Keeps:
    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs

    def seen(self) -> dict[str, object]:
        return self.kwargs


class _Refuses:
    def __init__(self) -> None:
        raise KeyError("refused")


def test_create_actor_passes_every_constructor_keyword_and_cleans_up_a_failure(client: LocalClient) -> None:
    # Keywords of the shared create_actor helper itself still reach the constructor.
    actor = client.create_actor(_Keeps, name="keeps", client="c", ready_timeout=1, args=(), kwargs={})
    assert actor.seen() == {"client": "c", "ready_timeout": 1, "args": (), "kwargs": {}}
    with pytest.raises(KeyError, match="refused"):
        client.create_actor(_Refuses, name="refuses")
    assert client.find_actor("refuses") is None  # its group was shut down
