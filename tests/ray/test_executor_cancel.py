"""An executor honours a cancel that reaches it before its task starts: one that overtakes the
task (a task sent in a scheduling round's batch frame leaves after the round, `ray.cancel`'s
message at once) and one that comes while the task is between the queue and running.
Unit tests of the executor alone: the driver's messages are handed to its handlers directly."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import fray_ray.exceptions as exceptions
from fray_ray._private.core.task_spec import CallArguments
from fray_ray._private.messages import CancelTask, ExecuteTask, TaskDone
from fray_ray._private.objects.serialization import deserialize, serialize
from fray_ray._private.workers import executor as executor_module
from fray_ray._private.workers.executor import Executor


def _task(task_id: bytes) -> ExecuteTask:
    return ExecuteTask(task=task_id, fn=b"f" * 8, code=None, name="sleeper", num_returns=1, returns=[task_id + b"r"],
                       args=CallArguments(serialize(((), {}))))


@pytest.fixture
def executor(monkeypatch: pytest.MonkeyPatch) -> tuple[Executor, list[Any]]:
    sent: list[Any] = []
    monkeypatch.setattr(executor_module.messages, "notify", lambda connection, message, **kw: sent.append(message))
    executor = Executor(in_process=True)
    executor.runtime = SimpleNamespace(connection=object())  # type: ignore[assignment]
    return executor, sent


def test_a_cancel_that_overtakes_its_task_cancels_it_on_arrival(executor: tuple[Executor, list[Any]]) -> None:
    runner, sent = executor
    task_id = b"t" * 24
    runner._on_cancel(None, None, CancelTask(task_id, False))  # type: ignore[arg-type]
    assert sent == []  # nothing to answer yet
    runner._on_execute(None, None, _task(task_id))  # type: ignore[arg-type]
    assert not runner._queue  # never queued, so it never runs
    [done] = sent
    assert isinstance(done, TaskDone) and done.task == task_id and done.user_error
    with pytest.raises(exceptions.TaskCancelledError):
        raise deserialize(done.results[0])


def test_a_cancel_between_the_queue_and_the_start_stops_the_task(executor: tuple[Executor, list[Any]]) -> None:
    runner, _ = executor
    task_id = b"u" * 24
    runner._on_cancel(None, None, CancelTask(task_id, False))  # type: ignore[arg-type]
    task_id_done, results, error, count, generator_failed = runner._run(_task(task_id))  # taken from the queue: not started
    assert task_id_done == task_id and results is None and count == 1 and not generator_failed
    assert isinstance(error, exceptions.TaskCancelledError)


def test_other_tasks_are_untouched_and_old_cancels_are_forgotten(executor: tuple[Executor, list[Any]]) -> None:
    runner, sent = executor
    for index in range(executor_module._CANCELLED_EARLY_KEPT + 10):
        runner._on_cancel(None, None, CancelTask(index.to_bytes(24, "big"), False))  # type: ignore[arg-type]
    assert len(runner._cancelled_early) == executor_module._CANCELLED_EARLY_KEPT
    runner._on_execute(None, None, _task(b"v" * 24))  # type: ignore[arg-type]
    assert len(runner._queue) == 1 and sent == []
