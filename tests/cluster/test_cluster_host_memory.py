"""Each simulated host has a shared-memory directory of its own (the driver's host keeps the
driver's), private to this user, removed when the cluster stops or its owner dies."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cluster_helpers import job_name, pid_alive, sh, wait_file, wait_for

from fray_ray.cluster import cpu_worker
from fray_ray.cluster._host_memory import SHARED_MEMORY_DIR_ENV, HostMemoryDirs
from fray_ray.cluster._reaper import OWNER_FILE
from fray_ray.iris.types import ResourceSpec

DEADLINE_S = 60.0  # generous: a loaded machine can be slow to reap; nothing depends on speed
REPORT = 'echo "$IRIS_WORKER_ID ${{FRAY_RAY_SHARED_MEMORY_DIR-unset}}" >> {out}; sleep {sleep}'


def test_each_simulated_host_gets_a_private_directory_of_its_own(tmp_path: Path) -> None:
    dirs = HostMemoryDirs("127.0.0.1", base=str(tmp_path))
    assert dirs.for_host("head", "127.0.0.1") is None  # the driver's host keeps the driver's directory
    first = dirs.for_host("node-0", "127.0.0.2")
    second = dirs.for_host("node-1", "127.0.0.3")
    assert first is not None and second is not None and first != second
    assert dirs.for_host("node-0", "127.0.0.2") == first
    assert dirs.root is not None and os.path.dirname(first) == dirs.root
    assert stat.S_IMODE(os.stat(dirs.root).st_mode) == 0o700 and stat.S_IMODE(os.stat(first).st_mode) == 0o700
    assert Path(dirs.root, OWNER_FILE).read_text() == str(os.getpid())
    for bad in ("..", ".", "a/b", ""):
        with pytest.raises(ValueError):
            dirs.for_host(bad, "127.0.0.4")
    dirs.remove()
    assert not os.path.exists(dirs.root) and os.listdir(tmp_path) == []


def test_no_directories_when_sharing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARED_MEMORY_DIR_ENV, "")
    dirs = HostMemoryDirs("127.0.0.1")
    assert dirs.root is None and dirs.for_host("node-0", "127.0.0.2") is None
    dirs.remove()


def test_a_dead_owners_directories_are_removed_by_the_next_cluster(tmp_path: Path) -> None:
    stale = tmp_path / "fray-ray-cluster-deadbeef"
    (stale / "node-0").mkdir(parents=True)
    (stale / OWNER_FILE).write_text("999999999")  # no such process
    dirs = HostMemoryDirs("127.0.0.1", base=str(tmp_path))
    made = dirs.for_host("node-0", "127.0.0.2")
    assert made is not None and not stale.exists()
    dirs.remove()


def test_tasks_on_two_simulated_hosts_are_told_two_directories(make_cluster, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "shm"
    base.mkdir()
    monkeypatch.setenv(SHARED_MEMORY_DIR_ENV, str(base))
    cluster = make_cluster(*(cpu_worker(f"cpu-{i}", cpu=1, memory="1g", disk="1g") for i in range(2)))
    out = tmp_path / "seen"
    with cluster.client() as client:
        for index in range(2):  # a whole CPU each: one per host
            client.launch_job(sh(REPORT.format(out=out, sleep=0), name=job_name(f"where-{index}"),
                                 resources=ResourceSpec(cpu_millicores=1000)))
        seen = dict(line.split() for line in wait_for(
            lambda: len(wait_file(str(out)).splitlines()) == 2 and wait_file(str(out)), what="both reports").splitlines())
    assert set(seen) == {"cpu-0", "cpu-1"} and seen["cpu-0"] != seen["cpu-1"]
    for directory in seen.values():
        assert Path(directory).parent.parent == base and stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    cluster.stop()
    assert os.listdir(base) == []


def test_one_worker_is_the_drivers_host_and_keeps_its_directory(make_cluster, tmp_path: Path) -> None:
    cluster = make_cluster()
    out = tmp_path / "seen"
    with cluster.client() as client:
        client.launch_job(sh(REPORT.format(out=out, sleep=0), name=job_name("where")))
        assert wait_file(str(out)).split() == ["cpu-0", os.environ.get(SHARED_MEMORY_DIR_ENV, "unset")]


OWNER = textwrap.dedent(
    """
    import json, sys, time
    from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
    from fray_ray.iris.entrypoint import command_entrypoint
    from fray_ray.iris.names import JobName
    from fray_ray.iris.types import JobSpec, ResourceSpec

    workers = tuple(cpu_worker(f"cpu-{i}", cpu=1, memory="1g", disk="1g") for i in range(2))
    cluster = EmbeddedCluster(ClusterConfig(workers=workers, work_dir=sys.argv[1])).start()
    with cluster.client() as client:
        client.launch_job(JobSpec(name=JobName.root("tester", "hold"), resources=ResourceSpec(cpu_millicores=100),
                                  entrypoint=command_entrypoint(["sh", "-c", sys.argv[2]])))
    print(json.dumps({"reaper": cluster.guard.reaper_pid}), flush=True)
    time.sleep(600)
    """
)


def test_a_killed_owners_host_directories_are_removed_by_its_reaper(tmp_path: Path) -> None:
    base = tmp_path / "shm"
    base.mkdir()
    out = tmp_path / "seen"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), REPORT.format(out=out, sleep=300)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, SHARED_MEMORY_DIR_ENV: str(base)})
    try:
        assert owner.stdout is not None
        reaper = json.loads(owner.stdout.readline())["reaper"]
        _, directory = wait_file(str(out)).split()
        assert os.path.isdir(directory)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        wait_for(lambda: os.listdir(base) == [], timeout=DEADLINE_S, what="the hosts' directories to be removed")
        wait_for(lambda: not pid_alive(reaper), timeout=DEADLINE_S, what="the reaper to exit")
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
