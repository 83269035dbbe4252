"""The typed session messages: every kind survives the trip through msgpack and its buffers, and
a body that does not describe its message is refused without harming the connection."""

from __future__ import annotations

import dataclasses
import threading

import msgpack
import numpy as np
import pytest

from fray_ray._private import messages
from fray_ray._private.core.task_spec import (
    ActorCallSpec,
    Arguments,
    CallArguments,
    CodeBlob,
    PoolKey,
    ResourceShape,
    TaskSpec,
    inline_arguments,
)
from fray_ray._private.messages import (
    CallDone,
    CallMethod,
    CreateInstance,
    ExecuteTask,
    Hello,
    InstanceOptions,
    Loans,
    MessageError,
    Put,
    Stored,
    SubmitTask,
    TaskDone,
)
from fray_ray._private.objects import ids
from fray_ray._private.objects.serialization import HEADER_PAYLOAD_BUDGET, INLINE_LIMIT, deserialize, serialize
from fray_ray._private.stream.protocol import Connection, RemoteError


def _through_the_wire(message: messages.Message) -> messages.Message:
    """Encode, pack and unpack as a frame would, then decode."""
    body, buffers = messages.encode(message)
    body = msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False, strict_map_key=False)
    return messages.decode(type(message), body, [bytearray(memoryview(b).cast("B")) for b in buffers])


def _task(*args: object) -> TaskSpec:
    task_id = ids.new_task_id()
    return TaskSpec(
        task_id=task_id,
        function=CodeBlob.of(len, "len"),
        name="len",
        arguments=Arguments.pack(args, {}),
        return_ids=(ids.object_id_for(task_id, 1),),
        num_returns=1,
        max_retries=3,
        pool=PoolKey(shape=ResourceShape(cpu=1.0)),
    )


def test_stored_values_travel_out_of_band_and_come_back_whole() -> None:
    array = np.arange(100_000, dtype=np.int64)
    done = TaskDone(b"t" * 16, [serialize(array), serialize("small")], user_error=False)
    body, buffers = messages.encode(done)
    assert buffers, "the array's data must leave the msgpack header"
    back = _through_the_wire(done)
    assert isinstance(back, TaskDone) and back.task == done.task and back.user_error is False
    np.testing.assert_array_equal(deserialize(back.results[0]), array)
    assert deserialize(back.results[1]) == "small"


def test_many_small_values_keep_the_header_small_and_come_back_whole() -> None:
    # 3,000 results of 30 KB each: a 90 MB header would exceed what a reader accepts.
    results = [serialize(bytes([i % 256]) * 30_000) for i in range(3000)]
    done = TaskDone(b"t" * 16, results, user_error=False)
    body, buffers = messages.encode(done)
    header = msgpack.packb(body, use_bin_type=True)
    assert len(header) < 2 * HEADER_PAYLOAD_BUDGET, len(header)
    assert len(buffers) >= 3000 - HEADER_PAYLOAD_BUDGET // 30_000
    back = _through_the_wire(done)
    assert [deserialize(v) for v in back.results] == [bytes([i % 256]) * 30_000 for i in range(3000)]


def test_a_large_pickle_stream_travels_as_a_buffer() -> None:
    big = list(range(50_000))  # pickled in-band: no out-of-band buffers of its own
    done = TaskDone(b"t" * 16, [serialize("small"), serialize(big)], user_error=False)
    body, buffers = messages.encode(done)
    assert len(buffers) == 1 and body["results"][1][0] is None and body["results"][0][0] is not None
    back = _through_the_wire(done)
    assert deserialize(back.results[0]) == "small" and deserialize(back.results[1]) == big


def test_a_spec_keeps_its_argument_buffers_apart_from_its_pickle() -> None:
    array = np.ones(50_000)
    submit = SubmitTask(_task(array), parent=b"p" * 16)
    _, buffers = messages.encode(submit)
    assert buffers
    back = _through_the_wire(submit)
    assert back.parent == b"p" * 16
    assert back.spec.task_id == submit.spec.task_id
    (args, _kwargs) = deserialize(back.spec.arguments.value)
    np.testing.assert_array_equal(args[0], array)


def test_code_travels_out_of_band_in_tasks_specs_and_actor_creation() -> None:
    # Pickled code may be larger than a frame's header may be (a closure capturing an array).
    spec = _task(1)
    execute = ExecuteTask.of(spec, {}.get)
    body, buffers = messages.encode(execute)
    assert spec.function.payload in [bytes(b) for b in buffers]
    assert spec.function.payload not in msgpack.packb(body, use_bin_type=True)
    back = _through_the_wire(execute)
    assert back.code == spec.function.payload and back.fn == spec.function.code_id

    submit = SubmitTask(_task(np.ones(1000)), parent=b"p" * 16)
    back_spec = _through_the_wire(submit).spec
    assert back_spec.function == submit.spec.function
    np.testing.assert_array_equal(deserialize(back_spec.arguments.value)[0][0], np.ones(1000))

    create = CreateInstance(b"c" * 4096, "A", b"methods", CallArguments(serialize(((), {}))), InstanceOptions())
    body, _ = messages.encode(create)
    assert b"c" * 4096 not in msgpack.packb(body, use_bin_type=True)
    assert _through_the_wire(create).code == create.code


def test_small_ready_arguments_are_inlined_and_large_or_pending_ones_are_not() -> None:
    small, large, pending = b"s" * 28, b"l" * 28, b"p" * 28
    stored = {small: serialize(1), large: serialize(b"x" * (INLINE_LIMIT + 1))}
    arguments = Arguments(serialize(((), {})), (small, large, pending))
    inlined = inline_arguments(arguments, stored.get)
    assert list(inlined.inlined) == [small]
    assert list(inlined.top_level) == [small, large, pending]


def test_the_messages_to_workers_round_trip() -> None:
    spec = _task(3)
    execute = ExecuteTask.of(spec, {}.get, send_code=False, resources={"CPU": 1.0}, placement_group="ab")
    back = _through_the_wire(execute)
    assert back.code is None and back.returns == list(spec.return_ids) and back.resources == {"CPU": 1.0}
    assert deserialize(back.args.value) == ((3,), {})

    call_id = ids.new_task_id()
    call = ActorCallSpec(ids.new_actor_id(), call_id, "m", Arguments.pack((1,), {}), (ids.object_id_for(call_id, 1),), 1)
    method = _through_the_wire(CallMethod.of(call, {}.get))
    assert (method.call, method.method, method.num_returns) == (call_id, "m", 1)

    create = CreateInstance(b"code", "A", b"methods", CallArguments(serialize(((), {}))),
                            InstanceOptions(name="n", max_concurrency=4, concurrency_groups={"io": 2}, restarted=True))
    assert _through_the_wire(create) == dataclasses.replace(create, args=_through_the_wire(create).args)
    assert _through_the_wire(create).options == create.options


def test_loans_travel_nested_with_their_values_buffers_in_order() -> None:
    # The call's argument and a lent value are both large: their buffers share the frame, the
    # argument's first (fields in declaration order), and each comes back to its own field.
    argument, lent_value = np.arange(50_000), np.arange(60_000)
    call_id = ids.new_task_id()
    call = ActorCallSpec(ids.new_actor_id(), call_id, "m", Arguments.pack((argument,), {}),
                         (ids.object_id_for(call_id, 1),), 1)
    method = CallMethod.of(call, {}.get)
    method.loans = Loans([b"a" * 28, b"b" * 28], [serialize(lent_value)], [[1, "10.0.0.7:4000", 1 << 20]], [b"w" * 16, b""])
    body, buffers = messages.encode(method)
    assert len(buffers) >= 2 and set(body["loans"]) == {"ids", "values", "held", "owners"}
    back = _through_the_wire(method)
    np.testing.assert_array_equal(deserialize(back.args.value)[0][0], argument)
    assert back.loans is not None and back.loans.ids == [b"a" * 28, b"b" * 28]
    np.testing.assert_array_equal(deserialize(back.loans.values[0]), lent_value)
    assert back.loans.held == [[1, "10.0.0.7:4000", 1 << 20]] and back.loans.owners == [b"w" * 16, b""]


def test_a_call_that_lends_nothing_carries_no_loans() -> None:
    done = CallDone(b"c" * 16, [serialize("ok")])
    body, _ = messages.encode(done)
    assert body["loans"] is None and _through_the_wire(done).loans is None


def test_malformed_loans_are_a_message_error() -> None:
    body, buffers = messages.encode(CallDone(b"c" * 16, [serialize("ok")], loans=Loans([b"a" * 28])))
    with pytest.raises(MessageError):
        messages.decode(CallDone, {**body, "loans": ["not", "a", "map"]}, buffers)
    with pytest.raises(MessageError):
        messages.decode(CallDone, {**body, "loans": {"values": []}}, buffers)  # no ids
    with pytest.raises(MessageError):  # a lent value whose buffer is missing
        messages.decode(CallDone, {**body, "loans": {"ids": [b"a" * 28], "values": [[None, 0, [], False]]}}, buffers)


def test_a_body_that_does_not_describe_its_message_is_a_message_error() -> None:
    with pytest.raises(MessageError):
        messages.decode(Hello, ["not", "a", "map"], [])
    with pytest.raises(MessageError):
        messages.decode(TaskDone, {"results": []}, [])  # no task
    with pytest.raises(MessageError):
        messages.decode(TaskDone, {"task": b"t", "results": [[b"", 3, [], False]]}, [])  # buffers missing
    hello = messages.decode(Hello, {"kind": "lease", "token": "x", "unknown": 1}, [])
    assert hello.kind == "lease" and hello.pid is None  # absent optional fields take their defaults


def test_a_malformed_request_is_refused_and_the_connection_keeps_serving(tcp_pair) -> None:
    ours, theirs = tcp_pair
    stored: list[Put] = []

    def on_put(connection: Connection, message_id: int | None, put: Put) -> None:
        stored.append(put)
        messages.reply(connection, message_id, Stored(b"id"))

    server = Connection(theirs, name="server").start(messages.handlers({Put: on_put}))
    client = Connection(ours, name="client").start({})
    closed = threading.Event()
    server.add_close_callback(lambda _: closed.set())
    try:
        with pytest.raises(RemoteError) as refused:
            client.call("put", {"value": "not a value"}, timeout=30)
        assert refused.value.kind == "MessageError"
        reply = messages.call(client, Put(serialize(7)), timeout=30)
        assert reply == Stored(b"id")
        assert deserialize(stored[0].value) == 7
        assert not closed.is_set()
    finally:
        client.close()
        server.close()
