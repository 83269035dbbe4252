"""The processes of one benchmark session and their memory, read from /proc (no psutil).

A session is the driver, every process below it, and every process that carries the run's
marker in its environment (children inherit it, so daemons that re-parent themselves, such as
Ray's raylet and GCS or fray_ray's reaper, are still found). Memory comes from
/proc/<pid>/smaps_rollup: RSS counts a shared page once per process that maps it, PSS divides
it among them, so the PSS of all processes of a session adds up to what the session costs.
"""

from __future__ import annotations

import os
import time
from typing import Any

# Environment variable that marks every process started by one benchmark run.
MARK_ENV = "FRAY_BENCH_MARK"


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None if it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    rest = text[text.rfind(")") + 2 :].split()
    return rest[0], int(rest[1])


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> set[int]:
    """`root` and every live (non-zombie) process below it."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        st = _stat(pid)
        if st and st[0] != "Z":
            children.setdefault(st[1], []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def marked_pids(mark: str, exclude: frozenset[int] = frozenset()) -> set[int]:
    """Live processes whose environment carries MARK_ENV=mark (needs same user or root)."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = set()
    for pid in all_pids():
        if pid in exclude:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            st = _stat(pid)
            if st and st[0] != "Z":
                found.add(pid)
    return found


def session_pids() -> set[int]:
    """This driver and every process it started, directly or through re-parented daemons."""
    pids = descendants(os.getpid())
    mark = os.environ.get(MARK_ENV)
    if mark:
        pids |= marked_pids(mark)
    return pids


def rollup_kib(pid: int) -> dict[str, int]:
    """Rss and Pss (KiB) of one process from smaps_rollup; zeros if it is gone."""
    out = {"Rss": 0, "Pss": 0}
    for line in (_read(f"/proc/{pid}/smaps_rollup") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in out:
            out[key] = int(rest.split()[0])
    return out


def process_name(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline") or ""
    parts = [p for p in raw.split("\0") if p]
    if not parts:
        return (_read(f"/proc/{pid}/comm") or "?").strip()
    name = os.path.basename(parts[0])
    if name.startswith("python") and len(parts) > 1:
        arg = parts[2] if parts[1] in ("-u", "-m") and len(parts) > 2 else parts[1]
        name = f"{name} {os.path.basename(arg)}"
    return name[:60]


def memory_snapshot(pids: set[int]) -> dict[str, Any]:
    """Summed RSS and PSS (MiB) of `pids`, and the largest processes by RSS."""
    rollups = {pid: rollup_kib(pid) for pid in pids}
    alive = {pid: r for pid, r in rollups.items() if r["Rss"] or r["Pss"]}
    return {
        "rss_mib": sum(r["Rss"] for r in alive.values()) / 1024,
        "pss_mib": sum(r["Pss"] for r in alive.values()) / 1024,
        "processes": len(alive),
        "by_process": sorted(((process_name(pid), round(r["Rss"] / 1024, 1)) for pid, r in alive.items()), key=lambda x: -x[1]),
    }


def mem_available_bytes() -> int:
    """MemAvailable of the machine (what can still be allocated without swapping or OOM)."""
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def mem_total_bytes() -> int:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def settle_processes(min_settle_s: float = 1.0, stable_s: float = 1.5, poll_s: float = 0.25, max_s: float = 20.0) -> tuple[set[int], float]:
    """Wait at least `min_settle_s`, then until the session's process set is unchanged for `stable_s`."""
    start = time.perf_counter()
    time.sleep(min_settle_s)
    last, since = session_pids(), time.perf_counter()
    while time.perf_counter() - start < max_s:
        time.sleep(poll_s)
        now = session_pids()
        if now != last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= stable_s:
            break
    return last, time.perf_counter() - start


def wait_children_gone(timeout_s: float) -> float | None:
    """Seconds until no process of this session but the driver is left; None on timeout."""
    start = time.perf_counter()
    me = os.getpid()
    while time.perf_counter() - start < timeout_s:
        if session_pids() <= {me}:
            return time.perf_counter() - start
        time.sleep(0.02)
    return None


def loadavg() -> str:
    text = _read("/proc/loadavg")
    return " ".join(text.split()[:3]) if text else "?"


def _cpu_ticks() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot."""
    text = _read("/proc/stat") or "cpu 0 0 0 1"
    fields = [int(x) for x in text.splitlines()[0].split()[1:]]
    return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)


def wait_for_idle_cpu(idle_fraction: float = 0.9, window_s: float = 1.0, limit_s: float = 60.0) -> tuple[float, float]:
    """Wait until the CPUs were at least `idle_fraction` idle over one `window_s` (at most `limit_s`).

    The load average is a slow mean: after a shape that ran hundreds of processes it stays high
    for minutes on a machine that is already idle, so it cannot say whether the next shape starts
    on a quiet machine. Returns (seconds waited, idle fraction of the last window)."""
    started = time.monotonic()
    while True:
        idle0, total0 = _cpu_ticks()
        time.sleep(window_s)
        idle1, total1 = _cpu_ticks()
        idle = (idle1 - idle0) / max(1, total1 - total0)
        waited = time.monotonic() - started
        if idle >= idle_fraction or waited >= limit_s:
            return waited, idle
