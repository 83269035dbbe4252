"""The reaper: a watchdog process that kills what a cluster leaves behind when its owner dies.

`ProcessGuard` (`_guard.py`) starts one per cluster, in a session of its own, as
`python -I -S _reaper.py OWNER_PID MARKER TEMP_DIR CGROUP`. It imports a few standard modules
only, so it runs within milliseconds of being started and needs nothing of fray_ray.

Its stdin carries one message a line: `+PGID` (a task process group exists), `-PGID` (that
group's leader was reaped), `stop` (an orderly stop follows). The owner's death shows as its
pidfd turning readable, or as EOF on stdin without `stop` first; the reaper then SIGKILLs,
round after round until a round finds nothing (or `SWEEP_DEADLINE_S` passes):

- every process group it was told about,
- every process in the cluster's cgroup and the cgroups below it (when it has one),
- every process whose environment holds MARKER (`FRAY_RAY_CLUSTER_<id>=`), which the task
  processes and all their descendants inherit, including those that left their group (setsid),

then deletes TEMP_DIR (and the temp dirs of other dead owners beside it) and the cgroup, and
exits. After `stop` it makes the same sweep, for descendants that escaped their process group,
and leaves the directories to the owner, which is alive and removes them itself.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

#: Every task process carries `<MARKER_PREFIX><cluster id>=<owner pid>` in its environment.
MARKER_PREFIX = "FRAY_RAY_CLUSTER_"
#: Cluster temp dirs are `<TEMP_PREFIX>*`, with the owner's pid in `<OWNER_FILE>`.
TEMP_PREFIX = "fray-ray-cluster-"
OWNER_FILE = "owner.pid"
#: Cluster cgroups are `<CGROUP_PREFIX><owner pid>-<cluster id>`.
CGROUP_PREFIX = "fray-ray-"
SWEEP_DEADLINE_S = 5.0


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: ask the kernel
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def marked_pids(marker: bytes) -> list[int]:
    """Processes whose environment holds `marker` (those this user may read)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue  # gone, a kernel thread, or not ours to read
        if marker in environ:
            found.append(int(name))
    return found


def cgroup_pids(cgroup: str) -> list[int]:
    """Processes in `cgroup` and every cgroup below it."""
    found: list[int] = []
    if not cgroup:
        return found
    for directory, _, _ in os.walk(cgroup):
        try:
            with open(os.path.join(directory, "cgroup.procs")) as f:
                found.extend(int(line) for line in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def sweep(groups: set[int], cgroup: str, marker: bytes, spare: set[int], deadline_s: float = SWEEP_DEADLINE_S) -> int:
    """SIGKILL everything of the cluster until a round finds nothing; returns how many were hit."""
    hit = 0
    for pgid in sorted(groups):
        try:
            os.killpg(pgid, signal.SIGKILL)  # one signal reaches every member, racing no fork
            hit += 1
        except OSError:
            pass
    groups.clear()
    deadline = time.monotonic() + deadline_s
    pause = 0.001
    while True:
        victims = {pid for pid in cgroup_pids(cgroup) + marked_pids(marker) if pid not in spare}
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                hit += 1
            except OSError:
                pass
        if not victims or time.monotonic() > deadline:
            return hit
        time.sleep(pause)  # let the killed exit before the next look
        pause = min(pause * 2, 0.05)


def remove_temp_dir(path: str, owner: int) -> None:
    """Delete a cluster temp dir, but only one that is recognisably `owner`'s."""
    import shutil

    if not os.path.basename(path).startswith(TEMP_PREFIX):
        return
    try:
        with open(os.path.join(path, OWNER_FILE)) as f:
            if f.read().strip() != str(owner):
                return
    except OSError:
        return
    shutil.rmtree(path, ignore_errors=True)


def remove_orphaned_dirs(parent: str) -> None:
    """Delete the temp dirs in `parent` of clusters whose owner died without stopping them."""
    import shutil

    try:
        names = [n for n in os.listdir(parent) if n.startswith(TEMP_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(parent, name)
        try:
            with open(os.path.join(path, OWNER_FILE)) as owner:
                pid = int(owner.read().strip() or 0)
        except (OSError, ValueError):
            continue  # not ours to judge (older layout, or being created right now)
        if pid and not pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)


def remove_cgroup(path: str, wait_s: float = 2.0) -> bool:
    """rmdir `path` and the cgroups below it, deepest first; True once it is gone."""
    deadline = time.monotonic() + wait_s
    while True:
        for directory, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(directory)
            except OSError:
                pass
        if not os.path.exists(path):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # the last members are still exiting


def remove_stale_cgroups(parent: str) -> None:
    """rmdir the cluster cgroups in `parent` whose owner is dead (its reaper was killed too)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(CGROUP_PREFIX) :].partition("-")[0]
        if owner.isdigit() and not pid_alive(int(owner)):
            remove_cgroup(os.path.join(parent, name), wait_s=0)


def _watch(owner: int) -> int | None:
    """A pidfd for `owner` (readable once it exits), or None where the kernel has none."""
    try:
        return os.pidfd_open(owner)
    except (AttributeError, OSError):
        return None


def _serve(owner: int, groups: set[int]) -> bool:
    """Follow the owner's messages until it stops us (True) or dies (False)."""
    pidfd = _watch(owner)
    if os.getppid() != owner:
        return False  # the owner died before we were watching
    poller = select.poll()
    poller.register(0, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    pending = b""
    stopping = False
    while True:
        events = poller.poll(None if pidfd is not None else 1000)
        if not events and os.getppid() != owner:
            return False
        for fd, _ in events:
            if fd == pidfd:
                return False
            try:
                data = os.read(0, 65536)
            except OSError:
                data = b""
            if not data:
                # EOF: an orderly stop if the owner said so and still lives; else it died.
                return stopping and os.getppid() == owner
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line == b"stop":
                    stopping = True
                elif line[:1] == b"+" and line[1:].isdigit():
                    groups.add(int(line[1:]))
                elif line[:1] == b"-" and line[1:].isdigit():
                    groups.discard(int(line[1:]))


def main(argv: list[str]) -> int:
    owner, marker, temp_dir, cgroup = int(argv[0]), argv[1].encode(), argv[2], argv[3]
    also_remove = argv[4:]  # more cluster dirs of this owner (simulated hosts' shared memory)
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals are for the owner
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    orderly = _serve(owner, groups)
    sweep(groups, cgroup, marker, spare={owner, os.getpid()})
    if not orderly:
        for path in (temp_dir, *also_remove):
            remove_temp_dir(path, owner)
            remove_orphaned_dirs(os.path.dirname(path))
        if cgroup:
            remove_cgroup(cgroup)
    return 0


if __name__ == "__main__":
    sys.stderr.flush()
    os._exit(main(sys.argv[1:]))  # nothing to finalize; the owner may be waiting on this exit
