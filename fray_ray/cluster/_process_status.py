"""What GetProcessStatus reports about the controller's own process (Iris's `ProcessInfo`).

Read from the standard library and `/proc` where the platform has it; a figure that cannot be
read is left 0, which Iris's clients show as unknown.
"""

from __future__ import annotations

import getpass
import os
import platform
import resource
import socket
import threading
import time

from fray_ray.iris.rpc import job_pb2

_STARTED = time.monotonic()


def _memory_total_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _memory_bytes() -> tuple[int, int]:
    """(resident, virtual) bytes of this process, from /proc where it exists."""
    try:
        with open("/proc/self/statm") as statm:
            virtual_pages, resident_pages = (int(v) for v in statm.read().split()[:2])
        page = os.sysconf("SC_PAGE_SIZE")
        return resident_pages * page, virtual_pages * page
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 0


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def process_info() -> job_pb2.ProcessInfo:
    """This process: host, pid, Python, uptime, memory, threads, descriptors."""
    rss, vms = _memory_bytes()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return job_pb2.ProcessInfo(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        python_version=platform.python_version(),
        uptime_ms=int((time.monotonic() - _STARTED) * 1000),
        memory_rss_bytes=rss,
        memory_vms_bytes=vms,
        thread_count=threading.active_count(),
        open_fd_count=_open_fds(),
        memory_total_bytes=_memory_total_bytes(),
        cpu_count=os.cpu_count() or 0,
        provenance=job_pb2.Provenance(built_by=user),
    )
