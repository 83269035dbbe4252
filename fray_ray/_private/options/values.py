"""The typed option values the runtime reads: `TaskOptions`, `ActorOptions`, `MethodOptions`.

The keywords given at each layer (decorator → `.options()` → call) are checked by
`validation.py` and parsed once into one of these frozen values; their defaults come from the
table (`table.py`), nowhere else. `given` keeps the keywords that were set explicitly (what Ray
exposes as `remote_fn._default_options`).

>>> opts = TaskOptions.from_options({"num_cpus": 2, "resources": {"TPU": 4}})
>>> opts.resource_demand()
{'CPU': 2.0, 'GPU': 0.0, 'memory': 0, 'TPU': 4.0}
>>> opts.merge({"max_retries": 0}).max_retries
0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import fray_ray._private.options.checks as checks
from fray_ray._private.core.placement_group_handle import PlacementGroup
from fray_ray._private.core.scheduling_strategies import SchedulingStrategyT
from fray_ray._private.options.model import UNSET, Context, Kind, NumReturns, RetryExceptions, Unset
from fray_ray._private.options.quantities import check_quantity
from fray_ray._private.options.table import default
from fray_ray._private.options.validation import (
    validate_actor_options,
    validate_method_options,
    validate_task_options,
)

__all__ = ["ActorOptions", "MethodOptions", "TaskOptions"]


def _default(kind: Kind, key: str) -> Any:
    """A dataclass field whose default is the table's (a mapping default is copied per value)."""
    value = default(kind, key)
    if isinstance(value, Mapping):
        return dataclasses.field(default_factory=lambda: dict(value))
    return dataclasses.field(default=value)


def _bytes(value: float) -> int:
    return math.ceil(value)


def _custom_resources(value: Mapping[str, float]) -> dict[str, float]:
    return {name: float(amount) for name, amount in value.items()}


def _retry_value(value: bool | list[Any] | tuple[Any, ...]) -> RetryExceptions:
    return value if isinstance(value, bool) else tuple(value)


# How a validated keyword becomes a field value; keys not listed are taken as they are.
_NORMALISE: Final[dict[str, Callable[[Any], Any]]] = {
    "num_cpus": float,
    "num_gpus": float,
    "memory": _bytes,
    "resources": _custom_resources,
    "retry_exceptions": _retry_value,
    "concurrency_groups": checks.normalise_groups,
    "fallback_strategy": tuple,
    "label_selector": dict,
    "_labels": dict,
    "runtime_env": dict,
    "tensor_transport": str.upper,
}


def _fields(given: Mapping[str, Any]) -> dict[str, Any]:
    """Field values for the keywords given; None means "default", so it is left out."""
    return {
        key.lstrip("_"): _NORMALISE.get(key, _identity)(value)
        for key, value in given.items()
        if value is not None
    }


def _identity(value: Any) -> Any:
    return value


def _check_placement(options: _Placement) -> None:
    # The deprecated placement_group_* keywords are ignored when a strategy is given.
    if (
        options.placement_group_bundle_index != -1
        and options.placement_group is None
        and options.scheduling_strategy is None
    ):
        raise ValueError("If placement group is not set, the value of bundle index must be -1.")


class _Placement:
    """Fields and helpers shared by task and actor options (no state of its own)."""

    num_gpus: float
    memory: int
    resources: Mapping[str, float]
    runtime_env: Mapping[str, Any] | None
    placement_group: PlacementGroup | str | None
    placement_group_bundle_index: int
    scheduling_strategy: SchedulingStrategyT
    tpu: str | None
    num_slices: int
    gpu: str | None
    num_hosts: int
    gang: bytes | None

    def _demand(self, cpus: float) -> dict[str, float | int]:
        demand: dict[str, float | int] = {"CPU": cpus, "GPU": self.num_gpus, "memory": self.memory}
        demand.update((name, amount) for name, amount in self.resources.items() if amount)
        return demand

    def runtime_env_vars(self) -> dict[str, str]:
        """The `env_vars` of `runtime_env`: set in the task's or actor's process."""
        return dict((self.runtime_env or {}).get("env_vars") or {})


def _check_common(options: _Placement) -> None:
    for name in ("num_gpus", "memory"):
        check_quantity(name, getattr(options, name))
    checks.resources("resources", options.resources, Context())
    _check_placement(options)


@dataclasses.dataclass(frozen=True)
class TaskOptions(_Placement):
    """A remote function's options, merged and checked: what the runtime schedules with.

    Build with `from_options` (which validates the keywords) and layer with `merge`.
    """

    given: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The keywords set explicitly, as given (Ray's `_default_options`)."""
    is_generator: bool = False
    num_cpus: float = _default(Kind.TASK, "num_cpus")
    num_gpus: float = _default(Kind.TASK, "num_gpus")
    memory: int = _default(Kind.TASK, "memory")
    """Bytes of memory to reserve."""
    resources: Mapping[str, float] = _default(Kind.TASK, "resources")
    """Custom resources (never CPU or GPU), e.g. `{"TPU": 4}`."""
    accelerator_type: str | None = _default(Kind.TASK, "accelerator_type")
    num_returns: NumReturns | Unset = _default(Kind.TASK, "num_returns")
    """UNSET resolves to 1, or "streaming" for generator functions."""
    max_retries: int = _default(Kind.TASK, "max_retries")
    retry_exceptions: RetryExceptions = _default(Kind.TASK, "retry_exceptions")
    max_calls: int = _default(Kind.TASK, "max_calls")
    """Calls per worker process before it is replaced; 0 means no limit."""
    name: str | None = _default(Kind.TASK, "name")
    runtime_env: Mapping[str, Any] | None = _default(Kind.TASK, "runtime_env")
    scheduling_strategy: SchedulingStrategyT = _default(Kind.TASK, "scheduling_strategy")
    placement_group: PlacementGroup | str | None = _default(Kind.TASK, "placement_group")
    placement_group_bundle_index: int = _default(Kind.TASK, "placement_group_bundle_index")
    placement_group_capture_child_tasks: bool | None = _default(Kind.TASK, "placement_group_capture_child_tasks")
    label_selector: Mapping[str, str] | None = _default(Kind.TASK, "label_selector")
    fallback_strategy: tuple[Mapping[str, Any], ...] | None = _default(Kind.TASK, "fallback_strategy")
    enable_task_events: bool = _default(Kind.TASK, "enable_task_events")
    labels: Mapping[str, str] | None = _default(Kind.TASK, "_labels")
    generator_backpressure_num_objects: int | None = _default(Kind.TASK, "_generator_backpressure_num_objects")
    num_objects_per_yield: int | None = _default(Kind.TASK, "_num_objects_per_yield")
    tpu: str | None = _default(Kind.TASK, "tpu")
    num_slices: int = _default(Kind.TASK, "num_slices")
    gpu: str | None = _default(Kind.TASK, "gpu")
    num_hosts: int = _default(Kind.TASK, "num_hosts")
    gang: bytes | None = _default(Kind.TASK, "_gang")
    """fray_ray's own keywords: a gang of hosts (see `fray_ray._private.driver.gangs`)."""

    def __post_init__(self) -> None:
        if self.num_returns is UNSET or self.num_returns is None:
            ctx = Context(is_generator=self.is_generator)
            object.__setattr__(self, "num_returns", default(Kind.TASK, "num_returns", ctx))
        checks.check_num_returns(self.num_returns, self.is_generator)
        check_quantity("num_cpus", self.num_cpus)
        _check_common(self)
        checks.RETRY_COUNT("max_retries", self.max_retries, Context())
        checks.NON_NEGATIVE("max_calls", self.max_calls, Context())

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, is_generator: bool = False) -> TaskOptions:
        """Validate `options` (see `validate_task_options`) and parse them. Raises as Ray does."""
        given = validate_task_options(options, is_generator=is_generator)
        return cls.from_checked(given, is_generator=is_generator)

    @classmethod
    def from_checked(cls, given: Mapping[str, Any], *, is_generator: bool = False) -> TaskOptions:
        """Parse keywords `validate_task_options` has already accepted (checks only the merge)."""
        return cls(given=dict(given), is_generator=is_generator, **_fields(given))

    def merge(self, overrides: Mapping[str, Any]) -> TaskOptions:
        """A new value with `overrides` on top (a later layer wins, key by key)."""
        return self.from_options({**self.given, **overrides}, is_generator=self.is_generator)

    def resource_demand(self) -> dict[str, float | int]:
        """What one call holds while it runs: `{"CPU", "GPU", "memory" (bytes), **custom}`."""
        return self._demand(self.num_cpus)


@dataclasses.dataclass(frozen=True)
class ActorOptions(_Placement):
    """An actor class's options, merged and checked: what the runtime creates the actor with.

    Build with `from_options` (which validates the keywords) and layer with `merge`.
    """

    given: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The keywords set explicitly, as given (Ray's `_default_options`)."""
    is_async: bool = False
    num_cpus: float | Unset = _default(Kind.ACTOR, "num_cpus")
    """UNSET gives Ray's actor default; see `scheduling_demand` and `resource_demand`."""
    num_gpus: float = _default(Kind.ACTOR, "num_gpus")
    memory: int = _default(Kind.ACTOR, "memory")
    """Bytes of memory to reserve."""
    object_store_memory: int | None = _default(Kind.ACTOR, "object_store_memory")
    resources: Mapping[str, float] = _default(Kind.ACTOR, "resources")
    """Custom resources (never CPU or GPU), e.g. `{"TPU": 4}`."""
    accelerator_type: str | None = _default(Kind.ACTOR, "accelerator_type")
    max_restarts: int = _default(Kind.ACTOR, "max_restarts")
    max_task_retries: int = _default(Kind.ACTOR, "max_task_retries")
    max_concurrency: int | Unset = _default(Kind.ACTOR, "max_concurrency")
    """UNSET (or 0) resolves to 1 for sync actors and 1000 for async ones."""
    max_pending_calls: int = _default(Kind.ACTOR, "max_pending_calls")
    lifetime: Literal["detached", "non_detached"] | None = _default(Kind.ACTOR, "lifetime")
    name: str | None = _default(Kind.ACTOR, "name")
    namespace: str | None = _default(Kind.ACTOR, "namespace")
    get_if_exists: bool = _default(Kind.ACTOR, "get_if_exists")
    concurrency_groups: Mapping[str, int] = _default(Kind.ACTOR, "concurrency_groups")
    allow_out_of_order_execution: bool = _default(Kind.ACTOR, "allow_out_of_order_execution")
    enable_tensor_transport: bool = _default(Kind.ACTOR, "enable_tensor_transport")
    runtime_env: Mapping[str, Any] | None = _default(Kind.ACTOR, "runtime_env")
    scheduling_strategy: SchedulingStrategyT = _default(Kind.ACTOR, "scheduling_strategy")
    placement_group: PlacementGroup | str | None = _default(Kind.ACTOR, "placement_group")
    placement_group_bundle_index: int = _default(Kind.ACTOR, "placement_group_bundle_index")
    placement_group_capture_child_tasks: bool | None = _default(Kind.ACTOR, "placement_group_capture_child_tasks")
    label_selector: Mapping[str, str] | None = _default(Kind.ACTOR, "label_selector")
    fallback_strategy: tuple[Mapping[str, Any], ...] | None = _default(Kind.ACTOR, "fallback_strategy")
    enable_task_events: bool = _default(Kind.ACTOR, "enable_task_events")
    labels: Mapping[str, str] | None = _default(Kind.ACTOR, "_labels")
    actor_generator_backpressure_num_objects: int | None = _default(Kind.ACTOR, "_actor_generator_backpressure_num_objects")
    tpu: str | None = _default(Kind.ACTOR, "tpu")
    num_slices: int = _default(Kind.ACTOR, "num_slices")
    gpu: str | None = _default(Kind.ACTOR, "gpu")
    num_hosts: int = _default(Kind.ACTOR, "num_hosts")
    gang: bytes | None = _default(Kind.ACTOR, "_gang")
    """fray_ray's own keywords: a gang of hosts (see `fray_ray._private.driver.gangs`)."""

    def __post_init__(self) -> None:
        if self.max_concurrency is UNSET or self.max_concurrency == 0:
            ctx = Context(is_async=self.is_async)
            object.__setattr__(self, "max_concurrency", default(Kind.ACTOR, "max_concurrency", ctx))
        if self.num_cpus is not UNSET:
            check_quantity("num_cpus", self.num_cpus)
        _check_common(self)
        ctx = Context()
        checks.RETRY_COUNT("max_restarts", self.max_restarts, ctx)
        checks.RETRY_COUNT("max_task_retries", self.max_task_retries, ctx)
        checks.RETRY_COUNT("max_pending_calls", self.max_pending_calls, ctx)
        checks.lifetime("lifetime", self.lifetime, ctx)
        if self.name == "":
            raise ValueError("Actor name cannot be an empty string.")
        if self.namespace == "":
            raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')
        if self.get_if_exists and not self.name:
            raise ValueError("The actor name must be specified to use `get_if_exists`.")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, is_async: bool = False) -> ActorOptions:
        """Validate `options` (see `validate_actor_options`) and parse them. Raises as Ray does."""
        given = validate_actor_options(options, is_async=is_async)
        return cls.from_checked(given, is_async=is_async)

    @classmethod
    def from_checked(cls, given: Mapping[str, Any], *, is_async: bool = False) -> ActorOptions:
        """Parse keywords `validate_actor_options` has already accepted (checks only the merge)."""
        return cls(given=dict(given), is_async=is_async, **_fields(given))

    def merge(self, overrides: Mapping[str, Any]) -> ActorOptions:
        """A new value with `.options()` keywords on top; `concurrency_groups` is refused there."""
        if "concurrency_groups" in overrides:
            raise ValueError("Setting 'concurrency_groups' is not supported in '.options()'.")
        return self.from_options({**self.given, **overrides}, is_async=self.is_async)

    @property
    def detached(self) -> bool:
        """True for `lifetime="detached"`: the actor outlives the driver that made it."""
        return self.lifetime == "detached"

    def _cpus(self) -> tuple[float, float]:
        """(CPUs needed to place the actor, CPUs it holds while alive), as Ray 2.60 does it."""
        if self.num_cpus is not UNSET:
            return self.num_cpus, self.num_cpus
        given = {key for key, value in self.given.items() if value is not None}
        if given & {"num_gpus", "resources", "accelerator_type"}:
            return 1.0, 1.0  # any other resource request makes the CPU default 1 throughout
        return 1.0, 0.0  # `memory` alone too: placing needs a node with a CPU, none is held

    def scheduling_demand(self) -> dict[str, float | int]:
        """What a host must have to start the actor (1 CPU by default; in its totals, not free)."""
        return self._demand(self._cpus()[0])

    def resource_demand(self) -> dict[str, float | int]:
        """What the actor holds while alive (0 CPU by default, so idle actors cost no CPU)."""
        return self._demand(self._cpus()[1])


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """An actor method's options from `@method` and `.options()`, merged and checked."""

    given: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The keywords set explicitly, as given."""
    is_generator: bool = False
    num_returns: NumReturns | Unset = _default(Kind.METHOD, "num_returns")
    """UNSET resolves to 1, or "streaming" for generator methods."""
    concurrency_group: str | None = _default(Kind.METHOD, "concurrency_group")
    max_task_retries: int | Unset = _default(Kind.METHOD, "max_task_retries")
    """UNSET means the actor's `max_task_retries`."""
    retry_exceptions: RetryExceptions = _default(Kind.METHOD, "retry_exceptions")
    enable_task_events: bool | Unset = _default(Kind.METHOD, "enable_task_events")
    """UNSET means the actor's `enable_task_events`."""
    tensor_transport: str | None = _default(Kind.METHOD, "tensor_transport")
    name: str | None = _default(Kind.METHOD, "name")
    generator_backpressure_num_objects: int | None = _default(Kind.METHOD, "_generator_backpressure_num_objects")
    num_objects_per_yield: int | None = _default(Kind.METHOD, "_num_objects_per_yield")

    def __post_init__(self) -> None:
        if self.num_returns is UNSET or self.num_returns is None:
            ctx = Context(is_generator=self.is_generator)
            object.__setattr__(self, "num_returns", default(Kind.METHOD, "num_returns", ctx))
        checks.check_method_num_returns(self.num_returns, self.is_generator)

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], *, is_generator: bool = False, in_options: bool = False
    ) -> MethodOptions:
        """Validate `options` (see `validate_method_options`) and parse them."""
        given = validate_method_options(options, is_generator=is_generator, in_options=in_options)
        return cls.from_checked(given, is_generator=is_generator)

    @classmethod
    def from_checked(cls, given: Mapping[str, Any], *, is_generator: bool = False) -> MethodOptions:
        """Parse keywords already checked (by `validate_method_options`, or at `.remote()`)."""
        return cls(given=dict(given), is_generator=is_generator, **_fields(given))

    def merge(self, overrides: Mapping[str, Any]) -> MethodOptions:
        """A new value with a method's `.options()` keywords on top."""
        return self.from_options(
            {**self.given, **overrides}, is_generator=self.is_generator, in_options=True
        )

    def task_retries(self, actor: ActorOptions) -> int:
        """Retries of this call when the actor dies: the method's own, else the actor's."""
        return actor.max_task_retries if self.max_task_retries is UNSET else self.max_task_retries
