"""Ray's options for tasks, actors and actor methods: one table, checked keywords, typed values.

- `model`: what a row of the table is (`Option`, `Kind`, `Where`, `Default`, `UNSET`).
- `table`: every option with its types, check, default and where fray_ray honours it.
- `checks`, `labels`, `quantities`: the value checks, with Ray's exception types and words.
- `validation`: checking keywords against the table; the `@remote`/`@method` decorator forms.
- `values`: `TaskOptions`, `ActorOptions`, `MethodOptions`, the frozen values the runtime reads.
- `rendering`: the table as markdown (`docs/ray_options.md`) and as `remote`'s docstring.
"""

from __future__ import annotations

from fray_ray._private.options.model import UNSET, Kind, Option, Where
from fray_ray._private.options.table import (
    ACTOR_OPTION_KEYS,
    ALL_OPTION_KEYS,
    FRAY_OPTION_KEYS,
    METHOD_OPTION_KEYS,
    TASK_OPTION_KEYS,
)
from fray_ray._private.options.validation import (
    check_decorator_options,
    check_method_call_keys,
    check_remote_target,
    is_async_actor_class,
    is_generator_function,
    split_method_args,
    split_remote_args,
    validate_actor_options,
    validate_method_options,
    validate_task_options,
)
from fray_ray._private.options.values import ActorOptions, MethodOptions, TaskOptions

__all__ = [
    "ACTOR_OPTION_KEYS",
    "ALL_OPTION_KEYS",
    "FRAY_OPTION_KEYS",
    "METHOD_OPTION_KEYS",
    "TASK_OPTION_KEYS",
    "UNSET",
    "ActorOptions",
    "Kind",
    "MethodOptions",
    "Option",
    "TaskOptions",
    "Where",
    "check_decorator_options",
    "check_method_call_keys",
    "check_remote_target",
    "is_async_actor_class",
    "is_generator_function",
    "split_method_args",
    "split_remote_args",
    "validate_actor_options",
    "validate_method_options",
    "validate_task_options",
]
