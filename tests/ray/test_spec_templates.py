"""Specs travel as a template pickled once plus their per-call fields: every spec still arrives
whole and its own, a template is unpickled once per process, and anything that may change in
place is pickled again every time."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import msgpack
import pytest

from fray_ray._private import messages
from fray_ray._private.core.task_spec import (
    ActorCallSpec,
    ActorCreationSpec,
    Arguments,
    CodeBlob,
    PoolKey,
    ResourceShape,
    TaskSpec,
)
from fray_ray._private.messages import CreateActor, MessageError, SubmitActorCall, SubmitTask
from fray_ray._private.messages import _spec_templates as templates
from fray_ray._private.objects import ids
from fray_ray._private.objects.serialization import deserialize


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    templates.forget_templates()
    yield
    templates.forget_templates()


def _wire(message: messages.Message) -> tuple[dict, list[bytearray]]:
    body, buffers = messages.encode(message)
    body = msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False, strict_map_key=False)
    return body, [bytearray(memoryview(b).cast("B")) for b in buffers]


def _through_the_wire(message: messages.Message) -> messages.Message:
    return messages.decode(type(message), *_wire(message))


FUNCTION = CodeBlob.of(len, "len")


def _task(*args: object, max_retries: int | bool = 3, **fields: object) -> TaskSpec:
    task_id = ids.new_task_id()
    return TaskSpec(**{  # type: ignore[arg-type]
        "task_id": task_id, "function": FUNCTION, "name": "len", "arguments": Arguments.pack(args, {}),
        "return_ids": (ids.object_id_for(task_id, 1),), "num_returns": 1, "max_retries": max_retries,
        "pool": PoolKey(shape=ResourceShape(cpu=1.0)), "parent_task_id": ids.new_task_id(), **fields,
    })


def test_each_spec_of_a_template_arrives_whole_and_its_own() -> None:
    first, second = _task("a", 1), _task("bb", 2)
    got_first = _through_the_wire(SubmitTask(first)).spec  # type: ignore[attr-defined]
    got_second = _through_the_wire(SubmitTask(second)).spec  # type: ignore[attr-defined]
    for sent, got in ((first, got_first), (second, got_second)):
        assert type(got) is TaskSpec
        for name in ("task_id", "return_ids", "parent_task_id", "rebuilding", "name", "num_returns", "max_retries", "pool"):
            assert getattr(got, name) == getattr(sent, name), name
        assert type(got.return_ids) is tuple
        assert got.function.code_id == sent.function.code_id and pickle.loads(got.function.payload) is len
        assert deserialize(got.arguments.value) == (tuple(deserialize(sent.arguments.value)[0]), {})
    assert got_first.arguments is not got_second.arguments  # never shared: the driver sets it
    got_first.arguments = Arguments.pack(("changed",), {})
    assert deserialize(got_second.arguments.value)[0] == ("bb", 2)


def test_a_template_is_pickled_and_unpickled_once() -> None:
    bodies = [_wire(SubmitTask(_task(n)))[0]["spec"][0] for n in range(5)]
    assert len(set(bodies)) == 1 and len(templates._pickled) == 1
    for n in range(5):
        _through_the_wire(SubmitTask(_task(n)))
    assert len(templates._unpickled) == 1


def test_values_that_compare_equal_but_pickle_apart_are_different_templates() -> None:
    specs = [_through_the_wire(SubmitTask(_task(max_retries=value))).spec for value in (1, True)]  # type: ignore[attr-defined]
    assert [type(s.max_retries) for s in specs] == [int, bool]
    assert len(templates._pickled) == 2


def test_an_object_that_may_change_in_place_is_pickled_every_time() -> None:
    class Strategy:  # a scheduling strategy object: hashable by identity, yet mutable
        def __init__(self) -> None:
            self.node = "a"

    strategy = Strategy()
    assert _through_the_wire(SubmitTask(_task(scheduling_strategy=strategy))).spec.scheduling_strategy.node == "a"  # type: ignore[attr-defined]
    strategy.node = "b"
    assert _through_the_wire(SubmitTask(_task(scheduling_strategy=strategy))).spec.scheduling_strategy.node == "b"  # type: ignore[attr-defined]
    assert len(templates._pickled) == 0
    env = {"env_vars": {"A": "1"}}  # dicts are looked up by what they hold now
    assert _through_the_wire(SubmitTask(_task(runtime_env=env))).spec.runtime_env == env  # type: ignore[attr-defined]
    env["env_vars"]["A"] = "2"
    assert _through_the_wire(SubmitTask(_task(runtime_env=env))).spec.runtime_env == env  # type: ignore[attr-defined]


def test_actor_calls_travel_by_template_and_creations_whole() -> None:
    call = ActorCallSpec(b"a" * 16, b"c" * 16, "ping", Arguments.pack((), {}), (b"r" * 28,), 1, attempt=2, submitted_at=1.5)
    got = _through_the_wire(SubmitActorCall(call)).spec  # type: ignore[attr-defined]
    assert (got.call_id, got.return_ids, got.attempt, got.submitted_at, got.method) == (b"c" * 16, (b"r" * 28,), 2, 1.5, "ping")
    creation = ActorCreationSpec(b"x" * 16, CodeBlob.of(dict, "dict"), "dict", Arguments.pack((), {}),
                                 ResourceShape(cpu=0.0), {})
    assert _through_the_wire(CreateActor(creation)).spec.actor_id == b"x" * 16  # type: ignore[attr-defined]
    assert len(templates._unpickled) == 1  # the call's; each creation is its own


def test_the_caches_keep_at_most_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "TEMPLATES_KEPT", 3)
    for n in range(10):
        _through_the_wire(SubmitTask(_task(name=f"f{n}")))
    assert len(templates._pickled) == 3 and len(templates._unpickled) == 3


def test_a_large_template_is_pickled_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "TEMPLATE_MAX_BYTES", 100)
    got = _through_the_wire(SubmitTask(_task(1))).spec  # type: ignore[attr-defined]
    assert got.max_retries == 3
    assert len(templates._pickled) == 0 and len(templates._unpickled) == 0


def test_per_call_values_that_do_not_fit_their_template_are_a_message_error() -> None:
    body, buffers = _wire(SubmitTask(_task(1)))
    body["spec"][1] = body["spec"][1][:2]
    with pytest.raises(MessageError, match="per-call"):
        messages.decode(SubmitTask, body, buffers)
