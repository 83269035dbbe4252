"""Where the calling thread's next result will come from, so that `get` can read it itself.

A synchronous loop (`get(actor.f.remote())`, `get(task.remote())`) sends one call and waits
for its answer alone. Its answer arrives on the one connection the call went out on, and if
the waiting thread reads that connection itself (`Connection.serve_until`) no reader thread
has to wake it. The sender leaves a hint here (per thread, one deep) when it sends a call or
task that is the only one in flight on its connection; `get` of exactly that call's result
takes it. A hint can be wrong (the call is retried elsewhere, cancelled, its actor restarts):
the result then arrives another way, and whatever fulfils it wakes the reading thread.
"""

from __future__ import annotations

import threading
from typing import Any

_hints = threading.local()


def after_send(return_ids: list[bytes], connection: Any, alone: bool) -> None:
    """This thread just sent the call that produces `return_ids` on `connection`, `alone` (the
    only call in flight there) or behind others (its earlier hint no longer holds then)."""
    _hints.last = (return_ids[0], connection) if alone and return_ids else None


def take(object_id: bytes) -> Any | None:
    """The connection `object_id` should arrive on, if this thread's last hint is about it."""
    last = getattr(_hints, "last", None)
    if last is None or last[0] != object_id:
        return None
    _hints.last = None
    return last[1]
