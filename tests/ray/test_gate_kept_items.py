"""The items a gate keeps for a generator call whose caller is gone, until the owner claims the
call: bounded in bytes and in time, and a claim after they were dropped ends the stream with an
error; and the objects answers named, let go a while after their caller's connection closed
(one layer: the gate, with stand-in connections); and where an answer goes: to the caller,
or to the owner for its own calls and for calls whose caller is gone."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fray_ray._private import messages
from fray_ray._private.core.task_spec import CallArguments
from fray_ray._private.messages import CallDone, CallMethod, ClaimCalls, Yield
from fray_ray._private.objects.serialization import SerializedValue, deserialize, serialize
from fray_ray._private.workers import foreign_calls
from fray_ray._private.workers.foreign_calls import ForeignCallGate
from fray_ray.exceptions import ActorUnavailableError

CALL = b"\x07" * 24


class _Link:
    """A connection that keeps what is sent on it."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def notify(self, kind: str, body: Any, buffers: Any, **_: Any) -> None:
        sent = {Yield.KIND: Yield, CallDone.KIND: CallDone}[kind]
        self.sent.append(messages.decode(sent, body, [bytearray(b) for b in buffers]))


def _item(index: int, size: int = 10) -> Yield:
    return Yield(CALL, index, SerializedValue(b"x" * size, (), (), False))


@pytest.fixture
def gate() -> ForeignCallGate:
    gate = ForeignCallGate(lambda *args: None, bind_host="127.0.0.1", advertise_host="127.0.0.1")
    caller = _Link()
    call = CallMethod(CALL, "items", [], "streaming", CallArguments(serialize(((), {}))))
    gate._on_call(caller, None, call)  # type: ignore[arg-type]
    gate._forget(caller)  # the caller's connection closed mid-stream
    return gate


def test_items_wait_for_the_owners_claim_and_go_first(gate: ForeignCallGate) -> None:
    assert gate.send_item(_item(1)) and gate.send_item(_item(2))
    owner = _Link()
    gate._on_claim(owner, None, ClaimCalls([CALL]))  # type: ignore[arg-type]
    assert [m.index for m in owner.sent if isinstance(m, Yield)] == [1, 2]
    assert gate._held_bytes == 0


def test_items_nobody_claims_are_dropped_after_the_wait(gate: ForeignCallGate, monkeypatch: pytest.MonkeyPatch) -> None:
    assert gate.send_item(_item(1))
    monkeypatch.setattr(foreign_calls, "HELD_ITEMS_WAIT_S", 0.0)
    assert gate.send_item(_item(2))  # the wait is over: both are dropped, not sent to the owner
    assert gate._held_bytes == 0
    owner = _Link()
    gate._on_claim(owner, None, ClaimCalls([CALL]))  # type: ignore[arg-type]
    (done,) = owner.sent
    assert isinstance(done, CallDone) and done.user_error
    with pytest.raises(ActorUnavailableError):
        raise deserialize(done.results[0])


def test_items_past_the_byte_limit_are_dropped(gate: ForeignCallGate, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(foreign_calls, "HELD_ITEMS_LIMIT", 15)
    assert gate.send_item(_item(1)) and gate.send_item(_item(2))
    assert gate._held_bytes == 0 and gate._held[CALL] is None


# -- what answers name, once their caller's connection closed ---------------------------------

NAMED = b"\x09" * 28


def _answered_naming_a_ref(gate: ForeignCallGate, caller: _Link) -> None:
    gate._on_call(caller, None, CallMethod(CALL, "make", [b"\x08" * 28], 1,  # type: ignore[arg-type]
                                           CallArguments(serialize(((), {})))))
    assert gate.answer(CallDone(CALL, [SerializedValue(b"x", (), (NAMED,))]))
    assert CALL in gate._pinned


def test_what_an_answer_named_is_let_go_a_while_after_its_callers_connection_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(foreign_calls, "ORPHANED_PINS_S", 0.05)
    released = threading.Event()
    gate = ForeignCallGate(lambda *args: None, bind_host="127.0.0.1", advertise_host="127.0.0.1",
                           released=released.set)
    caller = _Link()
    _answered_naming_a_ref(gate, caller)
    gate._forget(caller)  # closed before its ResultsTaken came
    assert released.wait(30) and CALL not in gate._pinned
    gate.close()


def test_a_gate_closing_stops_its_timers_and_a_live_callers_pins_stay() -> None:
    gate = ForeignCallGate(lambda *args: None, bind_host="127.0.0.1", advertise_host="127.0.0.1")
    caller, other = _Link(), _Link()
    _answered_naming_a_ref(gate, caller)
    gate._forget(other)  # another caller's connection: this one's pins stay, no timer for them
    assert not gate._unpin_timers and CALL in gate._pinned
    gate._forget(caller)
    (timer,) = gate._unpin_timers
    gate.close()
    timer.join(5)
    assert not timer.is_alive() and CALL in gate._pinned  # cancelled: it let nothing go


def _gate_with_call(call_id: bytes) -> tuple[ForeignCallGate, _Link]:
    gate = ForeignCallGate(lambda *args: None, bind_host="127.0.0.1", advertise_host="127.0.0.1")
    caller = _Link()
    call = CallMethod(call_id, "ping", [call_id + b"\x01" * 4], 1, CallArguments(serialize(((), {}))))
    gate._on_call(caller, None, call)  # type: ignore[arg-type]
    return gate, caller


def test_an_answer_to_a_call_the_gate_never_saw_goes_to_the_owner() -> None:
    gate, caller = _gate_with_call(CALL)
    assert gate.answer(CallDone(b"\x08" * 24, [serialize("ok")])) is False  # the owner's own call
    assert caller.sent == [] and CALL in gate._callers  # the gate's own call is untouched


def test_an_answer_goes_to_its_caller_or_to_the_owner_once_the_caller_is_gone() -> None:
    gate, caller = _gate_with_call(CALL)
    assert gate.answer(CallDone(CALL, [serialize("ok")])) is True
    assert [deserialize(done.results[0]) for done in caller.sent] == ["ok"] and CALL not in gate._callers

    gate, caller = _gate_with_call(CALL)
    gate._forget(caller)  # its connection closed while the call ran: the answer is the owner's
    assert CALL in gate._orphaned and CALL not in gate._callers
    assert gate.answer(CallDone(CALL, [serialize("ok")])) is False
    assert caller.sent == [] and CALL not in gate._orphaned  # answered: the gate forgets it
