"""How user code ends beyond returning a value: the items a generator yields, sent as they
come (to the driver, or to the caller of a direct call), and `sys.exit()`, which ends the
worker with the status it asked for. Executors (tasks) and actor hosts (calls) both end user
code this way."""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from fray_ray._private import messages
from fray_ray._private.messages import Yield
from fray_ray._private.objects.ids import object_id_for
from fray_ray._private.objects.serialization import serialize
from fray_ray._private.observe.logs import flush_forwarded
from fray_ray._private.stream.protocol import Connection
from fray_ray._private.workers.held_results import WORKER_HOLDER

#: Sends one item of a generator where its stream is kept (the driver, or a direct call's caller).
SendItem = Callable[[Yield], None]


def to_driver(connection: Connection, *, keep_large: bool = False) -> SendItem:
    """Items sent on `connection`, the session with the driver; with `keep_large`, one over
    the inline limit stays in this process and the driver hears where it is."""
    if not keep_large:
        return lambda item: messages.notify(connection, item)

    def send(item: Yield) -> None:
        (item.value,), item.held = WORKER_HOLDER.keep_large([item.value], [object_id_for(item.stream, item.index)])
        messages.notify(connection, item)

    return send


def send_item(send: SendItem, stream_id: bytes, generator: Any) -> int:
    """Iterate a generator, sending each item as `yield`; returns how many were sent."""
    index = 0
    for item in generator:
        index += 1
        send(Yield(stream_id, index, serialize(item)))
    return index


async def send_items_async(send: SendItem, stream_id: bytes, generator: Any) -> int:
    """The same for an async generator."""
    index = 0
    async for item in generator:
        index += 1
        send(Yield(stream_id, index, serialize(item)))
    return index


def send_any_items(send: SendItem, stream_id: bytes, generator: Any) -> None:
    """Send the items of a generator method's result, sync or async (run here to its end)."""
    if inspect.isasyncgen(generator):
        asyncio.run(send_items_async(send, stream_id, generator))
    else:
        send_item(send, stream_id, generator)


async def send_any_items_async(send: SendItem, stream_id: bytes, generator: Any) -> None:
    """The same on an event loop (an async actor's)."""
    if inspect.isasyncgen(generator):
        await send_items_async(send, stream_id, generator)
    else:
        send_item(send, stream_id, generator)


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
