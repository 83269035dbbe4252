"""`ray.timeline()`: the session's task attempts as Chrome trace events (chrome://tracing, Perfetto).

One complete event (`"ph": "X"`) per ended attempt of a task, actor call or actor creation,
shaped as Ray writes them: `cat` is `task::<name>`, `pid` the node's address, `tid` the
worker (`worker:<id>`, or the actor's process), `ts` and `dur` in microseconds, and `args`
with the task's name, id and final state. The times are those the driver recorded
(`task_events`), so an attempt spans from when its worker took it to when its result arrived.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING, Any

from fray_ray._private.driver.nodes import node_id_for
from fray_ray._private.observe.task_events import TaskEvent, TaskType

if TYPE_CHECKING:
    from fray_ray._private.driver.state_source import DriverState


def _trace_name(event: TaskEvent) -> str:
    if event.kind is TaskType.NORMAL_TASK:
        return event.func_name
    return event.name.rpartition(".")[2]  # Ray names actor methods by the method alone


def chrome_trace(driver: DriverState) -> list[dict[str, Any]]:
    """The trace events of every ended attempt the driver still records, in start order."""
    addresses = {node.node_id_hex: node.address for node in driver.view.nodes()}
    trace = []
    for event in driver.task_events.snapshot():
        if event.ended is None:
            continue
        start = event.started if event.started is not None else event.ended
        node_hex = node_id_for(event.host).hex() if event.host else ""
        worker = event.worker_id.hex() if event.worker_id else f"pid-{event.worker_pid or 0}"
        name = _trace_name(event)
        trace.append({
            "cat": f"task::{event.name}",
            "name": name,
            "pid": addresses.get(node_hex, driver.node_ip),
            "tid": f"worker:{worker}",
            "ts": start * 1e6,
            "dur": max(0.0, (event.ended - start) * 1e6),
            "ph": "X",
            "cname": "generic_work",
            "args": {"name": name, "task_id": event.task_id.hex(), "attempt_number": event.attempt,
                     "state": str(event.state)},
        })
    trace.sort(key=lambda e: e["ts"])
    return trace


def write_trace(trace: list[dict[str, Any]], filename: str | os.PathLike[str]) -> None:
    """Write `trace` as JSON to `filename`, whole or not at all (a temp file renamed into place)."""
    target = os.fspath(filename)
    directory = os.path.dirname(os.path.abspath(target))
    fd, temp = tempfile.mkstemp(prefix=".timeline-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(trace, out)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
