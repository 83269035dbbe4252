"""``ray.cancel``: queued and running tasks, force, dependents, recursion, actor tasks.

Mirrors Ray's test_cancel.py (ray-api.md §1.4 "ray.cancel"). Running tasks here spin in a
Python loop (bounded, so nothing spins for ever if cancellation fails); they announce that they
started through a ``Recorder`` actor so the test never has to guess.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import Recorder, SignalActor, wait_for_condition

# What ray.get may raise for a cancelled task (Ray's own allowed sets).
CANCELLED = (exceptions.TaskCancelledError, exceptions.RayTaskError)
FORCE_CANCELLED = CANCELLED + (exceptions.WorkerCrashedError, exceptions.ObjectLostError)


@ray.remote
def _spin(recorder, tag, seconds=60):
    ray.get(recorder.record.remote(tag))
    deadline = time.time() + seconds
    count = 0
    while time.time() < deadline:
        count += 1
    return count


@ray.remote
def _sleep(recorder, tag, seconds=60):
    ray.get(recorder.record.remote(tag))
    time.sleep(seconds)
    return "slept"


@ray.remote
def _identity(x):
    return x


@ray.remote(num_cpus=0)
def _wait_then_return(signal, value):
    ray.get(signal.wait.remote())
    return value


# A value too big to be inlined into a dependent task's arguments. Ray 2.60's driver aborts
# (reference_counter.cc "Check failed: submitted_task_ref_count > 0") when a task is cancelled
# while it waits for a small, inlinable argument that later becomes ready; large values avoid it.
_BIG = b"v" * 1_000_000


def _started(recorder, tag):
    return tag in ray.get(recorder.items.remote())


def test_cancel__running_task_is_interrupted(ray_start_regular_shared):
    recorder = Recorder.remote()
    ref = _spin.remote(recorder, "spin")
    wait_for_condition(_started, recorder=recorder, tag="spin")
    start = time.monotonic()
    ray.cancel(ref)
    with pytest.raises(exceptions.TaskCancelledError) as info:
        ray.get(ref, timeout=60)
    assert time.monotonic() - start < 30  # interrupted, not run to its 60 s end
    # A running task's cancellation is reported through the task error, dual-typed.
    assert isinstance(info.value, exceptions.RayTaskError)


def test_cancel__queued_task(ray_start_regular_shared):
    signal = SignalActor.remote()
    head = _wait_then_return.remote(signal, _BIG)
    queued = _identity.remote(head)  # waits for its argument
    ray.cancel(queued)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(queued, timeout=60)
    signal.send.remote()
    assert ray.get(head) == _BIG
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(queued, timeout=60)  # still cancelled once its argument is ready


def test_cancel__single_cpu_cancel(ray_start_regular_shared):
    recorder = Recorder.remote()
    # Fill every CPU, so the next task waits for one.
    cpus = int(ray.cluster_resources()["CPU"])
    busy = [_spin.remote(recorder, f"busy{i}") for i in range(cpus)]
    for i in range(cpus):
        wait_for_condition(_started, recorder=recorder, tag=f"busy{i}")
    waiting = _spin.remote(recorder, "waiting")
    ray.cancel(waiting)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(waiting, timeout=60)
    for ref in busy:
        ray.cancel(ref)
    for ref in busy:
        with pytest.raises(CANCELLED):
            ray.get(ref, timeout=60)


def test_cancel__force_kills_the_worker(ray_start_regular_shared):
    recorder = Recorder.remote()
    # time.sleep is not interrupted by a plain cancel; force=True kills the process.
    ref = _sleep.remote(recorder, "sleeper")
    wait_for_condition(_started, recorder=recorder, tag="sleeper")
    start = time.monotonic()
    ray.cancel(ref, force=True)
    with pytest.raises(FORCE_CANCELLED):
        ray.get(ref, timeout=60)
    assert time.monotonic() - start < 30


def test_cancel__comprehensive(ray_start_regular_shared):
    recorder = Recorder.remote()
    stored = ray.put("stored")
    running = _spin.remote(recorder, "running")
    waiting_on_running = _identity.remote(running)
    wait_for_condition(_started, recorder=recorder, tag="running")
    for ref in (stored, waiting_on_running, running):
        ray.cancel(ref)
    assert ray.get(stored) == "stored"  # nothing to cancel
    for ref in (running, waiting_on_running):
        with pytest.raises(CANCELLED):
            ray.get(ref, timeout=60)
    # Cancelled work is gone, the cluster is not: new tasks still run.
    assert ray.get(_identity.remote("after"), timeout=60) == "after"


def test_cancel__cancel_chain(ray_start_regular_shared):
    recorder = Recorder.remote()
    head = _spin.remote(recorder, "head")
    middle = _identity.remote(head)
    tail = _identity.remote(middle)
    wait_for_condition(_started, recorder=recorder, tag="head")
    ray.cancel(tail)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(tail, timeout=60)
    ray.cancel(head)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(head, timeout=60)
    # The dependent of a cancelled task fails with the cancellation too.
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(middle, timeout=60)


def test_cancel__multiple_dependents(ray_start_regular_shared):
    signal = SignalActor.remote()
    head = _wait_then_return.remote(signal, _BIG)
    dependents = [_identity.remote(head) for _ in range(3)]
    ray.cancel(dependents[0])
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(dependents[0], timeout=60)
    signal.send.remote()
    assert ray.get(dependents[1:], timeout=60) == [_BIG, _BIG]


def test_cancel__recursive_cancel(ray_start_regular_shared):
    recorder = Recorder.remote()

    @ray.remote
    def parent(rec):
        child = _spin.remote(rec, "child")
        ray.get(rec.record.remote([child]))  # hand the child's ref to the test
        return ray.get(child)

    top = parent.remote(recorder)
    wait_for_condition(_started, recorder=recorder, tag="child")
    child = next(item[0] for item in ray.get(recorder.items.remote()) if isinstance(item, list))
    ray.cancel(top)  # recursive=True is the default
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(top, timeout=60)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(child, timeout=60)


def test_cancel__remote_cancel(ray_start_regular_shared):
    recorder = Recorder.remote()
    target = _spin.remote(recorder, "target")
    wait_for_condition(_started, recorder=recorder, tag="target")

    @ray.remote
    def canceller(refs):
        ray.cancel(refs[0])
        return "sent"

    assert ray.get(canceller.remote([target])) == "sent"
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(target, timeout=60)


def test_cancel__object_without_a_task_is_a_no_op(ray_start_regular_shared):
    # (Cancelling a task that has just finished is left out: on Ray 2.60 it can race with the
    # task's completion and abort the driver, task_manager.cc "Tried to complete task that was
    # not pending".)
    ref = ray.put("put")
    ray.cancel(ref)
    assert ray.get(ref) == "put"


def test_cancel__invalid_arguments(ray_start_regular_shared):
    with pytest.raises(TypeError):
        ray.cancel(1)

    @ray.remote(num_cpus=0)
    class Actor:
        def ping(self):
            return 1

    with pytest.raises(TypeError):
        ray.cancel(Actor.remote())


def test_cancel__actor_task_force_raises_value_error(ray_start_regular_shared):
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    class Actor:
        def block(self, sig):
            return ray.get(sig.wait.remote())

    actor = Actor.remote()
    ref = actor.block.remote(signal)
    with pytest.raises(ValueError, match="force"):
        ray.cancel(ref, force=True)
    signal.send.remote()
    assert ray.get(ref, timeout=60) is None


def test_cancel__queued_actor_task(ray_start_regular_shared):
    signal, argument_signal = SignalActor.remote(), SignalActor.remote()

    @ray.remote(num_cpus=0)
    class Actor:
        def block(self, sig):
            ray.get(sig.wait.remote())
            return "released"

        def echo(self, value):
            return value

    actor = Actor.remote()
    running = actor.block.remote(signal)
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 1)
    # This call cannot start: the actor is busy and its argument is not ready.
    queued = actor.echo.remote(_wait_then_return.remote(argument_signal, _BIG))
    ray.cancel(queued)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(queued, timeout=60)
    signal.send.remote()
    argument_signal.send.remote()
    assert ray.get(running, timeout=60) == "released"
    # (No further calls on this actor: on Ray 2.60 a call cancelled before it reached the actor
    # leaves a gap in the actor's call sequence, and later calls fail after 30 s with
    # ActorUnavailableError.)


def test_cancel__sync_actor_polls_is_canceled(ray_start_regular_shared):
    recorder = Recorder.remote()

    @ray.remote(num_cpus=0)
    class Actor:
        def poll(self, rec):
            ray.get(rec.record.remote("polling"))
            deadline = time.time() + 60
            while time.time() < deadline:
                if ray.get_runtime_context().is_canceled():
                    return "noticed"
                time.sleep(0.01)
            return "never noticed"

        def quick(self):
            return "quick"

    actor = Actor.remote()
    ref = actor.poll.remote(recorder)
    wait_for_condition(_started, recorder=recorder, tag="polling")
    start = time.monotonic()
    ray.cancel(ref)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)
    # The method returned early, so the actor is free again.
    assert ray.get(actor.quick.remote(), timeout=60) == "quick"
    assert time.monotonic() - start < 45


def test_cancel__async_actor_task(ray_start_regular_shared):
    recorder = Recorder.remote()

    @ray.remote(num_cpus=0)
    class AsyncActor:
        def __init__(self):
            self.saw_cancelled_error = False

        async def hang(self, rec):
            try:
                # Inside the try: the recorder may see "hanging" before this await returns, so
                # the cancellation can land here as well as in the sleep.
                await rec.record.remote("hanging")
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.saw_cancelled_error = True  # no await here: it could be cancelled too
                raise
            return "not cancelled"

        async def cancelled_error_seen(self):
            return self.saw_cancelled_error

    actor = AsyncActor.remote()
    ref = actor.hang.remote(recorder)
    wait_for_condition(_started, recorder=recorder, tag="hanging")
    ray.cancel(ref)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)
    # The coroutine itself was cancelled (asyncio.CancelledError), and the actor lives on.
    wait_for_condition(lambda: ray.get(actor.cancelled_error_seen.remote()))


def test_cancel__async_actor_task_error_is_a_task_error(ray_start_regular_shared):
    # A cancelled coroutine fails inside the actor, so the caller's error is a RayTaskError
    # (the task failed) that is also the TaskCancelledError (why it failed).
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    class AsyncActor:
        async def hang(self, signal):
            await signal.wait.remote()
            return "not cancelled"

    actor = AsyncActor.remote()
    ref = actor.hang.remote(signal)
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 1)
    ray.cancel(ref)
    try:
        ray.get(ref, timeout=60)
    except exceptions.RayTaskError as error:
        assert isinstance(error, exceptions.TaskCancelledError)
        assert isinstance(error.cause, exceptions.TaskCancelledError)
        assert "hang" in str(error)
    else:
        pytest.fail("the cancelled call returned")
    ray.get(signal.send.remote())


def test_cancel__async_generator_method_error_is_a_task_error(ray_start_regular_shared):
    # An actor whose only async method is an async generator is an async actor too: cancelling
    # the running stream cancels its coroutine, and the next item raises RayTaskError that is
    # also the TaskCancelledError.
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    class Streamer:
        async def stream(self, signal):
            yield "first"
            await signal.wait.remote()
            yield "never"

    actor = Streamer.remote()
    stream = actor.stream.remote(signal)
    assert ray.get(next(stream), timeout=60) == "first"
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 1)
    ray.cancel(stream)
    try:
        ray.get(next(stream), timeout=60)
    except exceptions.RayTaskError as error:
        assert isinstance(error, exceptions.TaskCancelledError)
        assert isinstance(error.cause, exceptions.TaskCancelledError)
    else:
        pytest.fail("the cancelled stream went on")
    ray.get(signal.send.remote())


def test_cancel__async_generator_methods_run_concurrently(ray_start_regular_shared):
    # Async generator methods alone make an async actor (max_concurrency 1000): two streams
    # wait at once.
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    class Streamer:
        async def stream(self, signal):
            await signal.wait.remote()
            yield "released"

    actor = Streamer.remote()
    streams = [actor.stream.remote(signal), actor.stream.remote(signal)]
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 2)
    ray.get(signal.send.remote())
    assert [ray.get(next(s), timeout=60) for s in streams] == ["released", "released"]


def test_cancel__sync_actor_task_error_is_not_a_task_error(ray_start_regular_shared):
    # A sync method is only flagged; the caller's error is a plain TaskCancelledError.
    recorder = Recorder.remote()

    @ray.remote(num_cpus=0)
    class Actor:
        def poll(self, rec):
            ray.get(rec.record.remote("polling"))
            deadline = time.time() + 60
            while time.time() < deadline and not ray.get_runtime_context().is_canceled():
                time.sleep(0.01)
            return "done"

    actor = Actor.remote()
    ref = actor.poll.remote(recorder)
    wait_for_condition(_started, recorder=recorder, tag="polling")
    ray.cancel(ref)
    with pytest.raises(exceptions.TaskCancelledError) as info:
        ray.get(ref, timeout=60)
    assert not isinstance(info.value, exceptions.RayTaskError)


@ray.remote
def _blocked_in_get(recorder, signal):
    ray.get(recorder.record.remote("blocked"))
    ray.get(signal.wait.remote())  # never sent before the cancel: only an interrupt ends this
    return "released"


def test_cancel__task_blocked_in_get_is_interrupted(ray_start_regular_shared):
    recorder, signal = Recorder.remote(), SignalActor.remote()
    ref = _blocked_in_get.remote(recorder, signal)
    wait_for_condition(_started, recorder=recorder, tag="blocked")
    ray.cancel(ref)
    # The task is interrupted inside its ray.get (KeyboardInterrupt there, as in Ray); without
    # that it would wait for the signal and this get would time out.
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)
    ray.get(signal.send.remote())


def test_cancel__recursive_cancel_while_parent_computes(ray_start_regular_shared):
    recorder, signal = Recorder.remote(), SignalActor.remote()

    @ray.remote
    def parent(rec, signal):
        child = _blocked_in_get.remote(rec, signal)
        ray.get(rec.record.remote([child]))  # hand the child's ref to the test
        deadline = time.time() + 60
        while time.time() < deadline:  # busy: the parent never blocks
            pass
        return "parent finished"

    top = parent.remote(recorder, signal)

    def child_blocked_and_known():  # the two records may arrive in either order
        items = ray.get(recorder.items.remote())
        return "blocked" in items and any(isinstance(item, list) for item in items)

    wait_for_condition(child_blocked_and_known)
    child = next(item[0] for item in ray.get(recorder.items.remote()) if isinstance(item, list))
    ray.cancel(top)  # recursive=True is the default
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(top, timeout=60)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(child, timeout=60)
    ray.get(signal.send.remote())
