"""Containment of a cluster's processes, so none outlives the cluster, even a SIGKILLed owner.

Three layers, each covering what the one before can miss:

1. Every task attempt is a process group, and its leader dies with the supervisor thread
   (PR_SET_PDEATHSIG, `_process.py`); the group is killed when the leader exits.
2. Every task process carries the cluster's marker variable in its environment, and so does
   every descendant that does not clear its environment, including one that called setsid.
3. Where the cgroup v1 `pids` hierarchy is writable (as root, usually), the supervisor thread
   joins a cgroup made for the cluster, so every task process is born inside it and no
   descendant can leave it, whatever it does with its session or environment.

`ProcessGuard` sets these up and starts the reaper (`_reaper.py`), a small process in its own
session that watches the owner (this process) through a pidfd. If the owner dies, by SIGKILL,
SIGTERM's default action or anything else, the reaper kills the known process groups, the
cgroup's processes and every marked process, then deletes the cluster's temp dir and cgroup.
On an orderly `stop()` it makes the same sweep (for descendants that left their group) before
exiting. Without a cgroup, a descendant that both leaves its process group and drops its
environment can outlive the cluster; without /proc, only the process groups are swept.
"""

from __future__ import annotations

import enum
import logging
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Mapping

import fray_ray.cluster._reaper as _reaper  # not via the package, whose __init__ imports this module

logger = logging.getLogger(__name__)

#: Messages the reaper has not taken yet; beyond this the guard stops reporting groups.
_MAX_PENDING = 1 << 20


class GuardState(enum.Enum):
    NEW = "new"  # configured; nothing started
    RUNNING = "running"  # the reaper watches this process
    STOPPED = "stopped"  # the reaper made its last sweep and exited; the cgroup is gone


def pids_cgroup_parent() -> str | None:
    """This process's cgroup in the v1 `pids` hierarchy, if that is mounted and writable."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = f.read().splitlines()
        with open("/proc/self/cgroup") as f:
            memberships = f.read().splitlines()
    except OSError:
        return None
    mount = next(
        (fields[1] for fields in (line.split() for line in mounts)
         if len(fields) > 3 and fields[2] == "cgroup" and "pids" in fields[3].split(",")),
        None,
    )
    relative = next(
        (parts[2] for parts in (line.split(":", 2) for line in memberships)
         if len(parts) == 3 and "pids" in parts[1].split(",")),
        None,
    )
    if mount is None or relative is None:
        return None
    parent = os.path.join(mount, relative.lstrip("/"))
    return parent if os.access(parent, os.W_OK) else None


class ProcessGuard:
    """Marks, cages and reaps one cluster's processes. `start()`, hand it to the
    `ProcessSupervisor`, and `stop()` after the supervisor has stopped."""

    def __init__(self, temp_dir: str, *, use_cgroup: bool = True, also_remove: tuple[str, ...] = ()) -> None:
        """`also_remove`: more owner-marked cluster dirs (named like the temp dir) the reaper
        deletes if the owner dies, made before or after `start`."""
        self._temp_dir = temp_dir
        self._also_remove = also_remove
        self._use_cgroup = use_cgroup
        self._owner = os.getpid()
        self._lock = threading.Lock()  # guards _state, _pipe and _pending
        self._state = GuardState.NEW
        cluster_id = secrets.token_hex(8)
        self._marker_name = f"{_reaper.MARKER_PREFIX}{cluster_id}"
        self._environment = {self._marker_name: str(self._owner)}
        self._cgroup_name = f"{_reaper.CGROUP_PREFIX}{self._owner}-{cluster_id}"
        self._cgroup: str | None = None
        self._reaper: subprocess.Popen | None = None
        self._pipe: int | None = None  # write end of the reaper's stdin, non-blocking
        self._pending = b""

    # ---- what the supervisor uses -------------------------------------------------------------

    @property
    def environment(self) -> Mapping[str, str]:
        """Variables every task process gets: the cluster's marker."""
        return self._environment

    @property
    def marker(self) -> str:
        """`NAME=` as it appears in /proc/<pid>/environ of every marked process."""
        return f"{self._marker_name}="

    @property
    def cgroup(self) -> str | None:
        """The cluster's cgroup directory, or None where none could be made."""
        return self._cgroup

    @property
    def reaper_pid(self) -> int | None:
        return self._reaper.pid if self._reaper is not None else None

    def enter_thread(self) -> None:
        """Move the calling thread (the supervisor's) into the cluster's cgroup, so every
        process it forks is born there. The v1 hierarchy places threads one by one."""
        if self._cgroup is None:
            return
        try:
            with open(os.path.join(self._cgroup, "tasks"), "w") as f:
                f.write(str(threading.get_native_id()))
        except OSError as exc:
            logger.info("task processes run without a cgroup (%s): %s", self._cgroup, exc)

    def group_started(self, pgid: int) -> None:
        self._send(b"+%d\n" % pgid)

    def group_reaped(self, pgid: int) -> None:
        self._send(b"-%d\n" % pgid)

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ProcessGuard:
        """Make the cgroup (where possible) and start the reaper; does not wait for it."""
        with self._lock:
            if self._state != GuardState.NEW:
                raise RuntimeError(f"process guard is {self._state.value}")
            self._state = GuardState.RUNNING
        if self._use_cgroup:
            self._cgroup = self._make_cgroup()
        environment = {k: v for k, v in os.environ.items() if not k.startswith(_reaper.MARKER_PREFIX)}
        argv = [sys.executable, "-I", "-S", os.path.abspath(_reaper.__file__), str(self._owner),
                self.marker, self._temp_dir, self._cgroup or "", *self._also_remove]
        try:
            self._reaper = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                env=environment,
                cwd="/",
                close_fds=True,
                start_new_session=True,  # Ctrl-C and a kill of the owner's group leave it running
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            logger.warning("cannot start the cluster's reaper (%s): processes may outlive a killed owner", exc)
            return self
        assert self._reaper.stdin is not None
        self._pipe = self._reaper.stdin.fileno()
        os.set_blocking(self._pipe, False)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Have the reaper sweep once more and exit; remove the cgroup. Idempotent, and a no-op
        in a forked child (its parent's cluster is not its to stop)."""
        with self._lock:
            if self._state != GuardState.RUNNING or os.getpid() != self._owner:
                self._state = GuardState.STOPPED
                return
            self._state = GuardState.STOPPED
            pipe, self._pipe = self._pipe, None
            message, self._pending = self._pending + b"stop\n", b""
        reaper = self._reaper
        if reaper is not None and reaper.stdin is not None:
            try:
                if pipe is not None:
                    os.set_blocking(pipe, True)
                    os.write(pipe, message)
            except OSError:
                pass  # the reaper is gone already
            reaper.stdin.close()
            try:
                reaper.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("the cluster's reaper did not finish within %.0f s; killing it", timeout)
                reaper.kill()
                reaper.wait()
        if self._cgroup is not None and not _reaper.remove_cgroup(self._cgroup):
            logger.warning("could not remove the cluster's cgroup %s", self._cgroup)

    # ---- internals ------------------------------------------------------------------------------

    def _make_cgroup(self) -> str | None:
        parent = pids_cgroup_parent()
        if parent is None:
            return None
        _reaper.remove_stale_cgroups(parent)
        path = os.path.join(parent, self._cgroup_name)
        try:
            os.mkdir(path)
        except OSError as exc:
            logger.info("task processes run without a cgroup: cannot create %s: %s", path, exc)
            return None
        return path

    def _send(self, line: bytes) -> None:
        with self._lock:
            if self._pipe is None:
                return
            self._pending += line
            try:
                written = os.write(self._pipe, self._pending)
                self._pending = self._pending[written:]
            except BlockingIOError:
                pass  # the reaper is busy; the rest goes out with the next message
            except OSError as exc:
                logger.warning("the cluster's reaper is gone (%s): processes may outlive a killed owner", exc)
                self._pipe = None
                self._pending = b""
                return
            if len(self._pending) > _MAX_PENDING:
                logger.warning("the cluster's reaper stopped reading; no longer reporting process groups to it")
                self._pipe = None
                self._pending = b""
