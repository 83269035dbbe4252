"""Actor calls made inside tasks and actors: the same rules as calls from the driver.

A task or actor that holds a handle calls the actor in submission order, gets results it can
pass on (to other tasks, inside return values, to an actor that keeps them past the task, and
from that actor to another), retries calls whose actor process was killed
under them while `max_task_retries` lasts, gets `ActorDiedError` once the actor will not come
back, and can cancel a call still queued. Processes are killed for real (`SIGKILL` of the pid
the actor reports); tests wait on conditions, never on sleeps.
"""

from __future__ import annotations

import os
import signal

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import Recorder, SignalActor, wait_for_condition


@ray.remote(num_cpus=0)
class Counter:
    def __init__(self):
        self.count = 0

    def incr(self, by=1):
        self.count += by
        return self.count


@ray.remote
def calls_in_order(counter, count):
    one_by_one = [ray.get(counter.incr.remote()) for _ in range(count)]
    pipelined = ray.get([counter.incr.remote() for _ in range(count)])
    return one_by_one + pipelined


def test_actor_calls_from_tasks__a_task_calls_an_actor_in_submission_order(ray_start_regular_shared):
    counter = Counter.remote()
    assert ray.get(counter.incr.remote()) == 1
    assert ray.get(calls_in_order.remote(counter, 100)) == list(range(2, 202))


@ray.remote(num_cpus=0)
class Caller:
    def __init__(self, target):
        self.target = target

    def calls(self, count):
        return ray.get([self.target.incr.remote() for _ in range(count)])


def test_actor_calls_from_tasks__an_actor_calls_an_actor(ray_start_regular_shared):
    counter = Counter.remote()
    caller = Caller.remote(counter)
    assert ray.get(caller.calls.remote(50)) == list(range(1, 51))
    assert ray.get(counter.incr.remote()) == 51


@ray.remote
def passes_the_handle_on(counter):
    return ray.get(calls_in_order.remote(counter, 3))


def test_actor_calls_from_tasks__a_handle_passed_on_twice(ray_start_regular_shared):
    counter = Counter.remote()
    assert ray.get(passes_the_handle_on.remote(counter)) == [1, 2, 3, 4, 5, 6]


@ray.remote
def add_one(value):
    return value + 1


@ray.remote
def results_passed_on(counter):
    first = counter.incr.remote(10)
    as_argument = ray.get(add_one.remote(first))
    later = counter.incr.remote(5)
    return as_argument, [later]


def test_actor_calls_from_tasks__results_passed_to_tasks_and_returned_inside_values(ray_start_regular_shared):
    counter = Counter.remote()
    as_argument, holder = ray.get(results_passed_on.remote(counter))
    assert as_argument == 11
    assert ray.get(holder[0]) == 15
    assert ray.get(add_one.remote(holder[0])) == 16


@ray.remote(num_cpus=0)
class ReplayBuffer:
    def __init__(self):
        self.kept = []

    def add(self, refs):
        self.kept.extend(refs)
        del self.kept[:-3]  # the oldest are let go
        return len(self.kept)

    def sample(self):
        return ray.get(self.kept)

    def refs(self):
        return list(self.kept)


@ray.remote
def rollouts(counter, buffer, steps):
    for _ in range(steps):
        ray.get(buffer.add.remote([counter.incr.remote()]))
    return steps


def test_actor_calls_from_tasks__refs_an_actor_keeps_outlive_the_task_that_made_them(ray_start_regular_shared):
    counter, buffer = Counter.remote(), ReplayBuffer.remote()
    assert ray.get(rollouts.remote(counter, buffer, 5)) == 5
    assert ray.get(buffer.sample.remote()) == [3, 4, 5]
    kept = ray.get(buffer.refs.remote())  # passed on, to the driver
    assert ray.get(kept) == [3, 4, 5]
    assert ray.get(add_one.remote(kept[0])) == 4


@ray.remote(num_cpus=0)
class Learner:
    def __init__(self):
        self.batch = []

    def take(self, buffer):
        self.batch = ray.get(buffer.refs.remote())  # refs the buffer borrows, unread
        return len(self.batch)

    def read(self):
        return ray.get(self.batch)

    def pass_to_a_task(self):
        return ray.get(add_one.remote(self.batch[0]))


def test_actor_calls_from_tasks__refs_a_learner_takes_from_a_buffer_outlive_the_buffers_own(ray_start_regular_shared):
    counter, buffer, learner = Counter.remote(), ReplayBuffer.remote(), Learner.remote()
    assert ray.get(rollouts.remote(counter, buffer, 5)) == 5
    assert ray.get(learner.take.remote(buffer)) == 3
    assert ray.get(rollouts.remote(counter, buffer, 3)) == 3  # the buffer lets go of those the learner took
    assert ray.get(buffer.sample.remote()) == [6, 7, 8]
    assert ray.get(learner.read.remote()) == [3, 4, 5]
    assert ray.get(learner.pass_to_a_task.remote()) == 4
    assert ray.get(learner.read.remote()) == [3, 4, 5]


@ray.remote
def waits_for_calls(counter):
    refs = [counter.incr.remote() for _ in range(10)]
    ready, not_ready = ray.wait(refs, num_returns=10, timeout=60)
    return len(ready), len(not_ready), sorted(ray.get(ready))


def test_actor_calls_from_tasks__wait_on_results_inside_a_task(ray_start_regular_shared):
    counter = Counter.remote()
    assert ray.get(waits_for_calls.remote(counter)) == (10, 0, list(range(1, 11)))


@ray.remote(num_cpus=0)
class Holder:
    def pid(self):
        return os.getpid()

    def hold(self, release, recorder):
        ray.get(recorder.record.remote(os.getpid()))
        ray.get(release.wait.remote())
        return os.getpid()


@ray.remote
def calls_hold(holder, release, recorder):
    try:
        return ray.get(holder.hold.remote(release, recorder))
    except exceptions.ActorDiedError:
        return "ActorDiedError"
    except exceptions.ActorUnavailableError:
        return "ActorUnavailableError"


def test_actor_calls_from_tasks__a_call_is_retried_when_its_actor_is_killed_under_it(ray_start_regular_shared):
    holder = Holder.options(max_restarts=1, max_task_retries=1).remote()
    first = ray.get(holder.pid.remote())
    release, recorder = SignalActor.remote(), Recorder.remote()
    result = calls_hold.remote(holder, release, recorder)
    wait_for_condition(lambda: ray.get(recorder.count.remote()) == 1)
    os.kill(first, signal.SIGKILL)
    wait_for_condition(lambda: ray.get(recorder.count.remote()) == 2)  # the restarted actor runs it again
    ray.get(release.send.remote())
    second = ray.get(result, timeout=120)
    assert second != first
    assert ray.get(recorder.items.remote()) == [first, second]


def test_actor_calls_from_tasks__actor_died_when_no_restart_is_left(ray_start_regular_shared):
    holder = Holder.options(max_restarts=0).remote()
    pid = ray.get(holder.pid.remote())
    release, recorder = SignalActor.remote(), Recorder.remote()
    result = calls_hold.remote(holder, release, recorder)
    wait_for_condition(lambda: ray.get(recorder.count.remote()) == 1)
    os.kill(pid, signal.SIGKILL)
    assert ray.get(result, timeout=120) == "ActorDiedError"


@ray.remote(num_cpus=0)
class Blocker:
    def block(self, release):
        ray.get(release.wait.remote())
        return "released"

    def after(self):
        return "after"


@ray.remote
def cancels_a_queued_call(blocker, release):
    running = blocker.block.remote(release)
    queued = blocker.after.remote()
    ray.cancel(queued)
    ray.get(release.send.remote())
    try:
        ray.get(queued)
        outcome = "ran"
    except exceptions.TaskCancelledError:
        outcome = "cancelled"
    return ray.get(running), outcome


def test_actor_calls_from_tasks__cancel_of_a_queued_call(ray_start_regular_shared):
    blocker = Blocker.remote()
    assert ray.get(blocker.after.remote()) == "after"
    assert ray.get(cancels_a_queued_call.remote(blocker, SignalActor.remote())) == ("released", "cancelled")
