"""An attacker without the token, run as its own process by the security tests.

    python attacker.py frames HOST PORT CANARY          # stream-protocol frames a stranger might send
    python attacker.py http HOST PORT CANARY PATH...    # Connect requests without a (valid) token
    python attacker.py flood HOST PORT COUNT            # COUNT idle connections, held until stdin closes
    python attacker.py slowloris HOST PORT KIND         # a greeting (KIND=stream) or request head
                                                        # (KIND=http) at one byte per second
    python attacker.py trickle HOST PORT COUNT PATH     # COUNT connections, each sending a GET
                                                        # head for PATH a byte every 2 s

Every outcome is one JSON line on stdout. The attacker only observes what the server does to
it; the tests decide whether that is right. Payloads that would create CANARY if they were ever
unpickled (or run) are sent wherever a server might deserialize them.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import select
import socket
import struct
import sys
import time
from typing import Any

import msgpack

PREFIX = struct.Struct("<II")
BUFFER_LENGTH = struct.Struct("<Q")
REQUEST = 0
ERROR = 2
GIB = 1 << 30
CLOSE_WAIT_S = 30.0  # how long to wait for the server to close a connection it should refuse


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


class Canary:
    """Unpickling this creates the canary directory: proof that a payload was deserialized."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def canary_pickle(path: str) -> bytes:
    return pickle.dumps(Canary(path))


def frame(header: list[Any], buffers: tuple[bytes, ...] = ()) -> bytes:
    packed = msgpack.packb(header, use_bin_type=True)
    parts = [PREFIX.pack(len(packed), len(buffers)), packed]
    for buffer in buffers:
        parts += [BUFFER_LENGTH.pack(len(buffer)), buffer]
    return b"".join(parts)


def wait_closed(sock: socket.socket, timeout: float = CLOSE_WAIT_S) -> tuple[bool, bytes]:
    """Read until the server closes the connection; (closed, what it sent before closing)."""
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:  # reset by the server
            return True, received
        if not chunk:
            return True, received
        received += chunk
    return False, received


def error_kind(received: bytes) -> str | None:
    """The kind of an ERROR frame at the start of `received`, if there is one."""
    if len(received) < PREFIX.size:
        return None
    length, _ = PREFIX.unpack_from(received)
    try:
        kind, _, _, body = msgpack.unpackb(received[PREFIX.size : PREFIX.size + length], raw=False)
    except Exception:  # noqa: BLE001 - not a frame
        return None
    return body[0] if kind == ERROR else None


# ---- stream-protocol frames -------------------------------------------------------------------


def frame_attacks(canary: str) -> dict[str, bytes]:
    payload = canary_pickle(canary)
    hello = {"kind": "executor", "id": b"\x01" * 16, "pid": 1, "ip": "127.0.0.1"}
    # What a handler would unpickle at once: placement_group / gang arguments, a submit spec.
    pickled_request = frame([REQUEST, 7, "placement_group", {"op": "get", "args": payload}])
    return {
        "no_token": frame([REQUEST, 1, "hello", hello]),
        "wrong_token": frame([REQUEST, 1, "hello", {**hello, "token": "0" * 32}]),
        "pickled_token": frame([REQUEST, 1, "hello", {**hello, "token": payload}]),
        "pickle_first": pickled_request,
        "pickle_after_wrong_token": frame([REQUEST, 1, "hello", {**hello, "token": "f" * 32}]) + pickled_request,
        "pickle_in_buffer": frame([REQUEST, 1, "hello", {**hello, "token": "0" * 32}], (payload,)),
        "huge_header": PREFIX.pack(2 * GIB - 1, 0) + b"\x94",
        "huge_buffer": PREFIX.pack(len(msgpack.packb([REQUEST, 1, "hello", hello])), 1)
        + msgpack.packb([REQUEST, 1, "hello", hello])
        + BUFFER_LENGTH.pack(2 * GIB),
        "oversized_hello": PREFIX.pack(1 << 20, 0) + b"\x00" * (1 << 20),
    }


def run_frames(host: str, port: int, canary: str) -> None:
    for name, data in frame_attacks(canary).items():
        began = time.monotonic()
        with socket.create_connection((host, port), timeout=10) as sock:
            try:
                sock.sendall(data)
            except OSError:
                pass  # refused part-way through (the oversized hello): also a refusal
            closed, received = wait_closed(sock)
        emit(attack=name, closed=closed, error=error_kind(received), seconds=round(time.monotonic() - began, 3))


# ---- Connect requests -------------------------------------------------------------------------


def http_attacks(canary: str, paths: list[str]) -> list[tuple[str, str, bytes, dict[str, str]]]:
    """(attack, path, body, extra headers): token-less requests to the first path, and payloads
    that would create the canary if run or unpickled, to the paths that would do so."""
    payload = canary_pickle(canary)
    from fray_ray.iris.entrypoint import CALLABLE_COMMAND, CALLABLE_FILE, RUNNER_FILE, RUNNER_SOURCE
    from fray_ray.iris.rpc import actor_pb2, controller_pb2

    launch = controller_pb2.Controller.LaunchJobRequest(name="/attacker/canary", replicas=1)
    launch.entrypoint.run_command.argv.extend(CALLABLE_COMMAND)
    # the runner unpickles `_callable.pkl`: unpickling this alone creates the canary
    launch.entrypoint.workdir_files[CALLABLE_FILE] = payload
    launch.entrypoint.workdir_files[RUNNER_FILE] = RUNNER_SOURCE.encode()
    call = actor_pb2.ActorCall(method_name="anything", serialized_args=payload, serialized_kwargs=payload)
    first = paths[0]
    attacks = [
        ("no_token", first, b"", {}),
        ("wrong_token", first, b"", {"authorization": "Bearer " + "0" * 43}),
        ("empty_bearer", first, b"", {"authorization": "Bearer "}),
        ("huge_length", first, b"", {"content-length": str(2 * GIB)}),
    ]
    for path in paths:
        if path.endswith("/LaunchJob"):
            attacks.append(("canary_launch_job", path, launch.SerializeToString(), {}))
        elif path.endswith("/Call") or path.endswith("/StartOperation"):
            attacks.append(("canary_actor_call", path, call.SerializeToString(), {}))
            attacks.append(("canary_actor_call_wrong_token", path, call.SerializeToString(),
                            {"authorization": "Bearer " + "1" * 43}))
    return attacks


def run_http(host: str, port: int, canary: str, paths: list[str]) -> None:
    """Each attack on a fresh connection; the server must answer and then close it."""
    for name, path, body, headers in http_attacks(canary, paths):
        lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", "content-type: application/proto"]
        if "content-length" not in headers:
            lines.append(f"content-length: {len(body)}")
        lines += [f"{key}: {value}" for key, value in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        with socket.create_connection((host, port), timeout=10) as sock:
            try:
                sock.sendall(request)
            except OSError:
                pass
            closed, received = wait_closed(sock)
        status_line = received.split(b"\r\n", 1)[0].decode(errors="replace")
        status = int(status_line.split()[1]) if status_line.startswith("HTTP/1.1 ") else 0
        text = received.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
        emit(attack=name, path=path, status=status, body=text[:200], closed=closed)


# ---- idle connections -------------------------------------------------------------------------


def raise_descriptor_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run_flood(host: str, port: int, count: int) -> None:
    """Open `count` connections that never send a byte; report how many the server closes.

    Runs until every one was closed by the server or stdin closes (the test is done).
    """
    raise_descriptor_limit(count + 64)
    poller = select.poll()
    open_socks: dict[int, socket.socket] = {}
    failed = 0
    for _ in range(count):
        try:
            sock = socket.create_connection((host, port), timeout=10)
        except OSError:
            failed += 1
            continue
        open_socks[sock.fileno()] = sock
        poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
    opened = len(open_socks)
    emit(event="opened", opened=opened, failed=failed)
    poller.register(sys.stdin.fileno(), select.POLLIN | select.POLLHUP)
    closed_by_server = 0
    last_report = 0.0
    while True:
        for fd, _ in poller.poll(250):
            if fd == sys.stdin.fileno():
                emit(event="stopped", opened=opened, closed_by_server=closed_by_server)
                for sock in open_socks.values():
                    sock.close()
                return
            sock = open_socks.pop(fd, None)
            if sock is None:
                continue
            poller.unregister(fd)
            sock.close()  # readable on a socket we never wrote to: the server closed it
            closed_by_server += 1
        now = time.monotonic()
        if now - last_report > 0.25 or not open_socks:
            last_report = now
            emit(event="progress", opened=opened, closed_by_server=closed_by_server)
        if not open_socks:
            emit(event="all_closed", opened=opened, closed_by_server=closed_by_server)
            sys.stdin.read()  # hold until the test is done with us
            return


# ---- slowloris --------------------------------------------------------------------------------


def run_slowloris(host: str, port: int, kind: str) -> None:
    if kind == "stream":
        data = frame([REQUEST, 1, "hello", {"kind": "executor", "id": b"\x02" * 16, "token": "a" * 32}])
    else:
        data = f"POST /iris.cluster.ControllerService/ListJobs HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/proto\r\n\r\n".encode()
    began = time.monotonic()
    sent = 0
    closed = False
    with socket.create_connection((host, port), timeout=10) as sock:
        while sent < len(data) and time.monotonic() - began < 60:
            try:
                sock.send(data[sent : sent + 1])
            except OSError:
                closed = True
                break
            sent += 1
            readable, _, _ = select.select([sock], [], [], 1.0)
            if readable:
                try:
                    chunk = sock.recv(4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    closed = True
                    break
    emit(attack="slowloris", kind=kind, closed=closed, bytes_sent=sent, total=len(data),
         seconds=round(time.monotonic() - began, 1))


TRICKLE_INTERVAL_S = 2.0
TRICKLE_LIMIT_S = 90.0


def run_trickle(host: str, port: int, count: int, path: str) -> None:
    """Hold `count` connections with request heads that arrive a byte every 2 s (each read of the
    server's gets a byte well within any per-read timeout); report how many the server closed
    and the most bytes any connection got in."""
    head = f"GET {path} HTTP/1.0\r\nhost: {host}\r\nauthorization: Bearer not-the-token\r\n\r\n".encode()
    raise_descriptor_limit(count + 64)
    socks: dict[socket.socket, int] = {}
    for _ in range(count):
        try:
            socks[socket.create_connection((host, port), timeout=10)] = 0
        except OSError:
            pass
    emit(event="opened", opened=len(socks))
    began = time.monotonic()
    closed = 0
    most_sent = 0
    while socks and time.monotonic() - began < TRICKLE_LIMIT_S:
        for sock in list(socks):
            sent = socks[sock]
            try:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable and not sock.recv(4096):
                    raise ConnectionResetError("closed by the server")
                sock.send(head[sent : sent + 1])
            except OSError:
                closed += 1
                del socks[sock]
                sock.close()
                continue
            socks[sock] = sent + 1
            most_sent = max(most_sent, sent + 1)
        time.sleep(TRICKLE_INTERVAL_S)
    for sock in socks:
        sock.close()
    emit(attack="trickle", opened=closed + len(socks), closed_by_server=closed, most_bytes_sent=most_sent,
         total=len(head), seconds=round(time.monotonic() - began, 1))


def main(argv: list[str]) -> None:
    mode, host, port = argv[0], argv[1], int(argv[2])
    if mode == "frames":
        run_frames(host, port, argv[3])
    elif mode == "http":
        run_http(host, port, argv[3], argv[4:])
    elif mode == "flood":
        run_flood(host, port, int(argv[3]))
    elif mode == "slowloris":
        run_slowloris(host, port, argv[3])
    elif mode == "trickle":
        run_trickle(host, port, int(argv[3]), argv[4])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    emit(event="exit")


if __name__ == "__main__":
    main(sys.argv[1:])
