"""`fray-ray start` in the background and `fray-ray down`: a cluster in a process of its own.

The background cluster is `python -m fray_ray start --block --json ...` in a new session (so a
Ctrl-C or a closed terminal does not reach it), its stderr in `cluster.log` beside the address
file. `start` returns once the controller answers its health check, after printing the address
and token; the cluster records itself (address, token, pid) in the per-user address file
(`fray_ray._private.driver.cluster_address`) before it says it is ready, so later commands and
`init(address="auto")` find it. A start while a recorded cluster is alive is refused, under a
lock so two starts at once cannot both pass the check.

`down` sends the recorded process SIGTERM: the cluster stops its workers and their task
processes and removes its temp dir and record, as on Ctrl-C in the foreground; it is killed if
it is still there after the deadline (its reaper then ends the task processes).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

from fray_ray._private.driver import cluster_address

#: How long `start` waits for the cluster to serve, and `down` for it to stop.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
LOG_NAME = "cluster.log"
LOCK_NAME = "start.lock"


def iris_cli_hint(address: str, token: str | None) -> str:
    """How to point the `iris` command-line tool at this cluster (it reads the bearer token
    from MARIN_CLUSTER_TOKEN)."""
    prefix = f"MARIN_CLUSTER_TOKEN={token} " if token else ""
    return f"{prefix}iris --controller-url {address} cluster status"


@contextlib.contextmanager
def _start_lock(directory: str) -> Iterator[None]:
    """Hold an exclusive lock on `directory`'s start lock (blocks while another start holds it)."""
    fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _prepare_dir(temp_dir: str | None) -> str:
    """The record directory, created private; PermissionError if it is not this user's alone."""
    directory = cluster_address.record_dir(temp_dir)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    cluster_address.read(temp_dir=temp_dir)  # raises PermissionError when not private
    return directory


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _is_fray_ray(pid: int) -> bool:
    """Whether `pid` looks like a fray_ray cluster (guards against a reused pid); True when
    the platform cannot tell."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read()
    except OSError:
        return True
    return b"fray_ray" in command or b"fray-ray" in command


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])
    except OSError:
        return ""


def start_background(cluster_args: Sequence[str], *, temp_dir: str | None, as_json: bool) -> int:
    """Start a cluster in a process of its own; return once it serves (0), or 1 with why not."""
    try:
        directory = _prepare_dir(temp_dir)
    except OSError as exc:
        print(f"fray-ray start: {exc}", file=sys.stderr)
        return 1
    with _start_lock(directory):
        current = cluster_address.read(temp_dir=temp_dir)
        if current is not None:
            print(
                f"fray-ray start: a cluster is already running at {current.address} (pid {current.pid}), recorded in "
                f"{directory}.\nStop it with `fray-ray down`, or run another one in the foreground with "
                "`fray-ray start --block` (it becomes the recorded one while it runs).",
                file=sys.stderr,
            )
            return 1
        log_path = os.path.join(directory, LOG_NAME)
        command = [sys.executable, "-m", "fray_ray", "start", "--block", "--json"]
        if temp_dir:
            command += ["--temp-dir", temp_dir]
        command += list(cluster_args)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_fd,
                start_new_session=True, close_fds=True,
            )
        finally:
            os.close(log_fd)
        info = _read_ready_line(process)
        if info is None:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                why = f"it did not become ready within {START_TIMEOUT_S:.0f} s"
            else:
                why = f"it exited with status {process.returncode}"
            print(f"fray-ray start: the cluster did not start: {why}.\n{_tail(log_path)}", file=sys.stderr)
            return 1
    info.update(pid=process.pid, log=log_path)
    if as_json:
        print(json.dumps(info), flush=True)
        return 0
    address, token = info["address"], info.get("token")
    print(f"fray_ray cluster started in the background (pid {process.pid})")
    print(f"address: {address}")
    print(f"token: {token}" if token else "token: none (auth disabled)")
    if info.get("dashboard"):
        print(f"dashboard: {info['dashboard']}")
    for worker in info.get("workers", []):
        print(f"worker: {worker}")
    print(f"log: {log_path}")
    print(f"recorded in {os.path.join(directory, cluster_address.FILE_NAME)}: `fray-ray status`, `fray-ray jobs` "
          "and fray_ray.init(address='auto') on this machine find it")
    print(f"iris CLI: {iris_cli_hint(address, token)}")
    print("stop it: fray-ray down", flush=True)
    return 0


def _read_ready_line(process: subprocess.Popen) -> dict | None:
    """The JSON line the cluster prints once it serves, or None if it ends or hangs first."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                break
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
    process.stdout.close()  # the cluster prints nothing more in --json mode
    line = buffer.split(b"\n", 1)[0]
    if not line:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def stop_recorded(*, temp_dir: str | None, timeout: float = STOP_TIMEOUT_S) -> int:
    """Stop the recorded cluster (SIGTERM, then SIGKILL after `timeout`); 0 when none runs
    afterwards, 1 when the record cannot be read or the process is not a cluster."""
    try:
        record = cluster_address.read(temp_dir=temp_dir)
    except OSError as exc:
        print(f"fray-ray down: {exc}", file=sys.stderr)
        return 1
    if record is None:
        print(f"no running fray_ray cluster is recorded in {cluster_address.record_dir(temp_dir)}")
        return 0
    if not _is_fray_ray(record.pid):
        print(f"fray-ray down: pid {record.pid} recorded for {record.address} is not a fray_ray cluster any more; "
              "not stopping it", file=sys.stderr)
        return 1
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    delay = 0.05
    while _running(record.pid) and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    if _running(record.pid):
        os.kill(record.pid, signal.SIGKILL)
        print(f"the cluster at {record.address} (pid {record.pid}) did not stop within {timeout:.0f} s: killed",
              file=sys.stderr)
        return 0
    print(f"stopped the fray_ray cluster at {record.address} (pid {record.pid})")
    return 0
