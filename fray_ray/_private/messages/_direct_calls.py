"""What a worker and its driver say about actor calls the worker sends straight to the actor.

A worker asks once per actor where the actor's host takes calls (`AskRoute`); the driver names
the host's call gate, which it asks the host to open (`OpenGate`), or says to keep calling
through it. Results stay with the caller until a ref to one leaves its process: then the
caller hands the object to the driver (`HandOver`, then `HandOverDone` with its value); the
stream of a generator call is handed over whole (`HandOverStream`) when the caller waits for it
together with objects the driver has, or loses the host's gate. Calls whose host died under
them go back to the driver (`HandBack`), which applies Ray's restart and retry rules as for
its own calls. A caller's results passed in the arguments of its next direct call are lent
to the callee rather than handed over (`CallMethod.loans`); a callee that keeps one past its
answer borrows it from the caller (`CallDone.kept`, until `LentReturned`), and asks for it to
be handed over (`AdoptLent`) only when it passes it on or reads a value the call did not carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from fray_ray._private.core.task_spec import ActorCallSpec
from fray_ray._private.messages._codec import Message, _message, pickled, spec, values
from fray_ray._private.objects.ids import object_id_for
from fray_ray._private.objects.serialization import SerializedValue


@dataclass(repr=False, eq=False)
class Route(Message):
    """Where an actor's host takes calls: its gate's `address` and `token`, and the instance
    (`incarnation`) they reach; no address: call through the driver. `pending`: the calls
    asked about that are still queued or running in the driver."""

    address: str | None = None
    token: str = ""
    incarnation: int = 0
    pending: list[bytes] = field(default_factory=list)
    #: the actor's `max_task_retries`, for calls that retry exceptions and leave it to the actor
    max_task_retries: int = 0
    #: the actor's `enable_task_events`, for calls that leave it to the actor
    task_events: bool = True


@_message
@dataclass(repr=False, eq=False)
class AskRoute(Message):
    """Where to send calls to `actor`; `through_driver`: this worker's calls to it that went
    through the driver and may not have ended (direct calls wait until none is left)."""

    KIND: ClassVar[str] = "ask_route"
    REPLY: ClassVar[type[Message]] = Route

    actor: bytes
    through_driver: list[bytes] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class Gate(Message):
    """An actor host's call gate ({"address", "token"}), or None where it has none."""

    gate: Any = pickled()


@_message
@dataclass(repr=False, eq=False)
class OpenGate(Message):
    """Driver to actor host: open the gate other processes send calls to, and say where."""

    KIND: ClassVar[str] = "open_gate"
    REPLY: ClassVar[type[Message]] = Gate


@dataclass(repr=False, eq=False)
class Adopted(Message):
    """The driver has the objects asked about (their lender handed them over), but `missing`:
    the lender had let them go (it lost its link to the borrower, which counted as its end)."""

    missing: list[bytes] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class AdoptLent(Message):
    """Callee to caller, on the caller's gate connection: hand these objects the caller lent
    with a call (`CallMethod.loans`) to the driver, and answer once the driver has them; the
    callee needs more of them than the call gave (to read a value not sent, to pass one on,
    or to keep one past its answer)."""

    KIND: ClassVar[str] = "adopt_lent"
    REPLY: ClassVar[type[Message]] = Adopted

    ids: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class AdoptFor(Message):
    """Callee to driver: `AdoptLent` for objects whose lender's gate connection broke; the
    driver asks the lender (worker `owner`) on its own session, and fails if it is gone."""

    KIND: ClassVar[str] = "adopt_for"
    REPLY: ClassVar[type[Message]] = Adopted

    owner: bytes
    ids: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class LentReturned(Message):
    """Callee to caller, on the caller's gate connection: this process no longer keeps these
    objects the caller lent it and it borrowed past the call (`CallDone.kept`): it dropped
    them, or borrows them from the driver now."""

    KIND: ClassVar[str] = "lent_returned"

    ids: list[bytes]


@dataclass(repr=False, eq=False)
class LentValues(Message):
    """The values of objects asked about with `ReadLent`, once ready: one for each of `ids`,
    empty where `held` ([index in `ids`, holder address, size]) names the holder that serves
    it. Objects asked about and left out are to be handed over instead (`AdoptLent`)."""

    ids: list[bytes] = field(default_factory=list)
    values: list[SerializedValue] = values(default_factory=list)
    held: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class ReadLent(Message):
    """Callee to caller, on the caller's gate connection: the values of these objects the
    caller lent, which were not ready as the call left; answered once they are."""

    KIND: ClassVar[str] = "read_lent"
    REPLY: ClassVar[type[Message]] = LentValues

    ids: list[bytes]


@dataclass(repr=False, eq=False)
class LentTaken(Message):
    """The callee borrows the objects from the driver now."""


@_message
@dataclass(repr=False, eq=False)
class TakeLent(Message):
    """Caller to callee, as the caller's process ends: the driver has these objects the callee
    keeps (the caller handed them over); borrow them from it, and answer once it counts that."""

    KIND: ClassVar[str] = "take_lent"
    REPLY: ClassVar[type[Message]] = LentTaken

    ids: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class ResultsTaken(Message):
    """Caller to actor host: the driver counts this process's refs to the objects these calls'
    results named, so the host may let go of its own (`ForeignCallGate.answer` kept them)."""

    KIND: ClassVar[str] = "results_taken"

    calls: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class HandOver(Message):
    """The driver owns these results of direct calls from now on (a ref to each left the
    caller's process); their values follow in `HandOverDone`. The caller holds one ref to each."""

    KIND: ClassVar[str] = "hand_over"

    ids: list[bytes]
    producers: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class HandOverDone(Message):
    """The values (or errors) of objects handed over; with `held`, those the caller keeps
    itself: [index in `results`, holder address, size] each (`remote_values`), their frame
    values empty."""

    KIND: ClassVar[str] = "hand_over_done"

    ids: list[bytes]
    results: list[SerializedValue] = values()
    held: list[list[Any]] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class HandOverStream(Message):
    """The driver keeps the stream of a direct generator call from now on (its caller waits
    for it with other objects, or lost its host's gate): `items` follow the stream's first
    `before` items (the caller took them itself, or sent them earlier), and `finished` says
    the stream has ended (an error is its last item). Sent again by the caller for each later
    item and for the end. `held` names the items the caller keeps itself, as in `HandOverDone`."""

    KIND: ClassVar[str] = "hand_over_stream"

    stream: bytes
    before: int
    items: list[SerializedValue] = values()
    finished: bool = False
    held: list[list[Any]] = field(default_factory=list)

    def item_ids(self) -> list[bytes]:
        """The object ids of `items`: the stream's items `before + 1` onwards."""
        return [object_id_for(self.stream, self.before + number) for number in range(1, len(self.items) + 1)]


@_message
@dataclass(repr=False, eq=False)
class HandBack(Message):
    """A direct call whose host went away before answering, on instance `incarnation` of its
    actor: the driver owns its results from now on and retries it or fails it by its rules."""

    KIND: ClassVar[str] = "hand_back"

    call: ActorCallSpec = spec()
    incarnation: int = 0


@dataclass(repr=False, eq=False)
class DirectCallRecords(Message):
    """Direct calls a host finished since it was last asked, and those it runs now: [call id,
    method, arrived, ended (None: running), error or None] each (times in wall-clock seconds)."""

    records: Any = pickled()


@_message
@dataclass(repr=False, eq=False)
class ListDirectCalls(Message):
    """Driver to actor host: the direct calls it finished since it was last asked (the state API)."""

    KIND: ClassVar[str] = "list_direct_calls"
    REPLY: ClassVar[type[Message]] = DirectCallRecords


@dataclass(repr=False, eq=False)
class Claimed(Message):
    """The calls asked about that the host runs or has queued: their answers now go to the driver."""

    calls: list[bytes] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class ClaimCalls(Message):
    """Driver to actor host: a caller lost its gate with these direct calls unanswered; answer
    the driver instead for any still running or queued here (the others ran and were answered,
    or never arrived)."""

    KIND: ClassVar[str] = "claim_calls"
    REPLY: ClassVar[type[Message]] = Claimed

    calls: list[bytes] = field(default_factory=list)
