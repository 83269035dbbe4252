"""Who reads a connection: its own reader thread, or a worker thread that would otherwise wait.

A worker's thread that runs tasks or calls spends its idle time waiting for the next one, and
the connection's reader thread hands each one over: a wake-up and a round of the GIL per call,
about a quarter of a synchronous call's time. So the worker thread may read the connection
itself while it waits (`serve_until`): a frame it reads is dispatched on it, and a task or call
that frame brings runs on it next, with no hand-off at all.

While the worker thread runs that work nobody reads, which must not last: replies to the
work's own requests, `Die` and cancellations arrive on the same connection. The reader thread
(here the *standby*) looks every `LENDER_AWAY_S` while the worker is away and takes over
reading once the same piece of work has run that long; a request sent from the worker thread
while it is away (the work is about to wait for the answer) hands over at once. An idle worker
costs no wake-ups: the standby parks after `_PARK_AFTER_CHECKS` looks that found the worker
reading, and the worker wakes it when it next goes away. When the worker wants to read again
while the standby reads, the standby hands the connection back after its next frame.

The worker thread waits in `poll` on the socket and a wake-up socket pair, so an event from
elsewhere (a call from another driver, a shutdown) reaches it through `wake_lender()`; it only
waits there at a frame boundary with nothing buffered, so waking it never splits a frame. While
its waits are short it looks for a while before it sleeps (`spin_wait.py`).

A driver thread lends itself the same way for as long as a `get` waits for the answer of a
call it sent alone (`read_hints` names the connection), with a timeout. One thread serves a
connection at a time: `serve_until` answers False to another, which waits its own way. On the
main thread, Ctrl-C is held back while a frame is read and dispatched (`_DeferredInterrupts`),
so an interrupted `get` leaves the stream whole.
"""

from __future__ import annotations

import _signal
import io
import select
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from fray_ray._private.stream.spin_wait import SpinningPoll, spin_budget

#: How long the worker thread may be away (running work) before the standby reads in its place.
LENDER_AWAY_S = 0.005
#: Looks in a row that found the worker reading before the standby parks until woken.
_PARK_AFTER_CHECKS = 4


class Woken(Exception):
    """The lending thread was woken (`wake_lender`), or its time ran out, while it waited for a frame."""


class LendableSocket(io.RawIOBase):
    """A socket's read side for a `BufferedReader`; while `interruptible`, a read first waits in
    `poll` for the socket or the wake-up pair and raises `Woken` if the wake-up came."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.interruptible = False
        self.poll_timeout: float | None = None  # seconds an interruptible read may wait
        self.waiting_since: float | None = None  # when the lender's wait began (`spin_wait.ShortWaits`)
        self.only_ready = False  # a read returns what has arrived, without waiting
        #: (a weak reference to) what to call when an interruptible read finds nothing to read,
        #: before it waits
        self.before_sleep: Callable[[], Callable[[], None] | None] | None = None
        self._poll: SpinningPoll | None = None
        self._wake_in: socket.socket | None = None
        self._wake_out: socket.socket | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self.interruptible:
            self._wait_readable(self.poll_timeout)
        elif self.only_ready:
            try:
                return self._sock.recv_into(buffer, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None  # nothing has arrived: the buffered reader reports no bytes
        return self._sock.recv_into(buffer)

    def make_wakeable(self) -> None:
        """Make reads interruptible; ValueError if the socket is closed already."""
        if self._poll is not None:
            return
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN | select.POLLPRI)  # -1 once closed: ValueError
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_in.setblocking(False)
        self._wake_out.setblocking(False)
        poller.register(self._wake_in.fileno(), select.POLLIN)
        self._poll = SpinningPoll(poller, spin_budget())

    def wake(self) -> None:
        try:
            self._wake_out.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken (the pair is full) or closing

    def _wait_readable(self, timeout: float | None) -> None:
        wake_fd = self._wake_in.fileno()
        assert self._poll is not None
        before_sleep = self.before_sleep() if self.before_sleep is not None else None
        if before_sleep is not None and not self._poll.ready_now():
            before_sleep()
        ready = self._poll.poll(timeout, self.waiting_since)
        if not ready:
            raise Woken()  # the time is up: the lender looks at its deadline
        for fd, _ in ready:
            if fd == wake_fd:
                try:
                    while self._wake_in.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
                raise Woken()

    def close(self) -> None:
        for sock in (self._wake_in, self._wake_out):
            if sock is not None:
                sock.close()
        super().close()


class ReadLending:
    """The lending state of a `Connection`, which supplies `_read_and_dispatch`,
    `_reading_failed`, `_mark_closed`, `_closed`, `_raw` and `_reader_file`, and calls
    `_init_lending` in its constructor."""

    _closed: bool
    _raw: LendableSocket
    _reader_file: io.BufferedReader

    if TYPE_CHECKING:  # supplied by Connection

        def _read_and_dispatch(self) -> None: ...

        def _mark_closed(self) -> None: ...

        def _reading_failed(self, exc: BaseException) -> None: ...

    def _init_lending(self) -> None:
        self._role_lock = threading.Lock()  # guards every field below
        self._role_changed = threading.Condition(self._role_lock)  # the standby handed reading back
        self._standby_reads = True  # else the lender has the connection (reading it, or away)
        self._lender: int | None = None  # the thread that lent itself last (`serve_until`)
        self._lender_present = False  # the lender is in `serve_until`: reading, or waiting its turn
        self._lender_waiting = False  # ...waiting for the standby to hand reading back
        self._times_away = 0  # how often the lender went away: the standby tells one absence from the next
        self._wake_pending = False  # `wake_lender` was called: the lender looks at its condition again
        self._standby_frames = 0  # frames the standby dispatched: each may have changed the lender's condition
        self._handoff = False  # the lender asked the standby to read now
        self._standby_wake = threading.Lock()  # locked while the standby has no reason to look
        self._standby_wake.acquire()
        self._standby_woken = False
        self._standby_parked = False

    # ---- the lending thread --------------------------------------------------------------

    def serve_until(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Read and dispatch frames on this thread until `done()` (looked at after every frame
        and every `wake_lender()`), `timeout` seconds pass or the connection closes. While the
        standby reads, this waits for it to hand reading back. False, at once, if another
        thread is serving the connection: the caller then waits its own way."""
        me = threading.get_ident()
        with self._role_lock:
            if self._lender_present or self._closed:
                return False
            if self._lender is None:
                try:
                    self._raw.make_wakeable()
                except (OSError, ValueError):
                    return False  # the socket closed meanwhile: its close wakes whoever waits
            self._lender = me
            self._lender_present = True
            self._handoff = False  # an earlier absence's request for the standby: back before it came
            self._raw.waiting_since = time.perf_counter()  # the other frames it reads are part of this wait
        deadline = None if timeout is None else time.monotonic() + timeout
        interrupts = _DeferredInterrupts.on_this_thread()
        try:
            interrupts.install()
            try:
                self._serve(done, deadline, interrupts)
            finally:
                interrupts.restore()
            interrupts.deliver_pending()
        finally:
            with self._role_lock:
                self._lender_present = False
                if not self._standby_reads:
                    self._times_away += 1
                    if self._standby_parked:
                        self._standby_parked = False
                        self._signal_standby_locked()
        return True

    def _serve(self, done: Callable[[], bool], deadline: float | None, interrupts: _DeferredInterrupts) -> None:
        remaining = None
        while True:
            seen_frames = self._standby_frames
            if done() or self._closed:
                return
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
            with self._role_lock:
                if self._wake_pending or self._standby_frames != seen_frames:
                    self._wake_pending = False  # something changed since `done()`: look again
                    continue
                if self._standby_reads:
                    self._lender_waiting = True
                    interrupts.clean = True  # Ctrl-C may end the wait
                    try:
                        self._role_changed.wait(remaining)
                    finally:
                        interrupts.clean = False
                        self._lender_waiting = False
                    continue
                self._raw.interruptible = True
                self._raw.poll_timeout = remaining
            interrupts.clean = True  # ...and the poll for the next frame, which reads nothing
            try:
                self._reader_file.peek(1)  # at a frame boundary: poll only if nothing is buffered
            except Woken:
                continue
            except (OSError, ValueError) as exc:
                self._reading_failed(exc)
                return
            finally:
                interrupts.clean = False
                self._raw.interruptible = False
            try:
                self._read_and_dispatch()
            except Exception as exc:  # noqa: BLE001 - what the reader thread's loop does with it
                self._reading_failed(exc)
                return
            interrupts.deliver_pending()

    def wake_lender(self) -> None:
        """Make the lending thread look at its `done()` again (something changed elsewhere)."""
        if self._lender is None or self._lender == threading.get_ident():
            return  # nobody lends, or the lender itself changed it (it looks after each frame)
        with self._role_lock:
            self._wake_pending = True
            if self._lender_waiting:
                self._role_changed.notify()
            elif self._raw.interruptible:
                self._raw.wake()

    def _is_away_lender(self) -> bool:
        """Whether this thread lent itself last and is away from `serve_until`: a quick look
        without the lock, which its callers repeat under it."""
        return self._lender == threading.get_ident() and not self._lender_present

    def hand_to_standby(self) -> None:
        """The lender, away, will wait elsewhere (for the answer to a request it sends here, or
        reading another connection): the standby reads now, not once it has missed it a while."""
        if not self._is_away_lender():
            return
        with self._role_lock:
            if not self._standby_reads and not self._lender_present:
                self._handoff = True
                self._signal_standby_locked()

    def lender_has_input(self) -> bool:
        """Whether bytes of a next frame have arrived, asked by the lender while it is away (so
        that nobody else reads): its work may then answer later, with the next one's answer."""
        if not self._is_away_lender():
            return False
        with self._role_lock:  # neither the standby nor another lender can start reading meanwhile
            if self._standby_reads or self._lender_present:
                return False
            return self._input_ready()

    def _input_ready(self) -> bool:
        """Whether bytes of a next frame are here (buffered, or arrived on the socket); for the
        thread whose turn it is to read, or one that holds the others off."""
        self._raw.only_ready = True
        try:
            return bool(self._reader_file.peek(1))
        except (OSError, ValueError):
            return False
        finally:
            self._raw.only_ready = False

    # ---- the standby (the connection's reader thread) ------------------------------------

    def _standby_turn(self) -> bool:
        """Wait until the standby should read; False once the connection is closed."""
        with self._role_lock:
            if self._standby_reads:
                return True
        seen_absence: int | None = None
        present_looks = 0
        while True:
            if self._standby_parked:
                woken = self._standby_wake.acquire()
            else:
                woken = self._standby_wake.acquire(timeout=LENDER_AWAY_S)
            with self._role_lock:
                if not woken and self._standby_woken:
                    # The wake came just after the wait timed out: it left the lock released,
                    # so take it now, or the next wake would release it a second time.
                    self._standby_wake.acquire()
                self._standby_woken = False
                if self._closed:
                    return False
                if not self._lender_present and (self._handoff or self._times_away == seen_absence):
                    self._handoff = False
                    self._standby_reads = True
                    return True
                if self._lender_present:
                    seen_absence = None
                    present_looks += 1
                    if present_looks >= _PARK_AFTER_CHECKS:
                        self._standby_parked = True
                else:
                    seen_absence = self._times_away
                    present_looks = 0

    def _after_standby_frame(self) -> None:
        """After a frame the standby dispatched: hand reading back to a lender in `serve_until`."""
        if self._lender is None:
            return  # no thread ever lent itself: this is a plain reader thread
        with self._role_lock:
            self._standby_frames += 1
            if self._lender_present:
                self._standby_reads = False
                self._role_changed.notify()

    def _signal_standby_locked(self) -> None:
        if not self._standby_woken:
            self._standby_woken = True
            self._standby_wake.release()

    def _end_lending(self) -> None:
        """The connection closed: wake whoever waits."""
        with self._role_lock:
            self._signal_standby_locked()
            self._role_changed.notify_all()
            if self._raw.interruptible:
                self._raw.wake()


class _DeferredInterrupts:
    """Ctrl-C while the main thread reads a frame would split it, and the stream with it: while
    it serves a connection, SIGINT's handler runs only while `clean` (waiting for a frame, with
    nothing half read); a signal that comes while a frame is read and dispatched is delivered
    right after that frame. Elsewhere than on the main thread it defers nothing: Python runs
    signal handlers on the main thread only.

    It calls `_signal`, the C half of `signal`, directly: `signal.signal()` and `getsignal()`
    look every handler up among the `Handlers` enum, which cost about 10 µs per `serve_until`."""

    def __init__(self, original: Callable[[int, FrameType | None], Any] | None) -> None:
        self._original = original
        self.clean = False
        self._pending: tuple[int, FrameType | None] | None = None

    @classmethod
    def on_this_thread(cls) -> _DeferredInterrupts:
        if threading.current_thread() is not threading.main_thread():
            return cls(None)
        handler = _signal.getsignal(_signal.SIGINT)
        return cls(handler if callable(handler) else None)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._pending = (signum, frame)
        if self.clean:
            self.deliver_pending()

    def deliver_pending(self) -> None:
        """Run the original handler for a signal that came meanwhile (it raises KeyboardInterrupt)."""
        if self._pending is not None:
            signum, frame = self._pending
            self._pending = None
            self.restore()
            self._original(signum, frame)  # type: ignore[misc]

    def install(self) -> None:
        if self._original is not None:
            _signal.signal(_signal.SIGINT, self._handle)

    def restore(self) -> None:
        if self._original is not None and _signal.getsignal(_signal.SIGINT) == self._handle:
            _signal.signal(_signal.SIGINT, self._original)
