"""The Ray layer's runtime, a stack of packages read from the bottom up: `stream` (the stream
protocol), `objects` (ids, serialization, the object table and store), `core` (what the API
hands out and what a call carries), `options`, `messages` (what a driver and its workers say),
`observe` (what a run records), then `driver` and `workers` side by side, and `bootstrap`
(building the driver for `init()`) on top. Each imports only those below it; ARCHITECTURE.md,
"The runtime's packages", has the map.

Beside them, as in Ray's `ray._private`, stand the few modules of Ray's private names that
public training code uses (`services`, `state`, `accelerators`): they sit on the public API,
above the runtime, and are loaded on first use (`ray._private.services` works after a plain
`import ray`, as in Ray).
"""

import importlib
from types import ModuleType

#: Ray's private modules that fray_ray provides (the survey in COMPATIBILITY.md says why these).
RAY_PRIVATE_MODULES = frozenset({"accelerators", "services", "state"})


def __getattr__(name: str) -> ModuleType:
    if name in RAY_PRIVATE_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
