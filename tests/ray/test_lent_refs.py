"""A worker's results passed to the host of its next direct call are lent, not handed to the
driver (`workers/lent_refs.py`): the driver hears nothing of a result the callee uses and
drops, and whatever else a callee does with such a ref still works: read a value the call did
not carry (asked of the caller, or fetched from its holder), keep the ref past its answer, lend
it on, pass it on otherwise, lose its link to a lender that lives on
(the driver then asks the lender), or find its lender gone. Real worker
processes on the embedded cluster; the driver's handlers are watched to see what it hears. The
unit tests at the end check `LentRefs` alone against a lender's well-formed and malformed answers."""

from __future__ import annotations

import concurrent.futures
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private import messages
from fray_ray._private.core import runtime_slot
from fray_ray._private.core.task_spec import CallArguments
from fray_ray._private.messages import CallMethod, LentValues, Loans
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.workers.lent_refs import LentRefs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from driver_watch import driver_hears  # noqa: E402
from latches import Latch  # noqa: E402
from waiting import wait_for  # noqa: E402

LARGE = 1 << 20  # over the inline limit: never sent with a call
HUGE = 9 << 20  # over what the caller sends in its answer to `ReadLent`: fetched from its holder


@pytest.fixture(scope="module")
def session(cluster_session: fray_ray.RayContext) -> fray_ray.RayContext:
    return cluster_session


@fray_ray.remote
class Source:
    def make(self, size: int = 8) -> bytes:
        return b"x" * size

    def fail(self) -> bytes:
        raise ValueError("made nothing")

    def make_naming(self) -> list[Any]:
        return [fray_ray.put(b"named")]

    def make_after(self, go: Any) -> bytes:
        fray_ray.get(go.wait.remote())
        return b"late"


@fray_ray.remote
class Sink:
    def __init__(self) -> None:
        self.kept: list[Any] = []
        self.error = ""

    def count(self, refs: list[Any]) -> int:
        return len(refs)

    def length(self, value: bytes) -> int:
        return len(value)

    def read(self, refs: list[Any]) -> list[int]:
        return [len(fray_ray.get(ref, timeout=60)) for ref in refs]

    def keep(self, refs: list[Any]) -> int:
        self.kept = refs
        return len(refs)

    def read_kept(self) -> int:
        return len(fray_ray.get(self.kept[0], timeout=60))

    def drop(self) -> None:
        self.kept = []
        fray_ray.put(None)  # an API call: sends what was released

    def read_kept_or_error(self) -> int | str:
        try:
            return len(fray_ray.get(self.kept[0], timeout=60))
        except Exception as exc:  # noqa: BLE001 - what the read raised is the answer
            return type(exc).__name__

    def pass_kept_on(self, other: Any) -> list[int]:
        return fray_ray.get(other.read.remote(self.kept), timeout=60)

    def pass_kept_to_a_task(self) -> int:
        return fray_ray.get(length_of.remote(self.kept), timeout=60)

    def read_before_and_after(self, refs: list[Any], go: Any) -> tuple[str, int]:
        try:
            fray_ray.get(refs[0], timeout=0.5)
            first = "read"
        except fray_ray.exceptions.GetTimeoutError:
            first = "timed out"
        fray_ray.get(go.open.remote())
        return first, len(fray_ray.get(refs[0], timeout=60))

    def break_links(self) -> None:
        import gc

        from fray_ray._private.workers.foreign_calls import ForeignCallGate

        for gate in [o for o in gc.get_objects() if isinstance(o, ForeignCallGate)]:
            for connection in list(gate._connections):  # as a network fault would: both ends live on
                connection.close()

    def pass_on(self, other: Any, refs: list[Any]) -> list[int]:
        return fray_ray.get(other.read.remote(refs), timeout=60)

    def read_when(self, started: Any, go: Any, refs: list[Any]) -> None:
        fray_ray.get(started.open.remote())
        fray_ray.get(go.wait.remote())
        try:
            fray_ray.get(refs[0], timeout=60)
        except Exception as exc:  # noqa: BLE001 - what the read raised is the answer
            self.error = type(exc).__name__

    def error_seen(self) -> str:
        return self.error

    def block(self, go: Any) -> None:
        fray_ray.get(go.wait.remote())

    def read_after_its_links_break(self, started: Any, refs: list[Any]) -> int:
        import gc

        from fray_ray._private.workers.foreign_calls import ForeignCallGate

        for gate in [o for o in gc.get_objects() if isinstance(o, ForeignCallGate)]:
            for connection in list(gate._connections):  # as a network fault would: both ends live on
                connection.close()
        fray_ray.get(started.open.remote())
        return len(fray_ray.get(refs[0], timeout=60))

    def lent_here(self) -> int:
        direct = runtime_slot.current().direct
        return -1 if direct is None else len(direct.lent._lent)

    def holds(self, made: str) -> bool:
        references = runtime_slot.current().references
        references.flush()
        return references.count(bytes.fromhex(made)) > 0


def ready_pair() -> tuple[Any, Any]:
    source, sink = Source.remote(), Sink.remote()
    fray_ray.get([source.make.remote(), sink.count.remote([])])  # both running: workers call them directly
    return source, sink


@fray_ray.remote
def pass_results_on(source: Any, sink: Any, steps: int, size: int, ready: bool, read: bool) -> list[Any]:
    fray_ray.get([source.make.remote(), sink.count.remote([])])  # the ways to both are known
    answers = []
    for _ in range(steps):
        ref = source.make.remote(size)
        if ready:
            fray_ray.wait([ref])
        answers.append(fray_ray.get((sink.read if read else sink.count).remote([ref]), timeout=60))
    direct = runtime_slot.current().direct
    assert direct is not None and direct.sent >= 2 * steps, "the calls went through the driver"
    return answers


def test_a_result_passed_on_and_dropped_costs_the_driver_nothing(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    with driver_hears() as heard:
        assert fray_ray.get(pass_results_on.remote(source, sink, 5, 8, False, False), timeout=60) == [1] * 5
    assert "hand_over" not in heard and "hand_over_done" not in heard, heard


def test_a_small_ready_value_travels_with_the_call_and_is_read_there(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    with driver_hears() as heard:
        assert fray_ray.get(pass_results_on.remote(source, sink, 5, 8, True, True), timeout=60) == [[8]] * 5
    assert "hand_over" not in heard and "hand_over_done" not in heard, heard


def test_a_value_not_ready_as_the_call_left_is_asked_of_the_caller(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    with driver_hears() as heard:
        assert fray_ray.get(pass_results_on.remote(source, sink, 3, 8, False, True), timeout=60) == [[8]] * 3
    assert "hand_over" not in heard, heard  # the caller answered once its call to the source ended


@fray_ray.remote
def pass_as_the_argument(source: Any, sink: Any, size: int, ready: bool) -> int:
    fray_ray.get([source.make.remote(), sink.count.remote([])])  # the ways to both are known
    ref = source.make.remote(size)
    if ready:
        fray_ray.wait([ref])
    return fray_ray.get(sink.length.remote(ref), timeout=60)  # resolved to its value as the call starts


@pytest.mark.parametrize("size, ready", [(8, False), (LARGE, True), (LARGE, False)],
                         ids=["pending", "large", "large-pending"])
def test_a_top_level_argument_not_sent_is_read_from_the_caller(
        session: fray_ray.RayContext, size: int, ready: bool) -> None:
    source, sink = ready_pair()
    with driver_hears() as heard:
        assert fray_ray.get(pass_as_the_argument.remote(source, sink, size, ready), timeout=60) == size
    assert "hand_over" not in heard, heard


@fray_ray.remote
def pass_one_naming_refs_on(source: Any, sink: Any) -> list[int]:
    fray_ray.get([source.make.remote(), sink.count.remote([])])  # the ways to both are known
    return fray_ray.get(sink.read.remote([source.make_naming.remote()]), timeout=60)


def test_a_value_naming_refs_is_read_through_the_driver(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    with driver_hears() as heard:
        assert fray_ray.get(pass_one_naming_refs_on.remote(source, sink), timeout=60) == [1]
    assert heard.count("hand_over") == 1, heard  # the driver counts whoever holds the ref it names


@fray_ray.remote
def pass_on_and_count_served(source: Any, sink: Any, size: int) -> tuple[list[int], int]:
    from fray_ray._private.workers.held_results import WORKER_HOLDER

    def served() -> int:  # by this process's holder so far (an executor runs many tasks)
        held = WORKER_HOLDER.held
        return 0 if held is None else held.served_bytes + held.lent_bytes

    fray_ray.get([source.make.remote(), sink.count.remote([])])  # the ways to both are known
    before = served()
    answer = fray_ray.get(sink.read.remote([source.make.remote(size)]), timeout=60)
    return answer, served() - before


@pytest.mark.parametrize("size", [LARGE, HUGE], ids=["large", "huge"])
def test_a_large_value_is_read_from_the_caller(session: fray_ray.RayContext, size: int) -> None:
    source, sink = ready_pair()
    with driver_hears() as heard:
        answer, served = fray_ray.get(pass_on_and_count_served.remote(source, sink, size), timeout=60)
    assert answer == [size]
    assert "hand_over" not in heard, heard
    # up to 8 MiB the caller's answer carries it; beyond, its holder serves it (mapped on this host)
    assert (served >= size) == (size == HUGE), served


@fray_ray.remote
class Lender:
    """Lends a result of its own to a sink that keeps it, and says whether it still refers to it."""

    def __init__(self, source: Any, sink: Any) -> None:
        self.source, self.sink = source, sink

    def ready(self) -> bool:
        return True

    def lend_and_drop(self, size: int, ready: bool) -> str:
        fray_ray.get([self.source.make.remote(), self.sink.count.remote([])])  # the ways to both are known
        ref = self.source.make.remote(size)
        if ready:
            fray_ray.wait([ref])
        assert fray_ray.get(self.sink.keep.remote([ref]), timeout=60) == 1
        made = ref.hex()
        del ref  # the sink's is the last ref
        fray_ray.put(None)  # an API call: sends what was released
        return made

    def lend_through(self, relay: Any, size: int, ready: bool, method: str) -> tuple[str, Any]:
        """A result of its own passed to `relay`, which passes it on to the sink's `method`."""
        fray_ray.get([self.source.make.remote(), relay.pass_to.remote(self.sink, [], "count")])
        ref = self.source.make.remote(size)
        if ready:
            fray_ray.wait([ref])
        answer = fray_ray.get(relay.pass_to.remote(self.sink, [ref], method), timeout=60)
        made = ref.hex()
        del ref
        fray_ray.put(None)  # an API call: sends what was released
        return made, answer

    def holds(self, made: str) -> bool:
        references = runtime_slot.current().references
        references.flush()
        return references.count(bytes.fromhex(made)) > 0

    def die(self) -> None:
        os._exit(1)


@pytest.mark.parametrize("size, ready", [(8, True), (8, False), (LARGE, True)], ids=["sent", "pending", "large"])
def test_a_ref_the_callee_keeps_past_its_answer_is_borrowed_from_its_caller_until_it_drops_it(
    session: fray_ray.RayContext, size: int, ready: bool
) -> None:
    objects = runtime_slot.current().objects
    source, sink = ready_pair()
    lender = Lender.remote(source, sink)
    assert fray_ray.get(lender.ready.remote(), timeout=60)  # it counts the handles it was given
    with driver_hears() as heard:
        made = fray_ray.get(lender.lend_and_drop.remote(size, ready), timeout=60)
    assert "hand_over" not in heard and "borrow" not in heard, heard  # the sink borrows it from the lender
    assert not objects.known(bytes.fromhex(made))
    assert fray_ray.get(lender.holds.remote(made), timeout=60)  # for the sink: its own ref is gone
    with driver_hears() as heard:
        assert fray_ray.get(sink.read_kept.remote(), timeout=60) == size
    assert "hand_over" not in heard, heard  # one not ready is asked of the lender
    fray_ray.get(sink.drop.remote(), timeout=60)
    wait_for(lambda: not fray_ray.get(lender.holds.remote(made), timeout=60), timeout=30,
             what="the lender to let the object go once the sink dropped it")
    wait_for(lambda: not objects.known(bytes.fromhex(made)), timeout=30, what="the driver to free what it was handed")


@fray_ray.remote
class Relay:
    """Passes the refs it is given on to another actor, as a pipeline stage does."""

    def pass_to(self, sink: Any, refs: list[Any], method: str) -> Any:
        return fray_ray.get(getattr(sink, method).remote(refs), timeout=60)

    def die(self) -> None:
        os._exit(1)

    def lent_here(self) -> int:
        direct = runtime_slot.current().direct
        return -1 if direct is None else len(direct.lent._lent)


@pytest.mark.parametrize("size, ready", [(8, True), (8, False), (LARGE, True)], ids=["sent", "pending", "large"])
def test_a_callee_lends_a_lent_ref_on_and_the_last_one_borrows_it_from_the_first(
        session: fray_ray.RayContext, size: int, ready: bool) -> None:
    objects = runtime_slot.current().objects
    source, sink = ready_pair()
    lender, relay = Lender.remote(source, sink), Relay.remote()
    assert fray_ray.get(lender.ready.remote(), timeout=60)
    with driver_hears() as heard:
        made, answer = fray_ray.get(lender.lend_through.remote(relay, size, ready, "read"), timeout=60)
    assert answer == [size]
    assert "hand_over" not in heard, heard  # one not ready is asked of the lender
    with driver_hears() as heard:
        made, answer = fray_ray.get(lender.lend_through.remote(relay, size, ready, "keep"), timeout=60)
    assert answer == 1 and "hand_over" not in heard and "borrow" not in heard, heard
    assert not objects.known(bytes.fromhex(made))
    assert fray_ray.get(lender.holds.remote(made), timeout=60)  # the sink borrows it through the relay
    assert fray_ray.get(relay.lent_here.remote(), timeout=60) == 1
    assert fray_ray.get(sink.read_kept.remote(), timeout=60) == size
    fray_ray.get(sink.drop.remote(), timeout=60)
    wait_for(lambda: not fray_ray.get(lender.holds.remote(made), timeout=60), timeout=30,
             what="the lender to let the object go once the sink dropped it")
    assert fray_ray.get(relay.lent_here.remote(), timeout=60) == 0


def test_a_ref_lent_on_through_a_relay_that_died_is_read_from_its_owner(session: fray_ray.RayContext) -> None:
    """The relay named the lender as the object's owner when it lent it on: the sink asks the
    lender through the driver, as a Ray borrower reads from the owner whoever passed it the ref."""
    source, sink = ready_pair()
    lender, relay = Lender.remote(source, sink), Relay.remote()
    assert fray_ray.get(lender.ready.remote(), timeout=60)
    made, answer = fray_ray.get(lender.lend_through.remote(relay, LARGE, True, "keep"), timeout=60)
    assert answer == 1
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(relay.die.remote(), timeout=60)
    assert fray_ray.get(sink.read_kept_or_error.remote(), timeout=60) == LARGE
    assert fray_ray.get(lender.holds.remote(made), timeout=60)


def lent_and_kept(size: int, ready: bool) -> tuple[Any, Any, str]:
    """(lender, sink, object id): the sink keeps a result of the lender's, which let go of its own refs."""
    source, sink = ready_pair()
    lender = Lender.remote(source, sink)
    made = fray_ray.get(lender.lend_and_drop.remote(size, ready), timeout=60)
    return lender, sink, made


@fray_ray.remote
def length_of(refs: list[Any]) -> int:
    return len(fray_ray.get(refs[0], timeout=60))


def test_a_kept_ref_passed_on_after_the_call_is_read_by_the_next(session: fray_ray.RayContext) -> None:
    lender, sink, _ = lent_and_kept(8, False)  # the lender lives on: it owns the object
    other = Sink.remote()
    fray_ray.get(other.count.remote([]), timeout=60)  # running: the sink's call goes straight to it
    with driver_hears() as heard:
        assert fray_ray.get(sink.pass_kept_on.remote(other), timeout=60) == [8]
    assert "hand_over" not in heard, heard  # lent on
    assert fray_ray.get(sink.read_kept.remote(), timeout=60) == 8  # and by the sink itself
    with driver_hears() as heard:
        assert fray_ray.get(sink.pass_kept_to_a_task.remote(), timeout=60) == 8
    assert heard.count("hand_over") == 1, heard  # a task's arguments go through the driver: it owns it now
    assert fray_ray.get(sink.read_kept.remote(), timeout=60) == 8


@fray_ray.remote
def lend_a_pending_one(source: Any, sink: Any, go: Any) -> tuple[str, int]:
    fray_ray.get([source.make.remote(), sink.count.remote([])])  # the ways to both are known
    return fray_ray.get(sink.read_before_and_after.remote([source.make_after.remote(go)], go), timeout=60)


def test_a_read_of_a_lent_value_not_ready_times_out_and_reads_it_later(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    assert fray_ray.get(lend_a_pending_one.remote(source, sink, Latch.remote()), timeout=60) == ("timed out", 4)


@pytest.mark.parametrize("ready, read", [(True, 8), (False, "OwnerDiedError")], ids=["sent", "pending"])
def test_a_kept_ref_whose_lender_died_reads_as_owner_died_unless_its_value_came(
        session: fray_ray.RayContext, ready: bool, read: int | str) -> None:
    lender, sink, _ = lent_and_kept(8, ready)
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(lender.die.remote(), timeout=60)
    assert fray_ray.get(sink.read_kept_or_error.remote(), timeout=60) == read


def test_a_kept_ref_whose_link_broke_is_read_from_its_lender_through_the_driver(session: fray_ray.RayContext) -> None:
    lender, sink, made = lent_and_kept(8, False)
    fray_ray.get(sink.break_links.remote(), timeout=60)  # both live on: the lender keeps it a while
    assert fray_ray.get(lender.holds.remote(made), timeout=60)
    with driver_hears() as heard:
        assert fray_ray.get(sink.read_kept_or_error.remote(), timeout=60) == 8
    assert "hand_over" in heard, heard  # asked through the driver, the lender handed it over
    fray_ray.get(sink.drop.remote(), timeout=60)
    wait_for(lambda: not fray_ray.get(sink.holds.remote(made), timeout=60), timeout=30,
             what="the sink to let go of it at once (no traceback keeps its read's refs)")
    # The lender lets go when its grace ends (`Borrowers`, tested alone in test_lent_answers.py).


@fray_ray.remote
def lend_to_one_that_passes_it_on(source: Any, sink: Any, other: Any) -> list[int]:
    fray_ray.get([source.make.remote(), sink.count.remote([])])
    ref = source.make.remote(8)
    fray_ray.wait([ref])
    return fray_ray.get(sink.pass_on.remote(other, [ref]), timeout=60)


def test_a_lent_ref_the_callee_passes_on_can_be_read_by_the_next(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    assert fray_ray.get(lend_to_one_that_passes_it_on.remote(source, sink, Sink.remote()), timeout=60) == [8]


@fray_ray.remote
def lend_an_error_to_one_that_passes_it_on(source: Any, sink: Any, other: Any) -> list[int]:
    fray_ray.get([source.make.remote(), sink.count.remote([])])
    ref = source.fail.remote()  # its value is the error: small, and sent with the call
    fray_ray.wait([ref])
    return fray_ray.get(sink.pass_on.remote(other, [ref]), timeout=60)


def test_a_lent_error_passed_on_raises_where_it_is_read(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    with pytest.raises(ValueError, match="made nothing"):
        fray_ray.get(lend_an_error_to_one_that_passes_it_on.remote(source, sink, Sink.remote()), timeout=60)


@fray_ray.remote(max_retries=0)
def lend_and_exit(source: Any, sink: Any, latches: list[Any]) -> None:
    started, go, late = latches
    fray_ray.get([source.make.remote(), sink.count.remote([])])
    ref = source.make_after.remote(late)  # pending: its value is not sent
    sink.read_when.remote(started, go, [ref])
    fray_ray.get(started.wait.remote())  # the sink runs the call
    os._exit(0)


def test_a_lent_ref_whose_lender_is_gone_reads_as_owner_died(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    started, go, late = Latch.remote(), Latch.remote(), Latch.remote()
    with pytest.raises(fray_ray.exceptions.WorkerCrashedError):
        fray_ray.get(lend_and_exit.remote(source, sink, [started, go, late]), timeout=60)
    fray_ray.get(go.open.remote())
    wait_for(lambda: fray_ray.get(sink.error_seen.remote(), timeout=60) != "", timeout=30,
             what="the sink's read of the lent ref to fail")
    assert fray_ray.get(sink.error_seen.remote(), timeout=60) == "OwnerDiedError"
    fray_ray.get(late.open.remote())


@fray_ray.remote(max_retries=0)
def lend_then_lose_the_link(source: Any, sink: Any, latches: list[Any]) -> int:
    started, late = latches
    fray_ray.get([source.make.remote(), sink.count.remote([])])
    ref = source.make_after.remote(late)  # pending: its value is not sent with the call
    return fray_ray.get(sink.read_after_its_links_break.remote(started, [ref]), timeout=120)


def test_a_lent_ref_read_after_the_link_to_its_lender_broke_is_read_through_the_driver(
        session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    started, late = Latch.remote(), Latch.remote()
    answer = lend_then_lose_the_link.remote(source, sink, [started, late])
    fray_ray.get(started.wait.remote())  # the sink's link to the task is gone; it reads the lent ref
    fray_ray.get(late.open.remote())
    assert fray_ray.get(answer, timeout=120) == len(b"late")  # not OwnerDiedError: its lender lives


@fray_ray.remote(max_restarts=1, max_task_retries=1)
class DiesOnce:
    def ping(self) -> None:
        return None

    def read_or_die(self, refs: list[Any]) -> list[int]:
        if not fray_ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)  # its caller hands the call back to the driver, which sends it again
        return [len(fray_ray.get(ref, timeout=60)) for ref in refs]


@fray_ray.remote
class FailsOnce:
    def __init__(self) -> None:
        self.failed = False

    def ping(self) -> None:
        return None

    def read_or_raise(self, refs: list[Any]) -> list[int]:
        if not self.failed:
            self.failed = True
            refs.clear()  # the error's traceback keeps this frame: it must not keep the ref too
            raise ValueError("the first time")  # its caller sends the call again, straight to this host
        return [len(fray_ray.get(ref, timeout=60)) for ref in refs]


@fray_ray.remote
def lend_to(source: Any, target: Any, method: str, size: int) -> list[int]:
    fray_ray.get([source.make.remote(), target.ping.remote()])  # the ways to both are known
    ref = source.make.remote(size)
    fray_ray.wait([ref])
    call = getattr(target, method)
    if method == "read_or_raise":
        call = call.options(retry_exceptions=[ValueError], max_task_retries=1)
    return fray_ray.get(call.remote([ref]), timeout=60)


def running(*actors: Any) -> list[Any]:
    """`actors`, once each runs: a task's first call to one goes straight to it."""
    fray_ray.get([actor.ping.remote() if hasattr(actor, "ping") else actor.make.remote() for actor in actors])
    return list(actors)


@pytest.mark.parametrize("size", [8, LARGE], ids=["small", "large"])
def test_a_call_handed_back_to_the_driver_hands_over_what_it_lent(session: fray_ray.RayContext, size: int) -> None:
    source, target = running(Source.remote(), DiesOnce.remote())
    assert fray_ray.get(lend_to.remote(source, target, "read_or_die", size), timeout=60) == [size]


@pytest.mark.parametrize("size", [8, LARGE], ids=["small", "large"])
def test_a_call_its_caller_sends_again_lends_again(session: fray_ray.RayContext, size: int) -> None:
    source, target = running(Source.remote(), FailsOnce.remote())
    with driver_hears() as heard:
        assert fray_ray.get(lend_to.remote(source, target, "read_or_raise", size), timeout=60) == [size]
    assert "hand_over" not in heard, heard  # the large one is read from the caller's holder


@fray_ray.remote
def lend_to_a_call_cancelled_before_it_starts(source: Any, sink: Any, go: Any) -> None:
    fray_ray.get([source.make.remote(), sink.count.remote([])])
    ref = source.make.remote(8)
    fray_ray.wait([ref])
    blocked = sink.block.remote(go)
    queued = sink.count.remote([ref])  # waits behind `block`
    fray_ray.cancel(queued)
    fray_ray.get(go.open.remote())
    fray_ray.get(blocked, timeout=60)


def test_what_a_call_cancelled_before_it_starts_lent_is_forgotten(session: fray_ray.RayContext) -> None:
    source, sink = ready_pair()
    fray_ray.get(lend_to_a_call_cancelled_before_it_starts.remote(source, sink, Latch.remote()), timeout=60)
    assert fray_ray.get(sink.lent_here.remote(), timeout=60) == 0


# ---- LentRefs alone: what a lender's answer to `ReadLent` does to the callee's record ----------


class _LenderStandIn:
    """A caller's gate connection as the callee sees it: `ReadLent` is answered with `answer`."""

    def __init__(self, answer: tuple[Any, list[Any]]) -> None:
        self.answer = answer
        self.peer_info: dict[str, Any] = {}
        self.closed = False

    def request(self, method: str, body: Any, buffers: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(self.answer)
        return future


def _lent_by(lender: _LenderStandIn, object_id: bytes) -> LentRefs:
    lent = LentRefs()
    call = CallMethod(call=b"\x05" * 24, method="read", returns=[], num_returns=1,
                      args=CallArguments(SerializedValue(b"")), loans=Loans([object_id]))
    lent.arrived(lender, call)  # type: ignore[arg-type]
    return lent


def test_a_lenders_answer_naming_its_holder_makes_the_value_readable_there() -> None:
    object_id = b"\x06" * 28
    body, buffers = messages.encode(LentValues([object_id], [SerializedValue(b"", (), (), False)],
                                               [[0, "10.0.0.7:4000", 1 << 20]]))
    lent = _lent_by(_LenderStandIn((body, buffers)), object_id)
    assert not lent.ready(object_id)
    lent.read_pending([object_id], timeout=5)
    assert lent.ready(object_id) and lent.holder_of(object_id) == ("10.0.0.7:4000", 1 << 20)


@pytest.mark.parametrize("body", [{"ids": 5, "values": [], "held": []}, {"ids": [], "values": [], "held": "x"},
                                  {"nonsense": True}], ids=["ids", "held", "shape"])
def test_a_malformed_answer_from_a_lender_leaves_the_value_to_be_handed_over(body: dict[str, Any]) -> None:
    object_id = b"\x07" * 28
    lent = _lent_by(_LenderStandIn((body, [])), object_id)
    lent.read_pending([object_id], timeout=5)  # returns: the reader is not left waiting
    assert lent.without_value([object_id]) == [object_id]  # so `adopt` asks the lender to hand it over
