"""Refs an actor's answer names are lent on to the worker that called it, not handed to the
driver (`workers/lent_refs.py`): a replay buffer's `sample` gives a learner refs that rollouts
lent the buffer, and the learner borrows them from the buffer, which keeps borrowing them from
the rollout, as a Ray borrower passes on what it borrowed. The driver hears nothing of it while
the refs stay between workers; a ref the learner passes on otherwise is handed over along the
chain. Real worker processes on the embedded cluster; the driver's handlers are watched to see
what it hears. The unit tests at the end check `LentRefs`, `Borrowers` and `Lending` alone."""

from __future__ import annotations

import sys
import weakref
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import fray_ray
from fray_ray._private import messages
from fray_ray._private.core import runtime_slot
from fray_ray._private.messages import CallDone, Loans
from fray_ray._private.objects.serialization import serialize
from fray_ray._private.workers import lent_out
from fray_ray._private.workers.lent_out import Borrowers, Lending
from fray_ray._private.workers.lent_refs import LentRefs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from driver_watch import driver_hears  # noqa: E402
from latches import Latch  # noqa: E402
from waiting import wait_for  # noqa: E402

LARGE = 1 << 20  # over the inline limit: never sent with a call or an answer


@pytest.fixture(scope="module")
def session(cluster_session: fray_ray.RayContext) -> fray_ray.RayContext:
    return cluster_session


def _holds(made: str) -> bool:
    """Whether this process still refers to the object `made` (hex id)."""
    references = runtime_slot.current().references
    references.flush()
    return references.count(bytes.fromhex(made)) > 0


def _sent() -> int:
    direct = runtime_slot.current().direct
    return -1 if direct is None else direct.sent


@fray_ray.remote(num_cpus=0)
class Source:
    def make(self, size: int = 8) -> bytes:
        return b"x" * size

    def make_after(self, go: Any) -> bytes:
        fray_ray.get(go.wait.remote())
        return b"late"


@fray_ray.remote(num_cpus=0)
class Rollout:
    """Lends results of its own to a buffer that keeps them, and lets go of its own refs."""

    def __init__(self, source: Any, buffer: Any) -> None:
        self.source, self.buffer = source, buffer

    def lend(self, size: int, ready: bool) -> str:
        fray_ray.get([self.source.make.remote(), self.buffer.keep.remote([])])  # the ways to both are known
        sent = _sent()
        ref = self.source.make.remote(size)
        if ready:
            fray_ray.wait([ref])
        fray_ray.get(self.buffer.keep.remote([ref]), timeout=60)
        assert _sent() == sent + 2, "the calls went through the driver"
        made = ref.hex()
        del ref  # the buffer's is the last ref
        fray_ray.put(None)  # an API call: sends what was released
        return made

    def lend_pending(self, go: Any) -> None:
        """Lends the buffer a result whose call waits for `go`."""
        fray_ray.get([self.source.make.remote(), self.buffer.keep.remote([])])
        self.pending = self.source.make_after.remote(go)
        fray_ray.get(self.buffer.keep.remote([self.pending]), timeout=60)

    def lend_and_sample(self, size: int) -> int:
        """Lends a result to the buffer and gets it back from it: its own object again."""
        fray_ray.get([self.source.make.remote(), self.buffer.keep.remote([])])
        ref = self.source.make.remote(size)
        fray_ray.get(self.buffer.keep.remote([ref]), timeout=60)
        (back,) = fray_ray.get(self.buffer.sample.remote(1), timeout=60)
        assert back == ref
        return len(fray_ray.get(back, timeout=60))

    def holds(self, made: str) -> bool:
        return _holds(made)

    def die(self) -> None:
        import os

        os._exit(1)


@fray_ray.remote(num_cpus=0)
class Buffer:
    def __init__(self) -> None:
        self.refs: list[Any] = []

    def keep(self, refs: list[Any]) -> int:
        self.refs.extend(refs)
        return len(self.refs)

    def sample(self, count: int) -> list[Any]:
        return self.refs[-count:]

    def use(self, source: Any) -> None:
        self.source = source
        fray_ray.get(source.make.remote(), timeout=60)  # the way is known

    def make_own(self, size: int) -> list[Any]:
        """A result of its own call, returned unread: the caller borrows it from here."""
        ref = self.source.make.remote(size)
        self.own = ref.hex()
        return [ref]

    def own_made(self) -> str:
        return self.own

    def drop(self) -> None:
        self.refs = []
        fray_ray.put(None)  # an API call: sends what was released

    def holds(self, made: str) -> bool:
        return _holds(made)

    def lent_here(self) -> int:
        direct = runtime_slot.current().direct
        return -1 if direct is None else len(direct.lent._lent)

    def die(self) -> None:
        import os

        os._exit(1)

    def leave(self) -> None:
        fray_ray.actor.exit_actor()


@fray_ray.remote(num_cpus=0)
class Learner:
    def __init__(self) -> None:
        self.taken: list[Any] = []

    def take(self, buffer: Any, count: int) -> int:
        fray_ray.get(buffer.lent_here.remote(), timeout=60)  # the way is known
        sent = _sent()
        self.taken = fray_ray.get(buffer.sample.remote(count), timeout=60)
        assert _sent() == sent + 1, "the call went through the driver"
        return len(self.taken)

    def take_own(self, buffer: Any, size: int) -> int:
        fray_ray.get(buffer.lent_here.remote(), timeout=60)  # the way is known
        self.taken = fray_ray.get(buffer.make_own.remote(size), timeout=60)
        return len(self.taken)

    def take_twice(self, buffer: Any) -> int:
        """The same ref sampled by two calls: one loan, returned once both are dropped."""
        fray_ray.get(buffer.lent_here.remote(), timeout=60)
        first = fray_ray.get(buffer.sample.remote(1), timeout=60)
        self.taken = fray_ray.get(buffer.sample.remote(1), timeout=60)
        assert first == self.taken
        return len(first)

    def wait_taken(self, timeout: float) -> int:
        """How many of the taken refs `ray.wait` finds ready within `timeout`."""
        ready, _ = fray_ray.wait(self.taken, num_returns=len(self.taken), timeout=timeout)
        return len(ready)

    def read_taken(self) -> list[int]:
        return [len(fray_ray.get(ref, timeout=60)) for ref in self.taken]

    def read_taken_or_error(self) -> Any:
        try:
            return self.read_taken()
        except Exception as exc:  # noqa: BLE001 - what the read raised is the answer
            return type(exc).__name__

    def pass_taken_to_a_task(self) -> int:
        return fray_ray.get(length_of.remote(self.taken), timeout=60)

    def pass_taken_to(self, sink: Any) -> list[int]:
        fray_ray.get(sink.count.remote([]), timeout=60)  # the way is known
        return fray_ray.get(sink.read.remote(self.taken), timeout=60)

    def drop(self) -> None:
        self.taken = []
        fray_ray.put(None)  # an API call: sends what was released

    def borrowed_here(self) -> int:
        direct = runtime_slot.current().direct
        return -1 if direct is None else sum(entry.kept for entry in direct.lent._lent.values())


@fray_ray.remote(num_cpus=0)
class Sink:
    def count(self, refs: list[Any]) -> int:
        return len(refs)

    def read(self, refs: list[Any]) -> list[int]:
        return [len(fray_ray.get(ref, timeout=60)) for ref in refs]


@fray_ray.remote
def length_of(refs: list[Any]) -> int:
    return len(fray_ray.get(refs[0], timeout=60))


def running(*handles: Any) -> None:
    """Each actor answered a call: workers call it directly from now on."""
    fray_ray.get([getattr(handle, name).remote(*args) for handle, name, args in handles], timeout=60)


def rollout_buffer_learner() -> tuple[Any, Any, Any]:
    source, buffer, learner = Source.remote(), Buffer.remote(), Learner.remote()
    rollout = Rollout.remote(source, buffer)
    running((source, "make", ()), (buffer, "lent_here", ()), (learner, "borrowed_here", ()),
            (rollout, "holds", ("00",)))
    return rollout, buffer, learner


@pytest.mark.parametrize("size, ready", [(8, True), (8, False), (LARGE, True)], ids=["sent", "pending", "large"])
def test_a_sampled_ref_is_borrowed_from_the_buffer_which_borrows_it_from_the_rollout(
        session: fray_ray.RayContext, size: int, ready: bool) -> None:
    objects = runtime_slot.current().objects
    rollout, buffer, learner = rollout_buffer_learner()
    made = fray_ray.get(rollout.lend.remote(size, ready), timeout=60)
    with driver_hears() as heard:
        assert fray_ray.get(learner.take.remote(buffer, 1), timeout=60) == 1
        assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [size]
    assert "hand_over" not in heard and "borrow" not in heard, heard
    assert not objects.known(bytes.fromhex(made))
    assert fray_ray.get(learner.borrowed_here.remote(), timeout=60) == 1
    fray_ray.get(buffer.drop.remote(), timeout=60)  # the learner's loan keeps the buffer's borrow
    assert fray_ray.get(buffer.holds.remote(made), timeout=60)
    assert fray_ray.get(rollout.holds.remote(made), timeout=60)
    assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [size]
    fray_ray.get(learner.drop.remote(), timeout=60)
    wait_for(lambda: not fray_ray.get(buffer.holds.remote(made), timeout=60), timeout=30,
             what="the buffer to let go once the learner dropped its ref")
    wait_for(lambda: not fray_ray.get(rollout.holds.remote(made), timeout=60), timeout=30,
             what="the rollout to let go once the buffer did")
    assert fray_ray.get(buffer.lent_here.remote(), timeout=60) == 0
    assert fray_ray.get(learner.borrowed_here.remote(), timeout=60) == 0


def test_a_ref_sampled_twice_stays_borrowed_until_both_are_dropped(session: fray_ray.RayContext) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    made = fray_ray.get(rollout.lend.remote(LARGE, True), timeout=60)
    assert fray_ray.get(learner.take_twice.remote(buffer), timeout=60) == 1  # the first sample is dropped
    fray_ray.get(buffer.drop.remote(), timeout=60)
    assert fray_ray.get(buffer.holds.remote(made), timeout=60)  # for the learner's second
    assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [LARGE]
    fray_ray.get(learner.drop.remote(), timeout=60)
    wait_for(lambda: not fray_ray.get(rollout.holds.remote(made), timeout=60), timeout=30,
             what="the rollout to let go once the learner dropped both")


def test_a_wait_for_a_sampled_ref_is_answered_by_the_buffer_not_the_driver(session: fray_ray.RayContext) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    go = Latch.remote()
    fray_ray.get(rollout.lend_pending.remote(go), timeout=60)
    fray_ray.get(learner.take.remote(buffer, 1), timeout=60)
    with driver_hears() as heard:
        assert fray_ray.get(learner.wait_taken.remote(0.3), timeout=60) == 0  # its call still runs
        assert fray_ray.get(learner.wait_taken.remote(0), timeout=60) == 0
        fray_ray.get(go.open.remote(), timeout=60)
        assert fray_ray.get(learner.wait_taken.remote(60), timeout=60) == 1
        assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [4]
    assert "hand_over" not in heard, heard


def test_a_ref_sampled_back_by_its_own_lender_is_its_own(session: fray_ray.RayContext) -> None:
    _, buffer, _ = rollout_buffer_learner()
    source = Source.remote()
    rollout = Rollout.remote(source, buffer)
    running((source, "make", ()), (rollout, "holds", ("00",)))
    with driver_hears() as heard:
        assert fray_ray.get(rollout.lend_and_sample.remote(LARGE), timeout=60) == LARGE
    assert "hand_over" not in heard and "borrow" not in heard, heard


@pytest.mark.parametrize("size", [8, LARGE], ids=["small", "large"])
def test_a_result_of_the_hosts_own_call_is_lent_to_its_caller(session: fray_ray.RayContext, size: int) -> None:
    source, buffer, learner = Source.remote(), Buffer.remote(), Learner.remote()
    running((source, "make", ()), (buffer, "use", (source,)), (learner, "borrowed_here", ()))
    with driver_hears() as heard:
        assert fray_ray.get(learner.take_own.remote(buffer, size), timeout=60) == 1
        assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [size]
    assert "hand_over" not in heard and "borrow" not in heard, heard
    made = fray_ray.get(buffer.own_made.remote(), timeout=60)
    assert fray_ray.get(buffer.holds.remote(made), timeout=60)  # for the learner: its own ref is gone
    fray_ray.get(learner.drop.remote(), timeout=60)
    wait_for(lambda: not fray_ray.get(buffer.holds.remote(made), timeout=60), timeout=30,
             what="the buffer to let its result go once the learner dropped it")


@pytest.mark.parametrize("size", [8, LARGE], ids=["small", "large"])
def test_a_sampled_ref_passed_to_a_task_is_handed_over_along_the_chain(
        session: fray_ray.RayContext, size: int) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    made = fray_ray.get(rollout.lend.remote(size, True), timeout=60)
    fray_ray.get(learner.take.remote(buffer, 1), timeout=60)
    with driver_hears() as heard:
        assert fray_ray.get(learner.pass_taken_to_a_task.remote(), timeout=60) == size
    assert heard.count("hand_over") == 1, heard  # the rollout's, asked by the buffer for the learner
    assert runtime_slot.current().objects.known(bytes.fromhex(made))
    assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [size]  # from the driver now
    assert fray_ray.get(learner.borrowed_here.remote(), timeout=60) == 0


def test_a_sampled_ref_is_lent_on_to_the_learners_own_callee(session: fray_ray.RayContext) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    sink = Sink.remote()
    running((sink, "count", ([],)))
    fray_ray.get(rollout.lend.remote(LARGE, True), timeout=60)
    fray_ray.get(learner.take.remote(buffer, 1), timeout=60)
    with driver_hears() as heard:
        assert fray_ray.get(learner.pass_taken_to.remote(sink), timeout=60) == [LARGE]
    assert "hand_over" not in heard, heard


def test_a_sample_the_driver_asks_for_is_handed_over_to_it(session: fray_ray.RayContext) -> None:
    rollout, buffer, _ = rollout_buffer_learner()
    made = fray_ray.get(rollout.lend.remote(8, True), timeout=60)
    (ref,) = fray_ray.get(buffer.sample.remote(1), timeout=60)
    assert ref.hex() == made and fray_ray.get(ref, timeout=60) == b"x" * 8


def test_a_sampled_ref_whose_buffer_died_is_read_from_its_owner(session: fray_ray.RayContext) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    fray_ray.get(rollout.lend.remote(LARGE, True), timeout=60)  # its value is not sent with the sample
    fray_ray.get(learner.take.remote(buffer, 1), timeout=60)
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(buffer.die.remote(), timeout=60)
    assert fray_ray.get(learner.read_taken_or_error.remote(), timeout=60) == [LARGE]  # the rollout lives


def test_a_sampled_ref_whose_owner_died_fails_as_owner_died(session: fray_ray.RayContext) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    fray_ray.get(rollout.lend.remote(LARGE, True), timeout=60)
    fray_ray.get(learner.take.remote(buffer, 1), timeout=60)
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(rollout.die.remote(), timeout=60)
    assert fray_ray.get(learner.read_taken_or_error.remote(), timeout=60) == "OwnerDiedError"


@pytest.mark.parametrize("size", [8, LARGE], ids=["small", "large"])
def test_a_sampled_ref_outlives_a_buffer_that_leaves_on_purpose(session: fray_ray.RayContext, size: int) -> None:
    rollout, buffer, learner = rollout_buffer_learner()
    made = fray_ray.get(rollout.lend.remote(size, False), timeout=60)  # pending: no value goes with the sample
    fray_ray.get(learner.take.remote(buffer, 1), timeout=60)
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(buffer.leave.remote(), timeout=60)  # hands what the learner borrows to the driver first
    assert fray_ray.get(learner.borrowed_here.remote(), timeout=60) == 0
    assert fray_ray.get(learner.read_taken.remote(), timeout=60) == [size]
    assert runtime_slot.current().objects.known(bytes.fromhex(made))
    fray_ray.get(learner.drop.remote(), timeout=60)
    wait_for(lambda: not runtime_slot.current().objects.known(bytes.fromhex(made)), timeout=30,
             what="the driver to free it once the learner dropped it")


# ---- LentRefs and Borrowers alone --------------------------------------------------------


class _Link:
    """A connection's stand-in: records the notices sent on it."""

    closed = False

    def __init__(self) -> None:
        self.sent: list[messages.Message] = []
        self.handed_to_standby = 0

    def hand_to_standby(self) -> None:
        self.handed_to_standby += 1


def _answer(ids: list[Any], values: list[Any]) -> CallDone:
    return CallDone(b"c" * 16, [], loans=Loans(ids, values))


def test_an_answer_lends_what_this_process_does_not_have_and_returns_the_rest() -> None:
    link = _Link()
    lent = LentRefs()
    with mock.patch.object(messages, "notify", lambda connection, message: connection.sent.append(message)):
        lent.lent_with_answer(link, _answer([b"a" * 28, b"b" * 28, 7], [serialize(b"v")]), taken=True,
                              known=lambda object_id: object_id == b"b" * 28)
        assert lent.borrowed_here(b"a" * 28) and not lent.borrowed_here(b"b" * 28)
        assert lent.value(b"a" * 28) is not None  # it came with the answer
        assert [message.ids for message in link.sent] == [[b"b" * 28]]  # had it already: back at once
        assert lent.returned([b"a" * 28]) == []
    assert [message.ids for message in link.sent][-1] == [b"a" * 28]
    assert not lent.holds(b"a" * 28)


def test_a_value_asked_of_its_lender_is_asked_once_until_it_answers() -> None:
    link = _Link()
    lent = LentRefs()
    answer: Any = mock.Mock()
    with mock.patch.object(messages, "notify", lambda connection, message: connection.sent.append(message)), \
            mock.patch.object(messages, "request", lambda connection, message: connection.sent.append(message) or answer):
        lent.lent_with_answer(link, _answer([b"a" * 28], []), taken=True, known=lambda object_id: False)
        first = lent.ask_lenders([b"a" * 28])
        again = lent.ask_lenders([b"a" * 28])  # a wait that polls
    assert len(link.sent) == 1 and first == again and not first[0].done()
    assert lent.awaitable(b"a" * 28)


def test_a_second_loan_of_the_same_object_from_the_same_host_is_the_same_loan() -> None:
    link, other = _Link(), _Link()
    lent = LentRefs()
    with mock.patch.object(messages, "notify", lambda connection, message: connection.sent.append(message)):
        for _ in range(2):  # two answers of the host name it (it counts this process once)
            lent.lent_with_answer(link, _answer([b"a" * 28], []), taken=True, known=lambda object_id: False)
        lent.lent_with_answer(other, _answer([b"a" * 28], []), taken=True, known=lambda object_id: True)
        assert link.sent == [] and [message.ids for message in other.sent] == [[b"a" * 28]]
        assert lent.returned([b"a" * 28]) == []
    assert [message.ids for message in link.sent] == [[b"a" * 28]]  # returned to it once


def test_an_answer_nobody_wants_returns_everything_it_lent() -> None:
    link = _Link()
    lent = LentRefs()
    with mock.patch.object(messages, "notify", lambda connection, message: connection.sent.append(message)):
        lent.lent_with_answer(link, _answer([b"a" * 28], []), taken=False, known=lambda object_id: False)
        lent.lent_with_answer(link, _answer("not a list", []), taken=True, known=lambda object_id: False)
    assert [message.ids for message in link.sent] == [[b"a" * 28]]
    assert not lent.holds(b"a" * 28)


def test_a_lender_reading_one_link_hands_the_others_it_lent_over_to_their_readers() -> None:
    borrowers = Borrowers()
    reading, other, unlent = _Link(), _Link(), _Link()
    with mock.patch("fray_ray._private.workers.lent_out.ObjectRef"):
        borrowers.kept(reading, [b"a" * 28])
        borrowers.kept(other, [b"b" * 28])
    borrowers.away_from(reading)
    assert (reading.handed_to_standby, other.handed_to_standby, unlent.handed_to_standby) == (0, 1, 0)


class _Results:
    """`lent_out.OwnResults` standing in for a host's `DirectCalls`: it may lend `lendable`."""

    def __init__(self, lendable: list[bytes], lent_by_caller: list[bytes] = ()) -> None:
        self.lent = mock.Mock(spec=LentRefs)
        self.lent.lent_by.side_effect = lambda object_id, caller: object_id in lent_by_caller
        self.lent.holder_of.return_value = None
        self._lendable = lendable
        self.escapes: list[bytes] = []

    def lendable(self, object_ids: Any) -> list[bytes]:
        return [oid for oid in object_ids if oid in self._lendable]

    def ready_value(self, object_id: bytes) -> Any:
        return serialize(b"v")

    def escaped(self, *object_ids: bytes) -> None:
        self.escapes.extend(object_ids)


def _lending(results: _Results) -> Lending:
    references = mock.Mock()
    return Lending(results, mock.Mock(), references)


def test_an_answer_lends_on_what_the_host_may_lend_and_hands_over_the_rest() -> None:
    mine, callers, other = b"m" * 28, b"c" * 28, b"o" * 28
    results = _Results([mine, callers], lent_by_caller=[callers])
    lending, caller, done = _lending(results), _Link(), CallDone(b"c" * 16, [])
    with mock.patch("fray_ray._private.workers.lent_out.ObjectRef"):
        lending.with_answer(done, [mine, callers, other], caller)
    assert done.loans is not None and done.loans.ids == [mine] and len(done.loans.values) == 1  # the caller's own object needs nothing
    assert results.escapes == [other]
    assert list(lending.borrowers._by_link[caller]) == [mine]


def test_an_answer_to_the_driver_hands_everything_over() -> None:
    results = _Results([b"m" * 28])
    done = CallDone(b"c" * 16, [])
    _lending(results).with_answer(done, [b"m" * 28], None)
    assert done.loans is None and results.escapes == [b"m" * 28]


def test_an_answer_lent_to_a_caller_that_went_meanwhile_is_handed_over_instead() -> None:
    results = _Results([b"m" * 28])
    lending, caller, done = _lending(results), _Link(), CallDone(b"c" * 16, [])
    with mock.patch("fray_ray._private.workers.lent_out.ObjectRef"):
        lending.with_answer(done, [b"m" * 28], caller)
        lending.answer_not_lent(done, caller)
    assert done.loans is None and results.escapes == [b"m" * 28]
    assert caller not in lending.borrowers._by_link


def test_a_caller_closed_before_its_loan_was_recorded_keeps_nothing() -> None:
    results = _Results([b"m" * 28])
    lending, caller, done = _lending(results), _Link(), CallDone(b"c" * 16, [])
    caller.closed = True  # its close callback ran before the loan was recorded
    with mock.patch("fray_ray._private.workers.lent_out.ObjectRef"):
        lending.with_answer(done, [b"m" * 28], caller)
    assert caller not in lending.borrowers._by_link


def test_a_broken_links_borrows_are_kept_for_a_grace_then_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lent_out, "BROKEN_LINK_GRACE_S", 0.2)
    made: list[weakref.ref[Any]] = []

    class Ref:  # an ObjectRef's stand-in: alive while the lender keeps it
        def __init__(self, object_id: bytes, _announced: bool = False) -> None:
            made.append(weakref.ref(self))

    monkeypatch.setattr(lent_out, "ObjectRef", Ref)
    flushed: list[int] = []
    borrowers = Borrowers(lambda: flushed.append(1))
    link, ended = _Link(), _Link()
    borrowers.kept(link, [b"a" * 28])
    borrowers.kept(ended, [b"b" * 28])
    borrowers.gone(link)
    assert made[0]() is not None and not flushed  # a borrower that lives on may still ask
    wait_for(lambda: flushed and made[0]() is None, timeout=30, what="the grace to end")
    borrowers.close()  # this process ends: links closing now let go at once
    borrowers.gone(ended)
    assert made[1]() is None and len(flushed) == 2
