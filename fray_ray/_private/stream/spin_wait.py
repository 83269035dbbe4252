"""Waiting for a frame by looking for it briefly before falling asleep.

A thread that sends a request and sleeps in `poll` until the answer comes pays for falling
asleep and for being woken on another CPU. On the 2-core virtual machines fray_ray is measured
on, that costs about 80 µs of a 90 µs loopback round trip: more than the Python on both sides
of a synchronous call. So a lending thread (`read_lending.py`: a driver thread waiting for the
answer of its call, a synchronous actor's call thread waiting for its next call, an executor
waiting for its next task) first polls without blocking for up to a budget, yielding its CPU
between looks, and sleeps only if nothing came. (Executors slept at once until 2026-12-08, for
fear that between the tasks of a batch their spin took CPU from the driver handing them out;
measured again, 1000-task batches ran 0 to 4% slower, within the noise, and synchronous tasks
25% faster.)

The spin is adaptive: after a wait that outlasted the budget, the next wait sleeps at once, so
a thread whose frames come seldom costs nothing; a wait that ended within the budget turns
spinning back on. A wait is what its thread waits for, not each frame: a driver thread that
waits for a long task's result reads the other frames of that worker's connection meanwhile
(the tasks it submits, its `get`s), and looks for them without sleeping only in the first
budget of its wait (`since`), not for ever because each came soon after the one before. A
spin also stops once the machine has had more runnable threads than CPUs for 50 µs
(`CROWDED_GRACE_S`; the running count of `/proc/loadavg`, about 1 µs to read, looked at between
polls): it would take CPU from a thread that works, perhaps the one that sends the awaited
frame. A briefer crowd is often the thread that brings the frame. Nothing spins
where the process may use only one CPU, nor in a session whose workers are threads of the
driver (`local_mode`): between its looks a spinning thread takes back the GIL that the thread
it waits for needs. `FRAY_RAY_SPIN_WAIT_US` sets the budget in microseconds (0 turns spinning
off); the driver passes its setting on to its workers.

An async actor's event loop waits the same way (`SpinningSelector`): each call reaches it from
the connection's reader thread, which wakes the loop through its self-pipe, and that wake-up
on another CPU cost a synchronous call to an async actor about a quarter of its time.
"""

from __future__ import annotations

import logging
import os
import selectors
import time
from collections.abc import Callable
from typing import Any, TypeVar

#: The environment variable that sets the budget, in microseconds.
SPIN_ENV = "FRAY_RAY_SPIN_WAIT_US"
#: The budget when the variable is not set: longer than a synchronous call's work on either side.
DEFAULT_SPIN_US = 200
#: How long a spin goes on while the machine has more runnable threads than CPUs. Often the
#: extra thread is the one that brings the frame: the connection's reader thread, woken by
#: it, hands a call to the event loop that spins for it within some 20-40 µs here. Stopping at
#: once put the loop to sleep just before each call came (async-actor calls about 25% slower).
CROWDED_GRACE_S = 50e-6

logger = logging.getLogger(__name__)

Ready = TypeVar("Ready")

_workers_are_threads = False  # set by the driver of a session whose workers run in its process


def workers_are_threads_here(flag: bool) -> None:
    """Whether this process's session runs its workers as threads of it (then nothing spins)."""
    global _workers_are_threads
    _workers_are_threads = flag


def spin_budget() -> float:
    """The spin budget of this process, in seconds (0 when spinning is off)."""
    text = os.environ.get(SPIN_ENV, "").strip()
    micros: float = DEFAULT_SPIN_US
    if text:
        try:
            micros = float(text)
        except ValueError:
            micros = -1
        if not 0 <= micros < 1e6:
            logger.warning("%s=%r is not a number of microseconds below 1000000; using %d",
                           SPIN_ENV, text, DEFAULT_SPIN_US)
            micros = DEFAULT_SPIN_US
    if micros and (_workers_are_threads or len(os.sched_getaffinity(0)) < 2):
        return 0.0
    return micros / 1e6


_loadavg_fd: int | None = None


def machine_has_spare_cpu(cpus: int) -> bool:
    """Whether no more threads are runnable on this machine than `cpus` (the caller counts as
    one); True where `/proc/loadavg` cannot be read."""
    global _loadavg_fd
    try:
        if _loadavg_fd is None:
            _loadavg_fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        running = int(os.pread(_loadavg_fd, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running <= cpus


def look_until(look: Callable[[], Ready], until: float, cpus: int) -> Ready:
    """Call `look()` until it finds something, `until` (a `perf_counter` time) passes, or the
    machine has had no CPU to spare for `CROWDED_GRACE_S`; returns what the last look found."""
    crowded_since: float | None = None
    while True:
        ready = look()
        now = time.perf_counter()
        if ready or now >= until:
            return ready
        if machine_has_spare_cpu(cpus):
            crowded_since = None
        elif crowded_since is None:
            crowded_since = now
        elif now - crowded_since >= CROWDED_GRACE_S:
            return ready  # another thread needs this CPU: sleep, let it run
        os.sched_yield()


class ShortWaits:
    """The rule every spinning wait follows: while its recent waits were short, look without
    blocking for up to the budget before sleeping; a wait longer than the budget turns the
    looking off until a short one."""

    def __init__(self, budget_s: float, cpus: int | None = None) -> None:
        self.budget_s = budget_s
        self._cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
        self._last_wait_short = True

    def wait(self, look: Callable[[], Ready], block: Callable[[float | None], Ready], timeout_s: float | None,
             since: float | None = None) -> Ready:
        """What `look()` finds, or else what `block(seconds left)` returns once `timeout_s`
        seconds passed (None: no limit). `since`: when the wait this is part of began (a
        `perf_counter` time; None: now): the looking ends a budget after it."""
        started = time.perf_counter()
        budget = self.budget_s
        began = started if since is None else since
        spin_end = began + budget if timeout_s is None else min(began + budget, started + timeout_s)
        left = timeout_s
        if budget and self._last_wait_short and timeout_s != 0 and spin_end > started:
            ready = look_until(look, spin_end, self._cpus)
            if ready:
                return ready
            if timeout_s is not None:
                left = max(0.0, timeout_s - (time.perf_counter() - started))
        ready = block(left)
        if budget:
            self._last_wait_short = time.perf_counter() - began <= budget
        return ready


class SpinningPoll:
    """A `select.poll` whose `poll(timeout)` first looks without blocking while recent waits
    were short. For one waiting thread at a time (the connection's lender)."""

    def __init__(self, poller: Any, budget_s: float, cpus: int | None = None) -> None:
        self._poller = poller
        self._waits = ShortWaits(budget_s, cpus)

    @property
    def budget_s(self) -> float:
        return self._waits.budget_s

    def ready_now(self) -> bool:
        """Whether anything is ready, without waiting."""
        return bool(self._poller.poll(0))

    def poll(self, timeout_s: float | None, since: float | None = None) -> list[tuple[int, int]]:
        """The ready (fd, events) pairs, or [] once `timeout_s` seconds passed (None: no
        limit); `since`: as `ShortWaits.wait`'s."""
        poll = self._poller.poll
        return self._waits.wait(  # type: ignore[no-any-return]
            lambda: poll(0), lambda left: poll(None if left is None else left * 1000), timeout_s, since)


class SpinningSelector(selectors.DefaultSelector):
    """The selector of an async actor's event loop: while the loop's recent waits were short,
    it looks for events without blocking for up to the budget before it sleeps."""

    def __init__(self, budget_s: float | None = None, cpus: int | None = None) -> None:
        super().__init__()
        self._waits = ShortWaits(spin_budget() if budget_s is None else budget_s, cpus)

    @property
    def budget_s(self) -> float:
        return self._waits.budget_s

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        select = super().select
        if not self.budget_s or (timeout is not None and timeout <= 0):
            return select(timeout)  # a loop with work to do: no wait, and no change to the rule
        return self._waits.wait(lambda: select(0), select, timeout)
