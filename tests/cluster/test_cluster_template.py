"""The worker template: task processes forked from a warm interpreter behave as fresh ones do,
are supervised and contained as spawned ones are, and launches fall back to spawning whenever
the template cannot serve."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cluster_helpers import job_name, pid_alive, wait_finished, wait_for
from test_cluster_process import Recorder  # noqa: E402  (this directory is on sys.path)

from fray_ray.cluster._process import ProcessSpec, ProcessSupervisor
from fray_ray.cluster._template import ForkCandidate, TemplateSettings, fork_request, resolve_command
from fray_ray.iris.entrypoint import callable_entrypoint
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec

PROBE = textwrap.dedent(
    """
    import atexit, json, os, sys, threading, time
    atexit.register(lambda: print("atexit ran", flush=True))
    def late():
        time.sleep(0.2)
        print("thread finished", flush=True)
    threading.Thread(target=late).start()  # not a daemon: the interpreter waits for it
    print(json.dumps({"ppid": os.getppid(), "argv": sys.argv, "path": sys.path, "cwd": os.getcwd(),
                      "foo": os.environ.get("FOO"), "main": __name__, "file": __file__,
                      "sid": os.getsid(0) == os.getpid(), "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[1]))
    """
)


def settings(tmp_path: Path, preload: tuple[str, ...] = ("json",), env: dict[str, str] | None = None) -> TemplateSettings:
    return TemplateSettings(python=sys.executable, preload=preload, environment=env or dict(os.environ), cwd=str(tmp_path))


@pytest.fixture
def templated(tmp_path: Path):
    with ProcessSupervisor(template=settings(tmp_path)) as supervisor:
        wait_for(lambda: supervisor.template_pid, what="the template to be ready")
        yield supervisor


def script_spec(workdir: Path, source: str, *args: str, fork: bool = True, env: dict[str, str] | None = None) -> ProcessSpec:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "probe.py").write_text(source)
    argv = (sys.executable, "-u", "probe.py", *args)
    return ProcessSpec(argv, {**os.environ, "FOO": "bar", **(env or {})}, str(workdir), ForkCandidate(argv) if fork else None)


def launch(supervisor: ProcessSupervisor, key: int, spec: ProcessSpec) -> Recorder:
    recorder = Recorder()
    supervisor.spawn(key, spec, recorder)
    return recorder


def stdout_json(recorder: Recorder) -> dict:
    return json.loads(next(line for source, line in recorder.lines if source == "stdout" and line.startswith("{")))


def test_a_forked_task_sees_what_a_fresh_interpreter_sees(templated: ProcessSupervisor, tmp_path: Path) -> None:
    forked = launch(templated, 1, script_spec(tmp_path / "a", PROBE, "3"))
    fresh = launch(templated, 2, script_spec(tmp_path / "b", PROBE, "3", fork=False))
    assert forked.done.wait(60) and fresh.done.wait(60)
    assert forked.exits == fresh.exits == [(3, "")]
    seen, expected = stdout_json(forked), stdout_json(fresh)
    assert seen["ppid"] == templated.template_pid and expected["ppid"] == os.getpid()
    assert forked.started == [pid for pid in forked.started if pid != templated.template_pid]
    for result, workdir in ((seen, tmp_path / "a"), (expected, tmp_path / "b")):
        assert result["cwd"] == str(workdir) and result["foo"] == "bar" and result["main"] == "__main__"
        assert result["argv"] == ["probe.py", "3"] and result["file"] == str(workdir / "probe.py")
        assert result["sid"] and result["stdin"] == ""
    # sys.path is the fresh interpreter's, with the script's own directory first.
    assert seen["path"] == [str(tmp_path / "a"), *expected["path"][1:]]
    for recorder in (forked, fresh):
        assert ("stderr", "to stderr") in recorder.lines
        stdout = [line for source, line in recorder.lines if source == "stdout"]
        assert stdout[-2:] == ["thread finished", "atexit ran"]


def test_a_failing_forked_task_exits_as_python_does(templated: ProcessSupervisor, tmp_path: Path) -> None:
    raising = launch(templated, 1, script_spec(tmp_path / "a", "def f():\n    1 / 0\nf()\n"))
    message = launch(templated, 2, script_spec(tmp_path / "b", "import sys\nsys.exit('it went wrong')\n"))
    assert raising.done.wait(60) and message.done.wait(60)
    assert raising.exits == [(1, "")] and message.exits == [(1, "")]
    stderr = [line for source, line in raising.lines if source == "stderr"]
    assert stderr[0] == "Traceback (most recent call last):" and stderr[-1] == "ZeroDivisionError: division by zero"
    assert str(tmp_path / "a" / "probe.py") in stderr[1] and not any("_template_main" in line for line in stderr)
    assert ("stderr", "it went wrong") in message.lines


def test_killing_a_forked_task_kills_its_group(templated: ProcessSupervisor, tmp_path: Path) -> None:
    source = "import subprocess, time\nchild = subprocess.Popen(['sleep', '60'])\nprint(child.pid, flush=True)\ntime.sleep(60)\n"
    recorder = launch(templated, 1, script_spec(tmp_path / "a", source))
    wait_for(lambda: recorder.lines, timeout=60)
    grandchild = int(recorder.lines[0][1])
    assert pid_alive(recorder.started[0]) and pid_alive(grandchild)
    templated.kill(1)
    assert recorder.done.wait(60) and recorder.exits == [(-signal.SIGKILL, "")]
    wait_for(lambda: not pid_alive(grandchild) and not pid_alive(recorder.started[0]))


def test_leftovers_of_a_forked_task_die_when_it_exits(templated: ProcessSupervisor, tmp_path: Path) -> None:
    source = "import subprocess\nprint(subprocess.Popen(['sleep', '60']).pid, flush=True)\n"
    recorder = launch(templated, 1, script_spec(tmp_path / "a", source))
    assert recorder.done.wait(60) and recorder.exits == [(0, "")]
    wait_for(lambda: not pid_alive(int(recorder.lines[0][1])))


def test_launches_spawn_once_the_template_is_killed(templated: ProcessSupervisor, tmp_path: Path) -> None:
    template = templated.template_pid
    running = launch(templated, 1, script_spec(tmp_path / "a", "import time\nprint('up', flush=True)\ntime.sleep(60)\n"))
    wait_for(lambda: running.lines, timeout=60)
    os.kill(template, signal.SIGKILL)
    # Its child dies with it and is reported; the cluster goes on without the template.
    assert running.done.wait(60) and running.exits == [(-signal.SIGKILL, "")]
    assert not pid_alive(running.started[0]) and templated.template_pid is None
    after = launch(templated, 2, script_spec(tmp_path / "b", PROBE, "0"))
    assert after.done.wait(60) and after.exits == [(0, "")]
    assert stdout_json(after)["ppid"] == os.getpid()


def test_a_stalled_template_holds_up_no_launch_and_keeps_its_children(tmp_path: Path) -> None:
    sleeper = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    with ProcessSupervisor(template=dataclasses.replace(settings(tmp_path), reply_timeout_s=2.0)) as supervisor:
        template = wait_for(lambda: supervisor.template_pid, what="the template to be ready")
        forked = launch(supervisor, 1, script_spec(tmp_path / "a", sleeper))
        wait_for(lambda: forked.lines, timeout=60)
        os.kill(template, signal.SIGSTOP)
        try:
            waiting = launch(supervisor, 2, script_spec(tmp_path / "b", sleeper))
            # A launch that may not fork starts while the fork request above goes unanswered.
            spawned = launch(supervisor, 3, script_spec(tmp_path / "c", PROBE, "0", fork=False))
            assert spawned.done.wait(60) and spawned.exits == [(0, "")] and not waiting.started
            # Unanswered past its deadline, the waiting launch spawns; the template forks no more,
            # and the child it runs is left alone.
            wait_for(lambda: waiting.lines, timeout=60)
            assert supervisor.template_pid is None and pid_alive(forked.started[0]) and not forked.done.is_set()
        finally:
            os.kill(template, signal.SIGCONT)
        # The template answers the stale fork before it reports this kill: the late child is
        # killed on arrival, so the template is left with no child at all.
        supervisor.kill(1)
        assert forked.done.wait(60) and forked.exits == [(-signal.SIGKILL, "")]
        wait_for(lambda: children_of(template) == [], what="the late fork's child to be killed")
        assert len(waiting.started) == 1 and waiting.started[0] not in children_of(template)
        supervisor.kill(2)
        assert waiting.done.wait(60) and waiting.exits == [(-signal.SIGKILL, "")]


def children_of(pid: int) -> list[int]:
    """Live (not zombie) children of `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def test_the_template_starts_with_the_last_launch_that_spawns_before_it(tmp_path: Path) -> None:
    sleeper = "import os, time\nprint(os.getppid(), flush=True)\ntime.sleep(60)\n"
    with ProcessSupervisor(template=dataclasses.replace(settings(tmp_path), start_after=2)) as supervisor:
        not_forkable = launch(supervisor, 0, script_spec(tmp_path / "n", sleeper, fork=False))
        first = launch(supervisor, 1, script_spec(tmp_path / "a", sleeper))
        wait_for(lambda: not_forkable.lines and first.lines, timeout=60)
        assert supervisor.template_pid is None and template_processes() == []  # not yet: one launch could fork
        second = launch(supervisor, 2, script_spec(tmp_path / "b", sleeper))
        wait_for(lambda: second.lines, timeout=60)
        template = wait_for(lambda: supervisor.template_pid, what="the template, started with the second launch")
        third = launch(supervisor, 3, script_spec(tmp_path / "c", sleeper))
        wait_for(lambda: third.lines, timeout=60)
        parents = [int(r.lines[0][1]) for r in (not_forkable, first, second, third)]
        assert parents == [os.getpid(), os.getpid(), os.getpid(), template]
        for key in range(4):
            supervisor.kill(key)


def template_processes() -> list[int]:
    """This process's children that run the template's main module."""
    found = []
    for pid in children_of(os.getpid()):
        try:
            if b"_template_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def test_stop_leaves_no_template_and_no_forked_task(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(template=settings(tmp_path)).start()
    try:
        template = wait_for(lambda: supervisor.template_pid, what="the template")
        recorders = [launch(supervisor, i, script_spec(tmp_path / str(i), "import time\ntime.sleep(60)\n")) for i in range(3)]
        wait_for(lambda: all(r.started for r in recorders), timeout=60)
        pids = [r.started[0] for r in recorders]
    finally:
        supervisor.stop()
    assert not pid_alive(template) and not any(pid_alive(p) for p in pids) and supervisor.pids() == []


def test_a_template_that_loads_a_device_library_refuses_and_launches_spawn(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "cupy.py").write_text("")  # stands in for a CUDA library
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with ProcessSupervisor(template=settings(tmp_path, preload=("cupy",), env=env)) as supervisor:
        recorder = launch(supervisor, 1, script_spec(tmp_path / "a", PROBE, "0", env={"PYTHONPATH": env["PYTHONPATH"]}))
        assert recorder.done.wait(60) and recorder.exits == [(0, "")]
        assert stdout_json(recorder)["ppid"] == os.getpid() and supervisor.template_pid is None


def test_only_plain_scripts_of_the_templates_python_may_fork(tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text("")
    config = settings(tmp_path, env={"PATH": "/bin", "LANG": "C.UTF-8"})
    env = {"PATH": "/bin", "LANG": "C.UTF-8", "IRIS_PYTHON": sys.executable, "IRIS_WORKDIR": str(tmp_path)}
    iris = ForkCandidate(("bash", "-c", "exec $IRIS_PYTHON -u $IRIS_WORKDIR/run.py"), "/cg/cgroup.procs")
    request = fork_request(iris, config, env, str(tmp_path))
    assert request is not None and request.unbuffered and request.join_cgroup == "/cg/cgroup.procs"
    assert request.script == str(tmp_path / "run.py") and request.args == ()  # as $IRIS_WORKDIR expands
    assert fork_request(ForkCandidate((sys.executable, "run.py", "x")), config, env, str(tmp_path)).args == ("x",)
    refused = [
        ForkCandidate(("/usr/bin/python3.9", "run.py")),  # another Python
        ForkCandidate((sys.executable, "-O", "run.py")),  # interpreter options the template lacks
        ForkCandidate((sys.executable, "-c", "pass")),
        ForkCandidate((sys.executable, "missing.py")),
        ForkCandidate(("bash", "-c", "exec $IRIS_PYTHON -u $IRIS_WORKDIR/run.py; echo done")),
        ForkCandidate(("bash", "-c", "pip install x && exec $IRIS_PYTHON run.py")),
        ForkCandidate(("sleep", "1")),
    ]
    assert [fork_request(c, config, env, str(tmp_path)) for c in refused] == [None] * len(refused)
    # A variable read at interpreter or library start that differs from the template's: spawn.
    assert fork_request(ForkCandidate((sys.executable, "run.py")), config, {**env, "OMP_NUM_THREADS": "1"}, str(tmp_path)) is None
    assert fork_request(ForkCandidate((sys.executable, "run.py")), config, {**env, "PYTHONHASHSEED": "0"}, str(tmp_path)) is None
    # Words the shell would split or glob are not expanded by hand.
    assert resolve_command(("bash", "-c", "exec $IRIS_PYTHON $X"), {"IRIS_PYTHON": "/p", "X": "a b"}) is None
    assert resolve_command(("bash", "-c", "exec $IRIS_PYTHON ${X}.py"), {"IRIS_PYTHON": "/p", "X": "a"}) == ("/p", "a.py")


def test_tasks_die_with_the_process_that_owns_the_template(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text("import time\ntime.sleep(120)\n")
    owner_script = f"""
import os, sys, time
from fray_ray.cluster._process import ProcessSpec, ProcessSupervisor
from fray_ray.cluster._template import ForkCandidate, TemplateSettings
class L:
    def process_started(self, pid): print(pid, sup.template_pid, flush=True)
    def process_output(self, *a): pass
    def process_exited(self, *a): pass
sup = ProcessSupervisor(template=TemplateSettings(sys.executable, ("json",), dict(os.environ), {str(tmp_path)!r})).start()
while sup.template_pid is None:
    time.sleep(0.01)
argv = (sys.executable, "probe.py")
sup.spawn(1, ProcessSpec(argv, dict(os.environ), {str(tmp_path)!r}, ForkCandidate(argv)), L())
time.sleep(120)
"""
    owner = subprocess.Popen([sys.executable, "-c", owner_script], stdout=subprocess.PIPE, text=True)
    try:
        child, template = (int(p) for p in owner.stdout.readline().split())
        assert pid_alive(child) and pid_alive(template)
        owner.kill()
        owner.wait(10)
        wait_for(lambda: not pid_alive(template) and not pid_alive(child), timeout=30, what="the template and its child to die")
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        owner.stdout.close()


# -- on the embedded cluster ----------------------------------------------------------------------


def _report_parent() -> None:
    print("parent", os.getppid(), flush=True)


def _allocate_past_the_limit() -> None:
    print("parent", os.getppid(), flush=True)
    block = bytearray(400 * 1024 * 1024)
    print("allocated", len(block))


def _run_job(cluster, fn, **resources: int):
    with cluster.client() as client:
        job_id = client.launch_job(JobSpec(
            name=job_name(fn.__name__.strip("_")), entrypoint=callable_entrypoint(fn),
            resources=ResourceSpec(cpu_millicores=100, **resources),
        ))
        status = wait_finished(client, job_id, timeout=120)
        (task,) = client.list_tasks(job_id)
        return status, task, [line.data for line in client.task_logs(job_id)]


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_the_switch_turns_the_template_off(make_cluster, monkeypatch, switch: str) -> None:
    on = make_cluster(worker_template_after=0)
    template = wait_for(lambda: on.worker_template_pid, timeout=60, what="the template")
    status, _, lines = _run_job(on, _report_parent)
    assert status.state == JobState.SUCCEEDED and f"parent {template}" in lines
    on.stop()
    if switch == "environment":
        monkeypatch.setenv("FRAY_RAY_WORKER_TEMPLATE", "0")
    off = make_cluster(worker_template=False) if switch == "config" else make_cluster()
    status, _, lines = _run_job(off, _report_parent)
    # The Iris callable command runs `bash -c "exec python ..."`: bash execs the interpreter,
    # so a fresh task's parent is this process.
    assert status.state == JobState.SUCCEEDED and f"parent {os.getpid()}" in lines
    assert off.worker_template_pid is None


def test_a_forked_task_is_held_to_its_memory_request(make_cluster) -> None:
    from fray_ray.cluster._cgroups import OOM_HEADLINE, MemoryCgroups

    probe = MemoryCgroups.open()
    if probe is None:
        pytest.skip("this machine does not let this process make a memory cgroup")
    probe.close()
    cluster = make_cluster(worker_template_after=0)
    template = wait_for(lambda: cluster.worker_template_pid, timeout=60, what="the template")
    status, task, lines = _run_job(cluster, _allocate_past_the_limit, memory_bytes=64 * 1024 * 1024)
    assert status.state == JobState.FAILED and f"parent {template}" in lines
    assert task.exit_code == 137 and task.error.startswith(OOM_HEADLINE)


def test_a_template_whose_cluster_stops_listening_mid_fork_exits_cleanly(tmp_path: Path) -> None:
    """The answer to a fork cannot be sent: the template stops its child and exits, and the
    child's descriptors are closed once (a second close could hit a reused number)."""
    import socket

    from fray_ray.cluster import _template

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    main = Path(_template.__file__).with_name("_template_main.py")
    template = subprocess.Popen([sys.executable, str(main), str(theirs.fileno()), '["json"]'],
                                pass_fds=[theirs.fileno()], stderr=subprocess.PIPE)
    theirs.close()
    read_end, write_end = os.pipe()
    try:
        assert json.loads(ours.recv(1 << 16))["op"] == "ready"
        ours.shutdown(socket.SHUT_RD)  # every answer from now on fails with EPIPE
        (tmp_path / "child.py").write_text("import time\ntime.sleep(600)\n")
        request = {"op": "fork", "id": 1, "script": str(tmp_path / "child.py"), "args": [], "unbuffered": False,
                   "cgroup_procs": None, "env": {}, "cwd": str(tmp_path)}
        socket.send_fds(ours, [json.dumps(request).encode()], [write_end, write_end])
        os.close(write_end)
        _, stderr = template.communicate(timeout=60)
        assert template.returncode == 0, stderr.decode()
        assert b"Traceback" not in stderr, stderr.decode()
        assert os.read(read_end, 1) == b""  # the child, the pipe's last writer, is gone
    finally:
        if template.poll() is None:
            template.kill()
            template.wait()
        ours.close()
        os.close(read_end)
