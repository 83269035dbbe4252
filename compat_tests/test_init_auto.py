"""`init(address="auto")`: finding a running cluster, by Ray's rule.

`RAY_ADDRESS` first, then the cluster the last `ray start` (`fray-ray start`) on this machine
recorded in its temp dir; a ConnectionError when there is none. The standalone cluster is
started with each backend's own command, in its own process session, with a temp dir of its
own (`--temp-dir`, read back with `init(_temp_dir=...)`) so other sessions on this machine
neither see it nor disturb it.

Each driver is a script of its own (`_drive`), not the pytest process: a Ray driver whose
raylet goes away exits its whole process, so stopping a cluster the test process were connected
to could end the test run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from compat_tests._backend import BACKEND
from compat_tests.helpers import wait_for_condition

#: A resource only the standalone cluster has, to tell which cluster a driver reached.
MARKER = "compat_auto_marker"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _session_members(session_id: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session_id:
                    members.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return members


def _stop_session(leader: subprocess.Popen, first: int) -> None:
    """`first` to the leader's whole session, SIGKILL to what is left after 10 s (some of Ray's
    processes outlive SIGTERM for much longer); reaps it."""
    for sig, grace in ((first, 10), (signal.SIGKILL, 30)):
        for pid in _session_members(leader.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while _session_members(leader.pid) and time.monotonic() < deadline:
            leader.poll()
            time.sleep(0.1)
        if not _session_members(leader.pid):
            break
    leader.wait(30)


@contextmanager
def standalone_cluster(temp_dir: str):
    """A cluster started by the backend's command line with one CPU and the MARKER resource;
    yields (address, environment a driver needs besides the address)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS")}
    if BACKEND == "ray":
        env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        port = _free_port()
        command = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--num-cpus", "1",
                   "--resources", json.dumps({MARKER: 1}), "--port", str(port), "--temp-dir", temp_dir,
                   "--include-dashboard", "false"]
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        try:
            assert process.stdout is not None
            seen = []
            for line in process.stdout:
                seen.append(line)
                if "Ray runtime started" in line:
                    break
            else:
                raise AssertionError("ray start --head failed:\n" + "".join(seen[-40:]))
            threading.Thread(target=process.stdout.read, daemon=True).start()
            # the address Ray records (the node's own address), written just after that line
            record = Path(temp_dir, "ray_current_cluster")
            wait_for_condition(lambda: record.exists() and record.read_text().strip(), timeout=60)
            yield record.read_text().strip(), {}
        finally:
            _stop_session(process, signal.SIGTERM)
        return
    command = [sys.executable, "-m", "fray_ray", "start", "--block", "--temp-dir", temp_dir, "--json", "--cpu", "1",
               "--attribute", f"ray-resource:{MARKER}=1"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        yield info["address"], {"FRAY_RAY_TOKEN": info["token"]}
    finally:
        _stop_session(process, signal.SIGINT)


#: A driver: `init(**argv[1] as JSON)`, then one line of JSON: the MARKER resources it sees, or
#: the name of the error `init` raised (and whether the driver is left initialized).
_DRIVER = f"""
import json, sys
import {BACKEND} as ray
try:
    ray.init(**json.loads(sys.argv[1]))
except Exception as exc:
    print(json.dumps({{"error": type(exc).__name__, "initialized": ray.is_initialized()}}))
else:
    print(json.dumps({{"marker": ray.cluster_resources().get({MARKER!r})}}))
    ray.shutdown()
"""


def _drive(init_kwargs: dict, env: dict[str, str] | None = None) -> dict:
    """Run a driver script with `init(**init_kwargs)`; its one line of JSON."""
    environment = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS")}
    environment.update(env or {})
    finished = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(init_kwargs)], env=environment,
                              capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return json.loads(finished.stdout.strip().splitlines()[-1])


def _other_ray_instances() -> bool:
    """Whether a Ray GCS runs on this machine (Ray's `auto` falls back to any it finds)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if b"gcs_server" in handle.read():
                        return True
            except OSError:
                pass
    return False


# First in the module: the other tests' cluster is not started yet.
def test_init_auto__without_a_cluster_raises_connection_error():
    if BACKEND == "ray" and _other_ray_instances():
        pytest.skip("another Ray instance runs on this machine; Ray's init('auto') would connect to it")
    empty = tempfile.mkdtemp(prefix="ta-", dir="/tmp")  # no cluster ever recorded here
    try:
        assert _drive({"address": "auto", "_temp_dir": empty}) == {"error": "ConnectionError", "initialized": False}
    finally:
        shutil.rmtree(empty, ignore_errors=True)


@pytest.fixture(scope="module")
def started():
    """One standalone cluster for the module, with a private temp dir (a short path: Ray's unix
    sockets live there): (temp dir, address, environment a driver needs besides the address)."""
    temp_dir = tempfile.mkdtemp(prefix="ta-", dir="/tmp")
    try:
        with standalone_cluster(temp_dir) as (address, env):
            yield temp_dir, address, env
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_init_auto__connects_to_the_last_started_cluster(started):
    temp_dir, _, _ = started
    assert _drive({"address": "auto", "_temp_dir": temp_dir}) == {"marker": 1}


def test_init_auto__uses_ray_address(started):
    _, address, env = started
    assert _drive({"address": "auto"}, {"RAY_ADDRESS": address, **env}) == {"marker": 1}


def test_init_auto__init_without_an_address_uses_ray_address(started):
    # As in a job Ray's job server starts: RAY_ADDRESS points init() at the job's cluster.
    _, address, env = started
    assert _drive({}, {"RAY_ADDRESS": address, **env}) == {"marker": 1}


def test_init_auto__sizes_are_refused_for_the_cluster_ray_address_names(started):
    _, address, env = started
    assert _drive({"address": "auto", "num_cpus": 1}, {"RAY_ADDRESS": address, **env}) == {
        "error": "ValueError", "initialized": False,
    }
    assert _drive({"num_cpus": 1}, {"RAY_ADDRESS": address, **env}) == {"error": "ValueError", "initialized": False}
