"""Restarting actors: the rules (actor_restarts), the driver's state machine (ActorManager,
with a fake launcher and fake host connections), and real actor processes killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import fray_ray as ray
from fray_ray import exceptions
from fray_ray._private.core.execution import make_task_error
from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec, Arguments, CodeBlob, ResourceShape
from fray_ray._private.driver import actor_restarts as rules
from fray_ray._private.driver.actor_restarts import CallFate, RetryBudget
from fray_ray._private.driver.actors import ActorManager
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.streams import StreamTable
from fray_ray._private.driver.timers import TimerQueue
from fray_ray._private.objects import ids
from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import deserialize, serialize, serialize_error
from fray_ray._private.stream.protocol import ConnectionClosed


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


# ---- the rules ---------------------------------------------------------------------------


def test_retry_budget_counts_down_and_minus_one_never_runs_out() -> None:
    budget = RetryBudget()
    budget.admit(b"a", 2)
    budget.admit(b"b", -1)
    budget.admit(b"c", 0)
    assert [budget.spend(b"a") for _ in range(3)] == [True, True, False]
    assert all(budget.spend(b"b") for _ in range(100))
    assert budget.spend(b"c") is False
    assert budget.spend(b"unknown") is False
    budget.forget(b"a")
    assert budget.left(b"a") == 0


def test_fates_follow_ray_rules() -> None:
    budget = RetryBudget()
    budget.admit(b"none", 0)
    budget.admit(b"one", 1)
    budget.admit(b"always", -1)
    # A new call while the actor restarts: waits if retryable (costs nothing), else unavailable.
    assert rules.fate_while_restarting(budget, b"none") is CallFate.UNAVAILABLE
    assert rules.fate_while_restarting(budget, b"one") is CallFate.SEND
    assert budget.left(b"one") == 1
    # A call in flight when the process died: each death costs one retry.
    assert rules.fate_at_death(budget, b"one", restarting=True) is CallFate.SEND
    assert rules.fate_at_death(budget, b"one", restarting=True) is CallFate.UNAVAILABLE
    assert rules.fate_at_death(budget, b"none", restarting=True) is CallFate.UNAVAILABLE
    assert rules.fate_at_death(budget, b"always", restarting=False) is CallFate.DIED


def test_restart_budget() -> None:
    assert rules.can_restart(1, 0, stopped=False)
    assert not rules.can_restart(1, 1, stopped=False)
    assert rules.can_restart(-1, 10**6, stopped=False)
    assert not rules.can_restart(-1, 0, stopped=True)  # killed for good or exit_actor()
    assert not rules.can_restart(0, 0, stopped=False)
    assert rules.iris_restart_budget(5) == 5
    assert rules.iris_restart_budget(-1) == -1
    assert rules.iris_restart_budget(2**70) == -1  # Iris holds 32 bits; that many is no limit


class Flaky(Exception):
    pass


def _failed_with(exc: BaseException) -> list[Any]:
    return [serialize_error(make_task_error(exc, "A.m"))]


def test_which_user_exceptions_are_retried() -> None:
    flaky = _failed_with(Flaky("again"))
    assert rules.retries_user_exception(True, flaky)
    assert rules.retries_user_exception((Flaky,), flaky)
    assert rules.retries_user_exception((Exception,), flaky)
    assert not rules.retries_user_exception((KeyError,), flaky)
    assert not rules.retries_user_exception(False, flaky)
    assert not rules.retries_user_exception(True, [serialize(1)])  # it succeeded
    died = [serialize_error(exceptions.ActorDiedError("its constructor raised"))]
    assert not rules.retries_user_exception(True, died)  # the actor's failure, not the method's


# ---- the driver's state machine, with a fake launcher and fake hosts ---------------------


class FakeGroup:
    pass


class FakeLauncher:
    """Launches nothing; reports a job failure when told to."""

    in_process = False

    def __init__(self) -> None:
        self.failure: str | None = None
        self.max_restarts: int | None = None
        self.terminated: list[Any] = []

    def launch_actor(self, actor_id, group_name, shape, *, env_vars, max_restarts, accelerator, callback, gang=None,
                     runtime_env=None, started=None, start_failed=None, cpu=None, detached=False, named=False,
                     pins=None, identity=None):
        self.max_restarts = max_restarts
        callback(FakeGroup(), None)

    def lookup_named(self, namespace, name):
        return None

    def named_group(self, namespace, name):
        return f"{namespace}-{name}"

    def group_failure(self, group):
        return self.failure

    def terminate(self, group):
        self.terminated.append(group)


class FakeHost:
    """The driver's end of a host connection: records what is sent; `die()` closes it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.closed = False
        self._callbacks: list[Any] = []

    def add_close_callback(self, callback) -> None:
        self._callbacks.append(callback)

    def notify(self, method: str, body: Any = None, buffers: Any = (), *, defer: bool = False, hold: bool = False) -> None:
        if self.closed:
            raise ConnectionClosed("closed")
        self.sent.append((method, body))

    def calls(self) -> list[bytes]:
        return [body["call"] for method, body in self.sent if method == "call"]

    def create_options(self) -> dict[str, Any]:
        return next(body for method, body in self.sent if method == "create")["options"]

    def die(self) -> None:
        self.closed = True
        for callback in self._callbacks:
            callback(self)


class Harness:
    def __init__(self, **spec: Any) -> None:
        self.store = ObjectStore(ObjectStoreConfig(limit=1 << 30), session_name="restart-tests")
        self.objects = ObjectTable(self.store)
        self.launcher = FakeLauncher()
        self.timers = TimerQueue("test-timers")
        self.manager = ActorManager(self.objects, ClusterLedger.of_one_node({"CPU": 4}), self.launcher, StreamTable(self.objects),
                                    namespace="tests", session_id="s", timers=self.timers)
        self.spec = ActorCreationSpec(
            actor_id=ids.new_actor_id(), cls=CodeBlob(b"c", b"", "A"), class_name="A",
            arguments=Arguments.pack((), {}), shape=ResourceShape(cpu=0.0), methods={}, **spec,
        )
        self.manager.create(self.spec)

    def connect(self) -> FakeHost:
        host = FakeHost()
        assert self.manager.host_connected(self.spec.actor_id, host, pid=1234)
        self.manager.ready(self.spec.actor_id, 1234)
        return host

    def call(self, retries: int | None = None, retry_exceptions: Any = False) -> ActorCallSpec:
        call_id = ids.new_task_id()
        return_ids = (ids.object_id_for(call_id, 1),)
        self.objects.create_pending(return_ids, producer=call_id)
        self.objects.incref(list(return_ids))  # what the caller's ObjectRef holds
        call = ActorCallSpec(self.spec.actor_id, call_id, "m", Arguments.pack((), {}), return_ids, 1,
                             max_task_retries=retries, retry_exceptions=retry_exceptions)
        self.manager.submit_call(call)
        return call

    def outcome(self, call: ActorCallSpec) -> Any:
        value = self.objects.value(call.return_ids[0])
        return None if value is None else deserialize(value)

    def close(self) -> None:
        self.manager.close()
        self.timers.stop()
        self.store.close()


@pytest.fixture
def harness_factory():
    made: list[Harness] = []

    def make(**spec: Any) -> Harness:
        made.append(Harness(**spec))
        return made[-1]

    yield make
    for harness in made:
        harness.close()


def test_in_flight_calls_at_death_follow_their_retries(harness_factory) -> None:
    h = harness_factory(max_restarts=1)
    host = h.connect()
    no_retry, one_retry = h.call(retries=0), h.call(retries=1)
    host.die()
    assert isinstance(h.outcome(no_retry), exceptions.ActorUnavailableError)
    assert h.outcome(one_retry) is None  # kept for the next instance
    second = h.connect()
    assert one_retry.call_id in second.calls()
    assert second.create_options()["restarted"] is True
    h.manager.call_done(second, one_retry.call_id, [serialize("done")])
    assert h.outcome(one_retry) == "done"


def test_new_calls_while_restarting_wait_or_fail_at_once(harness_factory) -> None:
    h = harness_factory(max_restarts=2, max_task_retries=0)
    h.connect().die()
    refused = h.call()  # the actor's default: no retries
    waiting = h.call(retries=-1)
    assert isinstance(h.outcome(refused), exceptions.ActorUnavailableError)
    assert "The actor is restarting" in str(h.outcome(refused))
    assert h.outcome(waiting) is None
    host = FakeHost()
    assert h.manager.host_connected(h.spec.actor_id, host, pid=5)
    assert waiting.call_id in host.calls()
    # Until the new instance's constructor has run, the actor is still restarting.
    assert isinstance(h.outcome(h.call()), exceptions.ActorUnavailableError)
    h.manager.ready(h.spec.actor_id, 5)
    sent = h.call()
    assert sent.call_id in host.calls()


def test_retries_are_spent_one_per_death(harness_factory) -> None:
    h = harness_factory(max_restarts=-1)
    call = h.call(retries=2)
    for _ in range(2):
        host = h.connect()
        assert call.call_id in host.calls()
        host.die()
        assert h.outcome(call) is None
    h.connect().die()  # the third death: no retry left
    assert isinstance(h.outcome(call), exceptions.ActorUnavailableError)


def test_no_restart_left_means_actor_died_for_every_call(harness_factory) -> None:
    h = harness_factory(max_restarts=1)
    h.connect().die()
    host = h.connect()
    in_flight = h.call(retries=-1)
    host.die()
    assert isinstance(h.outcome(in_flight), exceptions.ActorDiedError)
    assert isinstance(h.outcome(h.call(retries=-1)), exceptions.ActorDiedError)


def test_killed_actor_is_not_restarted(harness_factory) -> None:
    h = harness_factory(max_restarts=5)
    host = h.connect()
    call = h.call(retries=-1)
    h.manager.kill(h.spec.actor_id, no_restart=True)
    assert isinstance(h.outcome(call), exceptions.ActorDiedError)
    assert ("die", {"restart": False}) in host.sent


def test_user_exception_is_retried_under_retry_exceptions(harness_factory) -> None:
    h = harness_factory()
    host = h.connect()
    call = h.call(retries=1, retry_exceptions=(Flaky,))
    h.manager.call_done(host, call.call_id, _failed_with(Flaky("first")))
    assert h.outcome(call) is None
    assert host.calls().count(call.call_id) == 2
    h.manager.call_done(host, call.call_id, _failed_with(Flaky("second")))
    assert isinstance(h.outcome(call), Flaky)  # retries used up: the last error stays


def test_restarting_actor_whose_job_ended_is_dead(harness_factory) -> None:
    h = harness_factory(max_restarts=3)
    h.connect().die()
    waiting = h.call(retries=-1)
    h.launcher.failure = "its job ended failed"
    wait_for(lambda: h.outcome(waiting) is not None, timeout=30)
    assert isinstance(h.outcome(waiting), exceptions.ActorDiedError)
    assert "its job ended failed" in str(h.outcome(waiting))


def test_restart_budget_beyond_iris_is_sent_as_unlimited(harness_factory) -> None:
    h = harness_factory(max_restarts=2**70)
    assert h.launcher.max_restarts == -1


# ---- real actor processes ----------------------------------------------------------------


pytestmark_processes = pytest.mark.usefixtures("cluster_session")


@ray.remote(max_restarts=1)
class Survivor:
    def __init__(self) -> None:
        self.calls = 0

    def pid(self) -> int:
        return os.getpid()

    def reconstructed(self) -> bool:
        return ray.get_runtime_context().was_current_actor_reconstructed

    def hold(self, started: str, release: str) -> int:
        """Announce the attempt in `started`, then run until the file `release` exists."""
        with open(started, "a") as marks:
            marks.write(f"{os.getpid()}\n")
        while not os.path.exists(release):
            time.sleep(0.01)
        return os.getpid()

    def flaky(self, fail_times: int) -> int:
        self.calls += 1
        if self.calls <= fail_times:
            raise Flaky(f"attempt {self.calls}")
        return self.calls

    @ray.method(max_task_retries=1)
    def hold_with_one_retry(self, started: str, release: str) -> int:
        return self.hold(started, release)


def _attempts(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytestmark_processes
def test_call_right_after_the_kill_is_never_actor_died_while_a_restart_remains() -> None:
    actor = Survivor.remote()
    first = ray.get(actor.pid.remote())
    os.kill(first, signal.SIGKILL)
    # With retries the call simply waits for the restarted actor.
    assert ray.get(actor.pid.options(max_task_retries=-1).remote(), timeout=120) != first
    assert ray.get(actor.reconstructed.remote()) is True


@pytestmark_processes
def test_calls_without_retries_see_unavailable_then_the_new_instance() -> None:
    actor = Survivor.remote()
    first = ray.get(actor.pid.remote())
    os.kill(first, signal.SIGKILL)
    seen: list[str] = []

    def answered() -> int | None:
        try:
            return ray.get(actor.pid.remote(), timeout=60)
        except exceptions.RayActorError as error:
            seen.append(type(error).__name__)
            return None

    second = wait_for(answered, timeout=120, interval=0.01)
    assert second != first
    assert "ActorDiedError" not in seen
    assert set(seen) <= {"ActorUnavailableError"}


@pytestmark_processes
def test_method_level_max_task_retries_retries_an_in_flight_call(tmp_path: Path) -> None:
    actor = Survivor.remote()
    started, release = tmp_path / "started", tmp_path / "release"
    ref = actor.hold_with_one_retry.remote(str(started), str(release))
    wait_for(lambda: len(_attempts(started)) == 1)
    os.kill(_attempts(started)[0], signal.SIGKILL)
    wait_for(lambda: len(_attempts(started)) == 2, timeout=120)  # the retry runs on the new instance
    release.touch()
    assert ray.get(ref, timeout=60) == _attempts(started)[1]


@pytestmark_processes
def test_finite_retries_run_out(tmp_path: Path) -> None:
    actor = Survivor.options(max_restarts=3).remote()
    started, release = tmp_path / "started", tmp_path / "release"
    ref = actor.hold.options(max_task_retries=1).remote(str(started), str(release))
    wait_for(lambda: len(_attempts(started)) == 1)
    os.kill(_attempts(started)[0], signal.SIGKILL)
    wait_for(lambda: len(_attempts(started)) == 2, timeout=120)
    os.kill(_attempts(started)[1], signal.SIGKILL)
    with pytest.raises(exceptions.ActorUnavailableError):
        ray.get(ref, timeout=120)
    release.touch()
    # Restarts remain, so the actor itself comes back.
    assert wait_for(lambda: _pid_or_none(actor), timeout=120) not in _attempts(started)


def _pid_or_none(actor: Any) -> int | None:
    try:
        return ray.get(actor.pid.options(max_task_retries=-1).remote(), timeout=60)
    except exceptions.RayActorError:
        return None


@pytestmark_processes
def test_actor_method_retry_exceptions() -> None:
    actor = Survivor.remote()
    assert ray.get(actor.flaky.options(max_task_retries=2, retry_exceptions=True).remote(2)) == 3
    other = Survivor.remote()
    with pytest.raises(Flaky):  # not in the list: not retried
        ray.get(other.flaky.options(max_task_retries=2, retry_exceptions=[KeyError]).remote(1))
    assert ray.get(other.flaky.remote(0)) == 2  # the call ran once
    third = Survivor.remote()
    with pytest.raises(Flaky, match="attempt 2"):  # retries used up: the last error
        ray.get(third.flaky.options(max_task_retries=1, retry_exceptions=True).remote(5))


@pytestmark_processes
def test_restart_budget_larger_than_iris_holds() -> None:
    actor = Survivor.options(max_restarts=2**40).remote()
    first = ray.get(actor.pid.remote())
    os.kill(first, signal.SIGKILL)
    assert ray.get(actor.pid.options(max_task_retries=-1).remote(), timeout=120) != first


def test_call_cancelled_while_its_actor_restarts_is_not_sent_again(harness_factory) -> None:
    h = harness_factory(max_restarts=1)
    host = h.connect()
    call = h.call(retries=-1)
    host.die()
    assert h.manager.cancel_call(call.call_id)
    assert isinstance(h.outcome(call), exceptions.TaskCancelledError)
    assert call.call_id not in h.connect().calls()


@pytest.mark.slow  # over 10 s on its own
def test_an_actor_whose_greeting_the_driver_answers_late_lives_on(fresh_shutdown, monkeypatch) -> None:
    """A driver too busy to answer a new actor's greeting within 10 s (a loaded machine) must not
    make the actor connect a second time: the first connection's close would then look like the
    actor's death, and the actor would be killed while it serves."""
    from fray_ray._private.driver.session import SessionService

    answer = SessionService._hello
    delayed: list[bytes] = []  # the one greeting answered late
    answered = threading.Event()

    def slow_hello(self: SessionService, connection: Any, message_id: Any, hello: Any) -> None:
        if hello.kind != "actor" or delayed:
            answer(self, connection, message_id, hello)
            return
        delayed.append(hello.id)

        def late() -> None:
            time.sleep(11)  # longer than a worker used to wait before connecting again
            answer(self, connection, message_id, hello)
            answered.set()

        threading.Thread(target=late, daemon=True).start()

    monkeypatch.setattr(SessionService, "_hello", slow_hello)
    ray.init(num_cpus=2, namespace="tests")
    actor = Survivor.options(max_restarts=0).remote()
    first = ray.get(actor.pid.remote(), timeout=120)
    assert answered.wait(120)
    assert ray.get(actor.pid.remote(), timeout=60) == first
