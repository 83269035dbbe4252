"""Starting and stopping: the one-call API, the standalone command, fate sharing, layouts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cluster_helpers import job_name, pid_alive, port_open, sh, wait_file, wait_finished, wait_for, wait_state

from fray_ray.cluster import (
    ClusterConfig,
    ClusterLifecycle,
    EmbeddedCluster,
    config_from_mapping,
    cpu_worker,
    gpu_hosts,
    load_config_file,
    parse_bytes,
    tpu_slice,
)
from fray_ray.cluster._config import machine_cpu_millicores
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import JobState, ResourceSpec


def test_start_is_fast_and_stop_leaves_nothing(tmp_path) -> None:
    cluster = EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=4),), work_dir=str(tmp_path / "work")))
    with cluster:
        print(f"embedded cluster ready in {cluster.started_in_s * 1000:.1f} ms")
        assert cluster.started_in_s < 1.0
        assert cluster.state == ClusterLifecycle.RUNNING and cluster.address.startswith("http://127.0.0.1:")
        port, temp_dir = cluster.port, cluster.temp_dir
        assert temp_dir is not None and temp_dir.startswith(str(tmp_path / "work"))
        with cluster.client() as client:
            # each task leaves a background grandchild behind it in its process group
            job_id = client.launch_job(
                sh(
                    "sleep 60 & echo $! >> "
                    + str(tmp_path / "pids")
                    + "; echo $$ >> "
                    + str(tmp_path / "pids")
                    + "; wait",
                    name=job_name("sleepers"),
                    replicas=3,
                    resources=ResourceSpec(cpu_millicores=100),
                )
            )
            wait_state(client, job_id, JobState.RUNNING)
            pids_file = tmp_path / "pids"
            wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 6, what="6 pids")
        pids = [int(p) for p in pids_file.read_text().split()]
        assert all(pid_alive(p) for p in pids)
    stop_started = time.perf_counter()
    cluster.stop()  # idempotent
    print(f"second stop() took {(time.perf_counter() - stop_started) * 1000:.1f} ms")
    assert cluster.state == ClusterLifecycle.STOPPED
    assert not any(pid_alive(p) for p in pids)
    assert not os.path.exists(temp_dir) and not port_open(port)
    with pytest.raises(RuntimeError):
        cluster.start()
    with pytest.raises(RuntimeError):
        _ = cluster.address


def test_leftover_children_of_a_finished_task_are_killed(client, tmp_path) -> None:
    pid_file = tmp_path / "orphan"
    job_id = client.launch_job(sh(f"sleep 60 & echo $! > {pid_file}", name=job_name("orphaner")))
    assert wait_finished(client, job_id).state == JobState.SUCCEEDED
    orphan = int(wait_file(str(pid_file)))
    wait_for(lambda: not pid_alive(orphan), what="the task's leftover child to be killed")


def test_default_worker_is_sized_from_this_machine(make_cluster) -> None:
    cluster = EmbeddedCluster().start()
    try:
        (worker,) = cluster.workers()
        assert worker.spec.cpu_millicores == machine_cpu_millicores()
        assert worker.spec.memory_bytes > 0 and worker.spec.attributes["device-type"] == "cpu"
    finally:
        cluster.stop()


def run_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fray_ray.cluster", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_standalone_command_runs_until_signalled(stop_signal: int, tmp_path) -> None:
    process = run_cli("--json", "--cpu", "2", "--memory", "2g", "--tpu", "v5p-16:tpu-a")
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        assert info["workers"] == ["tpu-a-w0", "tpu-a-w1", "cpu-0"]
        pid_file = tmp_path / "task.pid"
        with ControllerClient(info["address"], token=info["token"]) as client:
            job_id = client.launch_job(sh(f"echo $$ > {pid_file}; exec sleep 60", name=job_name("cli")))
            wait_state(client, job_id, JobState.RUNNING)
        task_pid = int(wait_file(str(pid_file)))
        process.send_signal(stop_signal)
        assert process.wait(timeout=20) == 0
        assert not pid_alive(task_pid)
        assert not port_open(int(info["address"].rsplit(":", 1)[1]))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def test_tasks_die_with_a_killed_cluster_process(tmp_path) -> None:
    """Fate sharing: SIGKILL of the cluster's process takes its tasks with it (parent-death signal)."""
    process = run_cli("--json", "--cpu", "2")
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        pid_file = tmp_path / "task.pid"
        with ControllerClient(info["address"], token=info["token"]) as client:
            client.launch_job(sh(f"echo $$ > {pid_file}; exec sleep 60", name=job_name("orphan"), replicas=1))
        task_pid = int(wait_file(str(pid_file)))
        assert pid_alive(task_pid)
        process.kill()
        process.wait(timeout=10)
        wait_for(lambda: not pid_alive(task_pid), timeout=10, what="the task to die with its cluster")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def test_standalone_command_reads_a_layout_file(tmp_path) -> None:
    layout = tmp_path / "cluster.toml"
    layout.write_text(
        'auth = false\n\n[[workers]]\nkind = "cpu"\ncount = 2\ncpu = 1\nmemory = "1g"\n\n'
        '[[workers]]\nkind = "gpu"\nvariant = "A100"\ncount = 4\nhosts = 1\npool = "p"\n'
    )
    process = run_cli("--config", str(layout), "--json")
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        assert info["token"] is None and info["workers"] == ["cpu-0", "cpu-1", "gpu-0"]
        with ControllerClient(info["address"]) as client:
            job_id = client.launch_job(sh("true", name=job_name("from-file")))
            assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        process.terminate()
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def test_layouts_and_helpers(tmp_path) -> None:
    assert parse_bytes("8g") == 8 * 1024**3 and parse_bytes("512MiB") == 512 * 1024**2 and parse_bytes(10) == 10
    with pytest.raises(ValueError):
        parse_bytes("lots")
    config = config_from_mapping(
        {
            "port": 0,
            "workers": [
                {"kind": "cpu", "id": "head", "cpu": 2, "memory": "2g", "attributes": {"region": "local"}},
                {"kind": "tpu", "variant": "v6e-8", "name": "t", "env": {"JAX_PLATFORMS": "cpu"}},
                {"kind": "gpu", "variant": "H100", "count": 8, "hosts": 2, "pool": "p", "leafgroup": "lg"},
            ],
        }
    )
    ids = [w.worker_id for w in config.workers]
    assert ids == ["head", "t-w0", "gpu-0", "gpu-1"]
    tpu = config.workers[1]
    assert tpu.attributes["tpu-vm-count"] == 1 and tpu.device_env["JAX_PLATFORMS"] == "cpu"
    assert tpu.tpu is not None and tpu.tpu.chips == 8
    assert config.workers[2].attributes["leafgroup"] == "lg" and config.workers[2].attributes["gpu-count"] == 8
    with pytest.raises(ValueError, match="unknown key"):
        config_from_mapping({"workers": [{"kind": "cpu", "cores": 2}]})
    with pytest.raises(ValueError, match="unknown key"):
        config_from_mapping({"prot": 1})
    with pytest.raises(ValueError, match="duplicate worker ids"):
        ClusterConfig(workers=(cpu_worker("a"), cpu_worker("a")))
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"auth": False, "workers": [{"kind": "tpu", "variant": "v5p-32", "name": "big"}]}))
    loaded = load_config_file(path)
    assert not loaded.auth and len(loaded.workers) == 4
    assert [w.attributes["tpu-worker-id"] for w in loaded.workers] == [0, 1, 2, 3]
    assert len(gpu_hosts(hosts=3)) == 3 and len(tpu_slice("v5p-16")) == 2


def test_start_removes_temp_dirs_of_clusters_whose_process_died(tmp_path) -> None:
    import subprocess
    import sys

    from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / "fray-ray-cluster-orphan"
    orphan.mkdir()
    (orphan / "owner.pid").write_text(dead.stdout.strip())
    foreign = tmp_path / "fray-ray-cluster-unknown"  # no owner file: left alone
    foreign.mkdir()
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=1),), work_dir=str(tmp_path))):
        assert not orphan.exists()
        assert foreign.exists()
