"""A task whose process exits says how it ended, which attempt it was and where its output is.

Each retry is announced as Ray announces it; the last attempt's `WorkerCrashedError` names the
exit code or signal, the attempt and the `fray-ray logs` command. Real worker processes on an
embedded cluster.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import pytest

import fray_ray
from fray_ray.exceptions import WorkerCrashedError
from fray_ray.util.state import list_tasks

pytestmark = pytest.mark.usefixtures("cluster_session")


@fray_ray.remote(max_retries=1)
def exits_with_3() -> None:
    sys.exit(3)


@fray_ray.remote(max_retries=0)
def killed_by_sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_exit_code_attempt_and_logs_command_are_named(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fray_ray"):
        with pytest.raises(WorkerCrashedError) as raised:
            fray_ray.get(exits_with_3.remote())
    message = str(raised.value)
    assert message.startswith("The worker died unexpectedly while executing this task.")
    assert "exits_with_3 exited with code 3 (attempt 2 of 2)" in message
    assert "`fray-ray logs " in message
    announced = [r.getMessage() for r in caplog.records if "will be retried" in r.getMessage()]
    assert len(announced) == 1, announced
    assert announced[0].startswith("Task exits_with_3 failed: the process running it exited with code 3")
    assert "There are 1 retries remaining, so the task will be retried." in announced[0]
    # Each failed attempt's row says how it ended (the retried one's was learnt first: the
    # cluster is asked in order, on one thread).
    rows = list_tasks(filters=[("name", "=", "exits_with_3")], detail=True)
    messages = sorted((row.attempt_number, row.error_message or "") for row in rows)
    assert [attempt for attempt, _ in messages] == [0, 1], messages
    assert all("exited with code 3" in message for _, message in messages), messages
    assert "The task was retried." in messages[0][1]


def test_a_signal_is_named() -> None:
    with pytest.raises(WorkerCrashedError) as raised:
        fray_ray.get(killed_by_sigkill.remote())
    assert "killed_by_sigkill was killed by signal SIGKILL (attempt 1 of 1)" in str(raised.value)
