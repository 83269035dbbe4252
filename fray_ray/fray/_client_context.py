"""The ContextVar that holds the current Fray client.

`current_client.py` reads and sets it; `LocalClient` sets it in the threads it starts. It has
its own module so that the backends need not import `current_client.py`, which imports them.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fray_ray.fray.client import Client

__all__ = ["current_client_var"]

#: The client made current by `set_current_client` (None: resolve as `current_client` says).
current_client_var: ContextVar[Client | None] = ContextVar("fray_current_client", default=None)
