"""An async actor's group loop: calls spawned together wake it once, start in order, and the
loop says how many have not begun (an answer waits for the next ones while it is not zero)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from fray_ray._private.workers.group_loops import GroupLoop

WAIT_S = 30.0


@pytest.fixture
def group() -> Iterator[GroupLoop]:
    loop = GroupLoop("test-loop", max_concurrency=100)
    yield loop
    loop.stop()
    loop._thread.join(WAIT_S)
    assert not loop._thread.is_alive()
    loop.loop.close()


def _block(group: GroupLoop) -> threading.Event:
    """Keep the loop's thread busy until the returned event is set."""
    release, busy = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        release.wait(WAIT_S)

    group.call(hold)
    assert busy.wait(WAIT_S)
    return release


def test_calls_spawned_together_wake_the_loop_once_and_start_in_order(group: GroupLoop) -> None:
    wakes = 0
    wake = group.loop.call_soon_threadsafe

    def counting_wake(*args: object) -> object:
        nonlocal wakes
        wakes += 1
        return wake(*args)  # type: ignore[arg-type]

    release = _block(group)
    group.loop.call_soon_threadsafe = counting_wake  # type: ignore[method-assign]
    started: list[int] = []
    seen_backlog: list[int] = []
    all_ran = threading.Event()

    def make(number: int):  # type: ignore[no-untyped-def]
        async def call() -> None:
            started.append(number)
            seen_backlog.append(group.backlog())
            if len(started) == 10:
                all_ran.set()
        return call

    for number in range(10):
        group.spawn(make(number))
    assert group.backlog() == 10  # none has begun: the loop is busy
    release.set()
    assert all_ran.wait(WAIT_S)
    assert started == list(range(10))
    assert wakes == 1
    assert seen_backlog == list(range(9, -1, -1))  # each saw the calls still behind it
    assert group.backlog() == 0


def test_a_call_spawned_after_the_loop_took_the_others_wakes_it_again(group: GroupLoop) -> None:
    ran = threading.Event()
    done: list[str] = []

    async def first() -> None:
        done.append("first")
        ran.set()

    group.spawn(first)
    assert ran.wait(WAIT_S)
    again = threading.Event()

    async def second() -> None:
        done.append("second")
        again.set()

    group.spawn(second)  # the loop emptied its list: nothing would wake it for this one otherwise
    assert again.wait(WAIT_S)
    assert done == ["first", "second"] and group.backlog() == 0
