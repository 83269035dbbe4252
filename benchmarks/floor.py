"""The floor every call is compared against: framed messages between two plain Python processes.

    python benchmarks/floor.py [--seconds 1]          # prints the floor as JSON

A child interpreter (this file with `--echo PORT`, importing nothing but the standard library)
connects to the parent over loopback TCP, proves it knows a secret the parent gave it, and then
answers frames: `<u32 length><u8 kind>` and the payload. Kind ECHO sends the payload back, kind
ACK answers with its length only. Measured:

- `floor_socket_rtt_us`: a 64-byte frame and its echo, one at a time (µs per round trip): what
  one synchronous call costs when nothing but framing, two system calls each way and two
  process wake-ups happen (the caller reads its own socket);
- `floor_socket_threaded_rtt_us`: the same, but a reader thread receives the reply and hands it
  to the waiting caller, as a connection shared by several callers must (one thread hand-off);
- `floor_socket_spin_rtt_us`: the first round trip, but both ends look for the next frame
  without blocking for up to 200 µs before they sleep, as fray_ray's waiting threads do
  (`fray_ray/_private/stream/spin_wait.py`): what is left when no process has to be woken;
- `floor_socket_100mb_gbps`: one 100 MB frame, acknowledged (GB/s): moving a big argument over
  one stream, without shared memory.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HEADER = struct.Struct("<IB")
ECHO, ACK = 0, 1
SMALL_BYTES = 64
BIG_BYTES = 100_000_000
MAX_FRAME_BYTES = 256 * 1024 * 1024
SECRET_BYTES = 32
SPIN_S = 200e-6  # as fray_ray's default spin budget


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    filled = 0
    while filled < len(view):
        got = sock.recv_into(view[filled:])
        if not got:
            raise ConnectionError("peer closed the connection")
        filled += got


def _spin_until_readable(poller: select.poll, budget_s: float) -> None:
    """Look for input without blocking for up to `budget_s`, yielding the CPU between looks."""
    until = time.perf_counter() + budget_s
    while not poller.poll(0) and time.perf_counter() < until:
        os.sched_yield()


def _echo(port: int, secret: bytes, spin_s: float) -> None:
    """The child: connect, authenticate, answer frames until the parent closes."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(secret)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    header = bytearray(HEADER.size)
    small = bytearray(SMALL_BYTES * 16)
    big = bytearray()
    while True:
        if spin_s:
            _spin_until_readable(poller, spin_s)
        try:
            _recv_exactly(sock, memoryview(header))
        except ConnectionError:
            return
        length, kind = HEADER.unpack(header)
        if length > MAX_FRAME_BYTES or kind not in (ECHO, ACK):
            return  # not a frame this peer sends: stop
        if length <= len(small):
            buf = small
        else:
            if len(big) < length:
                big = bytearray(length)
            buf = big
        view = memoryview(buf)[:length]
        _recv_exactly(sock, view)
        if kind == ECHO:
            sock.sendall(bytes(header) + view)
        else:
            sock.sendall(HEADER.pack(length, ACK))


@contextmanager
def echo_peer(timeout_s: float = 60.0, spin_s: float = 0.0) -> Iterator[socket.socket]:
    """A connected, authenticated socket to a fresh echo child (which spins for `spin_s` before
    each wait); the child ends when we close it."""
    secret = secrets.token_bytes(SECRET_BYTES)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(timeout_s)
    env = dict(os.environ, FRAY_BENCH_FLOOR_SECRET=secret.hex())
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--echo", str(listener.getsockname()[1]), "--spin-s", str(spin_s)],
        env=env, stdin=subprocess.DEVNULL,
    )
    sock: socket.socket | None = None
    try:
        deadline = time.monotonic() + timeout_s
        while sock is None:
            conn, _ = listener.accept()
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            got = bytearray(SECRET_BYTES)
            try:
                _recv_exactly(conn, memoryview(got))
            except (ConnectionError, TimeoutError):
                conn.close()
                continue
            if secrets.compare_digest(bytes(got), secret):
                sock = conn
            else:
                conn.close()
            if time.monotonic() > deadline:
                raise TimeoutError("the echo child did not connect")
        listener.close()
        sock.settimeout(timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        yield sock
    finally:
        if sock is not None:
            sock.close()
        listener.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _round_trip(sock: socket.socket, frame: bytes, reply: memoryview) -> None:
    sock.sendall(frame)
    _recv_exactly(sock, reply)


def _us_per_call(call: Callable[[], None], warmup_s: float, round_s: float) -> float:
    """Microseconds per `call()` over one round of `round_s` after a warm-up of `warmup_s`."""
    clock = time.perf_counter
    end = clock() + warmup_s
    while clock() < end:
        call()
    count, start = 0, clock()
    while True:
        call()
        count += 1
        elapsed = clock() - start
        if elapsed >= round_s:
            return elapsed / count * 1e6


def socket_rtt_us(sock: socket.socket, warmup_s: float, round_s: float) -> float:
    """Microseconds per 64-byte round trip, over one round after a warm-up."""
    frame = HEADER.pack(SMALL_BYTES, ECHO) + bytes(SMALL_BYTES)
    reply = memoryview(bytearray(len(frame)))
    return _us_per_call(lambda: _round_trip(sock, frame, reply), warmup_s, round_s)


def socket_spin_rtt_us(sock: socket.socket, warmup_s: float, round_s: float, spin_s: float = SPIN_S) -> float:
    """Microseconds per 64-byte round trip when the caller (and an echo child started with the
    same `spin_s`) spins before it waits for the reply."""
    frame = HEADER.pack(SMALL_BYTES, ECHO) + bytes(SMALL_BYTES)
    reply = memoryview(bytearray(len(frame)))
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)

    def round_trip() -> None:
        sock.sendall(frame)
        _spin_until_readable(poller, spin_s)
        _recv_exactly(sock, reply)

    return _us_per_call(round_trip, warmup_s, round_s)


def socket_threaded_rtt_us(sock: socket.socket, warmup_s: float, round_s: float) -> float:
    """The same round trip, but a reader thread receives each reply and wakes the waiting caller.

    What a connection shared by several callers costs at least: one thread hand-off per reply.
    """
    frame = HEADER.pack(SMALL_BYTES, ECHO) + bytes(SMALL_BYTES)
    replies: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def reader() -> None:
        header = memoryview(bytearray(HEADER.size))
        while True:
            _recv_exactly(sock, header)
            length, _ = HEADER.unpack(header)
            payload = memoryview(bytearray(length))
            _recv_exactly(sock, payload)
            replies.put(bytes(payload))
            if length != SMALL_BYTES:  # the closing frame
                return

    thread = threading.Thread(target=reader, name="floor-reader", daemon=True)
    thread.start()

    def round_trip() -> None:
        sock.sendall(frame)
        replies.get()

    try:
        return _us_per_call(round_trip, warmup_s, round_s)
    finally:
        sock.sendall(HEADER.pack(1, ECHO) + b"\0")
        thread.join(timeout=10)


def socket_big_gbps(sock: socket.socket, round_s: float, size: int = BIG_BYTES) -> float:
    """GB/s of `size`-byte frames, each acknowledged before the next (at least three)."""
    payload = memoryview(bytearray(size))
    header = HEADER.pack(size, ACK)
    ack = memoryview(bytearray(HEADER.size))
    sock.sendall(header)  # one warm-up frame
    sock.sendall(payload)
    _recv_exactly(sock, ack)
    count, start = 0, time.perf_counter()
    while count < 3 or time.perf_counter() - start < round_s:
        sock.sendall(header)
        sock.sendall(payload)
        _recv_exactly(sock, ack)
        count += 1
    return count * size / (time.perf_counter() - start) / 1e9


def measure(warmup_s: float, round_s: float) -> dict[str, float]:
    """The plain-socket floor metrics, each from one round with a fresh echo child."""
    with echo_peer() as sock:
        rtt = socket_rtt_us(sock, warmup_s, round_s)
        threaded = socket_threaded_rtt_us(sock, warmup_s, round_s)
        big = socket_big_gbps(sock, round_s)
    with echo_peer(spin_s=SPIN_S) as sock:
        spin = socket_spin_rtt_us(sock, warmup_s, round_s)
    return {"floor_socket_rtt_us": rtt, "floor_socket_threaded_rtt_us": threaded, "floor_socket_100mb_gbps": big,
            "floor_socket_spin_rtt_us": spin}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--echo", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--spin-s", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    if args.echo is not None:
        secret = bytes.fromhex(os.environ.pop("FRAY_BENCH_FLOOR_SECRET", ""))
        if len(secret) != SECRET_BYTES:
            sys.exit("floor.py --echo is started by floor.py itself")
        _echo(args.echo, secret, args.spin_s)
        return
    print(json.dumps(measure(0.3, args.seconds)))


if __name__ == "__main__":
    main()
