"""Actors: definition, calls, ordering, handles, threaded actors, kill and exit.

Mirrors Ray's test_actor.py, test_basic_2.py actor tests and test_failure.py actor errors, plus
the actor rules of the reference (ray-api.md §1.2, §1.4).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from compat_tests._backend import actor_module, exceptions, ray, remote_function_module
from compat_tests.helpers import SignalActor, wait_for_condition


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, by=1):
        self.value += by
        return self.value

    def get(self):
        return self.value


@ray.remote(num_cpus=0)
def _wait_then_return(signal, value):
    ray.get(signal.wait.remote())
    return value


# --- definition -------------------------------------------------------------------------------


def test_actor__define_actor(ray_start_regular_shared):
    @ray.remote
    class Test:
        def __init__(self, x):
            self.x = x

        def f(self, y):
            return self.x + y

    t = Test.remote(2)
    assert ray.get(t.f.remote(1)) == 3
    with pytest.raises(TypeError, match="cannot be called directly"):
        t.f(1)


def test_actor__direct_instantiation_raises_type_error(ray_start_regular_shared):
    with pytest.raises(TypeError, match="cannot be instantiated directly"):
        Counter()


def test_actor__missing_method_raises_attribute_error(ray_start_regular_shared):
    counter = Counter.remote()
    with pytest.raises(AttributeError):
        counter.no_such_method
    with pytest.raises(AttributeError):
        counter.no_such_method.remote()
    assert ray.get(counter.increment.remote()) == 1


def test_actor__subclassing_an_actor_class_raises(ray_start_regular_shared):
    with pytest.raises(TypeError):

        class Derived(Counter):  # noqa: F841 - defining it is what raises
            pass

    assert issubclass(actor_module.ActorClassInheritanceException, TypeError)


def test_actor__importable_types(ray_start_regular_shared):
    counter = Counter.remote()
    assert isinstance(counter, actor_module.ActorHandle)
    assert isinstance(Counter, actor_module.ActorClass)

    @ray.remote
    def f():
        return 1

    assert isinstance(f, remote_function_module.RemoteFunction)


def test_actor__autocomplete(ray_start_regular_shared):
    public = {name for name in dir(Counter) if not name.startswith("_")}
    assert {"increment", "get", "options", "remote"} <= public
    assert public <= {"increment", "get", "options", "remote", "bind"}


def test_actor__decorator_args(ray_start_regular_shared):
    class Plain:
        def ping(self):
            return "pong"

    # ``@ray.remote()`` with empty parentheses is rejected (Ray raises AssertionError).
    with pytest.raises((AssertionError, TypeError, ValueError)):
        ray.remote()(Plain)
    with pytest.raises(ValueError, match="Invalid option keyword"):
        ray.remote(not_an_option=1)(Plain)
    with pytest.raises(ValueError):
        ray.remote(num_returns=2)(Plain)  # a task-only option
    with pytest.raises(ValueError):
        ray.remote(max_retries=2)(Plain)  # a task-only option
    with pytest.raises(TypeError):
        ray.remote(max_concurrency="2")(Plain)
    with pytest.raises(ValueError):
        ray.remote(resources={"CPU": 1})(Plain)
    # Unknown @ray.method options are rejected too (Ray raises AssertionError).
    with pytest.raises((AssertionError, TypeError, ValueError)):
        ray.method(not_an_option=1)

    valid = ray.remote(num_cpus=1, num_gpus=0, memory=10**6, max_restarts=0, max_task_retries=0)(Plain)
    assert ray.get(valid.remote().ping.remote()) == "pong"
    assert ray.get(ray.remote(Plain).options(num_cpus=0, max_concurrency=2).remote().ping.remote()) == "pong"


def test_actor__keyword_args(ray_start_regular_shared):
    @ray.remote
    class Holder:
        def __init__(self, a, b=2):
            self.value = (a, b)

        def get(self, extra=0, *, scale=1):
            return (self.value[0] * scale + extra, self.value[1])

    holder = Holder.remote(1, b=3)
    assert ray.get(holder.get.remote()) == (1, 3)
    assert ray.get(holder.get.remote(extra=1, scale=10)) == (11, 3)
    assert ray.get(Holder.remote(a=5).get.remote(1)) == (6, 2)
    with pytest.raises(TypeError):
        Holder.remote()
    with pytest.raises(TypeError):
        Holder.remote(1, c=2)
    with pytest.raises(TypeError):
        holder.get.remote(1, 2)


def test_actor__actor_name_conflict(ray_start_regular_shared):
    handles = []
    for i in range(3):

        @ray.remote(num_cpus=0)
        class Same:
            tag = i

            def get(self):
                return self.tag

        handles.append(Same.remote())
    assert ray.get([h.get.remote() for h in handles]) == [0, 1, 2]


def test_actor__custom_classes(ray_start_regular_shared):
    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y

    @ray.remote
    class Shape:
        def __init__(self, origin):
            self.points = [origin]

        def add(self, point):
            self.points.append(point)
            return Point(point.x + 1, point.y + 1)

        def all(self):
            return self.points

    shape = Shape.remote(Point(0, 0))
    moved = ray.get(shape.add.remote(Point(1, 2)))
    assert (moved.x, moved.y) == (2, 3)
    assert [(p.x, p.y) for p in ray.get(shape.all.remote())] == [(0, 0), (1, 2)]


def test_actor__actor_class_attributes(ray_start_regular_shared):
    class Base:
        base_attr = "base"

        def from_base(self):
            return "base method"

    class Mixin:
        def from_mixin(self):
            return "mixin method"

    @ray.remote
    class Actor(Base, Mixin):
        class_attr = 10

        @staticmethod
        def static(x):
            return x * 2

        @classmethod
        def klass(cls):
            return cls.class_attr

        def check(self):
            return (
                self.class_attr, self.base_attr, self.static(3), self.klass(),
                self.from_base(), self.from_mixin(),
            )

    actor = Actor.remote()
    assert ray.get(actor.check.remote()) == (10, "base", 6, 10, "base method", "mixin method")
    assert ray.get(actor.from_base.remote()) == "base method"


def test_actor__inherit_actor_from_class(ray_start_regular_shared):
    class Plain:
        def __init__(self, x):
            self.x = x

        def twice(self):
            return self.x * 2

    @ray.remote
    class Derived(Plain):
        def thrice(self):
            return self.x * 3

    actor = Derived.remote(5)
    assert ray.get([actor.twice.remote(), actor.thrice.remote()]) == [10, 15]


# --- calls and ordering -------------------------------------------------------------------------


def test_actor__multiple_actors(ray_start_regular_shared):
    counters = [Counter.remote(start=10 * i) for i in range(5)]
    refs = {i: [] for i in range(5)}
    for _ in range(10):
        for i, counter in enumerate(counters):
            refs[i].append(counter.increment.remote())
    for i in range(5):
        assert ray.get(refs[i]) == [10 * i + k for k in range(1, 11)]


def test_basic_2__actor_call_order(ray_start_regular_shared):
    first_signal, last_signal = SignalActor.remote(), SignalActor.remote()

    @ray.remote
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, value):
            self.seen.append(value)

        def get(self):
            return self.seen

    log = Log.remote()
    first_arg = _wait_then_return.remote(first_signal, "a")
    last_arg = _wait_then_return.remote(last_signal, "c")
    log.add.remote(first_arg)
    log.add.remote("b")
    log.add.remote(last_arg)
    # Resolve the last argument first; the calls must still run in submission order.
    last_signal.send.remote()
    ray.wait([last_arg], timeout=60)
    first_signal.send.remote()
    assert ray.get(log.get.remote()) == ["a", "b", "c"]


def test_basic_2__actor_pass_by_ref_order_optimization(ray_start_regular_shared):
    signal = SignalActor.remote()
    waiting, free = Counter.remote(), Counter.remote()
    blocked = waiting.increment.remote(_wait_then_return.remote(signal, 5))
    done = free.increment.remote(1)
    # A pending dependency of one actor's call does not hold up another actor.
    assert ray.get(done, timeout=60) == 1
    assert ray.wait([blocked], timeout=0)[0] == []
    signal.send.remote()
    assert ray.get(blocked) == 5


def test_basic_2__actor_pass_by_ref(ray_start_regular_shared):
    @ray.remote
    def make(x):
        return x

    @ray.remote
    def fail():
        raise IndexError("bad input")

    counter = Counter.remote()
    assert ray.get(counter.increment.remote(make.remote(3))) == 3
    assert ray.get(counter.increment.remote(by=ray.put(4))) == 7
    with pytest.raises(IndexError):
        ray.get(counter.increment.remote(fail.remote()))
    with pytest.raises(exceptions.RayTaskError):
        ray.get(counter.increment.remote(fail.remote()))
    # The failed calls did not run; the actor is fine.
    assert ray.get(counter.get.remote()) == 7


def test_basic_2__actor_recursive(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Link:
        def __init__(self, next_link=None):
            self.next_link = next_link

        def depth(self, x):
            if self.next_link is None:
                return x
            return ray.get(self.next_link.depth.remote(x)) + 1

    chain = None
    for _ in range(3):
        chain = Link.remote(chain)
    refs = [chain.depth.remote(i) for i in range(100)]
    ready, not_ready = ray.wait(refs, num_returns=100, timeout=120)
    assert len(ready) == 100 and not not_ready
    assert ray.get(refs) == [i + 2 for i in range(100)]


def test_basic_2__inline_arg_memory_corruption(ray_start_regular_shared):
    @ray.remote
    def make(i):
        return np.full(100, i, dtype=np.uint8)

    @ray.remote
    class Keeper:
        def __init__(self):
            self.kept = []

        def add(self, array):
            self.kept.append(array)
            return all(int(a[0]) == i and (a == i).all() for i, a in enumerate(self.kept))

    keeper = Keeper.remote()
    for i in range(20):
        assert ray.get(keeper.add.remote(make.remote(i)))


def test_basic_2__call_actors_indirect_through_tasks(ray_start_regular_shared):
    @ray.remote
    def bump(counter, times):
        for _ in range(times):
            ray.get(counter.increment.remote())

    @ray.remote
    def bump_from_list(handles, times):
        for _ in range(times):
            ray.get(handles[0].increment.remote())

    counter = Counter.remote()
    ray.get([bump.remote(counter, 3) for _ in range(2)])
    ray.get(bump_from_list.remote([counter], 4))
    assert ray.get(counter.get.remote()) == 10


def test_actor__use_actor_twice(ray_start_regular_shared):
    @ray.remote
    def bump(counter):
        return ray.get(counter.increment.remote())

    counter = Counter.remote()
    assert ray.get(bump.remote(counter)) == 1
    assert ray.get(bump.remote(counter)) == 2


def test_actor__remote_function_within_actor(ray_start_regular_shared):
    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    class Driver:
        def __init__(self):
            self.held = [square.remote(i) for i in range(3)]

        def values(self):
            return ray.get(self.held)

        def refs(self):
            return self.held

        def fresh(self, x):
            return ray.get(square.remote(x))

    driver = Driver.remote()
    assert ray.get(driver.values.remote()) == [0, 1, 4]
    assert ray.get(ray.get(driver.refs.remote())) == [0, 1, 4]
    assert ray.get(driver.fresh.remote(7)) == 49


def test_actor__define_actor_within_actor(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Outer:
        def make_inner(self, x):
            @ray.remote(num_cpus=0)
            class Inner:
                def __init__(self, y):
                    self.y = y

                def get(self):
                    return self.y

            self.inner = Inner.remote(x)
            return ray.get(self.inner.get.remote())

    assert ray.get(Outer.remote().make_inner.remote(11)) == 11


def test_actor__use_actor_within_actor(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class User:
        def __init__(self, counter):
            self.counter = counter

        def bump(self):
            return ray.get(self.counter.increment.remote())

    counter = Counter.remote()
    user = User.remote(counter)
    assert ray.get(user.bump.remote()) == 1
    assert ray.get(user.bump.remote()) == 2
    assert ray.get(counter.get.remote()) == 2


def test_actor__define_actor_within_remote_function(ray_start_regular_shared):
    @ray.remote
    def run(x, calls):
        @ray.remote(num_cpus=0)
        class Local:
            def __init__(self, base):
                self.base = base

            def add(self, y):
                return self.base + y

        local = Local.remote(x)
        return ray.get([local.add.remote(i) for i in range(calls)])

    results = ray.get([run.remote(10 * x, 5) for x in range(3)])
    assert results == [[10 * x + i for i in range(5)] for x in range(3)]


def test_actor__wrapped_actor_handle(ray_start_regular_shared):
    @ray.remote
    class Factory:
        def make(self):
            self.made = Counter.remote(start=100)
            return [self.made]

    factory = Factory.remote()  # keep the owner alive: an actor dies with its owner
    handles = ray.get(factory.make.remote())
    assert isinstance(handles, list)
    assert ray.get(handles[0].increment.remote()) == 101


def test_actor__return_actor_handle_from_actor(ray_start_regular_shared):
    @ray.remote
    class Factory:
        def make(self):
            self.made = Counter.remote(start=5)
            return self.made

    factory = Factory.remote()  # keep the owner alive: an actor dies with its owner
    handle = ray.get(factory.make.remote())
    assert ray.get(handle.increment.remote()) == 6


def test_actor__current_actor(ray_start_regular_shared):
    @ray.remote
    class Self:
        def me(self):
            return ray.get_runtime_context().current_actor

        def echo(self, x):
            return x

    actor = Self.remote()
    me = ray.get(actor.me.remote())
    assert ray.get(me.echo.remote("same actor")) == "same actor"


# --- multiple return values ---------------------------------------------------------------


def test_actor__multiple_return_values(ray_start_regular_shared):
    @ray.remote
    class Returns:
        @ray.method(num_returns=1)
        def one(self):
            return (1, 2)

        @ray.method(num_returns=2)
        def two(self):
            return 1, 2

        @ray.method(num_returns=3)
        def three(self):
            return 1, 2, 3

    actor = Returns.remote()
    assert ray.get(actor.one.remote()) == (1, 2)
    a, b = actor.two.remote()
    assert ray.get([a, b]) == [1, 2]
    refs = actor.three.remote()
    assert len(refs) == 3 and ray.get(refs) == [1, 2, 3]


def test_actor__options_num_returns(ray_start_regular_shared):
    @ray.remote
    class Returns:
        def pair(self):
            return "x", "y"

    actor = Returns.remote()
    x, y = actor.pair.options(num_returns=2).remote()
    assert ray.get([x, y]) == ["x", "y"]
    assert ray.get(actor.pair.remote()) == ("x", "y")


# --- threaded actors ------------------------------------------------------------------------


def test_basic_2__actor_concurrent(ray_start_regular_shared):
    @ray.remote(max_concurrency=3, num_cpus=0)
    class Rendezvous:
        def __init__(self):
            self.barrier = threading.Barrier(3)

        def meet(self, i):
            # Only returns if three calls are running at the same time.
            self.barrier.wait(timeout=60)
            return i

    actor = Rendezvous.remote()
    assert sorted(ray.get([actor.meet.remote(i) for i in range(3)], timeout=90)) == [0, 1, 2]


def test_basic_2__actor_max_concurrency(ray_start_regular_shared):
    @ray.remote(max_concurrency=2, num_cpus=0)
    class Tracker:
        def __init__(self):
            self.lock = threading.Lock()
            self.active = 0
            self.peak = 0
            self.threads = set()

        def work(self):
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
                self.threads.add(threading.get_ident())
            time.sleep(0.02)
            with self.lock:
                self.active -= 1

        def stats(self):
            return self.peak, len(self.threads)

    tracker = Tracker.remote()
    ray.get([tracker.work.remote() for _ in range(20)])
    peak, threads = ray.get(tracker.stats.remote())
    assert 1 <= peak <= 2
    assert threads <= 2


def test_actor__sync_actor_runs_one_call_at_a_time(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Serial:
        def __init__(self):
            self.active = 0
            self.peak = 0

        def work(self):
            self.active += 1
            self.peak = max(self.peak, self.active)
            time.sleep(0.01)
            self.active -= 1

        def peak_seen(self):
            return self.peak

    actor = Serial.remote()
    ray.get([actor.work.remote() for _ in range(10)])
    assert ray.get(actor.peak_seen.remote()) == 1


# --- failures, kill and exit ----------------------------------------------------------------------


def test_actor__actor_init_error_propagated(ray_start_regular_shared):
    @ray.remote
    class Broken:
        def __init__(self):
            raise ValueError("constructor exploded")

        def method(self):
            return 1

    broken = Broken.remote()
    for _ in range(2):  # every call, not only the first
        with pytest.raises(exceptions.ActorDiedError) as info:
            ray.get(broken.method.remote())
        assert "constructor exploded" in str(info.value)
    assert issubclass(exceptions.ActorDiedError, exceptions.RayActorError)


def test_actor__kill_then_call_raises_actor_died(ray_start_regular_shared):
    counter = Counter.remote()
    assert ray.get(counter.increment.remote()) == 1
    ray.kill(counter)

    def call_fails():
        try:
            ray.get(counter.increment.remote())
        except exceptions.ActorDiedError:
            return True
        return False

    wait_for_condition(call_fails)
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(counter.get.remote())
    with pytest.raises(exceptions.RayActorError):
        ray.get(counter.get.remote())
    ray.kill(counter)  # killing a dead actor is fine


def test_actor__kill_with_restart(ray_start_regular_shared):
    @ray.remote(max_restarts=1)
    class Restartable:
        def __init__(self):
            self.calls = 0

        def pid_and_calls(self):
            self.calls += 1
            return os.getpid(), self.calls

    actor = Restartable.remote()
    first_pid, _ = ray.get(actor.pid_and_calls.remote())
    ray.get(actor.pid_and_calls.remote())
    ray.kill(actor, no_restart=False)

    def restarted():
        pid, calls = ray.get(actor.pid_and_calls.remote())
        return pid != first_pid and calls >= 1

    wait_for_condition(restarted, timeout=60)


def test_actor__exit_actor(ray_start_regular_shared, tmp_path):
    marker = tmp_path / "atexit-ran"

    @ray.remote
    class Leaving:
        def __init__(self, path):
            import atexit

            atexit.register(lambda: open(path, "w").close())

        def ping(self):
            return "pong"

        def leave(self):
            actor_module.exit_actor()

    actor = Leaving.remote(str(marker))
    assert ray.get(actor.ping.remote()) == "pong"
    with pytest.raises(exceptions.RayActorError):
        ray.get(actor.leave.remote())
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.ping.remote())
    wait_for_condition(marker.exists, timeout=30)
