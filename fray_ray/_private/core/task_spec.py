"""What a task, an actor creation and an actor call carry, and how they travel.

Specs are built once at `.remote()` time. Arguments are pickled together as `(args, kwargs)`;
the ids of top-level ref arguments are listed so the worker can swap in their values before
the call (refs nested deeper stay refs, as in Ray). Functions and classes are pickled once and
shipped to each worker once, keyed by a content hash.
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fray_ray._private.core.cached_hash import CachedHash
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._private.objects import code_source
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue, serialize


@dataclass(frozen=True)
class CodeBlob:
    """A pickled function or class plus its content id; shipped to a worker at most once."""

    code_id: bytes
    payload: bytes
    name: str

    @classmethod
    def of(cls, obj: Any, name: str) -> CodeBlob:
        payload = code_source.dumps(obj)  # by-value code keeps its file name and lines
        return cls(hashlib.blake2b(payload, digest_size=16).digest(), payload, name)


@dataclass(frozen=True)
class ResourceShape:
    """The logical resources one task or actor holds while it runs (Ray's accounting)."""

    cpu: float = 1.0
    gpu: float = 0.0
    memory: int = 0
    custom: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, float]:
        demand = {"CPU": self.cpu, "GPU": self.gpu, "memory": float(self.memory), **dict(self.custom)}
        return {key: value for key, value in demand.items() if value}


@dataclass(frozen=True, eq=False)
class PoolKey(CachedHash):
    """Tasks with equal keys can share warm executor processes."""

    shape: ResourceShape
    env_vars: tuple[tuple[str, str], ...] = ()
    max_calls: int = 0
    accelerator: str | None = None
    #: the effective runtime env (code, packages, env vars) of the pool's processes
    runtime_env: RuntimeEnv = field(default_factory=RuntimeEnv)


_canonical_pools: dict[PoolKey, PoolKey] = {}


def canonical_pool(pool: PoolKey) -> PoolKey:
    """The one instance of `pool` this process uses: every task of a pool carries the same key
    object, so the scheduler's lookups and comparisons stop at identity."""
    found = _canonical_pools.get(pool)
    if found is None:
        if len(_canonical_pools) >= 4096:  # many distinct runtime envs: start over, keys stay valid
            _canonical_pools.clear()
        found = _canonical_pools.setdefault(pool, pool)
    return found


@dataclass
class Arguments:
    """`(args, kwargs)` pickled; `top_level` lists the ref ids to resolve before the call.

    `stored`: the driver keeps large arguments as an object of their own (copied at the call,
    as Ray copies them into its object store), and `value` is then only the holder of refs:
    of that object and of what the arguments contain.
    """

    value: SerializedValue
    top_level: tuple[bytes, ...] = ()
    stored: bytes | None = None

    @classmethod
    def pack(cls, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Arguments:
        if not args and not kwargs:
            return _NONE  # the commonest call of all, pickled once
        top_level = [a.binary() for a in args if isinstance(a, ObjectRef)]
        if kwargs:
            top_level += [v.binary() for v in kwargs.values() if isinstance(v, ObjectRef)]
        return cls(serialize((tuple(args), dict(kwargs))), tuple(dict.fromkeys(top_level)) if top_level else ())


#: `((), {})` pickled: the arguments of a call that has none (values are never mutated, and
#: neither is this: a call that changes its arguments gets a new `Arguments`).
_NO_ARGUMENTS = serialize(((), {}))
_NONE = Arguments(_NO_ARGUMENTS)


@dataclass
class TaskSpec:
    #: what differs between the tasks of one function and options (`messages/_spec_templates.py`)
    PER_CALL_FIELDS: ClassVar[tuple[str, ...]] = ("task_id", "return_ids", "parent_task_id", "rebuilding")

    task_id: bytes
    function: CodeBlob
    arguments: Arguments
    return_ids: tuple[bytes, ...]
    num_returns: int | str
    name: str
    pool: PoolKey
    max_retries: int
    retry_exceptions: bool | tuple[type, ...] = False
    scheduling_strategy: Any = None
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    #: False: its attempts are not recorded for the state API (`enable_task_events`)
    task_events: bool = True
    #: the task (if any) that submitted this one, for recursive cancel
    parent_task_id: bytes | None = None
    #: a gang call runs on every host of `gang` (a GangShape), or of the reserved gang `gang_id`
    gang: Any = None
    gang_id: bytes | None = None
    #: `module.qualname` of the function (`get_task_function_name()`); `name` may be an option
    function_name: str = ""
    #: a run that rebuilds results a lost holder had: its attempts follow the task's earlier ones
    rebuilding: bool = False

    @property
    def placement(self) -> tuple[bytes, int] | None:
        """(group id, bundle index) when the task is scheduled into a placement group."""
        group = getattr(self.scheduling_strategy, "placement_group", None)
        if group is None:
            return None
        return group.id.binary(), int(getattr(self.scheduling_strategy, "placement_group_bundle_index", -1))


@dataclass
class ActorCreationSpec:
    actor_id: bytes
    cls: CodeBlob
    class_name: str
    arguments: Arguments
    #: what the actor holds while alive
    shape: ResourceShape
    methods: Mapping[str, Mapping[str, Any]]
    is_async: bool = False
    #: Ray's defaults for an actor made without options (the options table has the same values
    #: and a test holds them equal; the table sits above this module, so it is not read here)
    max_concurrency: int = 1
    concurrency_groups: Mapping[str, int] = field(default_factory=dict)
    max_restarts: int = 0
    max_task_retries: int = 0
    #: False: its creation and its calls are not recorded for the state API, unless a method says otherwise
    task_events: bool = True
    name: str | None = None
    namespace: str | None = None
    get_if_exists: bool = False
    detached: bool = False
    env_vars: Mapping[str, str] = field(default_factory=dict)
    scheduling_strategy: Any = None
    accelerator: str | None = None
    #: the effective runtime env (code, packages, env vars) of the actor's process
    runtime_env: RuntimeEnv = field(default_factory=RuntimeEnv)
    #: a gang of actors, one per host of a TPU slice (a GangShape); its members' ids follow
    gang: Any = None
    #: what a node must have (in all, not free) to place it, when more than `shape` (Ray's
    #: placement resources: 1 CPU for an actor that holds none)
    placement: ResourceShape | None = None
    #: `module.qualname` of the class; a method's function name adds `.method`
    qualified_name: str = ""


def gang_member_id(base: bytes, index: int) -> bytes:
    """The actor id of member `index` of a gang whose ids derive from `base`."""
    return base[:-2] + index.to_bytes(2, "big")


@dataclass
class ActorCallSpec:
    #: what differs between the calls of one method and options (`messages/_spec_templates.py`)
    PER_CALL_FIELDS: ClassVar[tuple[str, ...]] = ("call_id", "return_ids", "submitted_at", "started_at", "attempt")

    actor_id: bytes
    call_id: bytes
    method: str
    arguments: Arguments
    return_ids: tuple[bytes, ...]
    num_returns: int | str
    concurrency_group: str | None = None
    #: None: the actor's max_task_retries
    max_task_retries: int | None = None
    retry_exceptions: bool | tuple[type, ...] = False
    #: None: the actor's `enable_task_events`
    task_events: bool | None = None
    #: the name the state API shows (None: `Class.method`)
    name: str | None = None
    #: when the driver accepted the call and when it began to run, as far as the driver can
    #: tell (wall-clock seconds; None: not yet), for the state API while it is live
    submitted_at: float | None = field(default=None, compare=False)
    started_at: float | None = field(default=None, compare=False)
    #: which attempt this is: a call sent again (a retried exception, its actor restarting) is the next
    attempt: int = field(default=0, compare=False)


# ---- a call's arguments as they travel ------------------------------------------------------

#: The `inlined` of arguments that inline nothing (shared: never changed).
_NOTHING_INLINED: Mapping[bytes, SerializedValue] = types.MappingProxyType({})


class CallArguments:
    """A call's pickled arguments, the ids of its top-level ref arguments, and the values of
    those small enough to travel with the call (the worker fetches the others). `stored`: the
    object that holds the pickled arguments instead of `value` (`task_spec.Arguments`). Never
    changed once made (a plain class: every task and call makes one)."""

    __slots__ = ("value", "top_level", "inlined", "stored")

    def __init__(self, value: SerializedValue, top_level: Sequence[bytes] = (),
                 inlined: Mapping[bytes, SerializedValue] = _NOTHING_INLINED, stored: bytes | None = None) -> None:
        self.value = value
        self.top_level = top_level
        self.inlined = inlined
        self.stored = stored

    def names_refs(self) -> bool:
        """Whether the callee makes refs as it reads these arguments (nested ones, those inside
        inlined values, or what the stored object holds)."""
        if self.value.contained_refs or self.stored:
            return True
        return bool(self.inlined) and any(v.contained_refs for v in self.inlined.values())

    def __eq__(self, other: object) -> bool:
        if type(other) is not CallArguments:
            return NotImplemented
        return (self.value == other.value and list(self.top_level) == list(other.top_level)
                and dict(self.inlined) == dict(other.inlined) and self.stored == other.stored)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CallArguments({self.value!r}, {self.top_level!r}, {dict(self.inlined)!r}, {self.stored!r})"


def inline_arguments(
    arguments: Arguments, stored: Callable[[bytes], SerializedValue | None], limit: int | None = INLINE_LIMIT
) -> CallArguments:
    """`arguments` with the stored values of its top-level refs that are ready and at most
    `limit` bytes (None: any size), so the worker need not ask for them."""
    if not arguments.top_level and arguments.stored is None:
        return CallArguments(arguments.value)  # the commonest call: no ref arguments at all
    inlined: dict[bytes, SerializedValue] = {}
    wanted = arguments.top_level if arguments.stored is None else (*arguments.top_level, arguments.stored)
    for object_id in wanted:
        found = stored(object_id)
        if found is not None and (limit is None or found.size <= limit):
            inlined[object_id] = found
    return CallArguments(arguments.value, list(arguments.top_level), inlined, arguments.stored)
