"""The `fray-ray` cluster commands against a cluster `fray-ray start` runs in the background:
start/down and the second-start refusal, status (text and --json) with usage and pending
demand, jobs (--json, full ids when piped) after a Ray session, logs -f (to the end, and
Ctrl-C), list/summary of a live session (Ray's state through its dashboard feed, nodes and jobs
from the controller). Every cluster is recorded in a private directory of the test's own and stopped with
`fray-ray down` (killed if that fails) even when a test fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray._private.driver import cluster_address
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec

DEADLINE = 180.0

PROGRAM = """
    import ray
    ray.init(address="auto")

    @ray.remote
    def add(x):
        return x + 1

    @ray.remote
    class Counter:
        def value(self):
            return 7

    counter = Counter.remote()
    print("results", ray.get([add.remote(i) for i in range(4)]), ray.get(counter.value.remote()), flush=True)
"""


LIVE_SESSION = """
    import sys
    import ray
    ray.init(address="auto")

    @ray.remote
    class Keeper:
        def ping(self):
            return "pong"

    @ray.remote
    def square(x):
        return x * x

    @ray.remote(max_retries=0)
    def explode():
        raise ValueError("listed failure")

    keeper = Keeper.remote()
    assert ray.get(keeper.ping.remote()) == "pong"
    assert ray.get(square.remote(3)) == 9
    try:
        ray.get(explode.remote())
    except ValueError:
        pass
    held = ray.put(b"x" * 1000)
    print("READY", keeper._actor_id.hex(), held.hex(), flush=True)
    sys.stdin.readline()  # alive (actor, held object) until the test closes stdin
"""


def fray_ray(env: dict[str, str], *args: str, **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fray_ray", *args], env=env, capture_output=True, text=True,
                          timeout=DEADLINE, **kwargs)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    record_dir = tmp_path_factory.mktemp("record")
    record_dir.chmod(0o700)
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN", "IRIS_AUTH_TOKEN", "PYTHONPATH")}
    environment["FRAY_RAY_TEMP_DIR"] = str(record_dir)
    environment["COLUMNS"] = "40"  # a narrow terminal: ids must still come out whole
    return environment


@pytest.fixture(scope="module")
def cluster(env: dict[str, str]) -> Iterator[dict]:
    """`fray-ray start` (background) with one 2-CPU host; `fray-ray down` at the end, kill as a fallback."""
    started = fray_ray(env, "start", "--json", "--cpu", "2", "--memory", "2g", "--disk", "2g")
    try:
        assert started.returncode == 0, started.stderr
        yield json.loads(started.stdout.splitlines()[-1])
    finally:
        record = cluster_address.read(temp_dir=env["FRAY_RAY_TEMP_DIR"])
        fray_ray(env, "down")
        if record is not None:
            try:
                os.kill(record.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def launch(info: dict, argv: list[str], *, cpu: float = 0.5, name: str = "cli") -> str:
    with ControllerClient(info["address"], token=info["token"]) as controller:
        return controller.launch_job(JobSpec(JobName.root("clitest", f"{name}-{uuid.uuid4().hex[:6]}"),
                                             command_entrypoint(argv), resources=ResourceSpec(int(cpu * 1000))))


def test_start_returns_with_the_cluster_serving_and_recorded(env: dict[str, str], cluster: dict) -> None:
    record = cluster_address.read(temp_dir=env["FRAY_RAY_TEMP_DIR"])
    assert record is not None and record.address == cluster["address"] and record.pid == cluster["pid"]
    with ControllerClient(cluster["address"], token=cluster["token"]) as controller:
        assert controller.healthy()
    again = fray_ray(env, "start")
    assert again.returncode == 1
    assert f"already running at {cluster['address']}" in again.stderr and "fray-ray down" in again.stderr


def test_status_shows_nodes_usage_and_pending_demand(env: dict[str, str], cluster: dict) -> None:
    running = launch(cluster, ["bash", "-c", "echo started; sleep 600"], cpu=1.5, name="holds-most-cpu")
    waiting = launch(cluster, ["true"], cpu=1.5, name="waits-for-cpu")  # fits the host, not beside the first
    try:
        with ControllerClient(cluster["address"], token=cluster["token"]) as controller:
            import time

            deadline = time.monotonic() + DEADLINE
            while controller.job_state(running) != JobState.RUNNING:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        as_json = fray_ray(env, "status", "--json")
        assert as_json.returncode == 0, as_json.stderr
        status = json.loads(as_json.stdout)
        assert status["address"] == cluster["address"]
        [node] = status["nodes"]
        assert node["node_id"] == "cpu-0" and node["healthy"] and node["total"]["CPU"] == 2.0
        assert node["attributes"]["device-type"] == "cpu"
        assert node["used"]["CPU"] == 1.5 and node["running_tasks"] == 1
        assert status["resources"]["CPU"] == {"used": 1.5, "total": 2.0, "free": 0.5}
        [demand] = [d for d in status["pending"] if d["job_id"] == waiting]
        assert demand["tasks"] == 1 and demand["shape"]["CPU"] == 1.5 and demand["reason"]
        text = fray_ray(env, "status")
        assert text.returncode == 0, text.stderr
        for expected in ("Node status", "Active:", " 1 cpu-0", "Usage:", " 1.5/2 CPU", "Demands:",
                         f"{{'CPU': 1.5}}: 1 pending task(s) of {waiting}: {demand['reason']}"):
            assert expected in text.stdout, text.stdout
    finally:
        with ControllerClient(cluster["address"], token=cluster["token"]) as controller:
            controller.terminate_job(running)
            controller.terminate_job(waiting)


def test_jobs_of_a_finished_session_succeeded_with_full_ids(env: dict[str, str], cluster: dict, tmp_path: Path) -> None:
    script = tmp_path / "session.py"
    script.write_text(textwrap.dedent(PROGRAM))
    run = fray_ray(env, "run", "--address", "auto", str(script), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "results [1, 2, 3, 4] 7" in run.stdout
    listed = fray_ray(env, "jobs", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = json.loads(listed.stdout)
    sessions = [job for job in jobs if "/session-" in job["job_id"]]
    roots = [job for job in sessions if not job["parent_job_id"]]
    assert len(roots) == 1, sessions
    children = [job for job in sessions if job["parent_job_id"] == roots[0]["job_id"]]
    assert any("-exec-" in job["job_id"] for job in children) and any("-Counter-" in job["job_id"] for job in children)
    assert {job["state"] for job in [*roots, *children]} == {"succeeded"}, [(j["job_id"], j["state"], j["error"]) for j in sessions]
    assert not [job for job in jobs if job["state"] == "failed"], jobs
    table = fray_ray(env, "jobs")  # piped, COLUMNS=40
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line.split()[1] for line in table.stdout.splitlines()[1:]}
    for job in sessions:
        assert rows[job["job_id"]] == "succeeded", table.stdout


def test_logs_follow_prints_until_the_job_ends(env: dict[str, str], cluster: dict) -> None:
    job_id = launch(cluster, ["bash", "-c", "for i in 1 2 3; do echo line $i; sleep 0.5; done"], name="three-lines")
    followed = fray_ray(env, "logs", "-f", job_id)
    assert followed.returncode == 0, followed.stderr
    assert [line.split("] ", 1)[1] for line in followed.stdout.splitlines()] == ["line 1", "line 2", "line 3"]
    assert f"{job_id}: succeeded" in followed.stderr


def test_logs_follow_ends_cleanly_on_ctrl_c(env: dict[str, str], cluster: dict) -> None:
    job_id = launch(cluster, ["bash", "-c", "echo first; sleep 600"], name="endless")
    process = subprocess.Popen([sys.executable, "-m", "fray_ray", "logs", "-f", job_id], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().rstrip().endswith("] first")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=DEADLINE)
        assert process.returncode == 130 and "Traceback" not in stderr
        assert f"stopped following {job_id}; the job keeps running" in stderr
        with ControllerClient(cluster["address"], token=cluster["token"]) as controller:
            assert controller.job_state(job_id) == JobState.RUNNING
            controller.terminate_job(job_id)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture()
def live_session(env: dict[str, str], cluster: dict, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A driver on the cluster with a live actor, a finished and a failed task and a held
    object, kept running until the test ends; yields its actor's and object's ids."""
    script = tmp_path / "live_session.py"
    script.write_text(textwrap.dedent(LIVE_SESSION))
    process = subprocess.Popen([sys.executable, "-m", "fray_ray", "run", "--address", "auto", str(script)], env=env,
                               cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None and process.stdin is not None
        line = process.stdout.readline()
        assert line.startswith("READY "), (line, process.stderr.read() if process.poll() is not None else "")
        _, actor_id, object_id = line.split()
        yield {"actor_id": actor_id, "object_id": object_id}
        process.stdin.close()
        assert process.wait(timeout=DEADLINE) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_list_and_summary_show_a_live_session(env: dict[str, str], cluster: dict, live_session: dict[str, str]) -> None:
    import time

    actor_id = live_session["actor_id"]
    deadline = time.monotonic() + DEADLINE
    while True:  # the session's feed registers in the background once its job is placed
        listed = fray_ray(env, "list", "actors", "--json")
        assert listed.returncode == 0, listed.stderr
        actors = json.loads(listed.stdout)
        if any(actor["actor_id"] == actor_id for actor in actors):
            break
        assert time.monotonic() < deadline, (listed.stdout, listed.stderr)
        time.sleep(0.5)
    [actor] = [actor for actor in actors if actor["actor_id"] == actor_id]
    assert actor["state"] == "ALIVE" and actor["class_name"] == "Keeper" and actor["session"]
    alive = json.loads(fray_ray(env, "list", "actors", "--json", "--filter", "state=alive").stdout)
    assert actor_id in [a["actor_id"] for a in alive]
    assert json.loads(fray_ray(env, "list", "actors", "--json", "--filter", "state!=ALIVE").stdout) == []

    text = fray_ray(env, "list", "actors")  # piped, COLUMNS=40: the whole id still
    assert text.returncode == 0, text.stderr
    header, *lines = text.stdout.splitlines()
    assert header.split()[:4] == ["SESSION", "ACTOR_ID", "CLASS_NAME", "STATE"]
    assert any(line.split()[1:4] == [actor_id, "Keeper", "ALIVE"] for line in lines), text.stdout

    failed = fray_ray(env, "list", "tasks", "--filter", "state=FAILED", "--json")
    assert failed.returncode == 0, failed.stderr
    [task] = json.loads(failed.stdout)
    # as Ray's `ray list tasks` names a function of the script (`__main__`): without its module
    assert (task["name"], task["func_or_class_name"]) == ("explode", "explode") and task["error_type"]
    assert "listed failure" in task["error_message"]
    failed_text = fray_ray(env, "list", "tasks", "--filter", "state=FAILED")
    assert task["task_id"] in failed_text.stdout.split(), failed_text.stdout
    finished = json.loads(fray_ray(env, "list", "tasks", "--json", "--filter", "state=FINISHED").stdout)
    assert any((t["name"], t["func_or_class_name"]) == ("square", "square") for t in finished), finished
    one = json.loads(fray_ray(env, "list", "tasks", "--json", "--limit", "1").stdout)
    assert len(one) == 1

    objects = fray_ray(env, "list", "objects", "--json")
    assert objects.returncode == 0, objects.stderr
    [held] = [o for o in json.loads(objects.stdout) if o["object_id"] == live_session["object_id"]]
    assert held["object_size"] >= 1000 and held["reference_type"] == "LOCAL_REFERENCE"
    assert live_session["object_id"] in fray_ray(env, "list", "objects").stdout.split()

    summary = fray_ray(env, "summary", "tasks", "--json")
    assert summary.returncode == 0, summary.stderr
    by_name = json.loads(summary.stdout)["cluster"]["summary"]
    assert by_name["explode"]["state_counts"] == {"FAILED": 1}
    assert by_name["square"]["state_counts"] == {"FINISHED": 1}
    summary_text = fray_ray(env, "summary", "tasks").stdout
    assert "total_tasks: 2" in summary_text and "FAILED: 1" in summary_text, summary_text
    actors_summary = json.loads(fray_ray(env, "summary", "actors", "--json").stdout)["cluster"]["summary"]
    assert actors_summary["Keeper"]["state_counts"] == {"ALIVE": 1}

    nodes = json.loads(fray_ray(env, "list", "nodes", "--json").stdout)
    [node] = nodes
    assert node["node_name"] == "cpu-0" and node["state"] == "ALIVE" and node["resources_total"]["CPU"] == 2.0
    assert node["node_id"] == actor["node_id"]  # the id the session gives its actor's node
    assert node["node_id"] in fray_ray(env, "list", "nodes").stdout.split()
    jobs = json.loads(fray_ray(env, "list", "jobs", "--json", "--filter", "state=running").stdout)
    assert any("/session-" in job["job_id"] for job in jobs) and {job["state"] for job in jobs} == {"running"}
    jobs_text = fray_ray(env, "list", "jobs").stdout.split()
    assert all(job["job_id"] in jobs_text for job in jobs)


def test_list_refuses_a_bad_filter_and_a_wrong_token(env: dict[str, str], cluster: dict) -> None:
    for bad, says in ((["--filter", "state"], "write key=value"), (["--filter", "colour=red"], "filterable columns")):
        answer = fray_ray(env, "list", "actors", *bad)
        assert answer.returncode == 2 and "Traceback" not in answer.stderr
        assert says in answer.stderr, answer.stderr
    assert fray_ray(env, "list", "volcanoes").returncode == 2
    refused = fray_ray(env, "list", "actors", "--token", "wrong-token")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "fray-ray list:" in refused.stderr and refused.stdout == ""


def test_down_stops_the_cluster_and_its_tasks(env: dict[str, str], cluster: dict) -> None:
    job_id = launch(cluster, ["bash", "-c", "echo $$; sleep 600"], name="outlived")
    with ControllerClient(cluster["address"], token=cluster["token"]) as controller:
        import time
        deadline = time.monotonic() + DEADLINE
        lines: list = []
        while not lines:
            assert time.monotonic() < deadline
            lines, _ = controller.task_logs_after(job_id)
            time.sleep(0.2)
    task_pid = int(lines[0].data)
    down = fray_ray(env, "stop", "--cluster")
    assert down.returncode == 0, down.stderr
    assert f"stopped the fray_ray cluster at {cluster['address']}" in down.stdout
    assert cluster_address.read(temp_dir=env["FRAY_RAY_TEMP_DIR"]) is None
    assert not Path(f"/proc/{cluster['pid']}").exists() or "Z" in Path(f"/proc/{cluster['pid']}/stat").read_text().split(")")[-1][:3]
    assert not Path(f"/proc/{task_pid}").exists()
    nothing = fray_ray(env, "down")
    assert nothing.returncode == 0 and "no running fray_ray cluster" in nothing.stdout
