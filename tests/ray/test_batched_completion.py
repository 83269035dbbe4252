"""Answers that arrive together complete together: the object table fulfils and watches many
objects under one lock, task events end together and their history costs the garbage
collector nothing, a message handler can take a batch, and short tasks are queued deeper."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from fray_ray._private import messages
from fray_ray._private.core.task_spec import ActorCallSpec, Arguments
from fray_ray._private.driver.prefetch import DEPTH, MAX_DEPTH, SHORT_TASK_S, PrefetchDepth
from fray_ray._private.messages import CallDone, MessageError, TaskDone, encode
from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectState, ObjectTable
from fray_ray._private.objects.serialization import SerializedValue, deserialize, serialize, serialize_error
from fray_ray._private.observe.task_events import TaskEvent, TaskEvents, TaskStatus, TaskType, call_event, finished_call_record


@pytest.fixture
def table() -> Iterator[ObjectTable]:
    store = ObjectStore(ObjectStoreConfig(limit=1 << 30), session_name="batched-completion-tests")
    yield ObjectTable(store)
    store.close()


def _ids(count: int) -> list[bytes]:
    return [bytes([i]) * 28 for i in range(1, count + 1)]


# ---- object table --------------------------------------------------------------------------


def test_fulfil_all_completes_every_object_and_runs_their_callbacks(table: ObjectTable) -> None:
    ids = _ids(3)
    table.create_pending(ids, referenced=True)
    seen: list[bytes] = []
    table.add_done_callback(ids[1], seen.append)
    table.fulfil_all([(ids[0], serialize("a")), (ids[1], serialize_error(ValueError("b"))), (ids[2], serialize("c"))])
    assert [table.state(i) for i in ids] == [ObjectState.READY, ObjectState.FAILED, ObjectState.READY]
    assert seen == [ids[1]]
    values = table.values(ids)
    assert values is not None and deserialize(values[0]) == "a" and values[1].is_error


def test_fulfil_all_refuses_a_second_result_after_completing_the_others(table: ObjectTable) -> None:
    ids = _ids(2)
    table.create_pending(ids, referenced=True)
    table.fulfil(ids[0], serialize(1))
    with pytest.raises(RuntimeError, match="fulfilled twice"):
        table.fulfil_all([(ids[0], serialize(2)), (ids[1], serialize(3))])
    values = table.values(ids)
    assert values is not None and [deserialize(v) for v in values] == [1, 3]  # the first result stays


def test_a_result_arriving_after_shutdown_is_dropped_quietly(table: ObjectTable) -> None:
    # Shutdown fails every pending object; a task still running answers later, and its result
    # has nowhere to go (it used to surface as a "fulfilled twice" traceback in the driver).
    ids = _ids(2)
    table.create_pending(ids, referenced=True)
    table.fulfil(ids[0], serialize("done before"))
    table.fail_all_pending(lambda _: serialize_error(RuntimeError("shut down")))
    table.fulfil_all([(ids[1], serialize("late"))])
    values = table.values(ids)
    assert values is not None and deserialize(values[0]) == "done before" and values[1].is_error


def test_a_result_nobody_refers_to_is_dropped(table: ObjectTable) -> None:
    [object_id] = _ids(1)
    table.create_pending([object_id])  # no reference: freed as soon as it is done
    table.fulfil_all([(object_id, serialize(b"x" * 1000))])
    assert table.state(object_id) is None and table.store.used == 0


def test_values_gives_none_for_pending_and_unknown_objects(table: ObjectTable) -> None:
    ids = _ids(2)
    table.create_pending(ids, referenced=True)
    table.fulfil(ids[0], serialize(5))
    values = table.values([*ids, b"u" * 28])
    assert values is not None and deserialize(values[0]) == 5 and values[1:] == [None, None]
    assert table.values(ids, all_or_none=True) is None
    assert table.ready_values(ids[:1]) is not None


def test_watch_registers_once_per_pending_object_and_reports_errors_done_already(table: ObjectTable) -> None:
    ids = _ids(3)
    table.create_pending(ids, referenced=True)
    table.fulfil(ids[2], serialize_error(ValueError("done already")))
    seen: list[bytes] = []
    pending, unknown, failed = table.watch([ids[0], ids[1], ids[0], ids[2]], seen.append)
    assert pending == ids[:2] and unknown is None and failed
    table.fulfil_all([(ids[0], serialize(0)), (ids[1], serialize(1))])
    assert seen == ids[:2]  # once each, though asked for twice


def test_watch_of_an_unknown_object_leaves_no_callback_behind(table: ObjectTable) -> None:
    ids = _ids(2)
    table.create_pending(ids, referenced=True)
    seen: list[bytes] = []
    pending, unknown, failed = table.watch([ids[0], b"u" * 28, ids[1]], seen.append)
    assert (pending, unknown, failed) == ([], b"u" * 28, False)
    table.fulfil_all([(ids[0], serialize(0)), (ids[1], serialize(1))])
    assert seen == []


def test_a_pending_object_is_counted_with_the_ref_made_with_it(table: ObjectTable) -> None:
    ids = _ids(2)
    table.create_pending(ids[:1], referenced=True)
    table.create_pending(ids[1:])
    assert table.references(ids[0]) == 1 and table.references(ids[1]) == 0


# ---- task events ---------------------------------------------------------------------------


def _event(index: int) -> TaskEvent:
    return TaskEvent(bytes([index]) * 24, f"A.m{index}", "A.m", TaskType.ACTOR_TASK, TaskStatus.PENDING_NODE_ASSIGNMENT,
                     actor_id=b"a" * 16)


def _call(index: int, *, started: bool) -> ActorCallSpec:
    call = ActorCallSpec(b"a" * 16, bytes([index]) * 24, f"m{index}", Arguments.pack((), {}), (bytes([index]) * 28,), 1)
    call.submitted_at = 100.0 + index
    call.started_at = 200.0 + index if started else None
    return call


def test_live_calls_come_from_their_source_and_end_as_one_record_each() -> None:
    events = TaskEvents(history=10)
    running, waiting, queued = _call(1, started=True), _call(2, started=False), _call(3, started=False)
    live = [call_event(running, "A", "host-1", 7), call_event(waiting, "A", "host-1", 7), call_event(queued, "A", None, None)]
    events.add_live_source(lambda: live)
    assert [(e.name, e.state) for e in events.snapshot()] == [
        ("A.m1", TaskStatus.RUNNING),
        ("A.m2", TaskStatus.PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY),
        ("A.m3", TaskStatus.PENDING_NODE_ASSIGNMENT),
    ]
    assert (live[0].created, live[0].started, live[0].host, live[0].worker_pid) == (101.0, 201.0, "host-1", 7)
    # The first two end after the source described them: each is listed once, as it ended.
    events.add_finished([finished_call_record(running, "A", "host-1", 7, [serialize(1)], 300.0),
                         finished_call_record(waiting, "A", "host-1", 7, [serialize_error(KeyError("k"))], 301.0)])
    kept = events.snapshot()
    assert [(e.name, e.state) for e in kept] == [
        ("A.m1", TaskStatus.FINISHED), ("A.m2", TaskStatus.FAILED), ("A.m3", TaskStatus.PENDING_NODE_ASSIGNMENT),
    ]
    assert (kept[0].created, kept[0].started, kept[0].ended, kept[0].kind) == (101.0, 201.0, 300.0, TaskType.ACTOR_TASK)
    assert kept[1].error is not None and kept[1].started is None and kept[1].actor_id == b"a" * 16
    assert TaskEvent.from_record(kept[0].record()).record() == kept[0].record()


def test_records_added_past_the_bound_push_out_the_oldest() -> None:
    events = TaskEvents(history=3)
    events.add_finished([finished_call_record(_call(i, started=True), "A", None, None, [serialize(i)], 1.0)
                         for i in range(1, 6)])
    assert [e.name for e in events.snapshot()] == ["A.m3", "A.m4", "A.m5"] and events.dropped == 2
    events.add_finished([])
    assert events.dropped == 2


def test_the_history_of_finished_attempts_is_not_tracked_by_the_collector() -> None:
    events = TaskEvents(history=100)
    for index in range(50):
        event = events.submitted(_event(index))
        events.finished(event, [serialize(index)])
    gc.collect()  # a collection untracks tuples of plain values
    assert not any(gc.is_tracked(record) for record in events._finished)
    record = events._finished[-1]
    again = TaskEvent.from_record(record)
    assert again.record() == record and again.state is TaskStatus.FINISHED


# ---- message handlers ----------------------------------------------------------------------


class _Connection:
    name = "test"


def test_a_batched_handler_gets_a_lone_message_as_a_list_of_one() -> None:
    got: list[list[CallDone]] = []
    table = messages.handlers({}, batched={CallDone: lambda connection, answers: got.append(answers)})
    body, buffers = encode(CallDone(b"c" * 24, [serialize(1)]))
    table["call_done"](_Connection(), None, body, buffers)  # type: ignore[arg-type]
    assert len(got) == 1 and len(got[0]) == 1 and got[0][0].call == b"c" * 24


def test_a_malformed_message_in_a_batch_is_left_out_and_the_rest_delivered(caplog: pytest.LogCaptureFixture) -> None:
    got: list[list[CallDone]] = []
    table = messages.handlers({}, batched={CallDone: lambda connection, answers: got.append(answers)})
    good = encode(CallDone(b"c" * 24, [serialize(1)]))
    with caplog.at_level(logging.ERROR):
        table["call_done"].batch(_Connection(), [good, ({"results": []}, []), good])  # type: ignore[attr-defined]
    assert [len(answers) for answers in got] == [2]
    assert "malformed CallDone" in caplog.text


def test_a_type_may_not_have_both_kinds_of_handler() -> None:
    with pytest.raises(TypeError):
        messages.handlers({TaskDone: lambda *a: None}, batched={TaskDone: lambda *a: None})


def test_a_value_that_names_buffers_it_does_not_have_is_a_message_error() -> None:
    with pytest.raises(MessageError):
        messages.decode(CallDone, {"call": b"c", "results": [[b"p", 2, [], False]], "user_error": False}, [bytearray(1)])


def test_serialized_values_compare_by_content() -> None:
    value = SerializedValue(b"p", [b"x"], (b"r" * 28,), False)
    assert value == SerializedValue(b"p", (b"x",), (b"r" * 28,), False)
    assert value != SerializedValue(b"p", [b"y"], (b"r" * 28,), False)
    moved = value.with_buffers([memoryview(b"x")])
    assert moved.payload == b"p" and moved.contained_refs == value.contained_refs and bytes(moved.buffers[0]) == b"x"


# ---- prefetch depth ------------------------------------------------------------------------


def test_queues_grow_deeper_as_a_pools_tasks_get_shorter() -> None:
    depth = PrefetchDepth()
    assert depth.depth("pool") == DEPTH  # nothing known yet
    depth.ran("pool", 0.5)
    assert depth.depth("pool") == DEPTH  # long tasks
    for _ in range(60):  # a running average: the long one fades
        depth.ran("pool", SHORT_TASK_S / 4)
    assert DEPTH < depth.depth("pool") < MAX_DEPTH
    for _ in range(30):
        depth.ran("pool", 1e-6)
    assert depth.depth("pool") == MAX_DEPTH
    assert depth.depth("other pool") == DEPTH


def test_run_times_that_say_nothing_are_ignored() -> None:
    depth = PrefetchDepth()
    depth.ran("pool", float("nan"))
    depth.ran("pool", -1.0)
    assert depth.depth("pool") == DEPTH


# ---- handles -------------------------------------------------------------------------------


def test_reading_a_method_leaves_no_cycle_through_the_handle(cluster_session) -> None:
    """A method object must not be kept on its handle: it refers to the handle, and the cycle
    would keep the handle (so the actor) alive until a garbage collection, not its last `del`."""
    import weakref

    import fray_ray

    @fray_ray.remote
    class Counter:
        def one(self) -> int:
            return 1

    gc.disable()  # what frees the handle must be its reference count, not a collection
    try:
        actor = Counter.remote()
        assert fray_ray.get([actor.one.remote() for _ in range(3)], timeout=60) == [1, 1, 1]
        gone = weakref.ref(actor)
        del actor
        assert gone() is None
    finally:
        gc.enable()


def test_a_handle_keeps_each_methods_checked_options_and_options_still_apply(cluster_session) -> None:
    """The options of `handle.method` are checked once per handle; `.options()` on top of them
    applies to its own calls only."""
    import fray_ray

    @fray_ray.remote
    class Pairs:
        @fray_ray.method(num_returns=2)
        def pair(self) -> tuple[int, int]:
            return 1, 2

        def one(self) -> int:
            return 1

    actor = Pairs.remote()
    first, second = actor.pair.remote()
    assert fray_ray.get([first, second], timeout=60) == [1, 2]
    assert set(actor._checked_options) == {"pair"}
    assert fray_ray.get(list(actor.pair.remote()), timeout=60) == [1, 2]  # from the kept options
    three = actor.pair.options(num_returns=3).remote
    with pytest.raises(fray_ray.exceptions.RayTaskError):
        fray_ray.get(three(), timeout=60)  # two values for three returns
    assert fray_ray.get(list(actor.pair.remote()), timeout=60) == [1, 2]  # unchanged by .options()
    assert isinstance(actor.one.remote(), fray_ray.ObjectRef)
    assert set(actor._checked_options) == {"pair", "one"}
