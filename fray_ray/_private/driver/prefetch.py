"""How many tasks an executor may hold queued behind the one it runs: more for short tasks.

A queued task hides the round trip between an executor finishing a task and the driver sending
the next one. Two are enough for tasks that run a millisecond or more; tasks much shorter than
the round trip (about 0.1-0.2 ms here, more under load) would leave their executor idle between
them, and each would travel, and be answered, in a frame of its own. So the depth grows as a
pool's tasks get shorter, up to `MAX_DEPTH`: the driver then sends several at once, in one
frame, and takes their answers in batches. What deeper queues cost is balance at the end of a
batch: at most `MAX_DEPTH` short tasks (a few milliseconds in all) wait behind a busy executor
while another is idle. A long task among short ones keeps at most `DEPTH` behind it once it
has run `LONG_RUNNING_S`, and hands those back to an executor that falls idle meanwhile
(`withdrawals`); a task that blocks in `get` hands its queue back either way.

Run times are what executors measure (`TaskDone.ran_s`), averaged per pool.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

#: Queued tasks per executor for tasks of unknown or at least `SHORT_TASK_S` run time.
DEPTH = 2
#: Queued tasks per executor for the shortest tasks.
MAX_DEPTH = 16
#: Tasks that run this long or longer get `DEPTH`; shorter ones proportionally more.
SHORT_TASK_S = 0.001
#: A running task the driver has seen run this long is not a short one, whatever its pool's
#: average says: its executor takes no more than `DEPTH` queued tasks behind it.
LONG_RUNNING_S = 0.01
#: Weight of the newest run time in a pool's running average.
_NEWEST_WEIGHT = 0.2


class PrefetchDepth:
    """A running average of each pool's task run times, and the depth it allows. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._average_s: dict[Hashable, float] = {}

    def ran(self, pool: Hashable, seconds: float) -> None:
        """A task of `pool` ran for `seconds` (as its executor measured it)."""
        if not seconds >= 0:  # NaN or negative: a clock gone wrong says nothing
            return
        with self._lock:
            average = self._average_s.get(pool)
            self._average_s[pool] = seconds if average is None else average + _NEWEST_WEIGHT * (seconds - average)

    def depth(self, pool: Hashable) -> int:
        """How many tasks an executor of `pool` may hold queued behind its running one."""
        average = self._average_s.get(pool)
        if average is None or average >= SHORT_TASK_S:
            return DEPTH
        return min(MAX_DEPTH, max(DEPTH, int(DEPTH * SHORT_TASK_S / max(average, 1e-6))))
