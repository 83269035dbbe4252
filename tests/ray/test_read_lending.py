"""A worker thread that reads its own connection while it waits (`Connection.serve_until`):
frames are dispatched on it, the standby reader takes over while it is away, hands back when
it waits again, and nothing is lost or stuck at a close."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from fray_ray._private.stream import read_lending
from fray_ray._private.stream.protocol import Connection
from tests.waiting import wait_for


class _Frames:
    """What the `m` handler saw: (body, thread that ran it), in arrival order."""

    def __init__(self) -> None:
        self.items: list[tuple[object, int]] = []
        self.lock = threading.Lock()

    def __call__(self, connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        with self.lock:
            self.items.append((body, threading.get_ident()))

    def count(self) -> int:
        with self.lock:
            return len(self.items)

    def thread_of(self, body: object) -> int:
        with self.lock:
            return next(thread for b, thread in self.items if b == body)


@pytest.fixture
def pair(tcp_pair) -> Iterator[tuple[Connection, Connection, _Frames]]:
    """(peer, worker connection, frames the worker saw); both closed afterwards."""
    ours, theirs = tcp_pair
    frames = _Frames()

    def echo(connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        connection.reply(message_id, body)

    peer = Connection(ours, name="peer").start({"echo": echo})
    worker = Connection(theirs, name="worker").start({"m": frames})
    yield peer, worker, frames
    peer.close()
    worker.close()


class _Lender:
    """A thread that serves the worker connection until `target` frames arrived, then is away
    (doing its work) until told to serve again or to stop."""

    def __init__(self, connection: Connection, frames: _Frames) -> None:
        self.connection = connection
        self.frames = frames
        self.target = 0
        self.away = threading.Event()
        self.go_on = threading.Event()
        self.stop = False
        self.work: list = []  # callables the lender runs while away
        self.thread = threading.Thread(target=self._run, name="lender", daemon=True)

    def serve(self, target: int) -> None:
        self.target = target
        self.away.clear()
        if self.thread.is_alive():
            self.go_on.set()
        else:
            self.thread.start()

    def _run(self) -> None:
        while True:
            self.connection.serve_until(lambda: self.frames.count() >= self.target or self.stop)
            for work in self.work:
                work()
            self.work.clear()
            self.away.set()
            self.go_on.wait()
            self.go_on.clear()
            if self.stop:
                return

    def end(self) -> None:
        self.stop = True
        self.go_on.set()
        self.connection.wake_lender()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def _lend(peer: Connection, worker: Connection, lender: _Lender, target: int) -> None:
    """Start `lender` serving until `target` frames; the standby, blocked reading, hands the
    connection over after the next frame, which this sends."""
    lender.serve(target)
    wait_for(lambda: worker._lender_waiting, what="the lender to wait for its turn")
    peer.notify("m", "first")
    wait_for(lambda: lender.away.is_set() or not worker._standby_reads, what="the standby to hand reading over")


def test_a_frame_the_lender_reads_is_dispatched_on_the_lender(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    peer.notify("m", 0)  # read by the standby: nobody lends yet
    wait_for(lambda: frames.count() == 1)
    lender.serve(3)
    wait_for(lambda: worker._lender_waiting, what="the lender to wait for its turn")
    peer.notify("m", 1)  # the standby reads it, then hands reading back
    wait_for(lambda: frames.count() == 2 and not worker._standby_reads)
    peer.notify("m", 2)
    assert lender.away.wait(10)
    assert frames.thread_of(0) == worker._reader.ident
    assert frames.thread_of(2) == lender.thread.ident
    lender.end()


def test_the_standby_reads_while_the_lender_is_away(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 2)
    peer.notify("m", 0)
    assert lender.away.wait(10)
    assert frames.thread_of(0) == lender.thread.ident
    peer.notify("m", 1)  # the lender does not come back: the standby takes over
    wait_for(lambda: frames.count() == 3, what="the frame sent while the lender is away")
    assert frames.thread_of(1) == worker._reader.ident
    lender.serve(5)  # back: the standby hands reading over after its next frame
    wait_for(lambda: worker._lender_waiting)
    peer.notify("m", 2)
    wait_for(lambda: frames.count() == 4 and not worker._standby_reads)
    peer.notify("m", 3)
    wait_for(lambda: frames.count() == 5)
    assert frames.thread_of(3) == lender.thread.ident
    lender.end()


def test_a_request_from_the_away_lender_is_answered_at_once(pair, monkeypatch) -> None:
    monkeypatch.setattr(read_lending, "LENDER_AWAY_S", 3600.0)  # only the hand-off can read the answer
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    answers: list = []
    lender.work.append(lambda: answers.append(worker.call("echo", "hello", timeout=30)))
    _lend(peer, worker, lender, 2)  # from now on the standby looks only when asked
    peer.notify("m", 0)
    assert lender.away.wait(30)
    assert answers == [("hello", [])]
    lender.end()


def test_wake_lender_makes_the_lender_look_again_without_a_frame(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 2)
    lender.target = 0  # its condition now holds, but no frame will arrive to show it
    worker.wake_lender()
    assert lender.away.wait(10)
    lender.end()


def test_an_idle_lender_lets_the_standby_park(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 2)
    wait_for(lambda: worker._standby_parked, what="the standby to park while the lender reads")
    lender.end()


def test_the_away_lender_sees_that_a_frame_has_arrived(pair, monkeypatch) -> None:
    monkeypatch.setattr(read_lending, "LENDER_AWAY_S", 3600.0)  # the standby never takes over here
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    seen: list[bool] = []
    arrived = threading.Event()

    def look() -> None:
        seen.append(worker.lender_has_input())
        peer.notify("m", 1)
        arrived.wait(10)
        wait_for(worker.lender_has_input, what="the next frame's bytes")
        seen.append(worker.lender_has_input())

    lender.work.append(look)
    _lend(peer, worker, lender, 2)
    peer.notify("m", 0)
    arrived.set()
    assert lender.away.wait(30)
    assert seen == [False, True]
    assert frames.count() == 2  # looking read nothing
    lender.serve(3)
    wait_for(lambda: frames.count() == 3)
    assert frames.thread_of(1) == lender.thread.ident
    lender.end()
    assert not worker.lender_has_input()  # asked from another thread: always no


def test_a_close_ends_the_lender_and_the_standby(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 2)
    peer.close()
    assert lender.away.wait(10)  # serve_until returned: the connection closed
    wait_for(lambda: worker.closed)
    worker._reader.join(timeout=10)
    assert not worker._reader.is_alive()
    lender.end()


def test_one_thread_serves_at_a_time_and_another_may_follow(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 2)
    assert worker.serve_until(lambda: False) is False  # the lender serves: this waits its own way
    peer.notify("m", 0)
    assert lender.away.wait(10)
    peer.notify("m", 1)
    assert worker.serve_until(lambda: frames.count() == 3, timeout=30) is True  # the lender is away
    assert frames.thread_of(1) in (threading.get_ident(), worker._reader.ident)
    lender.end()


def test_serving_ends_when_its_time_is_up(pair) -> None:
    peer, worker, frames = pair
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 1)
    assert lender.away.wait(10)
    assert worker.serve_until(lambda: False, timeout=0.05) is True  # nothing comes: back after the timeout
    assert not worker.closed
    lender.end()


def test_ctrl_c_while_the_main_thread_serves_never_splits_a_frame(pair) -> None:
    """SIGINT while waiting for a frame interrupts at once; one that comes while a frame is
    dispatched waits until that frame is handled. The stream stays whole either way."""
    peer, worker, frames = pair
    assert threading.current_thread() is threading.main_thread()
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 1)
    assert lender.away.wait(10)
    lender.end()  # from here on this (main) thread serves

    def interrupt_soon() -> None:
        wait_for(lambda: worker._lender == threading.main_thread().ident and worker._lender_present)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    helper = threading.Thread(target=interrupt_soon)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        worker.serve_until(lambda: False, timeout=60)
    helper.join()

    handled_elsewhere: list[str] = []

    def interrupting(connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        frames(connection, message_id, body, buffers)
        if threading.current_thread() is threading.main_thread():
            signal.raise_signal(signal.SIGINT)  # in the middle of handling a frame, on the main thread
        else:  # a SIGINT from here would land wherever the main thread is: fail instead
            handled_elsewhere.append(threading.current_thread().name)

    def send_while_served() -> None:
        """Once the main thread reads (the standby hands reading back after a frame it reads:
        "first"), send the interrupting frame, so that the main thread is the one to handle it."""
        main = threading.main_thread().ident
        wait_for(lambda: worker._lender == main and worker._lender_present)  # it wants to read
        peer.notify("m", "first")
        wait_for(lambda: frames.count() == before + 1 and worker._lender == main and worker._lender_present
                 and not worker._standby_reads)
        peer.notify("i", "interrupting")
        peer.notify("m", "after")

    before = frames.count()
    worker._handlers["i"] = interrupting
    helper = threading.Thread(target=send_while_served)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        worker.serve_until(lambda: False, timeout=60)
    helper.join()
    assert handled_elsewhere == []
    assert frames.count() == before + 2  # the interrupting frame was handled whole, nothing after it yet
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert worker.serve_until(lambda: frames.count() == before + 3, timeout=60)
    assert frames.items[-1][0] == "after"


class _WakeJustAfterTimeout:
    """The standby's wake lock, with one race forced: its first timed wait times out and the
    wake lands right after; a second wake comes before the standby waits again."""

    def __init__(self, connection: Connection) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.connection = connection
        self.timed_waits = 0
        self.errors: list[BaseException] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout != -1:
            self.timed_waits += 1
            if self.timed_waits == 1:
                got = self.lock.acquire(timeout=0.01)  # times out: nothing woke it yet
                self._wake()  # ...and the wake lands just after
                return got
            if self.timed_waits == 2:
                self._wake()  # a second wake before this wait
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()

    def _wake(self) -> None:
        try:
            with self.connection._role_lock:
                self.connection._signal_standby_locked()
        except RuntimeError as exc:  # releasing a lock already released
            self.errors.append(exc)


def test_a_wake_that_lands_just_after_the_standby_timed_out_is_not_lost_or_doubled(pair) -> None:
    peer, worker, frames = pair
    wake = _WakeJustAfterTimeout(worker)
    worker._standby_wake = wake
    lender = _Lender(worker, frames)
    _lend(peer, worker, lender, 2)
    wait_for(lambda: wake.timed_waits >= 2, what="the standby to wait twice")
    assert wake.errors == []
    lender.end()
