"""Names that would leave the cluster's directory are refused at the controller's door.

A standalone controller runs in its own process with its work dir inside `outer/`; every attack
is a raw Connect JSON POST with the right token, as any local user holding it could send. Each
must get `invalid_argument`, create no job, and leave no file anywhere outside the cluster dir.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVICE = "/iris.cluster.ControllerService"
DEADLINE_S = 30.0


@dataclass(frozen=True)
class Controller:
    port: int
    token: str
    outer: Path  # holds only the cluster's work dir, unless something escapes it
    work: Path


def _wait_for(predicate, what: str, timeout: float = DEADLINE_S):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    outer = tmp_path / "outer"
    work = outer / "work"
    work.mkdir(parents=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "fray_ray.cluster", "--json", "--cpu", "2", "--memory", "2g", "--work-dir", str(work)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        yield Controller(int(info["address"].rsplit(":", 1)[1]), info["token"], outer, work)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def call(controller: Controller, method: str, body: dict, service: str = SERVICE) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", controller.port, timeout=30)
    try:
        connection.request(
            "POST",
            f"{service}/{method}",
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {controller.token}"},
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def launch_body(name: str, canary: Path, files: dict[str, bytes] | None = None) -> dict:
    files = {"note.txt": b"written by the task's workdir setup"} if files is None else files
    return {
        "name": name,
        "entrypoint": {
            "runCommand": {"argv": ["sh", "-c", f"touch {canary}"]},
            "workdirFiles": {k: base64.b64encode(v).decode() for k, v in files.items()},
        },
        "resources": {"cpuMillicores": 100},
    }


def files_outside(controller: Controller) -> list[str]:
    """Everything under `outer` that is not the work dir itself or inside it."""
    found = []
    for root, dirs, files in os.walk(controller.outer):
        for entry in dirs + files:
            path = Path(root, entry)
            if path != controller.work and controller.work not in path.parents:
                found.append(str(path))
    return found


# Five '..' climb from the worker's root (work/<cluster>/workers/<worker>) to `outer`.
ESCAPING_JOB_NAMES = [
    "/tester/../../../../../escaped",
    "/tester/../../etc",
    "/tester/a/..",
    "/tester/./job",
    "/../escaped",
    "/tester/job\u0000x",
    "/tester/job\nx",
    "/tester/job\u001bx",
    "/tester/" + "x" * 10_000,
    "/tester/" + "/".join(["abcdefgh"] * 200),
    "/tester//job",
    "tester/job",
]


@pytest.mark.parametrize("name", ESCAPING_JOB_NAMES, ids=lambda n: repr(n[:40]))
def test_bad_job_names_are_refused_and_nothing_runs(controller: Controller, tmp_path: Path, name: str) -> None:
    canary = tmp_path / "ran"
    status, body = call(controller, "LaunchJob", launch_body(name, canary))
    assert status == 400 and body["code"] == "invalid_argument", body
    assert "job" in body["message"] and len(body["message"]) < 400  # names the problem, never echoes 10 kB
    _, listed = call(controller, "ListJobs", {"query": {}})
    assert listed.get("jobs", []) == []
    assert files_outside(controller) == [] and not canary.exists()


def test_workdir_files_cannot_climb_out(controller: Controller, tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    for file_name in ("../../../../../../../escaped-file", "/etc/escaped", "a/../../x", "bad\u0000name", "x" * 300):
        status, body = call(controller, "LaunchJob", launch_body("/tester/files", canary, {file_name: b"x"}))
        assert status == 400 and body["code"] == "invalid_argument", (file_name, body)
        assert "workdir file name" in body["message"]
    assert files_outside(controller) == [] and not canary.exists()


def test_lookups_and_endpoints_with_bad_names_are_invalid_arguments(controller: Controller, tmp_path: Path) -> None:
    canary = tmp_path / "fine"
    status, body = call(controller, "LaunchJob", launch_body("/tester/fine", canary))
    assert status == 200 and body["jobId"] == "/tester/fine"  # the same raw path works for a good name
    _wait_for(canary.exists, "the well-named job to run")
    attacks = [
        ("GetJobStatus", {"jobId": "/tester/../../etc"}),
        ("TerminateJob", {"jobId": "/tester/.."}),
        ("ListTasks", {"jobId": "/tester/fine\u0000"}),
        ("GetJobState", {"jobIds": ["/tester/fine", "/tester/../fine"]}),
        ("GetTaskStatus", {"taskId": "/tester/../../0"}),
        ("GetTaskLogs", {"id": "/tester/../../../etc/passwd"}),
        ("RegisterEndpoint", {"name": "/tester/fine/../../x", "address": "127.0.0.1:1", "taskId": "/tester/fine/0"}),
        ("RegisterEndpoint", {"name": "/tester/fine/svc", "address": "127.0.0.1:1", "taskId": "/tester/../0"}),
        ("RegisterEndpoint", {"name": "svc\u0000", "address": "127.0.0.1:1", "taskId": "/tester/fine/0"}),
        ("RegisterEndpoint", {"name": "/t/" + "e" * 10_000, "address": "127.0.0.1:1", "taskId": "/tester/fine/0"}),
        ("ListEndpoints", {"prefix": "/tester", "taskIds": ["/tester/../../0"]}),
    ]
    for method, request in attacks:
        for service in (SERVICE, "/iris.cluster.EndpointService") if "Endpoint" in method else (SERVICE,):
            status, body = call(controller, method, request, service)
            assert status == 400 and body["code"] == "invalid_argument", (service, method, request, body)
    _, listed = call(controller, "ListJobs", {"query": {}})
    assert [job["jobId"] for job in listed["jobs"]] == ["/tester/fine"]
    assert files_outside(controller) == []
    status, body = call(controller, "GetJobStatus", {"jobId": "/tester/fine"})  # still serving
    assert status == 200 and body["job"]["jobId"] == "/tester/fine"


def test_a_chain_of_parent_jobs_named_dot_dot_cannot_climb_out(controller: Controller, tmp_path: Path) -> None:
    """The real attack: child jobs need a live parent, so climb one '..' per generation. Before
    names were checked, `/../../..` put its workdir in the work dir, outside the cluster's temp
    dir, and `/../../../..` put it in `outer` (worker root -> workers -> cluster dir -> work dir
    -> outer), where it stayed after the cluster stopped."""
    canary = tmp_path / "ran"
    for depth in range(2, 6):
        name = "/" + "/".join([".."] * depth)
        body = launch_body(name, canary)
        body["entrypoint"]["runCommand"]["argv"] = ["sh", "-c", f"touch {canary}; sleep 60"]
        status, answer = call(controller, "LaunchJob", body)
        assert status == 400 and answer["code"] == "invalid_argument", (name, answer)
        assert "'.' and '..' are not names" in answer["message"]
    assert files_outside(controller) == [] and not canary.exists()
