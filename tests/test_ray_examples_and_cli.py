"""The examples run as a user runs them, and the fray-ray command works end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
    )


def test_hello_example() -> None:
    result = run("examples/hello.py")
    assert result.returncode == 0, result.stderr
    assert "sum of squares: 285" in result.stdout


def test_multihost_training_example_runs_unmodified_through_fray_ray_run() -> None:
    result = run("-m", "fray_ray", "run", "--tpu", "v5p-16", "examples/multihost_training.py")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 3
    assert all("2 hosts ran, reports from hosts [0, 1]" in line for line in lines)
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines]
    assert losses[0] > losses[1] > losses[2]  # the coordinator's averaged updates train the model


def test_run_on_pod_example_runs_one_task_per_host_of_a_simulated_slice() -> None:
    result = run("-m", "fray_ray", "run", "--tpu", "v5p-16", "examples/run_on_pod.py")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("host ")]
    assert [line.split(":")[0] for line in lines] == ["host 0 of tpu-0", "host 1 of tpu-0"]
    assert all("on 4 chips" in line for line in lines)
    assert len({line.rsplit(" at ", 1)[1] for line in lines}) == 2  # two hosts, two addresses


def test_run_on_pod_multislice_example_has_one_actor_per_slice_and_one_coordinator() -> None:
    result = run("-m", "fray_ray", "run", "--tpu", "v5p-16", "--tpu", "v5p-16", "examples/run_on_pod.py",
                 "--multislice")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("slice ")]
    assert [line.split(":")[0] for line in lines] == [
        "slice 0 host 0 of tpu-0", "slice 0 host 1 of tpu-0", "slice 1 host 0 of tpu-1", "slice 1 host 1 of tpu-1"]
    coordinators = {line.rsplit("coordinator ", 1)[1] for line in lines}
    assert coordinators == {lines[0].split(" at ", 1)[1].split(",")[0] + ":8081"}  # slice 0's host 0


def test_run_makes_import_ray_mean_fray_ray(tmp_path: Path) -> None:
    script = tmp_path / "uses_ray.py"
    script.write_text(
        "import sys\n"
        "import ray\n"
        "from ray.util import ActorPool\n"
        "ray.init(num_cpus=1)\n"
        "@ray.remote\n"
        "def twice(x):\n"
        "    return 2 * x\n"
        "print(ray.__name__, ray.get(twice.remote(sys.argv[1] + '!')))\n"
        "ray.shutdown()\n"
    )
    result = run("-m", "fray_ray", "run", str(script), "hey")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("fray_ray hey!hey!")


def test_run_auto_address_reaches_the_runs_own_cluster(tmp_path: Path) -> None:
    # As under `ray job submit`: the script's init(address="auto") finds the cluster the run is
    # for (here the run's --gpu layout), not a recorded one (the record directory is empty);
    # sizes are refused as for any existing cluster.
    record_dir = tmp_path / "record"
    record_dir.mkdir(mode=0o700)
    script = tmp_path / "auto.py"
    script.write_text(
        "import ray\n"
        "ray.init(address='auto')\n"
        "@ray.remote\n"
        "def one():\n"
        "    return 1\n"
        "print('gpus', ray.cluster_resources().get('GPU'), 'task', ray.get(one.remote()), flush=True)\n"
        "ray.shutdown()\n"
        "try:\n"
        "    ray.init(address='auto', num_cpus=1)\n"
        "except ValueError as exc:\n"
        "    print('refused:', exc, flush=True)\n"
    )
    environment = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS")}
    environment["FRAY_RAY_TEMP_DIR"] = str(record_dir)
    result = subprocess.run(
        [sys.executable, "-m", "fray_ray", "run", "--gpu", "H100:2", str(script)], cwd=ROOT, capture_output=True,
        text=True, timeout=TIMEOUT, env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert "gpus 2.0 task 1" in result.stdout
    assert "refused: When connecting to an existing cluster, num_cpus and num_gpus must not be provided." in result.stdout


def test_run_reports_the_scripts_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import sys\nsys.exit(3)\n")
    assert run("-m", "fray_ray", "run", str(script)).returncode == 3


def test_run_alias_reaches_interpreters_the_script_spawns(tmp_path: Path) -> None:
    # A spawn-method pool re-imports the script in fresh interpreters: `import ray` must work
    # there too, in the driver's pool and in a pool a task starts.
    (tmp_path / "helpers_of_pool.py").write_text("import ray\n\ndef square(x):\n    return x * x\n")
    script = tmp_path / "spawn_pool.py"
    script.write_text(
        "import multiprocessing\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "import ray\n"
        "import helpers_of_pool\n"
        "def cube(x):\n"
        "    return x ** 3\n"
        "@ray.remote\n"
        "def fan_out(n):\n"
        "    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context('spawn')) as pool:\n"
        "        return sum(pool.map(helpers_of_pool.square, range(n)))\n"
        "if __name__ == '__main__':\n"
        f"    ray.init(num_cpus=1, runtime_env={{'working_dir': {str(tmp_path)!r}}})\n"
        "    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context('spawn')) as pool:\n"
        "        print('driver', sum(pool.map(cube, range(4))))\n"
        "    print('task', ray.get(fan_out.remote(5)))\n"
    )
    result = run("-m", "fray_ray", "run", str(script))
    assert result.returncode == 0, result.stderr
    assert "driver 36" in result.stdout and "task 30" in result.stdout


def test_run_reports_an_actor_ended_by_sys_exit(tmp_path: Path) -> None:
    # The actor's sys.exit() ends the actor, not the driver: the script fails with the
    # ActorDiedError of its `get`, printed, and the actor's own output is shown.
    script = tmp_path / "actor_exits.py"
    script.write_text(
        "import sys\n"
        "import ray\n"
        "@ray.remote\n"
        "class Leaving:\n"
        "    def bye(self):\n"
        "        print('leaving now', flush=True)\n"
        "        sys.exit()\n"
        "ray.get(Leaving.remote().bye.remote())\n"
    )
    result = run("-m", "fray_ray", "run", str(script))
    assert result.returncode == 1
    assert "ActorDiedError" in result.stderr
    assert "leaving now" in result.stdout + result.stderr


def test_status_jobs_logs_and_stop_against_a_cluster() -> None:
    from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
    from fray_ray.iris.entrypoint import command_entrypoint
    from fray_ray.iris.names import JobName
    from fray_ray.iris.types import JobSpec, ResourceSpec

    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        env = {"FRAY_RAY_ADDRESS": cluster.address, "FRAY_RAY_TOKEN": cluster.token}
        with cluster.client() as controller:
            job_id = controller.launch_job(JobSpec(
                JobName.root("cli", "echoes"),
                command_entrypoint(["bash", "-c", "echo from-the-job; sleep 60"]),
                resources=ResourceSpec(cpu_millicores=100, memory_bytes=1 << 20),
            ))
            status = run("-m", "fray_ray", "status", env=env)
            assert status.returncode == 0 and "healthy" in status.stdout
            jobs = run("-m", "fray_ray", "jobs", env=env)
            assert job_id in jobs.stdout
            deadline_logs = ""
            for _ in range(200):
                deadline_logs = run("-m", "fray_ray", "logs", job_id, env=env).stdout
                if "from-the-job" in deadline_logs:
                    break
            assert "from-the-job" in deadline_logs
            missing = run("-m", "fray_ray", "logs", "/cli/nothing", env=env)
            assert missing.returncode == 1 and "not found" in missing.stderr
            malformed = run("-m", "fray_ray", "logs", "nothing", env=env)
            assert malformed.returncode == 2 and "not a job" in malformed.stderr
            stop = run("-m", "fray_ray", "stop", job_id, env=env)
            assert stop.returncode == 0
            assert controller.job_state(job_id).name == "KILLED"


def test_commands_without_an_address_say_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS")}
    env["FRAY_RAY_TEMP_DIR"] = str(tmp_path)  # no cluster another test started is recorded here
    result = subprocess.run([sys.executable, "-m", "fray_ray", "jobs"], cwd=ROOT, capture_output=True, text=True,
                            timeout=TIMEOUT, env=env)
    assert result.returncode != 0 and "no cluster address" in result.stderr


@pytest.mark.parametrize("address", ["127.0.0.1:1"])
def test_commands_against_nothing_listening_fail_clearly(address: str) -> None:
    result = run("-m", "fray_ray", "status", "--address", address)
    assert result.returncode == 1 and "no controller answers" in result.stderr
