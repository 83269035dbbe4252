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
import signal
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


#: "exit code 3", "exit code -9": how the cluster reports a process's end.
_EXIT_CODE = re.compile(r"exit code (-?\d+)")


#: "killed by signal SIGKILL": the cluster's words for a signal's end.
_SIGNAL = re.compile(r"killed by signal (\w+)")


def how_it_ended(exit_text: str) -> str:
    """'exited with code 3', 'was killed by signal SIGKILL', or the cluster's first line."""
    by_signal = _SIGNAL.search(exit_text)
    if by_signal is not None:
        return f"was killed by signal {by_signal.group(1)}"
    found = _EXIT_CODE.search(exit_text)
    if found is None:
        return exit_text.strip().splitlines()[0] if exit_text.strip() else "ended"
    code = int(found.group(1))
    if code < 0 or code > 128:
        number = -code if code < 0 else code - 128
        try:
            return f"was killed by signal {signal.Signals(number).name}"
        except ValueError:
            return f"was killed by signal {number}"
    return f"exited with code {code}"


def logs_hint(job_id: str | None) -> str:
    """The command that shows a worker's output, while its cluster runs."""
    return f"`fray-ray logs {job_id}` shows its output" if job_id else "the cluster's logs hold its output"


def worker_death_error(
    task_name: str, attempt: int, attempts: int, exit_text: str, job_id: str | None = None
) -> BaseException:
    """OutOfMemoryError when the cluster says the process was OOM-killed, else WorkerCrashedError."""
    where = f"(attempt {attempt} of {attempts})"
    if is_oom_kill(exit_text):
        detail = next((line for line in exit_text.splitlines() if is_oom_kill(line)), exit_text).strip()
        return OutOfMemoryError(
            f"Task {task_name} was killed because its worker ran out of memory {where}. The cluster "
            f"reported: {detail}. Ask for more with .options(memory=...) or use less memory in the task."
        )
    known = _EXIT_CODE.search(exit_text) or _SIGNAL.search(exit_text)
    reported = "" if known else f" The cluster reported: {exit_text.strip()}"
    return WorkerCrashedError(
        f"The process running task {task_name} {how_it_ended(exit_text)} {where}; {logs_hint(job_id)}.{reported}"
    )


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
            text = self._read_and_end(job)
            on_error(worker_death_error(task_name, attempt, attempts, text or "the cluster gave no exit report",
                                        _job_id(job)))

        try:
            self._pool.submit(read)
        except RuntimeError:  # shutting down
            on_error(worker_death_error(task_name, attempt, attempts, "the session is shutting down"))

    def announce_retry(
        self, job: Any, task_name: str, failures: int, max_retries: int, on_error: Callable[[BaseException], None]
    ) -> None:
        """Say, as Ray does, that a task's worker died and the task runs again, with how the
        process ended once the cluster has said (on this object's thread); `on_error` gets the
        attempt's error (the `failures`-th) for the task's history."""

        def read() -> None:
            text = self._read_and_end(job)
            left = "infinite" if max_retries < 0 else str(max_retries - failures + 1)
            ended = how_it_ended(text) if text else "ended"
            logger.warning(
                "Task %s failed: the process running it %s; %s. There are %s retries remaining, so the task "
                "will be retried.", task_name, ended, logs_hint(_job_id(job)), left,
            )
            on_error(WorkerCrashedError(
                f"The process running task {task_name} {ended} (attempt {failures}); {logs_hint(_job_id(job))}. "
                "The task was retried."
            ))

        try:
            self._pool.submit(read)
        except RuntimeError:  # shutting down: nothing runs again
            pass

    def _read_and_end(self, job: Any) -> str:
        """How `job`'s process ended ("" if unknown); then `job` is terminated."""
        if job is None:
            return ""
        text = ""
        try:
            text = self._exit_text(job)
        except Exception:  # noqa: BLE001 - a lost controller just means no detail
            logger.debug("reading how %r ended failed", job, exc_info=True)
        self._terminate(job)
        return text

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


def _job_id(job: Any) -> str | None:
    job_id = getattr(job, "job_id", None)
    return job_id if isinstance(job_id, str) and job_id else None
