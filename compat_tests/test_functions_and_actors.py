"""Functions and actors as real Ray programs use them: recursion from closures, class
attributes inside actor methods, actors that exit, restart budgets and large closures.

Mirrors Ray's test_recursion.py and test_actor*.py (the name after ``__`` is the Ray test).
"""

from __future__ import annotations

import asyncio
import os
import sys

import numpy as np
import pytest

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import wait_for_condition

# --- recursion ------------------------------------------------------------------------------


@ray.remote
def factorial(n):
    return 1 if n == 0 else n * ray.get(factorial.remote(n - 1))


def make_factorial():
    """A recursive remote function defined inside a function: pickled by value, with itself in
    its closure."""

    @ray.remote
    def closure_factorial(n):
        return 1 if n == 0 else n * ray.get(closure_factorial.remote(n - 1))

    return closure_factorial


def make_tree():
    @ray.remote
    def tree(depth, width):
        if depth == 0:
            return 1
        return 1 + sum(ray.get([tree.remote(depth - 1, width) for _ in range(width)]))

    return tree


def test_recursion__recursion(ray_start_regular):
    # One CPU: every nested call waits while its caller blocks in ``get``.
    assert [ray.get(factorial.remote(n)) for n in range(6)] == [1, 1, 2, 6, 24, 120]


def test_functions__closure_recursion_one_cpu(ray_start_regular):
    closure_factorial = make_factorial()
    assert [ray.get(closure_factorial.remote(n)) for n in range(6)] == [1, 1, 2, 6, 24, 120]


def test_functions__closure_recursion_in_parallel(ray_start_regular_shared):
    closure_factorial = make_factorial()
    assert ray.get([closure_factorial.remote(n) for n in (3, 5, 6, 4)]) == [6, 120, 720, 24]


def test_functions__deep_recursive_task_tree(ray_start_regular_shared):
    tree = make_tree()
    # depth 3, width 3: 1 + 3 + 9 + 27 tasks
    assert ray.get(tree.remote(3, 3)) == 40


# --- actor classes --------------------------------------------------------------------------


class Base:
    INHERITED = "from the base"

    @staticmethod
    def helper(x):
        return x * 2


@ray.remote
class Constants(Base):
    LIMIT = 7

    def limit(self):
        # The class's name is bound to the actor class here, as in Ray.
        return Constants.LIMIT

    def inherited(self):
        return Constants.INHERITED, Constants.helper(21)


def test_actors__class_attributes_through_the_class_name(ray_start_regular_shared):
    actor = Constants.remote()
    assert ray.get(actor.limit.remote()) == 7
    assert ray.get(actor.inherited.remote()) == ("from the base", 42)
    # The same attributes are read on the actor class in the driver.
    assert Constants.LIMIT == 7
    assert Constants.INHERITED == "from the base"


def test_actors__class_attributes_of_a_closure_actor(ray_start_regular_shared):
    @ray.remote
    class Local:
        STEP = 3

        def step(self):
            return Local.STEP

    assert ray.get(Local.remote().step.remote()) == 3


def test_actors__missing_class_attribute_is_attribute_error(ray_start_regular_shared):
    with pytest.raises(AttributeError):
        Constants.NOT_THERE  # noqa: B018


def test_actors__instance_attribute_does_not_shadow_a_method(ray_start_regular_shared):
    @ray.remote
    class Shadowed:
        def __init__(self):
            self.value = "an attribute"

        def value(self):  # noqa: F811 - the attribute and the method share a name on purpose
            return "the method"

    actor = Shadowed.remote()
    assert ray.get(actor.value.remote()) == "the method"


def test_actors__async_init_is_awaited(ray_start_regular_shared):
    @ray.remote
    class AsyncInit:
        async def __init__(self, x):
            await asyncio.sleep(0)
            self.x = x

        async def get(self):
            return self.x

    @ray.remote
    class AsyncInitSyncMethods:
        async def __init__(self, x):
            await asyncio.sleep(0)
            self.x = x

        def get(self):
            return self.x

    assert ray.get(AsyncInit.remote(5).get.remote()) == 5
    assert ray.get(AsyncInitSyncMethods.remote(6).get.remote()) == 6


def test_actors__async_init_failure_fails_the_actor(ray_start_regular_shared):
    @ray.remote
    class FailingInit:
        async def __init__(self):
            await asyncio.sleep(0)
            raise ValueError("no start")

        async def get(self):
            return 1

    actor = FailingInit.remote()
    with pytest.raises(exceptions.RayActorError) as info:
        ray.get(actor.get.remote())
    assert "no start" in str(info.value)


# --- sys.exit() in actors and tasks -------------------------------------------------------------


@ray.remote
class Exiting:
    def pid(self):
        return os.getpid()

    def exit(self, *status):
        sys.exit(*status)


@pytest.mark.parametrize("status", [(), (0,), (3,)], ids=["no-status", "status-0", "status-3"])
def test_actors__sys_exit_ends_the_actor(ray_start_regular_shared, status):
    actor = Exiting.remote()
    ray.get(actor.pid.remote())
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.exit.remote(*status))
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.pid.remote())


def test_actors__sys_exit_zero_is_not_restarted(ray_start_regular_shared):
    actor = Exiting.options(max_restarts=1).remote()
    ray.get(actor.pid.remote())
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.exit.remote(0))
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.pid.remote())


def test_actors__sys_exit_with_a_failure_status_restarts(ray_start_regular_shared):
    actor = Exiting.options(max_restarts=1).remote()
    first = ray.get(actor.pid.remote())
    # The call in flight when the process died: the actor restarts, so it is "unavailable".
    with pytest.raises(exceptions.ActorUnavailableError):
        ray.get(actor.exit.remote(3))
    # The restart may still be under way: a call sent meanwhile may fail as unavailable.
    pids = []
    wait_for_condition(lambda: _try_pid(actor, pids), timeout=60)
    assert pids[-1] != first


def _try_pid(actor, pids):
    try:
        pids.append(ray.get(actor.pid.remote()))
        return True
    except exceptions.ActorUnavailableError:
        return False


@pytest.mark.parametrize("status", [None, 0, 2], ids=["no-status", "status-0", "status-2"])
def test_tasks__sys_exit_crashes_the_worker(ray_start_regular_shared, status):
    @ray.remote(max_retries=0)
    def leave(status):
        sys.exit(status)

    with pytest.raises(exceptions.WorkerCrashedError):
        ray.get(leave.remote(status))


# --- large closures -------------------------------------------------------------------------

# Ray warns about a pickled function over 10**7 bytes and refuses one of 10**8 bytes or more
# (FUNCTION_SIZE_WARN_THRESHOLD / FUNCTION_SIZE_ERROR_THRESHOLD).


def test_functions__large_closure_is_shipped(ray_start_regular_shared):
    captured = np.arange(80 * 1024 * 1024 // 8, dtype=np.int64)  # 80 MiB, inside the limit
    expected = int(captured[-1])

    @ray.remote
    def last():
        return int(captured[-1])

    assert ray.get(last.remote()) == expected


def test_actors__large_closure_of_an_actor_class_is_shipped(ray_start_regular_shared):
    captured = np.ones(70 * 1024 * 1024 // 8)  # 70 MiB: more than a frame header may hold

    @ray.remote
    class Holder:
        def total(self):
            return float(captured.sum())

    assert ray.get(Holder.remote().total.remote()) == float(captured.size)


def test_functions__closure_past_the_limit_is_value_error(ray_start_regular_shared):
    captured = np.zeros(10**8 // 8 + 1024)  # just over 10**8 bytes when pickled

    @ray.remote
    def too_big():
        return captured.size

    with pytest.raises(ValueError, match="too large"):
        ray.get(too_big.remote())


_SIZE_TIP = ("Check that its definition is not implicitly capturing a large array or other object in scope. "
             "Tip: use ray.put() to put large objects in the Ray object store.")


def test_functions__oversized_code_error_names_it_as_ray_does(ray_start_regular_shared):
    # A function is named `module.__name__` (not its qualified name), an actor class by its
    # `__name__` alone; the size and the limit are whole MiB.
    captured = np.zeros(100 * 1024 * 1024 // 8)  # 100 MiB, past the 10**8-byte limit (95 MiB)

    @ray.remote
    def too_big():
        return captured.size

    @ray.remote
    class TooBig:
        def size(self):
            return captured.size

    with pytest.raises(ValueError) as function_error:
        too_big.remote()
    assert str(function_error.value) == (
        f"The remote function {__name__}.too_big is too large (100 MiB > FUNCTION_SIZE_ERROR_THRESHOLD=95 MiB). "
        + _SIZE_TIP
    )
    with pytest.raises(ValueError) as actor_error:
        TooBig.remote()
    assert str(actor_error.value) == (
        "The actor TooBig is too large (100 MiB > FUNCTION_SIZE_ERROR_THRESHOLD=95 MiB). " + _SIZE_TIP
    )


# --- handles that travel into tasks -----------------------------------------------------------------


@ray.remote
class Pid:
    def pid(self):
        return os.getpid()


@ray.remote
def pid_through(handle):
    return ray.get(handle.pid.remote())


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_actors__handle_dropped_after_a_task_used_it_ends_the_actor(ray_start_regular_shared):
    actor = Pid.remote()
    pid = ray.get(pid_through.remote(actor))
    del actor
    wait_for_condition(lambda: not _process_alive(pid), timeout=60)


def test_actors__handle_kept_by_the_driver_outlives_the_task(ray_start_regular_shared):
    actor = Pid.remote()
    pid = ray.get(pid_through.remote(actor))
    assert ray.get(pid_through.remote(actor)) == pid
    assert ray.get(actor.pid.remote()) == pid


# --- os._exit(0) in an actor is a crash ------------------------------------------------------------


@ray.remote(max_restarts=4, max_task_retries=-1)
class ExitsEveryThirdCall:
    def __init__(self):
        self.counter = 0

    def increment_and_possibly_fail(self):
        if self.counter == 2:
            os._exit(0)
        self.counter += 1
        return self.counter


def test_actor_restart__os_exit_zero_restarts_and_retries_until_restarts_run_out(ray_start_regular_shared):
    # Ray's actor_restart.py example, shortened: each instance serves two calls, then its
    # process exits with status 0; the call in flight is retried on the next instance.
    actor = ExitsEveryThirdCall.remote()
    assert [ray.get(actor.increment_and_possibly_fail.remote()) for _ in range(10)] == [1, 2] * 5
    # The fifth instance dies on the next call, with no restart left: the call fails.
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.increment_and_possibly_fail.remote())
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.increment_and_possibly_fail.remote())


def test_actor_restart__os_exit_zero_without_restarts_is_death(ray_start_regular_shared):
    actor = ExitsEveryThirdCall.options(max_restarts=0, max_task_retries=0).remote()
    assert [ray.get(actor.increment_and_possibly_fail.remote()) for _ in range(2)] == [1, 2]
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.increment_and_possibly_fail.remote())
