"""Processes killed under the real Iris controller (marin-iris 2026-06 LocalCluster), where
every task and actor is an Iris job of its own:
- large task results held by the worker that made them are read from the driver and from
  another task, rebuilt from lineage after the holder's process is killed, and lost with a
  reason when they cannot be;
- a task's direct call to an actor whose host is killed mid-call is answered by the restarted
  actor; a result a killed caller handed on before its value was known fails with
  `OwnerDiedError`;
- large results of the driver's actor calls, held by the actor's process, outlive `ray.kill`
  and `exit_actor` (the driver takes them first) and are lost with a reason when the actor's
  process is killed;
- a streaming task's large items, held by its worker, are rebuilt by running it again after
  that worker is killed, and lost with a reason when they cannot be;
- refs an actor keeps past the call that lent them, borrowed from the task's worker (a large
  value read from that worker), outlive that worker's retirement (it hands them to the driver first) and fail with `OwnerDiedError`
  when it is killed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DEADLINE = 240.0

PROGRAM = """
    import os, signal, sys, time
    import fray_ray as ray
    from fray_ray._private.core import runtime_state

    ray.init(sys.argv[1])
    SIZE = 4 << 20

    @ray.remote
    def make(value):
        return os.getpid(), bytes([value]) * SIZE

    @ray.remote
    def split(pair):
        return pair[0]

    @ray.remote
    def total(pair):
        return sum(pair[1][::4096]) * 4096

    def killed_holder(ref):
        pid = ray.get(split.remote(ref))
        os.kill(pid, signal.SIGKILL)
        gone(pid)

    driver = runtime_state.current()
    ref = make.options(max_retries=1).remote(3)
    print("task", ray.get(total.remote(ref)) == 3 * SIZE, flush=True)
    print("held", bool(driver.objects.holders([ref.binary()])), flush=True)
    print("driver", ray.get(ref)[1] == bytes([3]) * SIZE, flush=True)
    killed_holder(ref)
    print("rebuilt", int(ray.get(ref, timeout=180)[1][0]), flush=True)

    lost = make.options(max_retries=0).remote(4)
    ray.wait([lost])
    killed_holder(lost)
    try:
        ray.get(lost, timeout=180)
        print("lost no error", flush=True)
    except ray.exceptions.ObjectLostError as exc:
        print("lost", type(exc).__name__, "max_retries=0" in str(exc), flush=True)
    ray.shutdown()
"""


#: Helpers every program below may use.
PRELUDE = """
import time


def gone(pid):
    while True:  # until the process is a zombie or reaped (it may go between two looks)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":  # the name may hold spaces
                    return
        except OSError:  # gone: no such file, or no such process while it was read
            return
        time.sleep(0.05)
"""


def _run(program: str, june: str, tmp_path: Path, expected: tuple[str, ...]) -> None:
    """Run `program` as a driver of the June controller; each of `expected` is a line it prints."""
    (tmp_path / "main.py").write_text(PRELUDE + textwrap.dedent(program))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN")}
    result = subprocess.run([sys.executable, "main.py", june], cwd=tmp_path, capture_output=True, text=True,
                            timeout=DEADLINE, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    lines = result.stdout.splitlines()
    for line in expected:
        assert line in lines, result.stdout + result.stderr[-4000:]


def test_held_results_are_read_rebuilt_and_lost_on_the_real_controller(june: str, tmp_path: Path) -> None:
    _run(PROGRAM, june, tmp_path, ("held True", "task True", "driver True", "rebuilt 3",
                                   "lost ObjectReconstructionFailedError True"))


DIRECT_CALLS = """
    import os, signal, sys, threading, time
    import fray_ray as ray
    from fray_ray._private.core import runtime_slot

    ray.init(sys.argv[1])

    def sent_direct():
        direct = runtime_slot.current().direct
        return 0 if direct is None else direct.sent

    @ray.remote(max_restarts=1, max_task_retries=1, concurrency_groups={"control": 1})
    class Stubborn:
        def __init__(self):
            self.started = threading.Event()

        def pid(self):
            return os.getpid()

        def work(self):
            if ray.get_runtime_context().was_current_actor_reconstructed:
                return os.getpid()
            self.started.set()
            time.sleep(3600)

        @ray.method(concurrency_group="control")
        def working(self):
            return self.started.is_set()

    @ray.remote
    def call_through_a_kill(actor):
        ray.get(actor.pid.remote())
        return ray.get(actor.work.remote(), timeout=180), sent_direct()

    @ray.remote(concurrency_groups={"control": 1})
    class Slow:
        def __init__(self):
            self.opened = threading.Event()

        def wait_open(self):
            self.opened.wait()
            return "open"

        @ray.method(concurrency_group="control")
        def open(self):
            self.opened.set()

    @ray.remote
    class Keeper:
        def __init__(self):
            self.kept, self.sent = [], 0

        def keep(self, refs, sent):
            self.kept, self.sent = refs, sent

        def kept_refs(self):
            return self.kept, self.sent

    @ray.remote(max_retries=0)
    def hand_on_and_get_killed(slow, keeper):
        pending = slow.wait_open.remote()
        # the ref leaves this process before its value is known
        ray.get(keeper.keep.remote([pending], sent_direct()))
        os.kill(os.getpid(), signal.SIGKILL)

    actor = Stubborn.remote()
    first = ray.get(actor.pid.remote())
    answered = call_through_a_kill.remote(actor)
    while not ray.get(actor.working.remote()):
        time.sleep(0.05)
    os.kill(first, signal.SIGKILL)
    pid, sent = ray.get(answered, timeout=200)
    print("restarted", pid != first, "direct", sent, flush=True)

    slow, keeper = Slow.remote(), Keeper.remote()
    ray.get(keeper.kept_refs.remote())
    try:
        ray.get(hand_on_and_get_killed.remote(slow, keeper), timeout=180)
    except ray.exceptions.WorkerCrashedError:
        print("caller killed", flush=True)
    (pending,), sent = ray.get(keeper.kept_refs.remote())
    print("pending call direct", sent, flush=True)
    ray.get(slow.open.remote())
    try:
        print("pending", ray.get(pending, timeout=120), flush=True)
    except ray.exceptions.OwnerDiedError:
        print("pending OwnerDiedError", flush=True)
    ray.shutdown()
"""


def test_direct_calls_survive_a_killed_host_and_a_killed_caller_fails_its_results(june: str, tmp_path: Path) -> None:
    # "direct 2": the task's two calls went straight to the actor's host (the second answered
    # after the restart); "pending call direct 1": the killed caller had sent its call straight too
    _run(DIRECT_CALLS, june, tmp_path, ("restarted True direct 2", "caller killed", "pending call direct 1",
                                        "pending OwnerDiedError"))


ACTOR_RESULTS = """
    import os, signal, sys, time
    import fray_ray as ray
    from fray_ray._private.core import runtime_state

    ray.init(sys.argv[1])
    SIZE = 4 << 20

    @ray.remote
    class Maker:
        def make(self, value):
            return bytes([value]) * SIZE

        def pid(self):
            return os.getpid()

        def leave(self):
            ray.actor.exit_actor()

    @ray.remote
    class Reader:
        def total(self, data):
            return sum(data[::4096]) * 4096

    driver = runtime_state.current()
    held = lambda ref: bool(driver.objects.holders([ref.binary()]))
    maker, reader = Maker.remote(), Reader.remote()
    ref = maker.make.remote(3)
    print("read elsewhere", ray.get(reader.total.remote(ref)) == 3 * SIZE, "held", held(ref), flush=True)
    pid = ray.get(maker.pid.remote())
    ray.kill(maker)
    gone(pid)
    print("after kill", ray.get(ref, timeout=120)[:1] == bytes([3]), "held", held(ref), flush=True)

    leaving = Maker.remote()
    kept = leaving.make.remote(4)
    ray.wait([kept])
    try:
        ray.get(leaving.leave.remote())
    except ray.exceptions.RayActorError:
        pass
    print("after exit", ray.get(kept, timeout=120)[:1] == bytes([4]), "held", held(kept), flush=True)

    crashing = Maker.remote()
    lost = crashing.make.remote(5)
    ray.wait([lost])
    pid = ray.get(crashing.pid.remote())
    os.kill(pid, signal.SIGKILL)
    gone(pid)
    try:
        ray.get(lost, timeout=180)
        print("lost no error", flush=True)
    except ray.exceptions.ObjectLostError as exc:
        print("lost", type(exc).__name__, "actor method" in str(exc), flush=True)
    ray.shutdown()
"""


def test_actor_results_outlive_a_kill_and_an_exit_and_are_lost_with_a_crash(june: str, tmp_path: Path) -> None:
    _run(ACTOR_RESULTS, june, tmp_path, ("read elsewhere True held True", "after kill True held False",
                                         "after exit True held False", "lost ObjectReconstructionFailedError True"))


STREAM_ITEMS = """
    import os, signal, sys
    import fray_ray as ray
    from fray_ray._private.core import runtime_state

    ray.init(sys.argv[1])
    SIZE = 4 << 20
    driver = runtime_state.current()

    @ray.remote(num_returns="streaming")
    def items(count):
        for value in range(count):
            yield os.getpid(), bytes([value]) * SIZE

    @ray.remote
    def first_byte(item):
        return item[1][0]

    refs = list(items.options(max_retries=1).remote(3))
    print("held", all(driver.objects.holders([ref.binary()]) for ref in refs), flush=True)
    print("task", ray.get(first_byte.remote(refs[2])), flush=True)
    pid = ray.get(refs[0])[0]
    os.kill(pid, signal.SIGKILL)
    gone(pid)
    again = ray.get(refs, timeout=180)
    print("rebuilt", [item[1][0] for item in again], pid not in {item[0] for item in again}, flush=True)

    lost = list(items.options(max_retries=0).remote(2))
    pid = ray.get(lost[0])[0]
    os.kill(pid, signal.SIGKILL)
    gone(pid)
    try:
        ray.get(lost[1], timeout=180)
        print("lost no error", flush=True)
    except ray.exceptions.ObjectLostError as exc:
        print("lost", type(exc).__name__, "max_retries=0" in str(exc), flush=True)
    ray.shutdown()
"""


def test_streaming_items_are_rebuilt_and_lost_on_the_real_controller(june: str, tmp_path: Path) -> None:
    _run(STREAM_ITEMS, june, tmp_path, ("held True", "task 2", "rebuilt [0, 1, 2] True",
                                        "lost ObjectReconstructionFailedError True"))


KEPT_REFS = """
    import os, signal, sys
    import fray_ray as ray
    from fray_ray._private.core import runtime_state
    from fray_ray._private.driver import executor_pool

    ray.init(sys.argv[1])
    SIZE = 1 << 20  # over the inline limit: never sent with a call

    @ray.remote
    class Source:
        def make(self, size):
            return b"x" * size

    @ray.remote
    class Buffer:
        def __init__(self):
            self.kept = []

        def keep(self, refs):
            self.kept.extend(refs)
            return len(self.kept)

        def sizes(self):
            return [len(ray.get(ref, timeout=120)) for ref in self.kept]

        def refs(self):
            return list(self.kept)

        def leave(self):
            ray.actor.exit_actor()

    @ray.remote
    class Learner:
        def take(self, buffer):
            self.refs = ray.get(buffer.refs.remote())  # borrowed from the buffer, which borrows them
            return len(self.refs)

        def sizes(self):
            return [len(ray.get(ref, timeout=120)) for ref in self.refs]

    @ray.remote
    def lend_to(source, buffer, sizes):
        ray.get([source.make.remote(0), buffer.keep.remote([])])  # the ways to both are known
        refs = [source.make.remote(size) for size in sizes]
        ray.wait(refs, num_returns=len(refs))
        ray.get(buffer.keep.remote(refs))  # the buffer borrows them from this process
        return os.getpid()

    driver = runtime_state.current()
    source, buffer = Source.remote(), Buffer.remote()
    pid = ray.get(lend_to.remote(source, buffer, [8, SIZE]), timeout=180)
    print("read from the lender", ray.get(buffer.sizes.remote(), timeout=180), flush=True)
    driver.scheduler._warm, executor_pool.IDLE_TIMEOUT_S = 0, 0.3  # retire the idle executor now
    driver.scheduler._maintain()
    gone(pid)
    executor_pool.IDLE_TIMEOUT_S = 30.0
    print("retired, kept", ray.get(buffer.sizes.remote(), timeout=180), flush=True)

    sampled, learner = Buffer.remote(), Learner.remote()
    ray.get([sampled.keep.remote([]), learner.take.remote(sampled)], timeout=180)  # both running
    ray.get(lend_to.remote(source, sampled, [8, SIZE]), timeout=180)
    print("taken", ray.get(learner.take.remote(sampled), timeout=180), ray.get(learner.sizes.remote(), timeout=180), flush=True)
    try:
        ray.get(sampled.leave.remote(), timeout=180)
    except ray.exceptions.RayActorError:
        pass
    print("buffer left, taken", ray.get(learner.sizes.remote(), timeout=180), flush=True)

    crashed = Buffer.remote()
    ray.get(crashed.keep.remote([]), timeout=180)  # running: the task's calls to it go straight to it
    pid = ray.get(lend_to.remote(source, crashed, [SIZE]), timeout=180)
    os.kill(pid, signal.SIGKILL)
    gone(pid)
    try:
        print("crash", ray.get(crashed.sizes.remote(), timeout=180), flush=True)
    except ray.exceptions.OwnerDiedError:
        print("crash OwnerDiedError", flush=True)
    ray.shutdown()
"""


def test_refs_an_actor_keeps_or_lends_on_outlive_a_retired_lender_and_die_with_a_killed_one(june: str, tmp_path: Path) -> None:
    _run(KEPT_REFS, june, tmp_path, (f"read from the lender [8, {1 << 20}]", f"retired, kept [8, {1 << 20}]",
                                     f"taken 2 [8, {1 << 20}]", f"buffer left, taken [8, {1 << 20}]",
                                     "crash OwnerDiedError"))
