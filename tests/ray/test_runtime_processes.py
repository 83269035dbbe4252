"""The Ray layer with real worker processes on the embedded cluster."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import fray_ray as ray
from fray_ray import exceptions

pytestmark = pytest.mark.usefixtures("cluster_session")


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@ray.remote
def whoami() -> int:
    return os.getpid()


@ray.remote
def factorial(n: int) -> int:
    return 1 if n <= 1 else n * ray.get(factorial.remote(n - 1))


def test_tasks_run_in_worker_processes() -> None:
    pids = set(ray.get([whoami.remote() for _ in range(8)]))
    assert os.getpid() not in pids


def test_deep_recursion_lends_slots_and_does_not_deadlock() -> None:
    # Each level blocks in get() on the next: 20 nested tasks on 2 logical CPUs.
    assert ray.get(factorial.remote(20), timeout=240) == 2432902008176640000


@ray.remote
def occupy(hold_s: float) -> tuple[float, float]:
    start = time.time()
    time.sleep(hold_s)  # holds its CPU slot; the check is on the recorded intervals
    return start, time.time()


def test_no_more_concurrent_tasks_than_cpus() -> None:
    intervals = ray.get([occupy.remote(0.3) for _ in range(6)], timeout=120)
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert peak <= 2


@ray.remote
class Gauge:
    def peak_seen(self) -> int:
        return os.getpid()


@ray.remote
def noisy(word: str) -> str:
    print(f"says {word}")
    return word


def test_task_output_reaches_the_driver_with_a_prefix(capfd: pytest.CaptureFixture[str]) -> None:
    assert ray.get(noisy.remote("hello-from-worker")) == "hello-from-worker"
    seen = wait_for(lambda: "says hello-from-worker" in (out := capfd.readouterr().out) and out)
    line = next(l for l in seen.splitlines() if "says hello-from-worker" in l)
    assert line.startswith("(noisy pid=") and line.endswith(") says hello-from-worker")


@ray.remote(max_retries=2)
def die_once(marker: str) -> str:
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # the executor process dies mid-task
    return "second attempt"


def test_task_retried_after_its_worker_process_dies(tmp_path) -> None:
    assert ray.get(die_once.remote(str(tmp_path / "died")), timeout=120) == "second attempt"


@ray.remote(max_retries=0)
def always_die() -> None:
    os._exit(1)


def test_worker_crash_without_retries_is_worker_crashed_error() -> None:
    with pytest.raises(exceptions.WorkerCrashedError):
        ray.get(always_die.remote(), timeout=120)


@ray.remote(max_restarts=1)
class Restartable:
    def __init__(self) -> None:
        self.calls = 0

    def pid(self) -> int:
        self.calls += 1
        return os.getpid()

    def count(self) -> int:
        return self.calls


def test_actor_restarts_with_fresh_state_after_its_process_is_killed() -> None:
    actor = Restartable.remote()
    first = ray.get(actor.pid.remote())
    assert ray.get(actor.count.remote()) == 1
    os.kill(first, signal.SIGKILL)

    def restarted() -> int | None:
        try:
            pid = ray.get(actor.pid.remote(), timeout=60)
        except exceptions.RayActorError:
            return None  # a call that raced the death
        return pid if pid != first else None

    second = wait_for(restarted, timeout=120, interval=0.1)
    assert second != first
    assert ray.get(actor.count.remote()) == 1  # fresh state: only the call that saw the new pid


def test_killed_actor_without_restarts_raises_actor_died() -> None:
    actor = Gauge.remote()
    pid = ray.get(actor.peak_seen.remote())
    ray.kill(actor)
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(actor.peak_seen.remote(), timeout=60)
    del pid


@ray.remote
def total(array: np.ndarray) -> float:
    return float(array.sum())


def test_large_arguments_and_results_cross_processes() -> None:
    big = np.ones(5_000_000, dtype=np.float64)  # 40 MB
    ref = ray.put(big)
    assert ray.get([total.remote(ref) for _ in range(3)]) == [5_000_000.0] * 3
    back = ray.get(ref)
    assert back.flags.writeable is False and float(back.sum()) == 5_000_000.0


def test_objects_are_freed_when_no_ref_remains() -> None:
    runtime = ray._private.core.runtime_state.current()  # type: ignore[attr-defined]
    ref = ray.put(np.zeros(1_000_000))
    object_id = ref.binary()
    assert runtime.objects.known(object_id)
    inner_holder = ray.put([ref])  # a stored value holding the ref keeps it alive
    del ref
    runtime.references.flush()
    assert runtime.objects.known(object_id)
    del inner_holder
    wait_for(lambda: (runtime.references.flush(), not runtime.objects.known(object_id))[1])


@ray.remote
def call_it(function) -> int:
    return ray.get(function.remote())


def test_a_remote_function_called_here_travels_into_a_task_and_runs_there() -> None:
    # Calling it here works out (and keeps) what its calls share with this driver's runtime;
    # none of that may travel with it.
    mine = ray.get(whoami.remote())
    theirs = ray.get(call_it.remote(whoami))
    assert isinstance(theirs, int) and os.getpid() not in (mine, theirs)
    bound = whoami.options(num_cpus=0.5)
    ray.get(bound.remote())
    assert isinstance(ray.get(call_it.remote(bound)), int)
