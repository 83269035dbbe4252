"""What the process supervisor runs and whom it tells, and its record of each running process.

`ProcessSpec` is a launch, `ProcessListener` hears of one process's life, `SpawnGuard` is the
containment applied to all of them (`_guard.ProcessGuard`); `_Running` and `_Stream` are the
supervisor's bookkeeping for a process and its pipes. They live apart from `_process.py` so
that the supervisor's two halves, spawning (`_process.py`) and forking from the worker template
(`_process_forks.py`), share them without importing each other.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from fray_ray.cluster._template import ForkCandidate


class ProcessListener(Protocol):
    """Receives one process's events, on the supervisor thread (never under its lock)."""

    def process_started(self, pid: int) -> None: ...

    def process_output(self, source: str, line: str, timestamp_ms: int) -> None: ...

    def process_exited(self, returncode: int, error: str) -> None:
        """`returncode` as Popen reports it (negative = killed by that signal); `error` is set
        when the process could not be started at all."""


class SpawnGuard(Protocol):
    """Containment applied to every process the supervisor starts (see `_guard.ProcessGuard`).
    Called on the supervisor thread only."""

    @property
    def environment(self) -> Mapping[str, str]:
        """Added to every process's environment."""
        ...

    def enter_thread(self) -> None:
        """Called once, first thing on the supervisor thread (before it forks anything)."""

    def group_started(self, pgid: int) -> None: ...

    def group_reaped(self, pgid: int) -> None: ...


@dataclass(frozen=True)
class ProcessSpec:
    """What to run: argv in cwd with exactly env; `fork` when it may fork from the template."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    fork: ForkCandidate | None = None


class _Stream:
    __slots__ = ("source", "fd", "buffer", "owned_fd")

    def __init__(self, source: str, fd: int, owned: bool = False) -> None:
        self.source = source
        self.fd = fd  # -1 once read to the end
        self.buffer = b""
        self.owned_fd = fd if owned else -1  # closed by us (not by a Popen's pipe objects)


class _Running:
    __slots__ = ("key", "pid", "popen", "pidfd", "listener", "streams", "waiter", "returncode")

    def __init__(self, key: int, pid: int, popen: subprocess.Popen | None, listener: ProcessListener) -> None:
        self.key = key
        self.pid = pid
        self.popen = popen  # None: forked by the template, which is its parent
        self.pidfd: int | None = None
        self.listener = listener
        self.streams: list[_Stream] = []
        self.waiter: threading.Thread | None = None
        self.returncode: int | None = None  # a forked child's, as the template reported it


class SupervisorState(enum.Enum):
    NEW = "new"  # constructed; nothing started
    RUNNING = "running"  # the thread runs and accepts spawns
    STOPPED = "stopped"  # every process killed and reaped, the thread joined


def kill_group_or_leader(pid: int) -> None:
    """SIGKILL the process group that unreaped `pid` leads. A child just forked from the
    worker template may not lead its group yet (it calls setsid first thing, a moment after
    the template reported it): then there is no such group, and the child itself is killed,
    before it could have started anything else."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    except PermissionError:
        pass
