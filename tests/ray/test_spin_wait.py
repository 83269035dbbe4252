"""A lending thread looks for its next frame for a while before it sleeps (`spin_wait.py`):
only while its waits have been short and the machine has a CPU to spare, never longer than its
timeout, not at all when turned off, on one CPU or with workers that are threads of the driver;
and workers get the driver's setting. An async actor's event loop waits the same way
(`SpinningSelector`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import select
import selectors
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pytest

import fray_ray
from fray_ray._private.stream import spin_wait
from fray_ray._private.stream.spin_wait import SPIN_ENV, SpinningPoll, SpinningSelector, spin_budget

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BUDGET_S = 0.002
IDLE_MACHINE = 10**6  # CPUs to tell SpinningPoll of: more than threads could ever be runnable


class _RecordingPoller:
    """A real `select.poll` that notes the timeout (ms) of every call."""

    def __init__(self, sock: socket.socket) -> None:
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)
        self.timeouts: list[float | None] = []

    def poll(self, timeout_ms: float | None = None) -> list[tuple[int, int]]:
        self.timeouts.append(timeout_ms)
        return self._poller.poll(timeout_ms)

    def spins(self) -> int:
        return sum(1 for t in self.timeouts if t == 0)


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_frame_already_there_is_seen_at_once(sockets: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = sockets
    poller = _RecordingPoller(ours)
    theirs.send(b"x")
    ready = SpinningPoll(poller, BUDGET_S, IDLE_MACHINE).poll(None)
    assert [fd for fd, _ in ready] == [ours.fileno()]
    assert poller.timeouts == [0]  # one look, no sleep


def test_a_wait_longer_than_the_budget_turns_spinning_off_until_a_short_one(
    sockets: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = sockets
    poller = _RecordingPoller(ours)
    waiting = SpinningPoll(poller, BUDGET_S, IDLE_MACHINE)
    started = time.monotonic()
    assert waiting.poll(0.05) == []  # nothing came: it looked, then slept out the rest
    assert time.monotonic() - started >= 0.05
    assert poller.spins() > 0 and poller.timeouts[-1] > 0

    poller.timeouts.clear()
    theirs.send(b"x")
    assert waiting.poll(1.0)  # after a long wait it sleeps at once (and this one was short)
    assert poller.timeouts and poller.timeouts[0] > 0 and poller.spins() == 0
    ours.recv(16)

    poller.timeouts.clear()
    theirs.send(b"y")
    assert waiting.poll(1.0)
    assert poller.timeouts == [0]  # the short wait turned spinning back on


def test_a_wait_that_began_a_budget_ago_sleeps_at_once_however_soon_its_frames_come(
    sockets: tuple[socket.socket, socket.socket],
) -> None:
    # A driver thread waiting for a long task's result reads the other frames of its connection
    # as they come: each comes soon after the last, but the wait itself is long.
    ours, theirs = sockets
    poller = _RecordingPoller(ours)
    waiting = SpinningPoll(poller, 0.5, IDLE_MACHINE)  # a budget no loaded machine outlasts by accident
    theirs.send(b"x")
    assert waiting.poll(1.0, since=time.perf_counter())  # within the budget of its wait: it looks first
    assert poller.timeouts == [0]
    ours.recv(16)

    poller.timeouts.clear()
    theirs.send(b"y")
    assert waiting.poll(1.0, since=time.perf_counter() - 10.0)  # a wait long past its budget: no look
    assert poller.spins() == 0 and poller.timeouts and poller.timeouts[0] > 0
    ours.recv(16)

    poller.timeouts.clear()
    theirs.send(b"z")
    assert waiting.poll(1.0)  # the next wait sleeps at once: the last one was long
    assert poller.spins() == 0
    ours.recv(16)

    poller.timeouts.clear()
    theirs.send(b"w")
    assert waiting.poll(1.0)  # ...and a short one turns looking back on
    assert poller.timeouts == [0]


def test_the_spin_never_outlasts_the_timeout(sockets: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = sockets
    poller = _RecordingPoller(ours)
    started = time.monotonic()
    assert SpinningPoll(poller, 10.0, IDLE_MACHINE).poll(0.02) == []
    assert time.monotonic() - started < 5.0  # the 10 s budget was cut to the 20 ms timeout


def test_a_zero_timeout_looks_once(sockets: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = sockets
    poller = _RecordingPoller(ours)
    assert SpinningPoll(poller, BUDGET_S, IDLE_MACHINE).poll(0) == []
    assert poller.timeouts == [0]


def test_without_a_budget_it_only_sleeps(sockets: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = sockets
    poller = _RecordingPoller(ours)
    theirs.send(b"x")
    assert SpinningPoll(poller, 0.0, IDLE_MACHINE).poll(1.0)
    assert poller.spins() == 0


def test_a_machine_without_a_spare_cpu_is_spun_on_only_for_the_grace(
    sockets: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours, _ = sockets
    poller = _RecordingPoller(ours)
    waiting = SpinningPoll(poller, 1.0, cpus=0)  # the caller alone is more runnable threads than that
    monkeypatch.setattr(spin_wait, "CROWDED_GRACE_S", 0.0)
    started = time.monotonic()
    assert waiting.poll(0.05) == []
    assert poller.spins() == 2  # a look, one more once the machine was seen crowded, then it slept
    assert time.monotonic() - started < 0.9

    poller.timeouts.clear()
    monkeypatch.setattr(spin_wait, "CROWDED_GRACE_S", 0.2)
    started = time.monotonic()
    assert waiting.poll(0.5) == []  # crowded throughout: it looks for the grace, then sleeps
    assert poller.spins() > 2 and poller.timeouts[-1] > 0
    assert time.monotonic() - started < 0.9


def test_a_brief_crowd_does_not_end_the_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    # The thread that brings the frame (a reader handing a call to an event loop) is runnable
    # for a moment: the spin goes on through it.
    crowded = iter([False, False, True, True])
    monkeypatch.setattr(spin_wait, "machine_has_spare_cpu", lambda cpus: next(crowded, True))
    monkeypatch.setattr(spin_wait, "CROWDED_GRACE_S", 10.0)  # however slowly this machine runs the test
    looks = 0

    def look() -> bool:
        nonlocal looks
        looks += 1
        return looks == 5

    assert spin_wait.look_until(look, time.perf_counter() + 10.0, cpus=2)
    assert looks == 5


def test_the_running_count_is_read_from_the_machine() -> None:
    assert spin_wait.machine_has_spare_cpu(IDLE_MACHINE)
    assert not spin_wait.machine_has_spare_cpu(0)  # this thread runs while it asks


# ---- an event loop's selector -----------------------------------------------------------------


@pytest.fixture
def selector_timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The timeout of every select the SpinningSelector makes of the real selector under it."""
    timeouts: list[float | None] = []
    underlying = SpinningSelector.__mro__[1]
    real_select = underlying.select

    def recording_select(self: selectors.BaseSelector, timeout: float | None = None) -> Any:
        timeouts.append(timeout)
        return real_select(self, timeout)

    monkeypatch.setattr(underlying, "select", recording_select)
    return timeouts


def test_the_selector_sees_an_event_already_there_at_once(
    sockets: tuple[socket.socket, socket.socket], selector_timeouts: list[float | None]
) -> None:
    ours, theirs = sockets
    with SpinningSelector(BUDGET_S, IDLE_MACHINE) as selector:
        selector.register(ours, selectors.EVENT_READ)
        theirs.send(b"x")
        assert [key.fileobj for key, _ in selector.select(None)] == [ours]
    assert selector_timeouts == [0]  # one look, no sleep


def test_the_selector_sleeps_at_once_after_a_long_wait_until_a_short_one(
    sockets: tuple[socket.socket, socket.socket], selector_timeouts: list[float | None]
) -> None:
    ours, theirs = sockets
    with SpinningSelector(BUDGET_S, IDLE_MACHINE) as selector:
        selector.register(ours, selectors.EVENT_READ)
        started = time.monotonic()
        assert selector.select(0.05) == []  # it looked, then slept out the rest of its timeout
        assert time.monotonic() - started >= 0.05
        assert selector_timeouts[0] == 0 and selector_timeouts[-1] is not None and selector_timeouts[-1] > 0

        selector_timeouts.clear()
        theirs.send(b"x")
        assert selector.select(1.0)
        assert selector_timeouts == [1.0]  # asleep at once, and this wait was short
        ours.recv(16)

        selector_timeouts.clear()
        theirs.send(b"y")
        assert selector.select(1.0)
        assert selector_timeouts == [0]


def test_the_selector_without_a_budget_and_with_a_zero_timeout_never_spins(
    sockets: tuple[socket.socket, socket.socket], selector_timeouts: list[float | None]
) -> None:
    ours, theirs = sockets
    with SpinningSelector(0.0, IDLE_MACHINE) as selector:
        selector.register(ours, selectors.EVENT_READ)
        theirs.send(b"x")
        assert selector.select(1.0)
    with SpinningSelector(10.0, IDLE_MACHINE) as selector:
        selector.register(ours, selectors.EVENT_READ)
        ours.recv(16)
        assert selector.select(0) == []
    assert selector_timeouts == [1.0, 0]


def test_an_event_loop_on_the_selector_runs_callbacks_from_other_threads_and_timers() -> None:
    loop = asyncio.SelectorEventLoop(SpinningSelector(BUDGET_S, IDLE_MACHINE))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        for index in range(20):  # some within the spin, the first after a sleep
            done: concurrent.futures.Future[int] = concurrent.futures.Future()
            loop.call_soon_threadsafe(done.set_result, index)
            assert done.result(timeout=30) == index

        async def after_a_timer() -> str:
            await asyncio.sleep(0.01)
            return "timer"

        assert asyncio.run_coroutine_threadsafe(after_a_timer(), loop).result(timeout=30) == "timer"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


# ---- the setting -----------------------------------------------------------------------------


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(spin_wait, "_workers_are_threads", False)


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, two_cpus: None) -> None:
    monkeypatch.delenv(SPIN_ENV, raising=False)
    assert spin_budget() == spin_wait.DEFAULT_SPIN_US / 1e6
    monkeypatch.setenv(SPIN_ENV, "50")
    assert spin_budget() == pytest.approx(50e-6)
    monkeypatch.setenv(SPIN_ENV, "0")
    assert spin_budget() == 0.0


@pytest.mark.parametrize("value", ["soon", "-5", "1e9", "nan"])
def test_a_bad_setting_warns_and_keeps_the_default(
    monkeypatch: pytest.MonkeyPatch, two_cpus: None, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    monkeypatch.setenv(SPIN_ENV, value)
    with caplog.at_level(logging.WARNING, logger="fray_ray._private.stream.spin_wait"):
        assert spin_budget() == spin_wait.DEFAULT_SPIN_US / 1e6
    assert SPIN_ENV in caplog.text and repr(value) in caplog.text


def test_one_cpu_turns_spinning_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPIN_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert spin_budget() == 0.0


def test_workers_that_are_threads_of_the_driver_turn_it_off(two_cpus: None, fresh_shutdown: None) -> None:
    fray_ray.init(local_mode=True, num_cpus=1)
    assert spin_budget() == 0.0
    fray_ray.shutdown()
    assert spin_budget() > 0  # until the next local-mode session


def _worker_spin_setting() -> dict[str, Any]:
    from fray_ray._private.core import runtime_state

    connection = runtime_state.current().connection
    poll = getattr(connection._raw, "_poll", None)  # made when the worker first waited on its session
    return {"env": os.environ.get(SPIN_ENV), "budget": None if poll is None else poll.budget_s,
            "cpus": len(os.sched_getaffinity(0))}


def test_workers_take_the_drivers_setting(monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> None:
    monkeypatch.setenv(SPIN_ENV, "0")
    fray_ray.init(num_cpus=1)
    setting = fray_ray.get(fray_ray.remote(_worker_spin_setting).remote(), timeout=120)
    assert {key: setting[key] for key in ("env", "budget")} == {"env": "0", "budget": 0.0}


@fray_ray.remote
class _SyncActor:
    def spin_setting(self) -> dict[str, Any]:
        return _worker_spin_setting()


def test_a_sync_actor_and_an_executor_both_look_for_their_next_call_before_they_sleep(
        monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> None:
    monkeypatch.delenv(SPIN_ENV, raising=False)
    fray_ray.init(num_cpus=1)
    executor = fray_ray.get(fray_ray.remote(_worker_spin_setting).remote(), timeout=120)
    actor = fray_ray.get(_SyncActor.remote().spin_setting.remote(), timeout=120)
    expected = spin_wait.DEFAULT_SPIN_US / 1e6 if executor["cpus"] >= 2 else 0.0  # one CPU: nothing spins
    assert executor["budget"] == actor["budget"] == expected


@fray_ray.remote
class _AsyncActor:
    async def loop_spin_budget(self) -> float:
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        return selector.budget_s if isinstance(selector, SpinningSelector) else -1.0


def test_an_async_actors_loop_spins_with_the_drivers_setting(monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> None:
    monkeypatch.setenv(SPIN_ENV, "150")
    fray_ray.init(num_cpus=1)
    actor = _AsyncActor.remote()
    assert fray_ray.get(actor.loop_spin_budget.remote(), timeout=120) == pytest.approx(150e-6)
