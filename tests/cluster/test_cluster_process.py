"""The process supervisor alone: output capture, exits, kills, process groups, parent death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import pytest
from cluster_helpers import pid_alive, wait_for

from fray_ray.cluster._process import ProcessSpec, ProcessSupervisor
from fray_ray.cluster._process_types import kill_group_or_leader


@dataclass
class Recorder:
    """A ProcessListener that remembers everything."""

    started: list[int] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    exits: list[tuple[int, str]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def process_started(self, pid: int) -> None:
        self.started.append(pid)

    def process_output(self, source: str, line: str, timestamp_ms: int) -> None:
        self.lines.append((source, line))

    def process_exited(self, returncode: int, error: str) -> None:
        self.exits.append((returncode, error))
        self.done.set()


def run(supervisor: ProcessSupervisor, key: int, script: str, tmp_path) -> Recorder:
    recorder = Recorder()
    supervisor.spawn(key, ProcessSpec(("sh", "-c", script), dict(os.environ), str(tmp_path)), recorder)
    return recorder


@pytest.fixture(params=["pidfd+setpriv", "waiter+prctl"])
def supervisor(request):
    pidfd = request.param.startswith("pidfd")
    with ProcessSupervisor(use_pidfd=pidfd, use_setpriv=pidfd) as sup:
        yield sup


def test_output_and_exit(supervisor: ProcessSupervisor, tmp_path) -> None:
    long_line = "x" * 100_000
    rec = run(supervisor, 1, f"echo one; echo two >&2; printf '{long_line}'; printf 'no newline' >&2; exit 3", tmp_path)
    assert rec.done.wait(20)
    assert rec.exits == [(3, "")] and len(rec.started) == 1
    stdout = "".join(line for source, line in rec.lines if source == "stdout")
    assert stdout.startswith("one") and stdout.endswith(long_line)
    assert len([1 for s, _ in rec.lines if s == "stdout"]) >= 3  # the 100 kB line came in 64 kB pieces
    assert [line for source, line in rec.lines if source == "stderr"] == ["two", "no newline"]


def test_kill_and_cancel(supervisor: ProcessSupervisor, tmp_path) -> None:
    rec = run(supervisor, 1, "echo ready; exec sleep 60", tmp_path)
    wait_for(lambda: rec.lines)
    supervisor.kill(1)
    assert rec.done.wait(20) and rec.exits == [(-9, "")]
    assert not pid_alive(rec.started[0])
    blocker = threading.Event()

    class Slow(Recorder):
        def process_started(self, pid: int) -> None:  # hold the supervisor thread briefly
            blocker.wait(5)
            super().process_started(pid)

    slow = Slow()
    supervisor.spawn(2, ProcessSpec(("true",), dict(os.environ), str(tmp_path)), slow)
    queued = run(supervisor, 3, "sleep 60", tmp_path)
    supervisor.kill(3)  # still queued behind the slow start: cancelled, never started
    blocker.set()
    assert queued.done.wait(20) and queued.exits == [(-9, "")] and queued.started == []
    assert slow.done.wait(20)


def test_group_leftovers_die_with_the_leader(supervisor: ProcessSupervisor, tmp_path) -> None:
    rec = run(supervisor, 1, "sleep 60 & echo $!", tmp_path)
    assert rec.done.wait(20)
    orphan = int(rec.lines[0][1])
    wait_for(lambda: not pid_alive(orphan))


def test_missing_program(supervisor: ProcessSupervisor, tmp_path) -> None:
    rec = Recorder()
    supervisor.spawn(1, ProcessSpec(("/no/such/program",), dict(os.environ), str(tmp_path)), rec)
    assert rec.done.wait(20)
    code, error = rec.exits[0]
    assert code == 127 and ("/no/such/program" in error or any("/no/such/program" in l for _, l in rec.lines))


def test_stop_kills_everything(tmp_path) -> None:
    supervisor = ProcessSupervisor().start()
    recs = [run(supervisor, i, "exec sleep 60", tmp_path) for i in range(5)]
    wait_for(lambda: all(r.started for r in recs))
    pids = [r.started[0] for r in recs]
    supervisor.stop()
    assert not any(pid_alive(p) for p in pids)
    assert supervisor.pids() == []
    with pytest.raises(RuntimeError):
        supervisor.spawn(9, ProcessSpec(("true",), {}, str(tmp_path)), Recorder())


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("use_setpriv", [True, False])
def test_children_die_with_their_parent_process(use_setpriv: bool, tmp_path) -> None:
    script = f"""
import os, sys, time
from fray_ray.cluster._process import ProcessSpec, ProcessSupervisor
class L:
    def process_started(self, pid): print(pid, flush=True)
    def process_output(self, *a): pass
    def process_exited(self, *a): pass
sup = ProcessSupervisor(use_setpriv={use_setpriv}).start()
sup.spawn(1, ProcessSpec(("sleep", "60"), dict(os.environ), {str(tmp_path)!r}), L())
time.sleep(60)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        # The signal is armed just before the task's own program is exec'd; wait for that.
        wait_for(lambda: _cmdline(child).startswith("sleep"), what="the child to exec its program")
        parent.kill()
        parent.wait(10)
        wait_for(lambda: not pid_alive(child), timeout=10, what="the child to get its parent-death signal")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()


def test_a_kill_reaches_a_child_that_does_not_lead_its_group_yet() -> None:
    # A child forked from the worker template leads its own group only once it has called
    # setsid; a kill in between must still reach it.
    child = subprocess.Popen(["sleep", "60"])  # in our group: no group of its own
    try:
        assert os.getpgid(child.pid) != child.pid
        kill_group_or_leader(child.pid)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
