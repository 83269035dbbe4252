"""An executor's half of taking queued tasks back (`Withdraw`): a task still in its queue is
returned and never runs there; one its main thread has taken to run is kept; never both, even
when the two happen at the same moment. Unit tests of the executor alone: the driver's messages
are handed to its handlers directly, what it sends is recorded."""

from __future__ import annotations

import random
import sys
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from fray_ray._private.core.task_spec import CallArguments
from fray_ray._private.messages import CancelTask, ExecuteTask, TaskDone, Withdraw, Withdrawn
from fray_ray._private.objects.serialization import serialize
from fray_ray._private.workers import executor as executor_module
from fray_ray._private.workers.executor import Executor


def _task(task_id: bytes) -> ExecuteTask:
    return ExecuteTask(task=task_id, fn=b"f" * 8, code=None, name="queued", num_returns=1, returns=[task_id + b"r"],
                       args=CallArguments(serialize(((), {}))))


@pytest.fixture
def executor(monkeypatch: pytest.MonkeyPatch) -> tuple[Executor, list[Any]]:
    sent: list[Any] = []
    lock = threading.Lock()

    def record(connection: object, message: object, **kw: object) -> None:
        with lock:
            sent.append(message)

    monkeypatch.setattr(executor_module.messages, "notify", record)
    runner = Executor(in_process=True)
    runner.runtime = SimpleNamespace(connection=SimpleNamespace(closed=False))  # type: ignore[assignment]
    return runner, sent


def _ids(index: int) -> bytes:
    return index.to_bytes(24, "big")


def test_queued_tasks_are_returned_and_the_rest_stay(executor: tuple[Executor, list[Any]]) -> None:
    runner, sent = executor
    for index in range(4):
        runner._on_execute(None, None, _task(_ids(index)))  # type: ignore[arg-type]
    running = runner._take_next()
    assert running is not None and running.task == _ids(0)
    never_sent = _ids(99)
    runner._on_withdraw(None, None, Withdraw([_ids(0), _ids(2), never_sent]))  # type: ignore[arg-type]
    [answer] = sent
    assert isinstance(answer, Withdrawn)
    assert answer.returned == [_ids(2)]
    assert answer.kept == [_ids(0), never_sent]  # taken to run, or never here: the executor answers those itself
    assert [task.task for task in runner._queue] == [_ids(1), _ids(3)]  # the others keep their order


def test_a_returned_task_cancelled_afterwards_is_not_answered_twice(executor: tuple[Executor, list[Any]]) -> None:
    runner, sent = executor
    runner._on_execute(None, None, _task(_ids(1)))  # type: ignore[arg-type]
    runner._on_withdraw(None, None, Withdraw([_ids(1)]))  # type: ignore[arg-type]
    runner._on_cancel(None, None, CancelTask(_ids(1), False))  # type: ignore[arg-type]
    assert [type(message) for message in sent] == [Withdrawn]  # the driver ends it: no TaskDone from here
    assert not runner._queue


def test_a_task_cancelled_in_the_queue_is_kept_by_a_later_withdrawal(executor: tuple[Executor, list[Any]]) -> None:
    runner, sent = executor
    runner._on_execute(None, None, _task(_ids(1)))  # type: ignore[arg-type]
    runner._on_cancel(None, None, CancelTask(_ids(1), False))  # type: ignore[arg-type]
    runner._on_withdraw(None, None, Withdraw([_ids(1)]))  # type: ignore[arg-type]
    done, answer = sent
    assert isinstance(done, TaskDone) and done.user_error
    assert isinstance(answer, Withdrawn) and answer.returned == [] and answer.kept == [_ids(1)]


@pytest.fixture
def frequent_thread_switches() -> Any:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave at every few bytecodes, not every 5 ms
    yield
    sys.setswitchinterval(previous)


def _jitter(rng: random.Random) -> None:
    for _ in range(rng.randrange(200)):
        pass


def _race(runner: Executor, task_id: bytes, rng: random.Random) -> bool:
    """Queue `task_id`, then let the main thread's `_take_next` and the reader thread's
    `_on_withdraw` go for it at once; whether the main thread got it."""
    runner._on_execute(None, None, _task(task_id))  # type: ignore[arg-type]
    start = threading.Barrier(2)
    taken: list[ExecuteTask | None] = []
    main_pause, reader_pause = random.Random(rng.random()), random.Random(rng.random())

    def main_thread() -> None:
        start.wait()
        _jitter(main_pause)
        with runner._condition:  # re-entrant: `_take_next` takes it again, never waiting on an empty queue
            taken.append(runner._take_next() if runner._queue else None)

    def reader_thread() -> None:
        start.wait()
        _jitter(reader_pause)
        runner._on_withdraw(None, None, Withdraw([task_id]))  # type: ignore[arg-type]

    threads = [threading.Thread(target=main_thread), threading.Thread(target=reader_thread)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return taken[0] is not None and taken[0].task == task_id


def test_a_withdrawal_racing_the_main_thread_claims_each_task_once(
    executor: tuple[Executor, list[Any]], frequent_thread_switches: None
) -> None:
    """The main thread takes the next task while the reader thread handles a `Withdraw` for it:
    every time, exactly one side has it (which one varies from round to round)."""
    runner, sent = executor
    rng = random.Random(7)
    for index in range(300):
        task_id = _ids(index)
        ran = _race(runner, task_id, rng)
        answer = sent.pop()
        assert isinstance(answer, Withdrawn) and not sent
        returned = answer.returned == [task_id]
        assert ran != returned, f"round {index}: ran={ran} returned={returned}"
        assert answer.kept == ([task_id] if ran else [])
        assert not runner._queue
