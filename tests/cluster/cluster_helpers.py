"""Shared helpers for the embedded-cluster tests: waiting on conditions, job specs, raw RPCs."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive  # noqa: E402,F401  (re-exported for the cluster tests)

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec, TaskInfo

T = TypeVar("T")

#: Generous: a loaded 2-core CI machine can be slow to fork; correctness never depends on it.
DEFAULT_TIMEOUT = 30.0


def wait_for(predicate: Callable[[], T], timeout: float = DEFAULT_TIMEOUT, interval: float = 0.01, what: str = "") -> T:
    """Poll `predicate` until it returns something truthy; return it. AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}: last value {last!r}")
        time.sleep(interval)
        last = predicate()
    return last


def sh(script: str, **kwargs: object) -> JobSpec:
    """Fields for a job running `sh -c script` (pass name=... and other JobSpec fields)."""
    kwargs.setdefault("resources", ResourceSpec(cpu_millicores=100))
    return JobSpec(entrypoint=command_entrypoint(["sh", "-c", script]), **kwargs)  # type: ignore[arg-type]


def job_name(name: str, user: str = "tester") -> JobName:
    return JobName.root(user, name)


def wait_state(client: ControllerClient, job_id: str, *states: JobState, timeout: float = DEFAULT_TIMEOUT) -> JobState:
    return wait_for(
        lambda: (s := client.job_state(job_id)) in states and s, timeout, what=f"{job_id} in {[s.name for s in states]}"
    )


def wait_finished(client: ControllerClient, job_id: str, timeout: float = DEFAULT_TIMEOUT):
    wait_for(lambda: client.job_state(job_id).finished, timeout, what=f"{job_id} to finish")
    return client.job_status(job_id)


def wait_tasks(
    client: ControllerClient, job_id: str, predicate: Callable[[list[TaskInfo]], bool], timeout: float = DEFAULT_TIMEOUT
) -> list[TaskInfo]:
    def check() -> list[TaskInfo]:
        tasks = client.list_tasks(job_id)
        return tasks if predicate(tasks) else []

    return wait_for(check, timeout, what=f"tasks of {job_id}")


def wait_file(path: str, timeout: float = DEFAULT_TIMEOUT) -> str:
    """Wait until `path` exists with content ending in a newline; return the content."""

    def read() -> str:
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            return ""
        return text if text.endswith("\n") else ""

    return wait_for(read, timeout, what=path)


def log_json(client: ControllerClient, task_or_job: str, marker: str = "ENV ") -> list[dict]:
    """JSON objects a task printed to stdout on lines starting with `marker`."""
    return [
        json.loads(line.data[len(marker) :])
        for line in client.task_logs(task_or_job)
        if line.source == "stdout" and line.data.startswith(marker)
    ]


def child_processes(pid: int | None = None) -> list[tuple[int, str]]:
    """(pid, command) of the direct children of `pid` (default: this process), zombies included."""
    parent = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent:
            found.append((int(entry), stat.split("(", 1)[1].rsplit(")", 1)[0]))
    return found


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def launch_many(client: ControllerClient, specs: Sequence[JobSpec]) -> list[str]:
    return [client.launch_job(spec) for spec in specs]
