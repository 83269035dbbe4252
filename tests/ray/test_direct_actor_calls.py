"""Tasks and actors call actors straight on the actor's host: real worker processes on the
embedded cluster. The driver process is this test's: it counts the calls that reach it."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private.core import runtime_slot
from fray_ray.exceptions import ActorDiedError, TaskCancelledError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def session(cluster_session: fray_ray.RayContext) -> fray_ray.RayContext:
    return cluster_session


@pytest.fixture
def driver_calls(session: fray_ray.RayContext) -> Iterator[list[bytes]]:
    """The ids of the actor calls the driver accepts while the test runs (from itself or a worker)."""
    actors = runtime_slot.current().actors
    seen: list[bytes] = []
    original = actors.submit_call

    def counted(call: Any) -> None:
        seen.append(call.call_id)
        original(call)

    actors.submit_call = counted
    try:
        yield seen
    finally:
        del actors.submit_call


@fray_ray.remote
class Counter:
    def __init__(self) -> None:
        self.count = 0

    def incr(self, by: int = 1) -> int:
        self.count += by
        return self.count

    def pid(self) -> int:
        return os.getpid()


def _direct_sent() -> int:
    """How many calls this worker process sent straight to actor hosts."""
    direct = runtime_slot.current().direct
    return 0 if direct is None else direct.sent


@fray_ray.remote
def call_in_order(counter: Any, count: int) -> tuple[list[int], list[int], int]:
    one_by_one = [fray_ray.get(counter.incr.remote()) for _ in range(count)]
    pipelined = fray_ray.get([counter.incr.remote() for _ in range(count)])
    return one_by_one, pipelined, _direct_sent()


def test_a_task_calls_an_actor_in_order_without_the_driver(driver_calls: list[bytes]) -> None:
    counter = Counter.remote()
    assert fray_ray.get(counter.incr.remote()) == 1  # the driver's own call: it is up
    driver_calls.clear()
    one_by_one, pipelined, sent = fray_ray.get(call_in_order.remote(counter, 300))
    assert one_by_one == list(range(2, 302))
    assert pipelined == list(range(302, 602))
    assert sent >= 600
    assert driver_calls == []


@fray_ray.remote
class Caller:
    def __init__(self, target: Any) -> None:
        self.target = target

    def calls(self, count: int) -> tuple[list[int], int]:
        values = [fray_ray.get(self.target.incr.remote()) for _ in range(count)]
        return values, _direct_sent()


def test_an_actor_calls_an_actor_directly(driver_calls: list[bytes]) -> None:
    counter = Counter.remote()
    fray_ray.get(counter.incr.remote())
    caller = Caller.remote(counter)
    driver_calls.clear()
    values, sent = fray_ray.get(caller.calls.remote(100))
    assert values == list(range(2, 102))
    assert sent >= 100
    assert len(driver_calls) == 1  # the driver's own call to `calls`


@fray_ray.remote
def pass_on(counter: Any) -> list[int]:
    return fray_ray.get(call_in_order.remote(counter, 5))[0]


def test_a_handle_passed_on_twice() -> None:
    counter = Counter.remote()
    fray_ray.get(counter.incr.remote())
    assert fray_ray.get(pass_on.remote(counter)) == [2, 3, 4, 5, 6]


@fray_ray.remote
def double(value: int) -> int:
    return value * 2


@fray_ray.remote
def results_that_leave(counter: Any) -> tuple[int, list[Any], list[int]]:
    first = counter.incr.remote(10)
    nested = fray_ray.get(double.remote(first))  # a top-level argument of another task
    inside = fray_ray.get(double.remote([first]))  # nested: the task gets the ref, not the value
    late = counter.incr.remote(5)  # not yet known here when it leaves
    ready, _ = fray_ray.wait([late], num_returns=1)
    return nested, [late], [inside == [first, first], len(ready)]


def test_direct_results_that_leave_the_caller_work_everywhere() -> None:
    counter = Counter.remote()
    nested, holder, checks = fray_ray.get(results_that_leave.remote(counter))
    assert nested == 20
    assert checks == [True, 1]
    assert fray_ray.get(holder[0]) == 15  # a ref returned inside a value reaches the driver


@fray_ray.remote
def passes_to_actor(counter: Any) -> int:
    made = counter.incr.remote(7)
    return fray_ray.get(counter.incr.remote(made))  # a direct result as a direct call's argument


def test_a_direct_result_as_an_argument_of_the_next_call() -> None:
    counter = Counter.remote()
    assert fray_ray.get(passes_to_actor.remote(counter)) == 14


@fray_ray.remote(max_restarts=1, max_task_retries=1)
class CrashesOnce:
    def __init__(self) -> None:
        self.calls = 0

    def work(self, crash: bool) -> str:
        self.calls += 1
        if crash and not fray_ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)
        return f"calls={self.calls}"

    def pid(self) -> int:
        return os.getpid()


@fray_ray.remote
def survive_restart(actor: Any) -> tuple[str, str, int]:
    before = fray_ray.get(actor.work.remote(False))
    during = fray_ray.get(actor.work.remote(True))  # kills the first instance; retried on the next
    return before, during, _direct_sent()


def test_a_direct_call_is_retried_on_the_restarted_actor() -> None:
    actor = CrashesOnce.remote()
    first_pid = fray_ray.get(actor.pid.remote())
    before, during, sent = fray_ray.get(survive_restart.remote(actor))
    assert before == "calls=1"
    assert during == "calls=1"  # the new instance ran it once
    assert sent >= 2
    assert fray_ray.get(actor.pid.remote()) != first_pid


@fray_ray.remote(max_restarts=0)
class Fragile:
    def ping(self) -> str:
        return "pong"

    def die(self) -> None:
        os._exit(1)


@fray_ray.remote
def call_until_dead(actor: Any) -> tuple[str, str]:
    first = fray_ray.get(actor.ping.remote())
    try:
        fray_ray.get(actor.die.remote())
    except ActorDiedError as exc:
        return first, type(exc).__name__
    return first, "no error"


def test_a_direct_call_fails_with_actor_died_when_no_restart_is_left() -> None:
    actor = Fragile.remote()
    fray_ray.get(actor.ping.remote())
    assert fray_ray.get(call_until_dead.remote(actor)) == ("pong", "ActorDiedError")


@fray_ray.remote(concurrency_groups={"control": 1})
class Gate:
    def __init__(self) -> None:
        self.opened = threading.Event()

    def blocked(self) -> str:
        self.opened.wait()
        return "through"

    def after(self) -> str:
        return "after"

    @fray_ray.method(concurrency_group="control")
    def open(self) -> None:
        self.opened.set()


@fray_ray.remote
def cancel_a_queued_call(gate: Any) -> tuple[str, str, str]:
    running = gate.blocked.remote()
    queued = gate.after.remote()
    fray_ray.cancel(queued)
    gate.open.remote()  # another concurrency group: it runs while `blocked` waits
    try:
        fray_ray.get(queued)
        outcome = "ran"
    except TaskCancelledError:
        outcome = "cancelled"
    return fray_ray.get(running), outcome, fray_ray.get(gate.after.remote())


def test_cancel_and_concurrency_groups_of_direct_calls() -> None:
    gate = Gate.remote()
    fray_ray.get(gate.after.remote())
    assert fray_ray.get(cancel_a_queued_call.remote(gate)) == ("through", "cancelled", "after")


@fray_ray.remote
class AsyncAdder:
    async def add(self, a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b


@fray_ray.remote
def many_async_calls(adder: Any) -> tuple[list[int], int]:
    return fray_ray.get([adder.add.remote(i, i) for i in range(50)]), _direct_sent()


def test_an_async_actor_answers_direct_calls() -> None:
    adder = AsyncAdder.remote()
    fray_ray.get(adder.add.remote(0, 0))
    values, sent = fray_ray.get(many_async_calls.remote(adder))
    assert values == [2 * i for i in range(50)]
    assert sent >= 50


@fray_ray.remote
def first_calls_while_it_starts(count: int) -> list[int]:
    counter = Counter.remote()  # made here: its first calls go through the driver, later ones not
    return [fray_ray.get(counter.incr.remote()) for _ in range(count)] + fray_ray.get(
        [counter.incr.remote() for _ in range(count)])


def test_calls_stay_in_order_when_they_switch_to_the_direct_path() -> None:
    assert fray_ray.get(first_calls_while_it_starts.remote(200)) == list(range(1, 401))


@fray_ray.remote
class Named:
    def listed_method(self) -> int:
        return 1

    def failing_method(self) -> None:
        raise ValueError("listed failure")


@fray_ray.remote
def call_for_the_state_api(actor: Any) -> int:
    fray_ray.get([actor.listed_method.remote() for _ in range(3)])
    try:
        fray_ray.get(actor.failing_method.remote())
    except ValueError:
        pass
    return _direct_sent()


def test_the_state_api_lists_direct_calls(driver_calls: list[bytes]) -> None:
    from fray_ray.util.state import list_tasks

    actor = Named.remote()
    fray_ray.get(actor.listed_method.remote())
    driver_calls.clear()
    assert fray_ray.get(call_for_the_state_api.remote(actor)) >= 4
    assert driver_calls == []
    rows = list_tasks(filters=[("name", "=", "Named.listed_method")], limit=100)
    assert len(rows) == 4  # one through the driver, three straight to the host
    assert {row.state for row in rows} == {"FINISHED"}
    failed = list_tasks(filters=[("name", "=", "Named.failing_method")])
    assert [row.state for row in failed] == ["FAILED"]
    assert failed[0].type == "ACTOR_TASK"


@fray_ray.remote(concurrency_groups={"control": 1})
class Slow:
    def __init__(self) -> None:
        self.opened = threading.Event()

    def wait_open(self) -> str:
        self.opened.wait()
        return "open"

    @fray_ray.method(concurrency_group="control")
    def open(self) -> None:
        self.opened.set()


@fray_ray.remote
class Keeper:
    def __init__(self) -> None:
        self.kept: list[Any] = []

    def keep(self, refs: list[Any]) -> None:
        self.kept = refs

    def kept_refs(self) -> list[Any]:
        return self.kept


@fray_ray.remote(max_retries=0)
def hand_out_and_die(slow: Any, keeper: Any) -> None:
    pending = slow.wait_open.remote()
    fray_ray.get(keeper.keep.remote([pending]))  # the ref leaves this process before its value is known
    os._exit(1)


def test_a_handed_over_result_fails_with_owner_died_when_its_caller_dies() -> None:
    from fray_ray.exceptions import OwnerDiedError, WorkerCrashedError

    slow, keeper = Slow.remote(), Keeper.remote()
    fray_ray.get(keeper.kept_refs.remote())
    with pytest.raises(WorkerCrashedError):
        fray_ray.get(hand_out_and_die.remote(slow, keeper))
    (pending,) = fray_ray.get(keeper.kept_refs.remote())
    fray_ray.get(slow.open.remote())
    with pytest.raises(OwnerDiedError):
        fray_ray.get(pending, timeout=60)


@fray_ray.remote(max_restarts=1, max_task_retries=-1)
class Journal:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def step(self, number: int, crash: bool = False) -> list[int]:
        if crash and not fray_ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)
        self.steps.append(number)
        return list(self.steps)


@fray_ray.remote
def pipeline_across_a_restart(journal: Any) -> list[list[int]]:
    before = [fray_ray.get(journal.step.remote(0)), fray_ray.get(journal.step.remote(1))]
    in_flight = [journal.step.remote(2, crash=True), journal.step.remote(3), journal.step.remote(4)]
    after = journal.step.remote(5)  # made while the others may be on their way back to the driver
    return before + fray_ray.get(in_flight) + [fray_ray.get(after)]


def test_pipelined_direct_calls_keep_their_order_across_a_restart() -> None:
    journal = Journal.remote()
    fray_ray.get(journal.step.remote(-1))
    results = fray_ray.get(pipeline_across_a_restart.remote(journal))
    assert results == [[-1, 0], [-1, 0, 1], [2], [2, 3], [2, 3, 4], [2, 3, 4, 5]]


@fray_ray.remote
class AwaitsAnother:
    def __init__(self, target: Any) -> None:
        self.target = target

    async def twice(self) -> list[int]:
        first = await self.target.incr.remote()
        second = await self.target.incr.remote()
        return [first, second]


def test_an_async_actor_awaits_direct_call_results() -> None:
    counter = Counter.remote()
    fray_ray.get(counter.incr.remote())
    assert fray_ray.get(AwaitsAnother.remote(counter).twice.remote()) == [2, 3]


@fray_ray.remote
def get_with_a_timeout(gate: Any) -> str:
    blocked = gate.blocked.remote()
    try:
        fray_ray.get(blocked, timeout=0.5)
        outcome = "no timeout"
    except fray_ray.exceptions.GetTimeoutError:
        outcome = "timed out"
    ready, _ = fray_ray.wait([blocked], num_returns=1, timeout=0.2)
    gate.open.remote()
    return f"{outcome}, {len(ready)} ready, then {fray_ray.get(blocked)}"


def test_get_and_wait_with_timeouts_on_direct_results() -> None:
    gate = Gate.remote()
    fray_ray.get(gate.after.remote())
    assert fray_ray.get(get_with_a_timeout.remote(gate)) == "timed out, 0 ready, then through"



@fray_ray.remote
class Started:
    """Says whether a call has started (another actor, so asking does not queue behind it)."""

    def __init__(self) -> None:
        self.count = 0

    def note(self) -> None:
        self.count += 1

    def seen(self) -> int:
        return self.count


@fray_ray.remote
class Sleeper:
    def __init__(self, started: Any) -> None:
        self.runs = 0
        self.started = started

    def work(self, seconds: float) -> int:
        import time

        self.runs += 1
        fray_ray.get(self.started.note.remote())
        time.sleep(seconds)
        return self.runs

    def count(self) -> int:
        return self.runs


def _break_gates() -> None:
    """Close every gate this worker has (as a network would): the hosts live on."""
    direct = runtime_slot.current().direct
    assert direct is not None
    for link in list(direct._links.values()):
        link.connection.close()


@fray_ray.remote
def break_the_gate_mid_call(actor: Any, started: Any) -> tuple[str, Any]:
    """Send a slow call straight to the host and, once it runs there, break the gate."""
    import time

    assert fray_ray.get(actor.work.remote(0)) == 1 and _direct_sent() >= 1
    ref = actor.work.remote(2.0)
    deadline = time.monotonic() + 60
    while fray_ray.get(started.seen.remote()) < 2:
        assert time.monotonic() < deadline, "the slow call never started"
        time.sleep(0.02)
    _break_gates()
    return "value", fray_ray.get(ref, timeout=60)


def test_a_call_whose_gate_breaks_while_it_runs_is_answered_through_the_driver() -> None:
    started = Started.remote()
    actor = Sleeper.remote(started)
    assert fray_ray.get(break_the_gate_mid_call.remote(actor, started)) == ("value", 2)
    assert fray_ray.get(actor.count.remote()) == 2  # it ran once, and its answer was not lost


@fray_ray.remote
def lose_a_call_then_break_the_gate(actor: Any, retries: int) -> tuple[str, Any]:
    """A call whose frame is lost on the way to the host, then the gate breaks: the caller
    cannot tell whether it ran (nor, in general, can anyone)."""
    from fray_ray._private import messages
    from fray_ray._private.messages import CallMethod

    assert fray_ray.get(actor.work.remote(0)) == 1 and _direct_sent() >= 1
    send = messages.notify

    def lossy(connection: Any, message: Any, **options: Any) -> None:
        if isinstance(message, CallMethod) and message.method == "work":
            return  # lost on the way
        send(connection, message, **options)

    messages.notify = lossy
    try:
        ref = actor.work.options(max_task_retries=retries).remote(0)
    finally:
        messages.notify = send
    _break_gates()
    try:
        return "value", fray_ray.get(ref, timeout=60)
    except Exception as exc:  # noqa: BLE001 - the test reads which error
        return type(exc).__name__, str(exc)


def test_a_call_lost_with_its_gate_fails_as_unavailable_without_retries_and_never_hangs() -> None:
    actor = Sleeper.remote(Started.remote())
    kind, detail = fray_ray.get(lose_a_call_then_break_the_gate.remote(actor, 0))
    assert kind == "ActorUnavailableError", detail
    assert "may or may not have been executed" in detail
    assert fray_ray.get(actor.count.remote()) == 1  # it never reached the host


def test_a_call_lost_with_its_gate_is_sent_again_within_its_retries() -> None:
    actor = Sleeper.remote(Started.remote())
    assert fray_ray.get(lose_a_call_then_break_the_gate.remote(actor, 1)) == ("value", 2)
    assert fray_ray.get(actor.count.remote()) == 2


@fray_ray.remote
class Flaky:
    def __init__(self) -> None:
        self.failures_left = 0
        self.runs = 0

    def arm(self, failures: int) -> None:
        self.failures_left = failures

    def work(self) -> int:
        self.runs += 1
        if self.failures_left > 0:
            self.failures_left -= 1
            raise ValueError(f"run {self.runs} fails")
        return self.runs


@fray_ray.remote
def retry_on_the_host(actor: Any, failures: int, retries: int) -> tuple[str, Any, int]:
    fray_ray.get(actor.arm.remote(failures))
    sent_before = _direct_sent()
    ref = actor.work.options(retry_exceptions=[ValueError], max_task_retries=retries).remote()
    try:
        outcome: tuple[str, Any] = ("value", fray_ray.get(ref))
    except ValueError as exc:
        outcome = ("ValueError", str(exc))
    return outcome[0], outcome[1], _direct_sent() - sent_before


def test_a_direct_call_that_retries_exceptions_is_sent_again_by_its_caller(driver_calls: list[bytes]) -> None:
    actor = Flaky.remote()
    fray_ray.get(actor.arm.remote(0))
    driver_calls.clear()
    kind, value, sent = fray_ray.get(retry_on_the_host.remote(actor, 2, 2))
    assert (kind, value, sent) == ("value", 3, 1)  # two failed runs, then the value; one call sent
    assert driver_calls == []  # neither the call nor its retries went through the driver
    kind, message, _ = fray_ray.get(retry_on_the_host.remote(actor, 3, 2))
    assert kind == "ValueError" and "run 6 fails" in message  # out of retries: the last run's error


@fray_ray.remote
class Napper:
    def __init__(self, started: Any) -> None:
        self.started = started

    def nap(self, seconds: float) -> str:
        import time

        fray_ray.get(self.started.note.remote())
        time.sleep(seconds)
        return "rested"

    def ready(self) -> bool:
        return True


@fray_ray.remote
def slow_direct_call(actor: Any, seconds: float, events: bool) -> tuple[str, int]:
    assert fray_ray.get(actor.ready.remote()) and _direct_sent() >= 1  # the gate is named
    ref = actor.nap.options(enable_task_events=events).remote(seconds)
    return fray_ray.get(ref), _direct_sent()


def _rows(name: str) -> list[Any]:
    from fray_ray.util.state import list_tasks

    return list_tasks(filters=[("name", "=", name)], limit=1000)


def test_the_state_api_lists_a_direct_call_while_it_runs(driver_calls: list[bytes]) -> None:
    started = Started.remote()
    actor = Napper.remote(started)
    fray_ray.get(actor.ready.remote())
    ref = slow_direct_call.remote(actor, 3.0, True)
    wait_for(lambda: fray_ray.get(started.seen.remote()) >= 1, what="the slow call to start")
    running = [row for row in _rows("Napper.nap") if row.state == "RUNNING"]
    assert len(running) == 1 and running[0].type == "ACTOR_TASK"
    assert bytes.fromhex(running[0].task_id) not in driver_calls  # the host said so, not the driver
    assert fray_ray.get(ref)[0] == "rested"
    assert [row.state for row in _rows("Napper.nap")] == ["FINISHED"]


def test_a_direct_call_without_task_events_is_not_listed(session: fray_ray.RayContext) -> None:
    started = Started.remote()
    actor = Napper.options(name="unlisted-napper").remote(started)
    fray_ray.get(actor.ready.remote())
    before = len(_rows("Napper.nap"))
    ref = slow_direct_call.remote(actor, 1.0, False)
    wait_for(lambda: fray_ray.get(started.seen.remote()) >= 1, what="the slow call to start")
    assert len(_rows("Napper.nap")) == before  # not while it runs
    assert fray_ray.get(ref) == ("rested", 2)
    assert len(_rows("Napper.nap")) == before  # nor once it ended


@fray_ray.remote
def child_task() -> str:
    return "child ran"


@fray_ray.remote
class Delegator:
    def ready(self) -> bool:
        return True

    def delegate(self) -> str:
        return fray_ray.get(child_task.remote(), timeout=120)


@fray_ray.remote
def wait_on_a_direct_call_that_needs_my_cpu(actor: Any) -> tuple[str, int]:
    assert fray_ray.get(actor.ready.remote())
    sent = _direct_sent()
    return fray_ray.get(actor.delegate.remote(), timeout=120), _direct_sent() - sent


def test_a_task_waiting_on_a_direct_call_lends_its_cpu_as_in_ray(session: fray_ray.RayContext) -> None:
    """The task holds every CPU and waits for a direct call whose method needs a CPU for a child
    task: as in Ray, a task waiting in `get` lends its CPU, so the child runs."""
    cpus = fray_ray.cluster_resources()["CPU"]
    actor = Delegator.remote()
    assert fray_ray.get(actor.ready.remote())
    greedy = wait_on_a_direct_call_that_needs_my_cpu.options(num_cpus=cpus)
    assert fray_ray.get(greedy.remote(actor), timeout=180) == ("child ran", 1)


@fray_ray.remote
def ray_wait_on_a_direct_call_that_needs_my_cpu(actor: Any) -> tuple[int, int]:
    assert fray_ray.get(actor.ready.remote())
    sent = _direct_sent()
    ready, pending = fray_ray.wait([actor.delegate.remote()], num_returns=1, timeout=120)
    return len(ready), _direct_sent() - sent


def test_a_task_in_ray_wait_on_a_direct_call_lends_its_cpu_too(session: fray_ray.RayContext) -> None:
    cpus = fray_ray.cluster_resources()["CPU"]
    actor = Delegator.remote()
    assert fray_ray.get(actor.ready.remote())
    greedy = ray_wait_on_a_direct_call_that_needs_my_cpu.options(num_cpus=cpus)
    assert fray_ray.get(greedy.remote(actor), timeout=180) == (1, 1)


@fray_ray.remote
class BigSource:
    def make(self, size: int) -> bytes:
        return b"x" * size


@fray_ray.remote
class PassesOn:
    def __init__(self, source: Any, keeper: Any) -> None:
        self.source, self.keeper = source, keeper

    def pass_on(self, size: int) -> int:
        ref = self.source.make.remote(size)
        fray_ray.wait([ref])  # its value is here before the ref leaves
        fray_ray.get(self.keeper.keep.remote([ref]))
        return os.getpid()


def test_a_large_direct_result_passed_on_stays_with_its_caller_and_dies_with_it() -> None:
    from fray_ray.exceptions import OwnerDiedError

    size = 2 << 20
    keeper = Keeper.remote()
    caller = PassesOn.remote(BigSource.remote(), keeper)
    caller_pid = fray_ray.get(caller.pass_on.remote(size))
    (ref,) = fray_ray.get(keeper.kept_refs.remote())
    driver = runtime_slot.current()
    assert driver.objects.holders([ref.binary()]), "the driver holds the value itself"
    assert fray_ray.get(ref) == b"x" * size  # read from the caller's process
    fray_ray.kill(caller)
    wait_for(lambda: not pid_alive(caller_pid), what="the caller's process gone")
    with pytest.raises(OwnerDiedError):  # the caller was its owner, as in Ray
        fray_ray.get(ref, timeout=60)
