"""How an actor's process ends: one that ends without meaning to is a crash, whatever its
exit status, and one killed through its ActorService ends its own Iris job.

In Ray, `os._exit(0)` called by an actor's own code is a worker crash: the actor restarts
under `max_restarts` and its calls are retried under `max_task_retries`. Iris restarts only a
job that failed, and a process that exits 0 succeeded. So the actor host replaces `os._exit`
in its process: a status 0 that the host did not plan (by `plan_exit()`: `exit_actor()`,
`ray.kill`, the driver's `Die`, the session's end) becomes `UNPLANNED_EXIT_STATUS`. Forked
children of the actor keep the real behaviour (the guard checks the process id).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import NoReturn

logger = logging.getLogger(__name__)

#: The status an unplanned `os._exit(0)` of the actor's process becomes.
UNPLANNED_EXIT_STATUS = 1

_real_exit = os._exit
_planned = threading.Event()
_guarded_pid: int | None = None


def guard_process_exits() -> None:
    """Install the guard in this process (the actor host's), once."""
    global _guarded_pid
    _guarded_pid = os.getpid()
    os._exit = _exit


def plan_exit() -> None:
    """The host is ending on purpose: a status 0 from here on is a success."""
    _planned.set()


def _exit(status: int) -> NoReturn:
    if status == 0 and not _planned.is_set() and os.getpid() == _guarded_pid:
        status = UNPLANNED_EXIT_STATUS
    _real_exit(status)


def end_own_job() -> None:
    """Ask the controller to terminate the job of this task, then exit (if still alive)."""
    time.sleep(0.05)  # let the reply to `kill` go out first
    try:
        from fray_ray.fray.iris_backend import FrayIrisClient, IrisJobHandle

        client = FrayIrisClient.from_job_info()
        if client.parent_job is not None:
            IrisJobHandle(client, client.parent_job).terminate()
    except Exception:  # noqa: BLE001 - the exit below ends the actor either way
        logger.debug("terminating this actor's job failed", exc_info=True)
    os._exit(0)
