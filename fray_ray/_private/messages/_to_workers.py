"""What the driver sends its workers: executors run tasks, actor hosts build instances and run calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fray_ray._private.core.task_spec import ActorCallSpec, CallArguments, TaskSpec, inline_arguments
from fray_ray._private.messages._codec import Message, _message, arguments, blob, nested, record, values
from fray_ray._private.objects.serialization import INLINE_LIMIT, SerializedValue

# ---- driver to executor --------------------------------------------------------------------


@_message
@dataclass(repr=False, eq=False)
class ExecuteTask(Message):
    """Run a task. `code` is the pickled function, sent only the first time `fn` goes to
    this executor."""

    KIND: ClassVar[str] = "execute"

    task: bytes
    fn: bytes
    code: bytes | None = blob()
    name: str
    num_returns: Any
    returns: list[bytes]
    args: CallArguments = arguments()
    env: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    placement_group: str | None = None
    function_name: str = ""
    capture_child_tasks: bool = False

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
            function_name=task.function_name,
            capture_child_tasks=getattr(task.scheduling_strategy, "placement_group_capture_child_tasks", None) is True,
        )


@_message
@dataclass(repr=False, eq=False)
class CancelTask(Message):
    """Cancel a queued or running task (`force`: kill the executor)."""

    KIND: ClassVar[str] = "cancel_task"

    task: bytes
    force: bool = False


@_message
@dataclass(repr=False, eq=False)
class Withdraw(Message):
    """Hand back those of `tasks` still waiting in the executor's queue: the driver runs them
    elsewhere (the running task blocked, or runs long while another executor is idle). The
    executor answers `Withdrawn`; a task it has taken from its queue stays its own."""

    KIND: ClassVar[str] = "withdraw"

    tasks: list[bytes]


@_message
@dataclass(repr=False, eq=False)
class Exit(Message):
    """End the executor after its queued tasks."""

    KIND: ClassVar[str] = "exit"


@_message
@dataclass(repr=False, eq=False)
class HostActor(Message):
    """Stop running tasks and become the host of actor `actor` in this process: serve it
    through the Fray client's `host_actor` as `group` and greet the session as its host."""

    KIND: ClassVar[str] = "host_actor"

    actor: bytes
    group: str


# ---- driver to actor host ------------------------------------------------------------------


@dataclass
class InstanceOptions:
    """How an actor instance runs: its name, lifetime, concurrency, and whether it is a restart."""

    name: str | None = None
    detached: bool = False
    is_async: bool = False
    max_concurrency: int = 1
    concurrency_groups: dict[str, int] = field(default_factory=dict)
    restarted: bool = False


@_message
@dataclass(repr=False, eq=False)
class CreateInstance(Message):
    """Build the actor's instance. `methods` is the pickled method table handles use."""

    KIND: ClassVar[str] = "create"

    code: bytes = blob()
    class_name: str
    methods: bytes
    args: CallArguments = arguments()
    options: InstanceOptions = record(InstanceOptions)
    env: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    placement_group: str | None = None
    qualified_name: str = ""  # the class's `module.qualname`
    capture_child_tasks: bool = False


@dataclass(repr=False, eq=False)
class Loans(Message):
    """Refs one worker lends another with a direct call or its answer, rather than hand them
    to the driver (`workers/lent_refs.py`): the borrower reads them from the lender. Most calls
    lend nothing and carry None instead (`CallMethod.loans`, `CallDone.loans`)."""

    ids: list[bytes]
    #: the values of the first `len(values)` of `ids`
    values: list[SerializedValue] = values(default_factory=list)
    #: [index in `ids`, holder address, size]: those (lent to the lender itself) whose own
    #: lender said which holder serves them; the borrower fetches them there
    held: list[list[Any]] = field(default_factory=list)
    #: the worker id of each one's owner (the process that made it, however many loans away):
    #: asked through the driver (`AdoptFor`) if the link to the lender breaks
    owners: list[bytes] = field(default_factory=list)


@_message
@dataclass(repr=False, eq=False)
class CallMethod(Message):
    """Run a method call in concurrency group `group` (None: the default group)."""

    KIND: ClassVar[str] = "call"

    call: bytes
    method: str
    returns: list[bytes]
    num_returns: Any
    args: CallArguments = arguments()
    group: str | None = None
    events: bool = True  # listed by the state API (`enable_task_events`; a direct call's host records it)
    #: the caller's results (and refs lent to it) its arguments name, lent to the callee
    loans: Loans | None = nested(Loans)
    #: a generator the driver calls: its large items stay in the actor's process, as its
    #: results do (`Yield.held`)
    keep_items: bool = False

    @classmethod
    def of(
        cls, actor_call: ActorCallSpec, stored: Callable[[bytes], SerializedValue | None],
        inline_limit: int | None = INLINE_LIMIT,
    ) -> CallMethod:
        """The message that runs `actor_call`, its ready arguments of at most `inline_limit`
        bytes (None: all of them) inlined."""
        return cls(
            call=actor_call.call_id,
            method=actor_call.method,
            returns=list(actor_call.return_ids),
            num_returns=actor_call.num_returns,
            args=inline_arguments(actor_call.arguments, stored, inline_limit),
            group=actor_call.concurrency_group,
        )


@_message
@dataclass(repr=False, eq=False)
class CancelCall(Message):
    """Cancel a method call (skipped if it has not started)."""

    KIND: ClassVar[str] = "cancel_call"

    call: bytes


@_message
@dataclass(repr=False, eq=False)
class Die(Message):
    """End the actor's process (`restart`: exit so Iris starts it again)."""

    KIND: ClassVar[str] = "die"

    restart: bool = False
