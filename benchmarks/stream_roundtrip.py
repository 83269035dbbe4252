"""Round trips over the driver-worker stream protocol alone, between two processes.

    python benchmarks/stream_roundtrip.py [--seconds 2] [--repeat 3]

The two ends are `fray_ray._private.stream.protocol.Connection`s on one loopback TCP connection; the child process
echoes what it receives. Nothing else of fray_ray runs, so this isolates the cost of framing,
frame checks and receive buffers from scheduling. Prints, per shape, the best and median of
`--repeat` runs:

- `sync_small`: one small request, wait for the reply, repeat (µs per round trip);
- `pipelined_small`: 1000 requests in flight, then all replies (requests per second);
- `buffer_1mb` / `buffer_100mb`: one out-of-band buffer sent and echoed back (GB/s both ways).

`protocol_rtt_us()` is the `floor_protocol_rtt_us` row of `compare.py`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fray_ray._private.stream.protocol import Connection


def _echo_child(sock: socket.socket) -> None:
    connection = Connection(sock, name="echo-child")

    def echo(conn: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        if message_id is not None:
            conn.reply(message_id, body, buffers)

    closed = threading.Event()  # the child runs until the parent closes its end
    connection.add_close_callback(lambda _: closed.set())
    connection.start({"echo": echo})
    closed.wait()


def _sync_small(connection: Connection, seconds: float) -> float:
    count = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        connection.call("echo", {"n": count})
        count += 1
    return (time.perf_counter() - began) / count * 1e6


def _pipelined_small(connection: Connection, seconds: float) -> float:
    count = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        futures = [connection.request("echo", {"n": i}) for i in range(1000)]
        for future in futures:
            future.result()
        count += 1000
    return count / (time.perf_counter() - began)


def _buffer(connection: Connection, size: int, seconds: float) -> float:
    payload = bytearray(size)
    moved = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds or moved == 0:
        _, buffers = connection.call("echo", {}, [payload])
        assert len(buffers[0]) == size
        moved += 2 * size
    return moved / (time.perf_counter() - began) / 1e9


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of one loopback TCP connection (what drivers and workers really use)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    return ours, theirs


@contextmanager
def echo_connection() -> Iterator[Connection]:
    """A started `Connection` to a fresh echo child process; the child ends when this closes."""
    ours, theirs = _tcp_pair()
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_echo_child, args=(theirs,), daemon=True)
    child.start()
    theirs.close()
    connection = Connection(ours, name="bench").start({})
    try:
        connection.call("echo", {})  # warm up both ends
        yield connection
    finally:
        connection.close()
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join()


def protocol_rtt_us(warmup_s: float, round_s: float) -> float:
    """Microseconds per small synchronous round trip, one round after a warm-up (compare.py's floor)."""
    with echo_connection() as connection:
        _sync_small(connection, warmup_s)
        return _sync_small(connection, round_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    shapes = {
        "sync_small_us": lambda: _sync_small(connection, args.seconds),
        "pipelined_small_per_s": lambda: _pipelined_small(connection, args.seconds),
        "buffer_1mb_gbps": lambda: _buffer(connection, 1 << 20, args.seconds),
        "buffer_100mb_gbps": lambda: _buffer(connection, 100 * 1000 * 1000, args.seconds),
    }
    results: dict[str, dict[str, float]] = {}
    with echo_connection() as connection:
        for name, run in shapes.items():
            values = [run() for _ in range(args.repeat)]
            best = min(values) if name.endswith("_us") else max(values)
            results[name] = {"best": best, "median": statistics.median(values)}
    if args.json:
        print(json.dumps(results))
        return
    for name, values in results.items():
        print(f"{name:<24} best {values['best']:12.2f}   median {values['median']:12.2f}")


if __name__ == "__main__":
    main()
