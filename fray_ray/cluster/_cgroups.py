"""Per-attempt memory cgroups: a job's memory request becomes its attempts' hard limit, and a
kill by the kernel's OOM killer is reported as such, whichever limit ran out.

Each cluster makes one directory `fray-ray-<pid>-<random>` under this process's own memory
cgroup (cgroup v1's memory hierarchy, or the unified v2 hierarchy when it delegates the
memory controller), and each attempt gets a child `attempt-<uid>`, limited to its memory
request if it made one. One without a limit is there to count OOM kills: the kernel counts a
kill in the victim's cgroup whichever limit ran out (the machine's, an enclosing cgroup's).
The task process joins its cgroup before it execs the task (a `sh` prefix writes its pid into
`cgroup.procs`), so whatever it starts is limited and counted too. After the
attempt exits, its OOM-kill counter (v1 `memory.oom_control`, v2 `memory.events`) tells an
OOM kill from any other SIGKILL, and the peak usage says how much memory it held.

When the machine does not allow it (no memory controller, read-only cgroupfs, not Linux),
`MemoryCgroups.open()` returns None and attempts run unlimited, as before.
`FRAY_RAY_MEMORY_CGROUPS=0` turns the feature off.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Sequence

logger = logging.getLogger(__name__)

ENV_SWITCH = "FRAY_RAY_MEMORY_CGROUPS"
CLUSTER_PREFIX = "fray-ray-"
#: The message every OOM report starts with; clients look for "OOM killed".
OOM_HEADLINE = "OOM killed"
_V1_ROOT = "/sys/fs/cgroup/memory"
_V2_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
_JOIN_SCRIPT = 'echo $$ > "$0" && exec "$@"'


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _own_cgroups() -> list[tuple[str, str]]:
    """(controllers, path) for each hierarchy this process is in (from /proc/self/cgroup)."""
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[1], parts[2]))
    return found


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


class AttemptCgroup:
    """One attempt's memory cgroup."""

    def __init__(self, path: str, version: int, limit_bytes: int) -> None:
        self.path = path
        self.version = version
        self.limit_bytes = limit_bytes

    def wrap(self, argv: Sequence[str]) -> tuple[str, ...]:
        """`argv` run by a shell that first moves itself into this cgroup."""
        return ("/bin/sh", "-c", _JOIN_SCRIPT, os.path.join(self.path, "cgroup.procs"), *argv)

    def _counter(self, file: str, key: str) -> int | None:
        try:
            for line in _read(os.path.join(self.path, file)).splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return None

    def oom_kills(self) -> int | None:
        """How many processes the OOM killer ended in this cgroup (None: the kernel does not say)."""
        if self.version == 1:
            return self._counter("memory.oom_control", "oom_kill")
        return self._counter("memory.events", "oom_kill")

    def limit_hits(self) -> int:
        """How often usage hit the limit (v1 failcnt, v2 `max` events)."""
        if self.version == 1:
            try:
                return int(_read(os.path.join(self.path, "memory.failcnt")))
            except (OSError, ValueError):
                return 0
        return self._counter("memory.events", "max") or 0

    def peak_bytes(self) -> int:
        """The most memory the attempt held at once (current usage where no peak is kept)."""
        names = ("memory.max_usage_in_bytes",) if self.version == 1 else ("memory.peak", "memory.current")
        for name in names:
            try:
                return int(_read(os.path.join(self.path, name)))
            except (OSError, ValueError):
                continue
        return 0

    def exit_report(self, returncode: int) -> str:
        """The error text for an attempt that was OOM-killed; "" for any other exit."""
        kills = self.oom_kills()
        if kills is None:  # older kernels count no OOM kills: a SIGKILL at the limit is one
            oom = returncode == -signal.SIGKILL and self.limit_hits() > 0
        else:
            oom = kills > 0
        if not oom:
            return ""
        peak = self.peak_bytes()
        limit = (
            f"memory limit {_mib(self.limit_bytes)} ({self.limit_bytes} bytes)" if self.limit_bytes > 0
            else "no memory limit of its own (it asked for none: the machine's memory, or an enclosing cgroup's, ran out)"
        )
        return (
            f"{OOM_HEADLINE}: the task ran out of memory and the kernel's OOM killer ended it "
            f"(exit by SIGKILL); {limit}, peak usage {_mib(peak)} ({peak} bytes)"
        )

    def remove(self, timeout: float = 5.0) -> bool:
        """Kill what is left inside, then delete the cgroup (and any it holds); True once gone."""
        return _remove_cgroup(self.path, time.monotonic() + timeout)


class MemoryCgroups:
    """The cluster's cgroup directory and its attempts' cgroups. Thread-safe."""

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version
        self._lock = threading.Lock()  # guards _attempts and _closed
        self._attempts: dict[int, AttemptCgroup] = {}
        self._closed = False

    @classmethod
    def open(cls, *, v1_root: str = _V1_ROOT, v2_roots: Sequence[str] = _V2_ROOTS) -> MemoryCgroups | None:
        """A new cluster directory in the first hierarchy that lets us make one, else None."""
        if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
            return None
        name = f"{CLUSTER_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        for controllers, own in _own_cgroups():
            if "memory" in controllers.split(","):
                made = cls._make(os.path.join(v1_root, own.lstrip("/")), name, 1)
                if made is not None:
                    return made
        for controllers, own in _own_cgroups():
            if controllers == "":
                for root in v2_roots:
                    parent = os.path.join(root, own.lstrip("/"))
                    try:
                        if "memory" not in _read(os.path.join(parent, "cgroup.subtree_control")).split():
                            continue
                    except OSError:
                        continue
                    made = cls._make(parent, name, 2)
                    if made is not None:
                        return made
        return None

    @classmethod
    def _make(cls, parent: str, name: str, version: int) -> MemoryCgroups | None:
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError:
            return None
        if version == 2:
            try:  # children get the memory controller too
                _write(os.path.join(path, "cgroup.subtree_control"), "+memory")
            except OSError:
                os.rmdir(path)
                return None
        cls._remove_orphans(parent)
        return cls(path, version)

    @staticmethod
    def _remove_orphans(parent: str) -> None:
        """Remove the directories of clusters whose process is gone (they are empty by now)."""
        try:
            names = [n for n in os.listdir(parent) if n.startswith(CLUSTER_PREFIX)]
        except OSError:
            return
        for name in names:
            pid = name[len(CLUSTER_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                _remove_tree(os.path.join(parent, name))

    def attempt(self, uid: int, limit_bytes: int) -> AttemptCgroup | None:
        """A cgroup limiting attempt `uid` to `limit_bytes` (0: no limit); None if it cannot be made."""
        path = os.path.join(self.path, f"attempt-{uid}")
        limit_file = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        with self._lock:
            if self._closed:
                return None
            try:
                os.mkdir(path)
                if limit_bytes > 0:
                    _write(os.path.join(path, limit_file), str(limit_bytes))
                if self.version == 2 and limit_bytes > 0:
                    try:
                        _write(os.path.join(path, "memory.swap.max"), "0")
                    except OSError:
                        pass  # no swap accounting here
            except OSError as exc:
                logger.warning("cannot make a memory cgroup for attempt %s: %s", uid, exc)
                try:
                    os.rmdir(path)
                except OSError:
                    pass
                return None
            cgroup = AttemptCgroup(path, self.version, limit_bytes)
            self._attempts[uid] = cgroup
        return cgroup

    def release(self, uid: int) -> None:
        """The attempt ended: remove its cgroup."""
        with self._lock:
            cgroup = self._attempts.pop(uid, None)
        if cgroup is not None:
            cgroup.remove()

    def close(self) -> None:
        """Remove every attempt's cgroup and the cluster's directory. Idempotent."""
        with self._lock:
            self._closed = True
            attempts = list(self._attempts.values())
            self._attempts.clear()
        for cgroup in attempts:
            cgroup.remove()
        _remove_tree(self.path)


def _remove_tree(path: str) -> None:
    _remove_cgroup(path, time.monotonic() + 5.0)


def _remove_cgroup(path: str, deadline: float) -> bool:
    """rmdir a cgroup after its child cgroups (a task may have made its own), killing any
    process still inside; True once it is gone."""
    while True:
        try:
            children = [os.path.join(path, n) for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))]
        except FileNotFoundError:
            return True
        except OSError:
            children = []
        for child in children:
            _remove_cgroup(child, deadline)
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
        try:
            pids = [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > deadline:
            logger.warning("memory cgroup %s could not be removed", path)
            return False
        time.sleep(0.01)
