"""Each containment layer on its own: process groups, the environment marker, the cgroup, and
the reaper's own survival; plus the sweep an orderly stop makes.

The owner is a separate process running an `EmbeddedCluster`; to test the layers below the
cgroup, it can be told to run without one (as on a machine where none can be made).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import job_name, pid_alive, sh, wait_for

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.cluster._guard import pids_cgroup_parent
from fray_ray.cluster._reaper import remove_orphaned_dirs, remove_temp_dir

HAVE_CGROUP = pids_cgroup_parent() is not None
DEADLINE_S = 60.0  # generous: a loaded CI machine can be slow to reap; nothing depends on speed

OWNER = textwrap.dedent(
    """
    import json, sys, time
    import fray_ray.cluster._guard as guard
    if sys.argv[2] == "no-cgroup":
        guard.pids_cgroup_parent = lambda: None  # as on a machine without a writable cgroup
    from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
    from fray_ray.iris.entrypoint import command_entrypoint
    from fray_ray.iris.names import JobName
    from fray_ray.iris.types import JobSpec, ResourceSpec

    cluster = EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),), work_dir=sys.argv[1])).start()
    with cluster.client() as client:
        client.launch_job(JobSpec(name=JobName.root("tester", "layers"), resources=ResourceSpec(cpu_millicores=100),
                                  entrypoint=command_entrypoint(["sh", "-c", sys.argv[3]])))
    guard = cluster.guard
    print(json.dumps({"temp_dir": cluster.temp_dir, "cgroup": guard.cgroup, "reaper": guard.reaper_pid}), flush=True)
    time.sleep(600)
    """
)


class Owner:
    def __init__(self, work: Path, pid_file: Path, script: str, *, cgroup: bool, own_session: bool = False) -> None:
        self.pid_file = pid_file
        self.process = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(work), "cgroup" if cgroup else "no-cgroup", script],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=own_session,
        )
        assert self.process.stdout is not None
        self.info = json.loads(self.process.stdout.readline())

    def task_pids(self, count: int) -> list[int]:
        wait_for(lambda: self.pid_file.exists() and len(self.pid_file.read_text().split()) == count, what="task pids")
        pids = [int(p) for p in self.pid_file.read_text().split()]
        assert all(pid_alive(p) for p in pids)
        return pids

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    started: list[Owner] = []
    yield started
    for owner in started:
        owner.close()


def _command_line(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _all_gone(pids: list[int], temp_dir: str, reaper: int) -> None:
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=DEADLINE_S,
             what=f"processes to die: {[p for p in pids if pid_alive(p)]}")
    wait_for(lambda: not os.path.exists(temp_dir), timeout=DEADLINE_S, what="the temp dir to be removed")
    wait_for(lambda: not pid_alive(reaper), timeout=DEADLINE_S, what="the reaper to exit")


def test_marker_finds_descendants_that_left_their_group(owners, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    owner = Owner(tmp_path, pid_file, f"setsid sleep 303 & echo $! >> {pid_file}; wait", cgroup=False)
    owners.append(owner)
    assert owner.info["cgroup"] is None
    (escaped,) = owner.task_pids(1)
    owner.process.kill()
    _all_gone([escaped], owner.info["temp_dir"], owner.info["reaper"])


def test_process_groups_catch_descendants_that_dropped_the_marker(owners, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    owner = Owner(tmp_path, pid_file, f"env -i sleep 304 & echo $! >> {pid_file}; wait", cgroup=False)
    owners.append(owner)
    (unmarked,) = owner.task_pids(1)
    wait_for(lambda: _command_line(unmarked).startswith(b"sleep\0"), what="env to exec sleep")
    with open(f"/proc/{unmarked}/environ", "rb") as f:
        assert b"FRAY_RAY_CLUSTER_" not in f.read()
    owner.process.kill()
    _all_gone([unmarked], owner.info["temp_dir"], owner.info["reaper"])


@pytest.mark.skipif(not HAVE_CGROUP, reason="no writable cgroup v1 'pids' hierarchy on this machine")
def test_cgroup_catches_descendants_that_left_their_group_and_dropped_the_marker(owners, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    script = f"env -i setsid sleep 305 & echo $! >> {pid_file}; wait"
    owner = Owner(tmp_path, pid_file, script, cgroup=True)
    owners.append(owner)
    cgroup = owner.info["cgroup"]
    (hidden,) = owner.task_pids(1)
    with open(os.path.join(cgroup, "cgroup.procs")) as f:
        assert str(hidden) in f.read().split()
    owner.process.kill()
    _all_gone([hidden], owner.info["temp_dir"], owner.info["reaper"])
    wait_for(lambda: not os.path.exists(cgroup), timeout=DEADLINE_S, what="the cgroup to be removed")


def test_reaper_outlives_a_kill_of_the_owners_whole_process_group(owners, tmp_path: Path) -> None:
    """A terminal's Ctrl-C or a job-control kill reaches the owner's group; the reaper is not in it."""
    pid_file = tmp_path / "pids"
    owner = Owner(tmp_path, pid_file, f"sleep 306 & echo $! >> {pid_file}; wait", cgroup=HAVE_CGROUP, own_session=True)
    owners.append(owner)
    (child,) = owner.task_pids(1)
    os.killpg(owner.process.pid, signal.SIGKILL)
    _all_gone([child], owner.info["temp_dir"], owner.info["reaper"])


def test_orderly_stop_kills_descendants_that_escaped_their_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),), work_dir=str(tmp_path / "work"))) as cluster:
        with cluster.client() as client:
            client.launch_job(sh(f"setsid sleep 307 & echo $! >> {pid_file}; wait", name=job_name("escaper")))
        escaped = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="pid"))
        assert pid_alive(escaped)
        guard = cluster.guard
        assert guard is not None and guard.reaper_pid is not None
        reaper = guard.reaper_pid
    wait_for(lambda: not pid_alive(escaped), timeout=DEADLINE_S, what="the escaped process to die")
    assert not pid_alive(reaper)
    assert guard.cgroup is None or not os.path.exists(guard.cgroup)


def test_temp_dirs_are_removed_only_when_recognisably_a_dead_owners(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    mine = tmp_path / "fray-ray-cluster-mine"
    mine.mkdir()
    (mine / "owner.pid").write_text(str(os.getpid()))
    remove_temp_dir(str(mine), dead_pid)  # not that owner's
    assert mine.exists()
    stranger = tmp_path / "not-a-cluster"
    stranger.mkdir()
    (stranger / "owner.pid").write_text(str(dead_pid))
    remove_temp_dir(str(stranger), dead_pid)  # not a cluster dir at all
    assert stranger.exists()
    orphan = tmp_path / "fray-ray-cluster-orphan"
    orphan.mkdir()
    (orphan / "owner.pid").write_text(str(dead_pid))
    remove_orphaned_dirs(str(tmp_path))
    assert not orphan.exists() and mine.exists() and stranger.exists()
    remove_temp_dir(str(mine), os.getpid())
    assert not mine.exists()


def test_a_forked_child_exiting_normally_leaves_its_parents_cluster_alone(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),), work_dir=str(tmp_path / "work"))) as cluster:
        with cluster.client() as client:
            client.launch_job(sh(f"setsid sleep 308 & echo $! >> {pid_file}; wait", name=job_name("survivor")))
        escaped = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="pid"))
        child = os.fork()
        if child == 0:  # what atexit would do in a child that exits through the interpreter
            try:
                cluster.stop()
            finally:
                os._exit(0)
        assert os.waitpid(child, 0)[1] == 0
        assert pid_alive(escaped) and cluster.temp_dir is not None and os.path.isdir(cluster.temp_dir)
        with cluster.client() as client:
            assert client.job_states(["/tester/survivor"])["/tester/survivor"].name == "RUNNING"
    wait_for(lambda: not pid_alive(escaped), timeout=DEADLINE_S, what="the escaped process to die at the real stop")
