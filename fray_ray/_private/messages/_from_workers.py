"""What workers send the driver (notifications and requests) and the driver's replies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec, TaskSpec
from fray_ray._private.messages._codec import Message, _message, nested, pickled, spec, value, values
from fray_ray._private.messages._to_workers import Loans
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.stream.stream_server import HELLO

# ---- replies -------------------------------------------------------------------------------


@dataclass(repr=False, eq=False)
class Done(Message):
    """The empty answer to a request that only had to succeed."""


@dataclass(repr=False, eq=False)
class Welcome(Message):
    """The driver's answer to hello: the session facts a worker's runtime reports."""

    namespace: str = ""
    job_id: str = "01000000"
    node_id: bytes = b""
    worker_id: bytes = b""
    session_address: str = ""
    object_store_memory: int = 0
    session_name: str = ""


@dataclass(repr=False, eq=False)
class Objects(Message):
    """Stored values (or errors) of the objects asked for that are done. `shared` lists the
    buffers sent as shared-memory files instead: [buffer index, file name, size, lease] each
    (`shared_memory`); their frame buffers are empty."""

    ids: list[bytes]
    found: list[SerializedValue] = values()
    shared: list[list[Any]] = field(default_factory=list)
    #: values held by another process: [index in found, holder address, size] (`remote_values`)
    held: list[list[Any]] = field(default_factory=list)
    #: ids among `held` whose address is a relay's, which answers once its copy is in (`relays`)
    copies: list[bytes] = field(default_factory=list)
    #: ids the asker is to keep a copy of and serve onward at the `relay` address it gave
    relays: list[bytes] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class Ready(Message):
    """The keys of the waited-for objects and streams that are ready."""

    ready: list[bytes]


@dataclass(repr=False, eq=False)
class Stored(Message):
    """The id a put value is stored under."""

    id: bytes


@dataclass(repr=False, eq=False)
class Returns(Message):
    """The return object ids of a submitted task or actor call."""

    returns: list[bytes]


@dataclass(repr=False, eq=False)
class ActorCreated(Message):
    """The id of a created actor (the members' ids, for a gang)."""

    actor_id: Any


@dataclass(repr=False, eq=False)
class NextItem(Message):
    """The object id of a stream's next item; END once the stream is over."""

    id: bytes | None


@dataclass(repr=False, eq=False)
class StreamState(Message):
    """Whether a stream's item is ready."""

    state: str


@dataclass(repr=False, eq=False)
class ResourceAmounts(Message):
    """Resources by name."""

    resources: dict[str, float]


@dataclass(repr=False, eq=False)
class Result(Message):
    """A Python value computed by the driver (an actor's description, the node table, ...)."""

    value: Any = pickled()


# ---- worker to driver ----------------------------------------------------------------------


@_message
@dataclass(repr=False, eq=False)
class Hello(Message):
    """The first frame of every worker connection; the gate has checked `token` before this."""

    KIND: ClassVar[str] = HELLO
    REPLY: ClassVar[type[Message]] = Welcome

    kind: str
    id: bytes | None = None
    token: str = ""
    pid: int | None = None
    host: str | None = None
    ip: str = ""
    index: int = 0  # a gang member's place in its gang
    shared_memory: str = ""  # the identity of the shared-memory directory it can read


@_message
@dataclass(repr=False, eq=False)
class TaskDone(Message):
    """An executor finished a task; `user_error` if the task (not the system) failed."""

    KIND: ClassVar[str] = "task_done"

    task: bytes
    results: list[SerializedValue] = values()
    user_error: bool = False
    ran_s: float | None = None  # how long the task ran, as the executor measured it
    #: a `num_returns="dynamic"` generator raised after sending its items so far as `Yield`s
    generator_failed: bool = False
    #: results this executor holds: [index in results, its holder address, size] (`remote_values`)
    held: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class Withdrawn(Message):
    """An executor's answer to `Withdraw`: `returned` left its queue unstarted and will never
    run there; `kept` it had already taken from its queue (or never received), and answers
    with `TaskDone` as usual."""

    KIND: ClassVar[str] = "withdrawn"

    returned: list[bytes]
    kept: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class CallDone(Message):
    """An actor host finished a method call."""

    KIND: ClassVar[str] = "call_done"

    call: bytes
    results: list[SerializedValue] = values()
    user_error: bool = False
    #: results the actor's process keeps: [index in results, its holder address, size] (`remote_values`)
    held: list[list[Any]] = field(default_factory=list)
    #: objects the caller lent with a direct call that the host keeps past it, borrowed from the caller
    kept: list[bytes] = field(default_factory=list)
    #: objects its results name that the host may lend on (lent to it by other callers, or its
    #: own results), lent to this caller, which borrows them from the host (`workers/lent_refs.py`)
    loans: Loans | None = nested(Loans)


@_message
@dataclass(repr=False, eq=False)
class ActorReady(Message):
    """The actor's constructor returned."""

    KIND: ClassVar[str] = "actor_ready"

    actor: bytes
    pid: int | None = None


@_message
@dataclass(repr=False, eq=False)
class ActorFailed(Message):
    """The actor's constructor raised `error`."""

    KIND: ClassVar[str] = "actor_failed"

    actor: bytes
    error: SerializedValue = value()


@_message
@dataclass(repr=False, eq=False)
class HandOffHeld(Message):
    """An actor's process is about to end on its own (`exit_actor`, another driver's
    `ray.kill`): the driver takes the values it holds for it, then answers."""

    KIND: ClassVar[str] = "hand_off_held"
    REPLY: ClassVar[type[Message]] = Done


@_message
@dataclass(repr=False, eq=False)
class ActorExiting(Message):
    """The actor leaves on purpose (exit_actor) during `call`."""

    KIND: ClassVar[str] = "actor_exiting"

    actor: bytes
    call: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class GetObjects(Message):
    """Fetch objects, answered once all are done or one has failed; `task` is the asking task,
    which blocks meanwhile (its executor may take other work)."""

    KIND: ClassVar[str] = "get"
    REPLY: ClassVar[type[Message]] = Objects

    ids: list[bytes]
    task: bytes | None = None
    shared: bool = True  # large buffers may come as shared-memory files (False: as bytes)
    #: where the asker could serve copies of large objects to other hosts (`relays`), if it can
    relay: str | None = None
    #: [object id, relay address] pairs: relays the asker could not fetch these from
    failed: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class TaskWaits(Message):
    """`task` waits for results its process gets straight from actor hosts (`direct_calls`):
    it is blocked, as in a `get` the driver answers, until a `GetAbandoned` says it no longer waits."""

    KIND: ClassVar[str] = "task_waits"

    task: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class GetAbandoned(Message):
    """A get of `task` timed out, or its wait for direct results ended: it is no longer blocked."""

    KIND: ClassVar[str] = "get_abandoned"

    task: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class Wait(Message):
    """ray.wait on objects and streams (`streams`: [stream id, next index] pairs)."""

    KIND: ClassVar[str] = "wait"
    REPLY: ClassVar[type[Message]] = Ready

    ids: list[bytes]
    num_returns: int
    timeout: float | None = None
    streams: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class Put(Message):
    """Store a value with the driver; or, with `held`, record that the worker holds it under
    the put id `id` it chose ([0, holder address, size], `remote_values`)."""

    KIND: ClassVar[str] = "put"
    REPLY: ClassVar[type[Message]] = Stored

    value: SerializedValue = value()
    id: bytes | None = None
    held: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class SubmitTask(Message):
    """Submit a task from inside a task or actor; `parent` is the submitting task."""

    KIND: ClassVar[str] = "submit"
    REPLY: ClassVar[type[Message]] = Returns

    spec: TaskSpec = spec()
    parent: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class CreateActor(Message):
    """Create an actor from inside a task or actor."""

    KIND: ClassVar[str] = "create_actor"
    REPLY: ClassVar[type[Message]] = ActorCreated

    spec: ActorCreationSpec = spec()
    parent: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class SubmitActorCall(Message):
    """Call an actor method from inside a task or actor."""

    KIND: ClassVar[str] = "actor_call"
    REPLY: ClassVar[type[Message]] = Returns

    spec: ActorCallSpec = spec()
    parent: bytes | None = None


@_message
@dataclass(repr=False, eq=False)
class KillActor(Message):
    """ray.kill."""

    KIND: ClassVar[str] = "kill_actor"
    REPLY: ClassVar[type[Message]] = Done

    actor_id: bytes
    no_restart: bool


@_message
@dataclass(repr=False, eq=False)
class Cancel(Message):
    """ray.cancel of the task or call that produces object `id`."""

    KIND: ClassVar[str] = "cancel"
    REPLY: ClassVar[type[Message]] = Done

    id: bytes
    force: bool
    recursive: bool


@_message
@dataclass(repr=False, eq=False)
class GetNamedActor(Message):
    """ray.get_actor: the description of a named actor."""

    KIND: ClassVar[str] = "get_actor"
    REPLY: ClassVar[type[Message]] = Result

    name: str
    namespace: str | None = None


@_message
@dataclass(repr=False, eq=False)
class ListNamedActors(Message):
    """ray.util.list_named_actors."""

    KIND: ClassVar[str] = "list_actors"
    REPLY: ClassVar[type[Message]] = Result

    all_namespaces: bool


@_message
@dataclass(repr=False, eq=False)
class GetResources(Message):
    """The cluster's resources, or those available now."""

    KIND: ClassVar[str] = "resources"
    REPLY: ClassVar[type[Message]] = ResourceAmounts

    available: bool


@_message
@dataclass(repr=False, eq=False)
class GetAvailablePerNode(Message):
    """What each node has free (`ray._private.state.available_resources_per_node`)."""

    KIND: ClassVar[str] = "available_per_node"
    REPLY: ClassVar[type[Message]] = Result


@_message
@dataclass(repr=False, eq=False)
class GetNodes(Message):
    """ray.nodes."""

    KIND: ClassVar[str] = "nodes"
    REPLY: ClassVar[type[Message]] = Result


@_message
@dataclass(repr=False, eq=False)
class Borrow(Message):
    """The worker holds its first refs to these objects."""

    KIND: ClassVar[str] = "borrow"

    ids: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class Release(Message):
    """The worker dropped its last refs to these objects."""

    KIND: ClassVar[str] = "release"

    ids: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class Sync(Message):
    """Answered once the driver has handled everything this connection sent before it: a worker
    asks before it lets another process act on what it told the driver (`driver_notices.py`)."""

    KIND: ClassVar[str] = "sync"
    REPLY: ClassVar[type[Message]] = Done


@_message
@dataclass(repr=False, eq=False)
class ReturnShared(Message):
    """The worker no longer reads these shared-memory leases (`Objects.shared`)."""

    KIND: ClassVar[str] = "return_shared"

    leases: list[int]


@_message
@dataclass(repr=False, eq=False)
class HolderUnreachable(Message):
    """The worker could not reach the holder of a value it read (`remote_values`): the driver
    checks, and deals with the holder's loss before answering."""

    KIND: ClassVar[str] = "holder_unreachable"
    REPLY: ClassVar[type[Message]] = Done

    holder: str


@_message
@dataclass(repr=False, eq=False)
class Log(Message):
    """Lines a worker printed: [stream name, prefix, line] each."""

    KIND: ClassVar[str] = "log"

    pid: int | None
    lines: list[list[str]]


@_message
@dataclass(repr=False, eq=False)
class MetricsReport(Message):
    """What a worker's `fray_ray.util.metrics` recorded since its last report (see `metrics`)."""

    KIND: ClassVar[str] = "metrics"

    points: list[list[Any]]


@_message
@dataclass(repr=False, eq=False)
class Yield(Message):
    """Item `index` (from 1) of the generator task or call `stream`."""

    KIND: ClassVar[str] = "yield"

    stream: bytes
    index: int
    value: SerializedValue = value()
    #: the value is kept by the sender: [[0, its holder address, size]] (`remote_values`)
    held: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class StreamNext(Message):
    """The object id of item `index` of a stream, once it exists."""

    KIND: ClassVar[str] = "stream_next"
    REPLY: ClassVar[type[Message]] = NextItem

    stream: bytes
    index: int


@_message
@dataclass(repr=False, eq=False)
class StreamReady(Message):
    """Whether item `index` of a stream is ready."""

    KIND: ClassVar[str] = "stream_ready"
    REPLY: ClassVar[type[Message]] = StreamState

    stream: bytes
    index: int
