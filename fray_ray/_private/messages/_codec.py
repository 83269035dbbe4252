"""The message base class and the codec: how a message's fields become a frame's body and
out-of-band buffers and back, and the helpers that send, answer and dispatch messages."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import cloudpickle

from fray_ray._private.core.task_spec import Arguments, CallArguments, CodeBlob
from fray_ray._private.messages._spec_templates import per_call_fields, pickled_template, spec_from_template
from fray_ray._private.objects.serialization import HeaderBudget, SerializedValue
from fray_ray._private.stream.protocol import Connection, Handler

logger = logging.getLogger(__name__)


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
    NESTED = "nested"  # another message (or None), as a map within the body
    BLOB = "blob"  # bytes (or None) carried as an out-of-band buffer, whatever their size


def _wire(codec: _Codec, **kwargs: Any) -> Any:
    return field(metadata={"codec": codec}, **kwargs)


def value() -> Any:
    """A field holding one SerializedValue."""
    return _wire(_Codec.VALUE)


def values(**kwargs: Any) -> Any:
    """A field holding a list of SerializedValues."""
    return _wire(_Codec.VALUES, **kwargs)


def arguments() -> Any:
    """A field holding CallArguments."""
    return _wire(_Codec.ARGUMENTS)


def spec() -> Any:
    """A field holding a task, actor-creation or actor-call spec."""
    return _wire(_Codec.SPEC)


def pickled(**kwargs: Any) -> Any:
    """A field holding any picklable value."""
    return _wire(_Codec.PICKLED, **kwargs)


def blob(**kwargs: Any) -> Any:
    """A field holding bytes or None that travel outside the frame's header (pickled code may
    be larger than a header may be)."""
    return _wire(_Codec.BLOB, **kwargs)


def record(cls: type) -> Any:
    """A field holding a frozen dataclass `cls` whose fields are plain msgpack values."""
    return field(metadata={"codec": _Codec.RECORD, "record": cls})


def nested(cls: type) -> Any:
    """A field holding a message of class `cls`, or None (the default): fields that most
    messages leave empty travel as one, and cost nothing while it is None."""
    return field(default=None, metadata={"codec": _Codec.NESTED, "record": cls})


@dataclass(repr=False, eq=False)
class Message:
    """Base of every message. `KIND`: the method of its frames ("" for replies).

    Messages are plain dataclasses, not frozen ones: every worker imports all of them when it
    starts, and each method a dataclass generates costs an `exec` at import; frozen ones cost
    twice as much to define and are slower to build (every field is set through
    `object.__setattr__`). For the same reason each message class generates only its
    `__init__` (`repr=False, eq=False`) and shares the `__repr__` and `__eq__` below. Nothing
    mutates a message once built.
    """

    KIND: ClassVar[str] = ""
    #: The type of the answer to a request (None: a notification, or a reply itself).
    REPLY: ClassVar[type[Message] | None] = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__


_KINDS: dict[str, type[Message]] = {}
_LAYOUTS: dict[type[Message], _Layout] = {}
M = TypeVar("M", bound=Message)


def _message(cls: type[M]) -> type[M]:
    """Register a message class under its `KIND`."""
    if cls.KIND:
        if cls.KIND in _KINDS:
            raise TypeError(f"two messages of kind {cls.KIND!r}")
        _KINDS[cls.KIND] = cls
    return cls


@dataclass(frozen=True)
class _Layout:
    """How a message class travels, worked out once per class.

    Plain fields are copied between the message's `__dict__` and the body as they are; the
    others (`special`, in declaration order, which is the order of their buffers) each go
    through their codec.
    """

    names: frozenset[str]
    required: frozenset[str]
    #: (name, codec, required, record type) of each field that is not plain.
    special: tuple[tuple[str, _Codec, bool, Any], ...]


def _layout(cls: type[Message]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        fields = dataclasses.fields(cls)
        required = frozenset(
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        special = tuple(
            (f.name, f.metadata["codec"], f.name in required, f.metadata.get("record"))
            for f in fields
            if f.metadata.get("codec", _Codec.PLAIN) is not _Codec.PLAIN
        )
        layout = _Layout(frozenset(f.name for f in fields), required, special)
        _LAYOUTS[cls] = layout
    return layout


# ---- encoding ------------------------------------------------------------------------------


def encode(message: Message) -> tuple[dict[str, Any], list[Any]]:
    """A message as a frame's body and its out-of-band buffers."""
    buffers: list[Any] = []
    budget = HeaderBudget()  # pickle streams beyond it travel as buffers: the header stays small
    return _encode_body(message, buffers, budget), buffers


def _encode_body(message: Message, buffers: list[Any], budget: HeaderBudget) -> dict[str, Any]:
    body: dict[str, Any] = dict(message.__dict__)  # the plain fields as they are; the rest below
    for name, codec, _, _ in _layout(type(message)).special:  # (the commonest codecs first)
        item = body[name]
        if codec is _Codec.NESTED:
            if item is not None:  # None, the usual value, stays as it is
                body[name] = _encode_body(item, buffers, budget)
        elif codec is _Codec.VALUES:
            body[name] = [v.to_wire(buffers, budget) for v in item] if item else []
        elif codec is _Codec.VALUE:
            body[name] = item.to_wire(buffers, budget)
        elif codec is _Codec.ARGUMENTS:
            inlined = item.inlined
            body[name] = [
                item.value.to_wire(buffers, budget),
                list(item.top_level),
                [[object_id, v.to_wire(buffers, budget)] for object_id, v in inlined.items()] if inlined else [],
                item.stored,
            ]
        elif codec is _Codec.SPEC:
            body[name] = _pack_spec(item, buffers, budget)
        elif codec is _Codec.RECORD:
            body[name] = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
        elif codec is _Codec.BLOB:
            body[name] = item is not None
            if item is not None:
                buffers.append(item)
        else:
            body[name] = cloudpickle.dumps(item)
    return body


def decode(cls: type[M], body: Any, buffers: Sequence[bytearray]) -> M:
    """The message of type `cls` a frame's body and buffers describe; MessageError if they do not."""
    message, offset = _decode_body(cls, body, buffers, 0)
    if offset != len(buffers):
        raise MessageError(f"a {cls.__name__} describes {offset} buffers but its frame carries {len(buffers)}")
    return message


def _decode_body(cls: type[M], body: Any, buffers: Sequence[bytearray], offset: int) -> tuple[M, int]:
    """The message a body describes, and the offset of the first buffer after its own."""
    if type(body) is not dict and not isinstance(body, Mapping):
        raise MessageError(f"a {cls.__name__} must be a map, not {type(body).__name__}")
    layout = _layout(cls)
    # Every field there and nothing else (the usual body): the message is built without its
    # __init__, which would only check again what the layout says.
    complete = len(body) == len(layout.names) and layout.names.issuperset(body)
    if not complete:
        missing = layout.required.difference(body)
        if missing:
            raise MessageError(f"a {cls.__name__} needs {sorted(missing)[0]!r}")
    # Keys this version does not know are left out: a newer peer may send more.
    fields: dict[str, Any] = dict(body) if complete or layout.names.issuperset(body) else {
        name: raw for name, raw in body.items() if name in layout.names
    }
    try:
        for name, codec, _, record_type in layout.special:
            if name not in fields:
                continue
            raw = fields[name]
            if codec is _Codec.NESTED:
                if raw is not None:
                    fields[name], offset = _decode_body(record_type, raw, buffers, offset)
            elif codec is _Codec.VALUE:
                fields[name], offset = SerializedValue.from_wire(raw, buffers, offset)
            elif codec is _Codec.VALUES:
                decoded = []
                for description in raw:
                    item, offset = SerializedValue.from_wire(description, buffers, offset)
                    decoded.append(item)
                fields[name] = decoded
            elif codec is _Codec.ARGUMENTS:
                argument_value, offset = SerializedValue.from_wire(raw[0], buffers, offset)
                inlined = {}
                for object_id, inlined_description in raw[2]:
                    inlined[object_id], offset = SerializedValue.from_wire(inlined_description, buffers, offset)
                top_level, stored = raw[1], raw[3] if len(raw) > 3 else None
                if stored is not None and not isinstance(stored, bytes):
                    raise MessageError(f"stored arguments must be an object id, not {type(stored).__name__}")
                fields[name] = CallArguments(argument_value, list(top_level), inlined, stored)
            elif codec is _Codec.SPEC:
                fields[name], offset = _unpack_spec(raw, buffers, offset)
            elif codec is _Codec.RECORD:
                if not isinstance(raw, Mapping):
                    raise MessageError(f"{name!r} of a {cls.__name__} must be a map")
                known = {f.name for f in dataclasses.fields(record_type)}
                fields[name] = record_type(**{k: v for k, v in raw.items() if k in known})
            elif codec is _Codec.BLOB:
                if raw:
                    fields[name], offset = bytes(buffers[offset]), offset + 1
                else:
                    fields[name] = None
            else:
                fields[name] = cloudpickle.loads(raw)
    except MessageError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise MessageError(f"a malformed {cls.__name__}: {exc}") from exc
    if complete:
        message = cls.__new__(cls)
        message.__dict__.update(fields)
        return message, offset
    return cls(**fields), offset


def _pack_spec(task_spec: Any, buffers: list[Any], budget: HeaderBudget) -> list[Any]:
    """A spec as its template's pickle (`_spec_templates`), its per-call fields, and its
    argument value and code as buffers (a pickled function may be larger than a frame's header
    may be)."""
    overrides: dict[str, Any] = {}
    code_fields = []
    for name, item in task_spec.__dict__.items():
        if type(item) is CodeBlob:
            code_fields.append(name)
            buffers.append(item.payload)
            overrides[name] = dataclasses.replace(item, payload=b"")
    argument_values = getattr(task_spec, "arguments", None)
    description = top_level = None
    if argument_values is not None:
        overrides["arguments"] = None
        description = argument_values.value.to_wire(buffers, budget)
        top_level = list(argument_values.top_level)
    per_call = [getattr(task_spec, name) for name in per_call_fields(type(task_spec))]
    return [pickled_template(task_spec, overrides), per_call, description, top_level, code_fields]


def _unpack_spec(raw: Sequence[Any], buffers: Sequence[bytearray], offset: int) -> tuple[Any, int]:
    template, per_call, description, top_level, code_fields = raw
    task_spec = spec_from_template(template, per_call)
    for name in code_fields:  # specs are mutable dataclasses
        setattr(task_spec, name, dataclasses.replace(getattr(task_spec, name), payload=bytes(buffers[offset])))
        offset += 1
    if description is not None:
        argument_value, offset = SerializedValue.from_wire(description, buffers, offset)
        task_spec.arguments = Arguments(argument_value, tuple(top_level))
    return task_spec, offset


# ---- sending and receiving -----------------------------------------------------------------


def notify(connection: Connection, message: Message, *, defer: bool = False, hold: bool = False) -> None:
    """Send a notification; ConnectionClosed if the peer is gone. `defer`, `hold`: see `Connection.notify`."""
    body, buffers = encode(message)
    connection.notify(message.KIND, body, buffers, defer=defer, hold=hold)


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
#: handler(connection, messages): notifications of one type that arrived together, in order.
BatchMessageHandler = Callable[[Connection, list[Any]], None]


class _Dispatch:
    """A Connection handler for one message type: decodes each frame's body and hands the
    message on. With `batch`, the notifications of a batch frame go to it as one list."""

    def __init__(self, cls: type[Message], handle: MessageHandler | None, batch: BatchMessageHandler | None) -> None:
        self._cls = cls
        self._handle = handle
        if batch is not None:
            self._batch_handle = batch
            self.batch = self._on_batch

    def __call__(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        message = decode(self._cls, body, buffers)
        if self._handle is not None:
            self._handle(connection, message_id, message)
        else:
            self._batch_handle(connection, [message])

    def _on_batch(self, connection: Connection, items: list[tuple[Any, list[bytearray]]]) -> None:
        decoded = []
        for body, buffers in items:
            try:
                decoded.append(decode(self._cls, body, buffers))
            except MessageError:
                logger.exception("%s: a malformed %s in a batch", connection.name, self._cls.__name__)
        if decoded:
            self._batch_handle(connection, decoded)


def handlers(
    table: Mapping[type[Message], MessageHandler], batched: Mapping[type[Message], BatchMessageHandler] | None = None,
) -> dict[str, Handler]:
    """A Connection's handler table from one handler per message type. A frame whose body does
    not decode is answered (if it is a request) with a MessageError and handled no further.

    `batched`: notification types whose handler takes a list of messages, those of a batch
    frame together (a lone frame's message as a list of one); a type may not be in both tables.
    """
    batched = batched or {}
    both = set(table) & set(batched)
    if both:
        raise TypeError(f"{sorted(c.__name__ for c in both)} have both a handler and a batch handler")
    dispatch: dict[str, Handler] = {cls.KIND: _Dispatch(cls, handle, None) for cls, handle in table.items()}
    dispatch.update({cls.KIND: _Dispatch(cls, None, handle) for cls, handle in batched.items()})
    return dispatch
