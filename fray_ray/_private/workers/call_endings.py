"""How user code ends beyond returning a value: the items a generator yields, sent to the
driver as they come, and `sys.exit()`, which ends the worker with the status it asked for.
Executors (tasks) and actor hosts (calls) both end user code this way."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from fray_ray._private import messages
from fray_ray._private.messages import Yield
from fray_ray._private.objects.serialization import serialize
from fray_ray._private.observe.logs import flush_forwarded
from fray_ray._private.stream.protocol import Connection


def send_item(connection: Connection, stream_id: bytes, generator: Any) -> int:
    """Iterate a generator, sending each item as `yield`; returns how many were sent."""
    index = 0
    for item in generator:
        index += 1
        messages.notify(connection, Yield(stream_id, index, serialize(item)))
    return index


async def send_items_async(connection: Connection, stream_id: bytes, generator: Any) -> int:
    """The same for an async generator."""
    index = 0
    async for item in generator:
        index += 1
        messages.notify(connection, Yield(stream_id, index, serialize(item)))
    return index


def exit_worker(exc: SystemExit) -> NoReturn:
    """End this worker process with the status `sys.exit()` asked for (a message is printed
    and means 1, as Python does), its output sent first."""
    code = exc.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    flush_forwarded()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))
