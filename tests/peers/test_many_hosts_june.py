"""A Ray program on the real Iris controller (marin-iris 2026-06 LocalCluster) from a driver that
shares nothing with its workers but the bundle: its modules live in a directory moved away right
after init; `fray-ray submit` runs a driver as a job there; a worker without fray_ray is a clear
error; the session's capacity is the controller's workers. The workers run the peer venv's
Python, unmodified: fray_ray reaches them through the controller process's PYTHONPATH (this
checkout plus its dependencies in a temp dir), which Iris's local process runtime passes on to
tasks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from june_controller import start_controller, stop_controller

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import JobState

pytestmark = pytest.mark.slow

DEADLINE = 240.0

PROGRAM = {
    "main.py": """
        import os, shutil, sys
        import fray_ray as ray
        from shapes.counter import Counter

        here = os.getcwd()
        ray.init(sys.argv[1])
        shutil.move(here, sys.argv[2])

        @ray.remote
        def area(side):
            from shapes import geometry
            with open("data/unit.txt") as f:
                return f"{geometry.square_area(side)} {f.read().strip()}"

        print("areas", ray.get([area.options(runtime_env={"env_vars": {"K": "v"}}).remote(i) for i in range(1, 4)]))
        counter = Counter.remote(1)
        print("counter", ray.get([counter.add.remote(2), counter.add.remote(3)]))
        ray.shutdown()
    """,
    "shapes/__init__.py": "",
    "shapes/geometry.py": "def square_area(side):\n    return side * side\n",
    "shapes/counter.py": """
        import fray_ray as ray

        @ray.remote
        class Counter:
            def __init__(self, start):
                self.total = start

            def add(self, amount):
                self.total += amount
                return self.total
    """,
    "data/unit.txt": "m2\n",
    "pyproject.toml": "",  # a project: all of it ships, the data file included
}

SUBMITTED = """
    import os, sys, time
    import ray
    from helpers import double

    ray.init()

    @ray.remote
    def work(x):
        return double(x)

    print("results", ray.get([work.remote(i) for i in range(3)]), flush=True)
    ticks = int(sys.argv[1])  # -1: until stopped
    while ticks != 0:
        print("waiting", flush=True)
        time.sleep(0.5)
        ticks -= 1
    print("finished", flush=True)
"""


@pytest.fixture(scope="module")
def june_without_fray_ray(peer_controller_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, address = start_controller(peer_controller_python, tmp_path_factory.mktemp("bare-home"), None)
    try:
        yield address
    finally:
        stop_controller(process)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN")}


def test_a_moved_away_program_runs_on_the_real_controller(june: str, tmp_path: Path) -> None:
    program = tmp_path / "program"
    for name, text in PROGRAM.items():
        path = program / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    result = subprocess.run(
        [sys.executable, "main.py", june, str(tmp_path / "moved")], cwd=program, capture_output=True, text=True,
        timeout=DEADLINE, env=clean_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "areas ['1 m2', '4 m2', '9 m2']" in result.stdout.splitlines()
    assert "counter [3, 6]" in result.stdout.splitlines()


def test_submit_streams_and_no_wait_leaves_the_job_running(june: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text(textwrap.dedent(SUBMITTED))
    (project / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    submit = [sys.executable, "-m", "fray_ray", "submit", "--address", june]
    process = subprocess.Popen([*submit, "main.py", "20"], cwd=project, env=clean_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line.strip())
            if line.strip().endswith("waiting"):
                break
        job_id = seen[0].split()[-1]
        assert any(line.endswith("results [0, 2, 4]") for line in seen), seen
        with ControllerClient(june) as controller:
            assert controller.job_state(job_id) == JobState.RUNNING  # streamed while it runs
        stdout, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert any(line.endswith("finished") for line in stdout.splitlines())

    detached = subprocess.run([*submit, "--no-wait", "main.py", "-1"], cwd=project,
                              env=clean_env(), capture_output=True, text=True, timeout=DEADLINE)
    assert detached.returncode == 0, detached.stderr
    job_id = detached.stdout.splitlines()[0].split()[-1]
    with ControllerClient(june) as controller:
        deadline = time.monotonic() + DEADLINE
        while controller.job_state(job_id) != JobState.RUNNING:
            assert time.monotonic() < deadline, "the detached job never ran"
            time.sleep(0.2)
        controller.terminate_job(job_id)
        assert controller.job_state(job_id).finished


PROBE = """
import sys
import fray_ray as ray
ray.init(sys.argv[1])

@ray.remote
def f():
    return 1

@ray.remote
class A:
    def ping(self):
        return 1

for what, call in (("task", lambda: f.remote()), ("actor", lambda: A.remote().ping.remote())):
    try:
        ray.get(call(), timeout=120)
        print(what, "ran")
    except Exception as exc:
        print(what, type(exc).__name__, "|".join(str(exc).splitlines()))
ray.shutdown()
"""


def test_a_worker_without_fray_ray_is_a_clear_error_on_the_real_controller(
    june_without_fray_ray: str, tmp_path: Path
) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    result = subprocess.run([sys.executable, "probe.py", june_without_fray_ray], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = {line.split(" ", 1)[0]: line for line in result.stdout.splitlines() if line.startswith(("task", "actor"))}
    assert lines["task"].startswith("task RaySystemError") and "No module named 'fray_ray'" in lines["task"]
    assert lines["actor"].startswith("actor ActorDiedError") and "No module named 'fray_ray'" in lines["actor"]


CAPACITY_PROBE = """
import json, sys, time
import fray_ray as ray
from fray_ray.iris.controller_client import ControllerClient

ray.init(sys.argv[1])

@ray.remote(num_cpus=2)
def where():
    import os
    return os.environ.get("IRIS_WORKER_ID"), ray.get_runtime_context().get_node_id()

host, node_id = ray.get(where.remote(), timeout=120)
with ControllerClient(sys.argv[1]) as controller:
    # The June LocalCluster autoscales: read until the controller's workers are the same before
    # and after the session's view was taken (a view is at most a second old).
    deadline = time.monotonic() + 120
    while True:
        before = [w for w in controller.list_workers() if w.healthy]
        time.sleep(1.2)
        resources, nodes = ray.cluster_resources(), ray.nodes()
        after = [w for w in controller.list_workers() if w.healthy]
        if [w.worker_id for w in before] == [w.worker_id for w in after] or time.monotonic() > deadline:
            break
print(json.dumps({
    "workers": [[w.worker_id, w.address, w.cpu_count, w.memory_bytes] for w in after],
    "resources": resources,
    "nodes": [[n["NodeID"], n["NodeManagerAddress"], n["Alive"], n["Resources"].get("CPU")] for n in nodes],
    "ran_on": [host, node_id],
}))
ray.shutdown()
"""


def test_the_sessions_capacity_is_the_real_controllers_workers(june: str, tmp_path: Path) -> None:
    import json

    (tmp_path / "probe.py").write_text(CAPACITY_PROBE)
    result = subprocess.run([sys.executable, "probe.py", june], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    workers, resources = seen["workers"], seen["resources"]
    assert workers and all(cpus == 8 for _, _, cpus, _ in workers)  # June's local workers report 8 cores
    assert resources["CPU"] == sum(cpus for _, _, cpus, _ in workers)
    assert resources["memory"] == sum(memory for *_, memory in workers)
    alive = [n for n in seen["nodes"] if n[2]]
    assert len(alive) == len(workers) and all(cpus == 8 for *_, cpus in alive)
    assert {address for _, address, _, _ in alive} == {address.split(":")[0] for _, address, _, _ in workers}
    host, node_id = seen["ran_on"]
    assert host in {worker_id for worker_id, *_ in workers} and node_id in {n[0] for n in alive}
