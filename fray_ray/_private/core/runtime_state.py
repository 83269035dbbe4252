"""The one runtime of this process, as a `CoreRuntime`: how the API and the runtime reach it.

It is kept in `runtime_slot`, which knows nothing of its type so that the values below the
runtime's interface (refs, generators, placement group handles) can reach it too. This module
gives the same functions their types, and says what a task or actor submitted from here
inherits (`effective_runtime_env`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fray_ray._private.core import runtime_slot
from fray_ray._private.core.runtime_env import RuntimeEnv, merge_runtime_envs, parse_runtime_env

if TYPE_CHECKING:  # the slot's functions, with the runtime's type
    import contextvars
    import threading

    from fray_ray._private.core.runtime import CoreRuntime

    def set_auto_init(hook: Callable[[], CoreRuntime]) -> None:
        """Register what `current()` calls when no runtime exists yet."""

    def current_or_none() -> CoreRuntime | None:
        """The runtime of this thread's context, else of this process; None before `init()`."""

    def process_runtime_or_none() -> CoreRuntime | None:
        """This process's runtime, whatever thread asks (in local mode: the driver's)."""

    def current() -> CoreRuntime:
        """The runtime, auto-initialising a local session like Ray does on first use."""

    def install(runtime: CoreRuntime) -> None: ...
    def uninstall(runtime: CoreRuntime) -> None: ...
    def set_context_runtime(runtime: CoreRuntime | None) -> contextvars.Token[Any]: ...
    def reset_context_runtime(token: contextvars.Token[Any]) -> None: ...
    def process_lock() -> threading.Lock: ...

else:  # the same functions: no wrapper on paths every ref and call takes
    set_auto_init = runtime_slot.set_auto_init
    current_or_none = runtime_slot.current_or_none
    process_runtime_or_none = runtime_slot.process_runtime_or_none
    current = runtime_slot.current
    install = runtime_slot.install
    uninstall = runtime_slot.uninstall
    set_context_runtime = runtime_slot.set_context_runtime
    reset_context_runtime = runtime_slot.reset_context_runtime
    process_lock = runtime_slot.process_lock


def effective_runtime_env(own: Mapping[str, Any] | None) -> RuntimeEnv:
    """The runtime env a task or actor submitted from here runs with: `own` (its options'
    runtime_env) on top of what this process's runtime passes on (`runtime.runtime_env`)."""
    runtime = current_or_none()
    inherited = runtime.runtime_env if runtime is not None else RuntimeEnv()
    if not own:
        return inherited
    return merge_runtime_envs(inherited, parse_runtime_env(own, check_paths=runtime is None or runtime.is_driver))
