"""Helpers of the security tests: the target, attacker processes, and the driver's peak memory."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ATTACKER = Path(__file__).with_name("attacker.py")
#: How much the driver's resident memory may grow while it is attacked (its peak, measured
#: from just before the attack). The attacks announce up to 2 GiB; an idle flood is bounded by
#: the connection caps.
RSS_GROWTH_BOUND_MIB = 192


@dataclass(frozen=True)
class Target:
    """Where the driver under attack listens, and what only its rightful clients know."""

    session_host: str
    session_port: int
    controller_url: str
    controller_port: int
    controller_token: str


def session_gate_stats() -> Any:
    from fray_ray._private.core import runtime_state

    return runtime_state.current().session.gate_stats()


class Attacker:
    """One attacker process. Its JSON lines are read with deadlines; it is always reaped."""

    def __init__(self, args: list[str], stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "w")
        self._stderr_path = stderr_path
        self.process = subprocess.Popen(
            [sys.executable, str(ATTACKER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=str(ATTACKER.parent),
        )
        assert self.process.stdout is not None
        self._stdout_fd = self.process.stdout.fileno()  # read raw: select() cannot see a file's buffer
        self._unread = b""
        self.events: list[dict[str, Any]] = []

    def _describe(self) -> str:
        self._stderr.flush()
        return f"events so far: {self.events}\nstderr: {self._stderr_path.read_text()[-2000:]}"

    def poll(self, timeout: float) -> dict[str, Any] | None:
        """The next event if one arrives within `timeout` seconds, else None."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._unread:
            readable, _, _ = select.select([self._stdout_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not readable:
                return None
            chunk = os.read(self._stdout_fd, 65536)
            if not chunk:
                raise AssertionError(f"the attacker exited early (code {self.process.poll()})\n{self._describe()}")
            self._unread += chunk
        line, self._unread = self._unread.split(b"\n", 1)
        event = json.loads(line)
        self.events.append(event)
        return event

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.poll(max(0.0, deadline - time.monotonic()))
            if event is not None and predicate(event):
                return event
        raise AssertionError(f"the attacker never reported what was expected\n{self._describe()}")

    def run_to_exit(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        self.wait_for(lambda e: e.get("event") == "exit", timeout)
        return [e for e in self.events if "attack" in e]

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def wait_until(condition: Callable[[], Any], timeout: float = 60.0, what: str = "a condition") -> Any:
    """Poll `condition` until it returns something truthy (returned); AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(0.25, delay * 2)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as status:
        match = re.search(rf"^{key}:\s+(\d+) kB", status.read(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


class PeakRss:
    """The driver's peak resident memory over a block, in MiB above where it started.

    The kernel's high-water mark (VmHWM, reset through /proc/self/clear_refs) catches every
    spike; where it cannot be reset, a sampler every 5 ms stands in.
    """

    def __init__(self) -> None:
        self.start_mib = 0.0
        self.peak_mib = 0.0
        self._exact = False
        self._sampled = 0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def __enter__(self) -> PeakRss:
        self.start_mib = _status_kib("VmRSS") / 1024
        try:
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")  # resets VmHWM to the current RSS
            self._exact = True
        except OSError:
            self._sampler = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self._sampled = max(self._sampled, _status_kib("VmRSS"))

    def __exit__(self, *exc_info: object) -> None:
        if self._exact:
            self.peak_mib = _status_kib("VmHWM") / 1024
        else:
            self._stop.set()
            assert self._sampler is not None
            self._sampler.join()
            self.peak_mib = self._sampled / 1024

    @property
    def growth_mib(self) -> float:
        return self.peak_mib - self.start_mib


def canary_payload_works(path: Path) -> bool:
    """Control: unpickling the attackers' payload in a throwaway process does create `path`."""
    code = "import pickle, sys, attacker; pickle.loads(attacker.canary_pickle(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(path)], cwd=str(ATTACKER.parent), check=True, timeout=60)
    created = path.exists()
    if created:
        os.rmdir(path)
    return created
