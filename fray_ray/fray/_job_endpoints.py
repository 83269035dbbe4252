"""Registering an endpoint on behalf of a job: under the job's first task, once it is placed.

Iris ties every endpoint to a live task attempt, so only a task can register one. A process
that owns a job without being its task (a driver and the session job it launched) registers
under that job's first task and its current attempt; inside the task itself, the task's own
identity is used. The registration lives as long as that attempt does: the endpoint goes when
the job ends. ControllerService registrations get the controller's long default lease, so
there is nothing to renew.
"""

from __future__ import annotations

import time

from fray_ray.iris.controller_client import Backoff, ControllerClient
from fray_ray.iris.errors import FailedPrecondition, NotFound
from fray_ray.iris.job_info import get_job_info
from fray_ray.iris.names import JobName


def register_for_job(controller: ControllerClient, job_id: str, name: str, address: str, *, timeout: float) -> str:
    """Register `<job_id>/<name>` → `address`; returns the endpoint id. Blocks until the job's
    first task has an attempt (at most `timeout` seconds): TimeoutError if it never gets one,
    FailedPrecondition if the job ends first, the controller's errors otherwise."""
    full_name = f"{JobName.from_wire(job_id).wire}/{name}"
    info = get_job_info()
    if info is not None and info.job_id.wire == job_id:
        return controller.register_endpoint(
            full_name, address, task_id=info.task_attempt.task.wire, attempt_id=info.attempt_id
        )
    deadline = time.monotonic() + timeout
    backoff = Backoff(initial=0.02, maximum=0.5)
    while True:
        try:
            tasks = controller.list_tasks(job_id)
        except NotFound:
            tasks = []  # launched a moment ago elsewhere; look again
        first = tasks[0] if tasks else None
        if first is not None and first.state.finished:
            raise FailedPrecondition(f"job {job_id} ended ({first.state.name}) before {full_name} was registered")
        if first is not None and first.state.active:
            try:
                return controller.register_endpoint(
                    full_name, address, task_id=first.task_id, attempt_id=first.current_attempt_id
                )
            except FailedPrecondition:
                pass  # the attempt moved on meanwhile: read it again
        if time.monotonic() >= deadline:
            raise TimeoutError(f"job {job_id} had no running task within {timeout:g} s to register {full_name}")
        time.sleep(min(backoff.next_delay(), max(deadline - time.monotonic(), 0.0)))
