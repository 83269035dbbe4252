"""The messages a driver and its workers exchange on the session stream, as typed values.

Each kind of message is a small frozen dataclass whose `KIND` is the method its frames carry;
a request names the type of its answer (`REPLY`). `encode` turns a message into a frame's body
and out-of-band buffers and `decode` turns them back; nothing else in the Ray layer builds or
reads a body. A body is a msgpack map keyed by field name. How a field travels is fixed by its
declaration: plain fields as msgpack values, stored values (`SerializedValue`) as descriptions
with their buffers out of band, specs pickled with their arguments' buffers out of band, and
`pickled` fields (driver-side records a worker only hands back to the API) with cloudpickle.

The framing (`protocol`) and the authentication of the first frame (`stream_server`) sit below
this module and do not change with it: the greeting is still a `hello` map carrying `token`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import cloudpickle

from fray_ray._private.protocol import Connection, Handler
from fray_ray._private.serialization import INLINE_LIMIT, SerializedValue
from fray_ray._private.stream_server import HELLO
from fray_ray._private.task_spec import ActorCallSpec, ActorCreationSpec, Arguments, TaskSpec


class MessageError(ValueError):
    """A frame's body does not describe the message its method names."""


class _Codec(enum.Enum):
    PLAIN = "plain"  # a msgpack value as it is
    VALUE = "value"  # one SerializedValue
    VALUES = "values"  # a list of SerializedValues
    ARGUMENTS = "arguments"  # CallArguments
    SPEC = "spec"  # a task, actor-creation or actor-call spec
    PICKLED = "pickled"  # any Python value, through cloudpickle
    RECORD = "record"  # a frozen dataclass of plain fields, as a map


def _wire(codec: _Codec, **kwargs: Any) -> Any:
    return field(metadata={"codec": codec}, **kwargs)


def value() -> Any:
    """A field holding one SerializedValue."""
    return _wire(_Codec.VALUE)


def values() -> Any:
    """A field holding a list of SerializedValues."""
    return _wire(_Codec.VALUES)


def arguments() -> Any:
    """A field holding CallArguments."""
    return _wire(_Codec.ARGUMENTS)


def spec() -> Any:
    """A field holding a task, actor-creation or actor-call spec."""
    return _wire(_Codec.SPEC)


def pickled(**kwargs: Any) -> Any:
    """A field holding any picklable value."""
    return _wire(_Codec.PICKLED, **kwargs)


def record(cls: type) -> Any:
    """A field holding a frozen dataclass `cls` whose fields are plain msgpack values."""
    return field(metadata={"codec": _Codec.RECORD, "record": cls})


@dataclass(frozen=True)
class Message:
    """Base of every message. `KIND`: the method of its frames ("" for replies)."""

    KIND: ClassVar[str] = ""
    #: The type of the answer to a request (None: a notification, or a reply itself).
    REPLY: ClassVar[type[Message] | None] = None


_KINDS: dict[str, type[Message]] = {}
_LAYOUTS: dict[type[Message], tuple[tuple[str, _Codec, bool, Any], ...]] = {}
M = TypeVar("M", bound=Message)


def _message(cls: type[M]) -> type[M]:
    """Register a message class under its `KIND`."""
    if cls.KIND:
        if cls.KIND in _KINDS:
            raise TypeError(f"two messages of kind {cls.KIND!r}")
        _KINDS[cls.KIND] = cls
    return cls


def _layout(cls: type[Message]) -> tuple[tuple[str, _Codec, bool, Any], ...]:
    """(name, codec, required, record type) of each field, in declaration order."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = tuple(
            (
                f.name,
                f.metadata.get("codec", _Codec.PLAIN),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                f.metadata.get("record"),
            )
            for f in dataclasses.fields(cls)
        )
        _LAYOUTS[cls] = layout
    return layout


# ---- argument values -----------------------------------------------------------------------


@dataclass(frozen=True)
class CallArguments:
    """A call's pickled arguments, the ids of its top-level ref arguments, and the values of
    those small enough to travel with the call (the worker fetches the others)."""

    value: SerializedValue
    top_level: Sequence[bytes] = ()
    inlined: Mapping[bytes, SerializedValue] = field(default_factory=dict)


def inline_arguments(arguments: Arguments, stored: Callable[[bytes], SerializedValue | None]) -> CallArguments:
    """`arguments` with the stored values of its top-level refs that are ready and at most
    `INLINE_LIMIT` bytes, so the worker need not ask for them."""
    inlined: dict[bytes, SerializedValue] = {}
    for object_id in arguments.top_level:
        found = stored(object_id)
        if found is not None and found.size <= INLINE_LIMIT:
            inlined[object_id] = found
    return CallArguments(arguments.value, list(arguments.top_level), inlined)


# ---- encoding ------------------------------------------------------------------------------


def encode(message: Message) -> tuple[dict[str, Any], list[Any]]:
    """A message as a frame's body and its out-of-band buffers."""
    body: dict[str, Any] = {}
    buffers: list[Any] = []
    for name, codec, _, _ in _layout(type(message)):
        item = getattr(message, name)
        if codec is _Codec.PLAIN:
            body[name] = item
        elif codec is _Codec.VALUE:
            body[name] = item.to_wire(buffers)
        elif codec is _Codec.VALUES:
            body[name] = [v.to_wire(buffers) for v in item]
        elif codec is _Codec.ARGUMENTS:
            body[name] = [
                item.value.to_wire(buffers),
                list(item.top_level),
                [[object_id, v.to_wire(buffers)] for object_id, v in item.inlined.items()],
            ]
        elif codec is _Codec.SPEC:
            body[name] = _pack_spec(item, buffers)
        elif codec is _Codec.RECORD:
            body[name] = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
        else:
            body[name] = cloudpickle.dumps(item)
    return body, buffers


def decode(cls: type[M], body: Any, buffers: Sequence[bytearray]) -> M:
    """The message of type `cls` a frame's body and buffers describe; MessageError if they do not."""
    if not isinstance(body, Mapping):
        raise MessageError(f"a {cls.__name__} must be a map, not {type(body).__name__}")
    fields: dict[str, Any] = {}
    offset = 0
    try:
        for name, codec, required, record_type in _layout(cls):
            if name not in body:
                if required:
                    raise MessageError(f"a {cls.__name__} needs {name!r}")
                continue
            raw = body[name]
            if codec is _Codec.PLAIN:
                fields[name] = raw
            elif codec is _Codec.VALUE:
                fields[name], offset = SerializedValue.from_wire(raw, buffers, offset)
            elif codec is _Codec.VALUES:
                decoded = []
                for description in raw:
                    item, offset = SerializedValue.from_wire(description, buffers, offset)
                    decoded.append(item)
                fields[name] = decoded
            elif codec is _Codec.ARGUMENTS:
                description, top_level, inlined_descriptions = raw
                argument_value, offset = SerializedValue.from_wire(description, buffers, offset)
                inlined = {}
                for object_id, inlined_description in inlined_descriptions:
                    inlined[object_id], offset = SerializedValue.from_wire(inlined_description, buffers, offset)
                fields[name] = CallArguments(argument_value, list(top_level), inlined)
            elif codec is _Codec.SPEC:
                fields[name], offset = _unpack_spec(raw, buffers, offset)
            elif codec is _Codec.RECORD:
                if not isinstance(raw, Mapping):
                    raise MessageError(f"{name!r} of a {cls.__name__} must be a map")
                known = {f.name for f in dataclasses.fields(record_type)}
                fields[name] = record_type(**{k: v for k, v in raw.items() if k in known})
            else:
                fields[name] = cloudpickle.loads(raw)
    except MessageError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise MessageError(f"a malformed {cls.__name__}: {exc}") from exc
    if offset != len(buffers):
        raise MessageError(f"a {cls.__name__} describes {offset} buffers but its frame carries {len(buffers)}")
    return cls(**fields)


def _pack_spec(task_spec: Any, buffers: list[Any]) -> list[Any]:
    """A spec pickled without its argument value, whose description and buffers travel apart."""
    argument_values = getattr(task_spec, "arguments", None)
    if argument_values is None:
        return [cloudpickle.dumps(task_spec), None]
    stripped = dataclasses.replace(
        task_spec, arguments=type(argument_values)(SerializedValue(b""), argument_values.top_level)
    )
    return [cloudpickle.dumps(stripped), argument_values.value.to_wire(buffers)]


def _unpack_spec(raw: Sequence[Any], buffers: Sequence[bytearray], offset: int) -> tuple[Any, int]:
    pickled_spec, description = raw
    task_spec = cloudpickle.loads(pickled_spec)
    if description is not None:
        task_spec.arguments.value, offset = SerializedValue.from_wire(description, buffers, offset)
    return task_spec, offset


# ---- sending and receiving -----------------------------------------------------------------


def notify(connection: Connection, message: Message) -> None:
    """Send a notification; ConnectionClosed if the peer is gone."""
    body, buffers = encode(message)
    connection.notify(message.KIND, body, buffers)


def request(connection: Connection, message: Message) -> concurrent.futures.Future:
    """Send a request; the Future holds the raw reply, which `reply_of` decodes."""
    body, buffers = encode(message)
    return connection.request(message.KIND, body, buffers)


def reply_of(message: Message, raw: tuple[Any, list[bytearray]]) -> Any:
    """The reply to `message`, decoded from the raw `(body, buffers)` a request resolved to."""
    assert message.REPLY is not None, f"{type(message).__name__} is not a request"
    return decode(message.REPLY, *raw)


def call(connection: Connection, message: Message, timeout: float | None = None) -> Any:
    """Send a request and wait for its decoded reply (RemoteError if the peer refused it)."""
    return reply_of(message, request(connection, message).result(timeout))


def reply(connection: Connection, message_id: int, answer: Message) -> None:
    """Answer request `message_id`; a closed connection is ignored (the asker is gone)."""
    body, buffers = encode(answer)
    connection.reply(message_id, body, buffers)


#: handler(connection, message_id, message); message_id is None for notifications.
MessageHandler = Callable[[Connection, "int | None", Any], None]


def handlers(table: Mapping[type[Message], MessageHandler]) -> dict[str, Handler]:
    """A Connection's handler table from one handler per message type. A frame whose body does
    not decode is answered (if it is a request) with a MessageError and handled no further."""

    def dispatch(cls: type[Message], handle: MessageHandler) -> Handler:
        def on_frame(connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
            handle(connection, message_id, decode(cls, body, buffers))

        return on_frame

    return {cls.KIND: dispatch(cls, handle) for cls, handle in table.items()}


# ---- replies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Done(Message):
    """The empty answer to a request that only had to succeed."""


@dataclass(frozen=True)
class Welcome(Message):
    """The driver's answer to hello: the session facts a worker's runtime reports."""

    namespace: str = ""
    job_id: str = "01000000"
    node_id: bytes = b""
    worker_id: bytes = b""
    session_address: str = ""
    object_store_memory: int = 0


@dataclass(frozen=True)
class Objects(Message):
    """Stored values (or errors) of the objects asked for that are done."""

    ids: list[bytes]
    found: list[SerializedValue] = values()


@dataclass(frozen=True)
class Ready(Message):
    """The keys of the waited-for objects and streams that are ready."""

    ready: list[bytes]


@dataclass(frozen=True)
class Stored(Message):
    """The id a put value is stored under."""

    id: bytes


@dataclass(frozen=True)
class Returns(Message):
    """The return object ids of a submitted task or actor call."""

    returns: list[bytes]


@dataclass(frozen=True)
class ActorCreated(Message):
    """The id of a created actor (the members' ids, for a gang)."""

    actor_id: Any


@dataclass(frozen=True)
class NextItem(Message):
    """The object id of a stream's next item; END once the stream is over."""

    id: bytes | None


@dataclass(frozen=True)
class StreamState(Message):
    """Whether a stream's item is ready."""

    state: str


@dataclass(frozen=True)
class ResourceAmounts(Message):
    """Resources by name."""

    resources: dict[str, float]


@dataclass(frozen=True)
class Result(Message):
    """A Python value computed by the driver (an actor's description, the node table, ...)."""

    value: Any = pickled()


# ---- worker to driver ----------------------------------------------------------------------


@_message
@dataclass(frozen=True)
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


@_message
@dataclass(frozen=True)
class TaskDone(Message):
    """An executor finished a task; `user_error` if the task (not the system) failed."""

    KIND: ClassVar[str] = "task_done"

    task: bytes
    results: list[SerializedValue] = values()
    user_error: bool = False


@_message
@dataclass(frozen=True)
class TasksReturned(Message):
    """An executor hands back tasks it had queued but not started (see Unqueue)."""

    KIND: ClassVar[str] = "tasks_returned"

    tasks: list[bytes]


@_message
@dataclass(frozen=True)
class CallDone(Message):
    """An actor host finished a method call."""

    KIND: ClassVar[str] = "call_done"

    call: bytes
    results: list[SerializedValue] = values()
    user_error: bool = False


@_message
@dataclass(frozen=True)
class ActorReady(Message):
    """The actor's constructor returned."""

    KIND: ClassVar[str] = "actor_ready"

    actor: bytes
    pid: int | None = None


@_message
@dataclass(frozen=True)
class ActorFailed(Message):
    """The actor's constructor raised `error`."""

    KIND: ClassVar[str] = "actor_failed"

    actor: bytes
    error: SerializedValue = value()


@_message
@dataclass(frozen=True)
class ActorExiting(Message):
    """The actor leaves on purpose (exit_actor) during `call`."""

    KIND: ClassVar[str] = "actor_exiting"

    actor: bytes
    call: bytes | None = None


@_message
@dataclass(frozen=True)
class GetObjects(Message):
    """Fetch objects, answered once all are done or one has failed; `task` is the asking task,
    which blocks meanwhile (its executor may take other work)."""

    KIND: ClassVar[str] = "get"
    REPLY: ClassVar[type[Message]] = Objects

    ids: list[bytes]
    task: bytes | None = None


@_message
@dataclass(frozen=True)
class GetAbandoned(Message):
    """A get of `task` timed out: the task is no longer blocked."""

    KIND: ClassVar[str] = "get_abandoned"

    task: bytes | None = None


@_message
@dataclass(frozen=True)
class Wait(Message):
    """ray.wait on objects and streams (`streams`: [stream id, next index] pairs)."""

    KIND: ClassVar[str] = "wait"
    REPLY: ClassVar[type[Message]] = Ready

    ids: list[bytes]
    num_returns: int
    timeout: float | None = None
    streams: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(frozen=True)
class Put(Message):
    """Store a value with the driver."""

    KIND: ClassVar[str] = "put"
    REPLY: ClassVar[type[Message]] = Stored

    value: SerializedValue = value()


@_message
@dataclass(frozen=True)
class SubmitTask(Message):
    """Submit a task from inside a task or actor; `parent` is the submitting task."""

    KIND: ClassVar[str] = "submit"
    REPLY: ClassVar[type[Message]] = Returns

    spec: TaskSpec = spec()
    parent: bytes | None = None


@_message
@dataclass(frozen=True)
class CreateActor(Message):
    """Create an actor from inside a task or actor."""

    KIND: ClassVar[str] = "create_actor"
    REPLY: ClassVar[type[Message]] = ActorCreated

    spec: ActorCreationSpec = spec()
    parent: bytes | None = None


@_message
@dataclass(frozen=True)
class SubmitActorCall(Message):
    """Call an actor method from inside a task or actor."""

    KIND: ClassVar[str] = "actor_call"
    REPLY: ClassVar[type[Message]] = Returns

    spec: ActorCallSpec = spec()
    parent: bytes | None = None


@_message
@dataclass(frozen=True)
class KillActor(Message):
    """ray.kill."""

    KIND: ClassVar[str] = "kill_actor"
    REPLY: ClassVar[type[Message]] = Done

    actor_id: bytes
    no_restart: bool


@_message
@dataclass(frozen=True)
class Cancel(Message):
    """ray.cancel of the task or call that produces object `id`."""

    KIND: ClassVar[str] = "cancel"
    REPLY: ClassVar[type[Message]] = Done

    id: bytes
    force: bool
    recursive: bool


@_message
@dataclass(frozen=True)
class GetNamedActor(Message):
    """ray.get_actor: the description of a named actor."""

    KIND: ClassVar[str] = "get_actor"
    REPLY: ClassVar[type[Message]] = Result

    name: str
    namespace: str | None = None


@_message
@dataclass(frozen=True)
class ListNamedActors(Message):
    """ray.util.list_named_actors."""

    KIND: ClassVar[str] = "list_actors"
    REPLY: ClassVar[type[Message]] = Result

    all_namespaces: bool


@_message
@dataclass(frozen=True)
class GetResources(Message):
    """The cluster's resources, or those available now."""

    KIND: ClassVar[str] = "resources"
    REPLY: ClassVar[type[Message]] = ResourceAmounts

    available: bool


@_message
@dataclass(frozen=True)
class GetNodes(Message):
    """ray.nodes."""

    KIND: ClassVar[str] = "nodes"
    REPLY: ClassVar[type[Message]] = Result


@_message
@dataclass(frozen=True)
class Borrow(Message):
    """The worker holds its first refs to these objects."""

    KIND: ClassVar[str] = "borrow"

    ids: list[bytes]


@_message
@dataclass(frozen=True)
class Release(Message):
    """The worker dropped its last refs to these objects."""

    KIND: ClassVar[str] = "release"

    ids: list[bytes]


@_message
@dataclass(frozen=True)
class Log(Message):
    """Lines a worker printed: [stream name, prefix, line] each."""

    KIND: ClassVar[str] = "log"

    pid: int | None
    lines: list[list[str]]


@_message
@dataclass(frozen=True)
class Yield(Message):
    """Item `index` (from 1) of the generator task or call `stream`."""

    KIND: ClassVar[str] = "yield"

    stream: bytes
    index: int
    value: SerializedValue = value()


@_message
@dataclass(frozen=True)
class StreamNext(Message):
    """The object id of item `index` of a stream, once it exists."""

    KIND: ClassVar[str] = "stream_next"
    REPLY: ClassVar[type[Message]] = NextItem

    stream: bytes
    index: int


@_message
@dataclass(frozen=True)
class StreamReady(Message):
    """Whether item `index` of a stream is ready."""

    KIND: ClassVar[str] = "stream_ready"
    REPLY: ClassVar[type[Message]] = StreamState

    stream: bytes
    index: int


@_message
@dataclass(frozen=True)
class CreatePlacementGroup(Message):
    """ray.util.placement_group; answered with the new group's PlacementGroupInfo."""

    KIND: ClassVar[str] = "placement_group_create"
    REPLY: ClassVar[type[Message]] = Result

    bundles: list[dict[str, float]]
    strategy: str
    name: str
    detached: bool


@_message
@dataclass(frozen=True)
class RemovePlacementGroup(Message):
    """ray.util.remove_placement_group."""

    KIND: ClassVar[str] = "placement_group_remove"
    REPLY: ClassVar[type[Message]] = Done

    id: bytes


@_message
@dataclass(frozen=True)
class WaitPlacementGroup(Message):
    """PlacementGroup.wait: answered with whether the group was placed within `timeout`."""

    KIND: ClassVar[str] = "placement_group_wait"
    REPLY: ClassVar[type[Message]] = Result

    id: bytes
    timeout: float | None


@_message
@dataclass(frozen=True)
class DescribePlacementGroup(Message):
    """The PlacementGroupInfo of a group (None if there is none)."""

    KIND: ClassVar[str] = "placement_group_info"
    REPLY: ClassVar[type[Message]] = Result

    id: bytes


@_message
@dataclass(frozen=True)
class FindPlacementGroup(Message):
    """ray.util.get_placement_group: the PlacementGroupInfo of a live group by name."""

    KIND: ClassVar[str] = "placement_group_get"
    REPLY: ClassVar[type[Message]] = Result

    name: str


@_message
@dataclass(frozen=True)
class PlacementGroupTable(Message):
    """ray.util.placement_group_table of one group (`id`) or of all (None)."""

    KIND: ClassVar[str] = "placement_group_table"
    REPLY: ClassVar[type[Message]] = Result

    id: bytes | None = None


@_message
@dataclass(frozen=True)
class ReserveGang(Message):
    """Reserve the hosts of `num_slices` TPU slices of type `tpu`; answered with the gang id."""

    KIND: ClassVar[str] = "gang_reserve"
    REPLY: ClassVar[type[Message]] = Result

    tpu: str
    num_slices: int
    timeout: float | None = None


@_message
@dataclass(frozen=True)
class ReleaseGang(Message):
    """Give back a reserved gang's hosts."""

    KIND: ClassVar[str] = "gang_release"
    REPLY: ClassVar[type[Message]] = Done

    gang_id: bytes


@_message
@dataclass(frozen=True)
class GangSize(Message):
    """How many hosts a reserved gang has."""

    KIND: ClassVar[str] = "gang_size"
    REPLY: ClassVar[type[Message]] = Result

    gang_id: bytes


# ---- driver to executor --------------------------------------------------------------------


@_message
@dataclass(frozen=True)
class ExecuteTask(Message):
    """Run a task. `code` is the pickled function, sent only the first time `fn` goes to
    this executor."""

    KIND: ClassVar[str] = "execute"

    task: bytes
    fn: bytes
    code: bytes | None
    name: str
    num_returns: Any
    returns: list[bytes]
    args: CallArguments = arguments()
    env: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    placement_group: str | None = None

    @classmethod
    def of(
        cls,
        task: TaskSpec,
        stored: Callable[[bytes], SerializedValue | None],
        *,
        send_code: bool = True,
        returns: Sequence[bytes] | None = None,
        num_returns: Any = None,
        env: Mapping[str, str] | None = None,
        resources: Mapping[str, float] | None = None,
        placement_group: str | None = None,
    ) -> ExecuteTask:
        """The message that runs `task`, its small ready arguments inlined (`stored` looks
        them up). Gang members each run one share: they pass their own `returns` and `env`."""
        return cls(
            task=task.task_id,
            fn=task.function.code_id,
            code=task.function.payload if send_code else None,
            name=task.name,
            num_returns=task.num_returns if num_returns is None else num_returns,
            returns=list(task.return_ids if returns is None else returns),
            args=inline_arguments(task.arguments, stored),
            env=dict(task.pool.env_vars if env is None else env),
            resources=dict(resources or {}),
            placement_group=placement_group,
        )


@_message
@dataclass(frozen=True)
class CancelTask(Message):
    """Cancel a queued or running task (`force`: kill the executor)."""

    KIND: ClassVar[str] = "cancel_task"

    task: bytes
    force: bool = False


@_message
@dataclass(frozen=True)
class Unqueue(Message):
    """Hand back every queued task that has not started (the running one blocked)."""

    KIND: ClassVar[str] = "unqueue"


@_message
@dataclass(frozen=True)
class Exit(Message):
    """End the executor after its queued tasks."""

    KIND: ClassVar[str] = "exit"


# ---- driver to actor host ------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceOptions:
    """How an actor instance runs: its name, lifetime, concurrency, and whether it is a restart."""

    name: str | None = None
    detached: bool = False
    is_async: bool = False
    max_concurrency: int = 1
    concurrency_groups: dict[str, int] = field(default_factory=dict)
    restarted: bool = False


@_message
@dataclass(frozen=True)
class CreateInstance(Message):
    """Build the actor's instance. `methods` is the pickled method table handles use."""

    KIND: ClassVar[str] = "create"

    code: bytes
    class_name: str
    methods: bytes
    args: CallArguments = arguments()
    options: InstanceOptions = record(InstanceOptions)
    env: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    placement_group: str | None = None


@_message
@dataclass(frozen=True)
class CallMethod(Message):
    """Run a method call in concurrency group `group` (None: the default group)."""

    KIND: ClassVar[str] = "call"

    call: bytes
    method: str
    returns: list[bytes]
    num_returns: Any
    args: CallArguments = arguments()
    group: str | None = None

    @classmethod
    def of(cls, actor_call: ActorCallSpec, stored: Callable[[bytes], SerializedValue | None]) -> CallMethod:
        """The message that runs `actor_call`, its small ready arguments inlined."""
        return cls(
            call=actor_call.call_id,
            method=actor_call.method,
            returns=list(actor_call.return_ids),
            num_returns=actor_call.num_returns,
            args=inline_arguments(actor_call.arguments, stored),
            group=actor_call.concurrency_group,
        )


@_message
@dataclass(frozen=True)
class CancelCall(Message):
    """Cancel a method call (skipped if it has not started)."""

    KIND: ClassVar[str] = "cancel_call"

    call: bytes


@_message
@dataclass(frozen=True)
class Die(Message):
    """End the actor's process (`restart`: exit so Iris starts it again)."""

    KIND: ClassVar[str] = "die"

    restart: bool = False
