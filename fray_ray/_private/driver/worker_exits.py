"""Why a worker process died: asked of the cluster after its connection closed.

A dropped connection says only that the process is gone. The cluster knows more: the
attempt's exit code and error text, which say "OOM killed" when the kernel's OOM killer ended
it (the embedded cluster reads the attempt's memory cgroup; Iris's workers read their
container's OOM flag). So before a task's last attempt is failed, its job is asked, for a few
seconds at most, how its process ended; an OOM kill becomes Ray's `OutOfMemoryError` naming
the task and the memory the cluster says it held, anything else `WorkerCrashedError`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from fray_ray.exceptions import OutOfMemoryError, WorkerCrashedError
from fray_ray.fray import JobStatus

logger = logging.getLogger(__name__)

#: "OOM killed", "OOMKilled", "oom-kill": how clusters say the kernel's OOM killer ended a process.
_OOM_PATTERN = re.compile(r"\boom[ _-]?kill", re.IGNORECASE)
#: How long to wait for the cluster to record the exit.
EXIT_WAIT_S = 10.0


def is_oom_kill(exit_text: str) -> bool:
    return bool(_OOM_PATTERN.search(exit_text))


def worker_death_error(task_name: str, attempt: int, attempts: int, exit_text: str) -> BaseException:
    """OutOfMemoryError when the cluster says the process was OOM-killed, else WorkerCrashedError."""
    where = f"(attempt {attempt} of {attempts})"
    if is_oom_kill(exit_text):
        detail = next((line for line in exit_text.splitlines() if is_oom_kill(line)), exit_text).strip()
        return OutOfMemoryError(
            f"Task {task_name} was killed because its worker ran out of memory {where}. The cluster "
            f"reported: {detail}. Ask for more with .options(memory=...) or use less memory in the task."
        )
    return WorkerCrashedError(f"The worker running task {task_name} died unexpectedly {where}: {exit_text}")


class ExitReports:
    """Asks the cluster how workers' processes ended, on a thread of its own."""

    def __init__(self, terminate: Callable[[Any], None], *, wait_s: float = EXIT_WAIT_S) -> None:
        self._terminate = terminate
        self._wait_s = wait_s
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="exit-reports")

    def explain(
        self, job: Any, task_name: str, attempt: int, attempts: int, on_error: Callable[[BaseException], None]
    ) -> None:
        """Once `job` (the dead worker's; None if unknown) has ended, terminate it and call
        `on_error` with the task's OutOfMemoryError or WorkerCrashedError."""

        def read() -> None:
            text = ""
            if job is not None:
                try:
                    text = self._exit_text(job)
                except Exception:  # noqa: BLE001 - a lost controller just means no detail
                    logger.debug("reading how %r ended failed", job, exc_info=True)
                self._terminate(job)
            on_error(worker_death_error(task_name, attempt, attempts, text or "the cluster gave no exit report"))

        try:
            self._pool.submit(read)
        except RuntimeError:  # shutting down
            on_error(worker_death_error(task_name, attempt, attempts, "the session is shutting down"))

    def _exit_text(self, job: Any) -> str:
        describe = getattr(job, "error", None)
        if describe is None:
            return ""  # in-process jobs (LocalClient) have no process to lose
        deadline = time.monotonic() + self._wait_s
        delay = 0.02
        while not JobStatus.finished(job.status()) and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        return describe()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
