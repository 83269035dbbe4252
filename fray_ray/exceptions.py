"""Ray's exception classes (`ray.exceptions`), including the dual-typed `RayTaskError(E)`.

    Exception
    └── RayError
        ├── CrossLanguageError
        ├── TaskCancelledError
        ├── RayTaskError                      RayTaskError(E) is made per user type E (below)
        ├── LocalRayletDiedError
        ├── WorkerCrashedError
        ├── RayActorError
        │   ├── ActorDiedError
        │   └── ActorUnavailableError
        ├── ActorUnschedulableError
        ├── ActorPlacementGroupRemoved
        ├── TaskPlacementGroupRemoved
        ├── TaskUnschedulableError
        ├── PendingCallsLimitExceeded
        ├── AsyncioActorExit
        ├── ActorAlreadyExistsError           also a ValueError (first in its MRO)
        ├── ActorHandleNotFoundError          also a ValueError (first in its MRO)
        ├── ObjectLostError
        │   ├── ObjectFetchTimedOutError
        │   ├── ObjectFreedError
        │   ├── OwnerDiedError
        │   ├── ObjectReconstructionFailedError
        │   └── ReferenceCountingAssertionError   also an AssertionError
        ├── ObjectStoreFullError
        ├── OutOfDiskError
        ├── PlasmaObjectNotAvailable
        ├── GetTimeoutError                   also a TimeoutError (so an OSError)
        ├── OutOfMemoryError
        ├── NodeDiedError
        ├── RaySystemError
        │   ├── RayChannelError
        │   │   └── RayChannelTimeoutError    also a TimeoutError
        │   ├── RayCgraphCapacityExceeded
        │   ├── RayDirectTransportError
        │   └── StreamingGeneratorReplayInconsistentError
        ├── RuntimeEnvSetupError
        ├── RpcError
        ├── AuthenticationError
        ├── UserCodeException
        ├── UnserializableException
        ├── OufOfBandObjectRefSerializationException
        └── ObjectRefStreamEndOfStreamError

Class names, bases and constructor signatures are those of Ray 2.60 (checked against a running
Ray 2.60.0; the findings are written down in the repository's `notes_ray_parity.md`).

A task that raises `E` fails with `RayTaskError(E)`: a class made on the fly whose MRO is
`RayTaskError(E) → RayTaskError → RayError → E → ...`, so both `except E` and
`except RayTaskError` catch it. `RayTaskError.create()` and `RayTaskError.from_exception()` build
it; `as_instanceof_cause()` upgrades a plain `RayTaskError`. When `E` cannot be combined with
`RayTaskError` (its metaclass, `__init_subclass__`, layout or `__new__` refuses), the plain
`RayTaskError` is used and `.cause` still holds the user's exception. Both forms pickle (with
`pickle` and cloudpickle) and keep their type across the round trip; a cause that cannot be
pickled or rebuilt still leaves its class name and traceback text (`pack_cause`, below).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import os
import pickle
import socket
import threading
import types
from typing import Any, Final

logger = logging.getLogger(__name__)

__all__ = [
    "RAY_EXCEPTION_TYPES",
    "ActorAlreadyExistsError",
    "ActorDeathInfo",
    "ActorDeathReason",
    "ActorDiedError",
    "ActorHandleNotFoundError",
    "ActorPlacementGroupRemoved",
    "ActorUnavailableError",
    "ActorUnschedulableError",
    "AsyncioActorExit",
    "AuthenticationError",
    "CrossLanguageError",
    "GetTimeoutError",
    "LocalRayletDiedError",
    "NodeDiedError",
    "ObjectFetchTimedOutError",
    "ObjectFreedError",
    "ObjectLostError",
    "ObjectReconstructionFailedError",
    "ObjectRefStreamEndOfStreamError",
    "ObjectStoreFullError",
    "OufOfBandObjectRefSerializationException",
    "OutOfDiskError",
    "OutOfMemoryError",
    "OwnerDiedError",
    "PendingCallsLimitExceeded",
    "PlasmaObjectNotAvailable",
    "RayActorError",
    "RayCgraphCapacityExceeded",
    "RayChannelError",
    "RayChannelTimeoutError",
    "RayDirectTransportError",
    "RayError",
    "RaySystemError",
    "RayTaskError",
    "ReferenceCountingAssertionError",
    "RpcError",
    "RuntimeEnvSetupError",
    "StreamingGeneratorReplayInconsistentError",
    "TaskCancelledError",
    "TaskPlacementGroupRemoved",
    "TaskUnschedulableError",
    "UnserializableException",
    "UserCodeException",
    "WorkerCrashedError",
]


class RayError(Exception):
    """Base class of every error fray_ray raises on Ray's behalf."""


class CrossLanguageError(RayError):
    """An error raised by a task written in another language (never raised by fray_ray)."""

    def __init__(self, ray_exception: BaseException) -> None:
        super().__init__(ray_exception)
        self.ray_exception = ray_exception

    def __str__(self) -> str:
        language = getattr(self.ray_exception, "language", "another language")
        return f"An exception raised from {language}:\n{self.ray_exception}"


class TaskCancelledError(RayError):
    """`ray.get` of a task that `ray.cancel` stopped before or while it ran."""

    def __init__(self, task_id: object | None = None, error_message: str | None = None) -> None:
        # BaseException.__new__ already set `args` to the positional arguments, as in Ray.
        self.task_id = task_id
        self.error_message = error_message

    def __str__(self) -> str:
        message = self.error_message or ""
        if self.task_id is None:
            return message
        return f"Task: {self.task_id} was cancelled. {message}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.task_id, self.error_message), self.__dict__)


# --------------------------------------------------------------------------------------------
# RayTaskError and its dual-typed variants


_TRACEBACK_HEADER: Final = "Traceback (most recent call last):"
# C-level exception fields that belong to the wrapper, never copied from the cause.
_NOT_COPIED: Final = frozenset({"args"})
_Py_TPFLAGS_HEAPTYPE: Final = 1 << 9
_DUAL_CACHE_SIZE: Final = 256


@functools.cache
def _local_ip() -> str:
    """This host's address as tasks report it: Iris's advertised host, else the outbound one."""
    advertised = os.environ.get("IRIS_ADVERTISE_HOST")
    if advertised:
        return advertised
    try:
        # Connecting a UDP socket only picks a route; nothing is sent.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _innermost_cause(cause: object) -> object:
    """A RayTaskError caught inside a task stands for its own cause: unwrap to the user error."""
    while isinstance(cause, RayTaskError):
        cause = cause.cause
    return cause


def _user_traceback(exc: BaseException) -> str:
    """Format `exc` like the interpreter would, without fray_ray's own frames (unless
    FRAY_RAY_BACKTRACE_INTERNALS=1)."""
    from fray_ray._private.core.user_tracebacks import format_task_traceback

    return format_task_traceback(exc)


class RayTaskError(RayError):
    """A task or actor method raised; `.cause` is the exception it raised.

    What `ray.get` raises is usually the dual-typed `RayTaskError(E)`, which is also an `E`.

    >>> err = RayTaskError.create("f", "Traceback (most recent call last):\\n"
    ...                           "ZeroDivisionError: division by zero", ZeroDivisionError("x"),
    ...                           pid=7, ip="10.0.0.1")
    >>> isinstance(err, ZeroDivisionError), isinstance(err, RayTaskError)
    (True, True)
    >>> str(err).splitlines()[0]
    'ray::f() (pid=7, ip=10.0.0.1)'
    """

    function_name: str
    traceback_str: str
    cause: Any
    proctitle: str
    pid: int
    ip: str
    actor_repr: str | None
    actor_id: str | None

    def __init__(
        self,
        function_name: str,
        traceback_str: str,
        cause: Any,
        proctitle: str | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
        actor_id: str | None = None,
    ) -> None:
        cause = _innermost_cause(cause)
        super().__init__(function_name, traceback_str, cause, proctitle, pid, ip)
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        # Ray's header shows the worker's process title, "ray::<function>" inside a task.
        self.proctitle = proctitle if proctitle is not None else f"ray::{function_name}"
        self.pid = os.getpid() if pid is None else pid
        self.ip = _local_ip() if ip is None else ip
        self.actor_repr = actor_repr
        self.actor_id = actor_id

    # -- construction helpers used by the runtime ---------------------------------------------

    @classmethod
    def create(
        cls,
        function_name: str,
        traceback_str: str,
        cause: Any,
        *,
        proctitle: str | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
        actor_id: str | None = None,
    ) -> RayTaskError:
        """Build the error for a failed task: `RayTaskError(E)` if possible, else plain.

        Never raises for an odd cause; returns immediately.
        """
        plain = cls(function_name, traceback_str, cause, proctitle, pid, ip, actor_repr, actor_id)
        return plain.as_instanceof_cause()

    @classmethod
    def from_exception(
        cls,
        exc: BaseException,
        function_name: str,
        *,
        proctitle: str | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
        actor_id: str | None = None,
    ) -> RayTaskError:
        """Wrap an exception caught while running a task, formatting its traceback.

        fray_ray's own frames are left out of the traceback text. A `RayTaskError` raised inside
        the task (a failed nested `ray.get`) keeps its original cause, so the result still
        matches `except <original type>`.
        """
        return cls.create(
            function_name,
            _user_traceback(exc),
            exc,
            proctitle=proctitle,
            pid=pid,
            ip=ip,
            actor_repr=actor_repr,
            actor_id=actor_id,
        )

    @classmethod
    def for_failed_argument(
        cls,
        function_name: str,
        argument_error: BaseException,
        *,
        proctitle: str | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
        actor_id: str | None = None,
    ) -> RayTaskError:
        """The error of a task that never ran because an ObjectRef argument holds an error."""
        kind = type(argument_error)
        text = (
            "  At least one of the input arguments for this task could not be computed:\n"
            f"{kind.__module__}.{kind.__qualname__}: {argument_error}"
        )
        return cls.create(
            function_name,
            text,
            argument_error,
            proctitle=proctitle,
            pid=pid,
            ip=ip,
            actor_repr=actor_repr,
            actor_id=actor_id,
        )

    def as_instanceof_cause(self) -> RayTaskError:
        """Return the `RayTaskError(E)` form of this error, or `self` if `E` cannot be combined.

        The result has the cause's attributes (e.g. `.code` of a custom error), `args == (cause,)`,
        and the same `str()` as this error.
        """
        if _is_dual(type(self)):
            return self
        cause = self.cause
        if not isinstance(cause, BaseException) or isinstance(cause, RayTaskError):
            return self
        try:
            dual_cls = _dual_class(type(cause))
            dual = _instantiate_dual(dual_cls, cause)
        except Exception as exc:  # any refusal by the user's class means: stay plain
            logger.warning(
                "User exception type %s cannot be combined with RayTaskError (%s: %s); raising "
                "a plain RayTaskError. Use `err.cause` to reach the user exception.",
                type(cause),
                type(exc).__name__,
                exc,
            )
            return self
        dual.__dict__.update(self._fields())
        return dual

    # -- presentation and transport ------------------------------------------------------------

    def _fields(self) -> dict[str, Any]:
        return {
            "function_name": self.function_name,
            "traceback_str": self.traceback_str,
            "cause": self.cause,
            "proctitle": self.proctitle,
            "pid": self.pid,
            "ip": self.ip,
            "actor_repr": self.actor_repr,
            "actor_id": self.actor_id,
        }

    def __str__(self) -> str:
        where = f"pid={self.pid}, ip={self.ip}"
        if self.actor_repr is not None:
            where += f", actor_id={self.actor_id}, repr={self.actor_repr}"
        lines = self.traceback_str.splitlines()
        if lines and lines[0].startswith(_TRACEBACK_HEADER):
            lines = lines[1:]  # the header line takes the place of "Traceback (...):"
        return "\n".join([f"{self.proctitle}() ({where})", *lines])

    def __reduce__(self) -> tuple[Any, ...]:
        # The cause travels as a pickle of its own: if its class cannot be pickled or rebuilt,
        # the reader still gets the function, the class name and the traceback text.
        fields = self._fields()
        extra = {k: v for k, v in self.__dict__.items() if k not in fields}
        packed = pack_cause(fields.pop("cause"), extra)
        return (_rebuild_task_error, (fields, _is_dual(type(self)), packed))


def _rebuild_task_error(fields: dict[str, Any], dual: bool, packed: Any = None) -> RayTaskError:
    """Unpickle a RayTaskError, restoring its dual type when it had one."""
    if packed is not None:
        return rebuild_task_error(fields, dual, packed)
    plain = RayTaskError(**fields)
    return plain.as_instanceof_cause() if dual else plain


def _is_dual(cls: type) -> bool:
    return "_ray_dual_cause_type" in cls.__dict__


def _dual_getattr(self: RayTaskError, name: str) -> Any:
    """Fall back to the cause for attributes the copy did not carry (e.g. computed ones)."""
    if name.startswith("__") or name == "cause":
        raise AttributeError(name)
    try:
        cause = self.__dict__["cause"]
    except KeyError:
        raise AttributeError(name) from None
    return getattr(cause, name)


def _reduce_ex(self: RayTaskError, protocol: int) -> tuple[Any, ...]:
    return self.__reduce__()


# Dual classes are cached per cause type so repeated failures share one class. Guarded by
# _DUAL_LOCK; bounded so that classes re-created per call (e.g. by cloudpickle) cannot pile up.
_DUAL_CLASSES: dict[type, type] = {}
_DUAL_LOCK = threading.Lock()


def _dual_class(cause_cls: type[BaseException]) -> type[RayTaskError]:
    """The class `RayTaskError(cause_cls)`; raises if Python refuses the combination."""
    with _DUAL_LOCK:
        cached = _DUAL_CLASSES.get(cause_cls)
    if cached is not None:
        return cached
    name = f"RayTaskError({cause_cls.__name__})"

    def body(ns: dict[str, Any]) -> None:
        ns["__module__"] = __name__
        ns["__qualname__"] = name
        ns["__doc__"] = f"A task raised {cause_cls.__qualname__}; this is both kinds of error."
        ns["_ray_dual_cause_type"] = cause_cls
        ns["__getattr__"] = _dual_getattr
        # The user's class may define these; the wrapper's versions must win.
        ns["__str__"] = RayTaskError.__str__
        ns["__reduce__"] = RayTaskError.__reduce__
        ns["__reduce_ex__"] = _reduce_ex
        ns["__setstate__"] = BaseException.__setstate__

    dual = types.new_class(name, (RayTaskError, cause_cls), exec_body=body)
    with _DUAL_LOCK:
        if len(_DUAL_CLASSES) >= _DUAL_CACHE_SIZE:
            _DUAL_CLASSES.pop(next(iter(_DUAL_CLASSES)))
        dual = _DUAL_CLASSES.setdefault(cause_cls, dual)
    return dual


def _builtin_base(cls: type) -> type:
    """The most derived class of `cls` implemented in C (BaseException, OSError, ...)."""
    for klass in cls.__mro__:
        if not klass.__flags__ & _Py_TPFLAGS_HEAPTYPE:
            return klass
    return BaseException


def _instantiate_dual(dual_cls: type[RayTaskError], cause: BaseException) -> RayTaskError:
    """An instance of `dual_cls` carrying `cause`'s state, made without running user code."""
    base = _builtin_base(type(cause))
    # The C-level constructor fills C-level state (OSError.errno, ExceptionGroup.exceptions...).
    instance = base.__new__(dual_cls, *cause.args)
    try:
        base.__init__(instance, *cause.args)  # type: ignore[misc]  # a C-level __init__: never user code
    except Exception:
        pass  # the fields copied below still carry the state
    for klass in base.__mro__:
        for attr, descriptor in vars(klass).items():
            is_c_field = isinstance(
                descriptor, (types.MemberDescriptorType, types.GetSetDescriptorType)
            )
            # Dunder descriptors (object.__class__, __traceback__, ...) belong to the wrapper.
            if not is_c_field or attr.startswith("__") or attr in _NOT_COPIED:
                continue
            try:
                setattr(instance, attr, getattr(cause, attr))
            except (AttributeError, TypeError, ValueError):
                pass  # read-only or unset fields keep what the constructor gave them
    instance.__dict__.update(getattr(cause, "__dict__", {}))
    instance.args = (cause,)
    return instance


# --------------------------------------------------------------------------------------------
# Workers and tasks


class LocalRayletDiedError(RayError):
    """The node daemon that ran the task died."""

    def __str__(self) -> str:
        return "The task's local raylet died. Check the node's logs for more information."


class WorkerCrashedError(RayError):
    """The process running the task died (crash, `os._exit`, OOM kill, forced cancel).

    Ray's first sentence, then what fray_ray learnt of the death (how the process ended, the
    attempt, where its output is) when it was given that."""

    def __str__(self) -> str:
        detail = self.args[0] if self.args and isinstance(self.args[0], str) else ""
        if detail:
            return f"The worker died unexpectedly while executing this task. {detail}"
        return (
            "The worker died unexpectedly while executing this task. Check the task's logs for "
            "more information."
        )


class TaskPlacementGroupRemoved(RayError):
    """The task's placement group was removed before the task could run."""

    def __str__(self) -> str:
        return "The placement group corresponding to this task has been removed."


class ActorPlacementGroupRemoved(RayError):
    """The actor's placement group was removed before the actor could start."""

    def __str__(self) -> str:
        return "The placement group corresponding to this Actor has been removed."


class TaskUnschedulableError(RayError):
    """No node can ever run the task (for example it names a node that is gone)."""

    def __init__(self, error_message: str) -> None:
        super().__init__(error_message)
        self.error_message = error_message

    def __str__(self) -> str:
        return f"The task is not schedulable: {self.error_message}"


class ActorUnschedulableError(RayError):
    """No node can ever host the actor."""

    def __init__(self, error_message: str) -> None:
        super().__init__(error_message)
        self.error_message = error_message

    def __str__(self) -> str:
        return f"The actor is not schedulable: {self.error_message}"


# --------------------------------------------------------------------------------------------
# Actors


class RayActorError(RayError):
    """An actor could not run the call: it died, failed to start, or is unreachable."""

    DEFAULT_ERROR_MSG: Final = "The actor experienced an error before finishing this task."

    def __init__(
        self,
        actor_id: str | None = None,
        error_msg: str = DEFAULT_ERROR_MSG,
        actor_init_failed: bool = False,
        preempted: bool = False,
    ) -> None:
        if actor_id is None and error_msg == self.DEFAULT_ERROR_MSG:
            super().__init__()
        else:
            super().__init__(actor_id, error_msg)
        self.actor_id = actor_id
        self.error_msg = error_msg
        self._actor_init_failed = actor_init_failed
        self._preempted = preempted

    @property
    def actor_init_failed(self) -> bool:
        """True when the actor's `__init__` raised."""
        return self._actor_init_failed

    @property
    def preempted(self) -> bool:
        """True when the actor's node was preempted."""
        return self._preempted

    def __str__(self) -> str:
        return self.error_msg


class ActorDeathReason(enum.StrEnum):
    """Why an actor is dead, as reported in `ActorDiedError` messages."""

    KILLED = "killed"  # ray.kill(actor)
    PROCESS_DIED = "process_died"  # the hosting process exited unexpectedly
    EXITED = "exited"  # exit_actor() or __ray_terminate__
    OUT_OF_SCOPE = "out_of_scope"  # every handle to a non-detached actor was dropped
    NODE_DIED = "node_died"  # the host running it went away


_DEATH_SENTENCES: Final[dict[ActorDeathReason, str]] = {
    ActorDeathReason.KILLED: "The actor is dead because it was killed by `ray.kill`.",
    ActorDeathReason.OUT_OF_SCOPE: (
        "The actor is dead because all references to the actor were removed."
    ),
    ActorDeathReason.NODE_DIED: "The actor is dead because its node has died.",
}
# (default exit type, default exit detail) for deaths that are a process exit.
_EXIT_DEFAULTS: Final[dict[ActorDeathReason, tuple[str, str]]] = {
    ActorDeathReason.PROCESS_DIED: ("SYSTEM_ERROR", "The worker process exited unexpectedly."),
    ActorDeathReason.EXITED: (
        "INTENDED_USER_EXIT",
        "Worker exits by an user request. Worker exits with an exit code 0. "
        "exit_actor() is called.",
    ),
}


@dataclasses.dataclass(frozen=True)
class ActorDeathInfo:
    """What is known about an actor's death; `ActorDiedError(info)` turns it into a message.

    >>> info = ActorDeathInfo(ActorDeathReason.KILLED, class_name="Counter", actor_id="ab12")
    >>> str(ActorDiedError(info)).splitlines()[-1]
    'The actor is dead because it was killed by `ray.kill`.'
    """

    reason: ActorDeathReason
    class_name: str | None = None
    actor_id: str | None = None
    pid: int | None = None
    namespace: str | None = None
    ip: str | None = None
    exit_type: str | None = None
    """Worker exit type shown for process deaths, e.g. "SYSTEM_ERROR" (the default)."""
    detail: str = ""
    """Free text appended to the reason, e.g. the worker's exit detail."""
    preempted: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.reason, ActorDeathReason):
            object.__setattr__(self, "reason", ActorDeathReason(self.reason))
        if self.pid is not None and not isinstance(self.pid, int):
            raise TypeError(f"pid must be an int or None, got {self.pid!r}")

    def reason_text(self) -> str:
        """The sentence explaining the death, worded as Ray words it where Ray was observed."""
        if self.reason in (ActorDeathReason.PROCESS_DIED, ActorDeathReason.EXITED):
            exit_type, detail = _EXIT_DEFAULTS[self.reason]
            return (
                "The actor is dead because its worker process has died. Worker exit type: "
                f"{self.exit_type or exit_type} Worker exit detail: {self.detail or detail}"
            )
        text = _DEATH_SENTENCES[self.reason]
        return f"{text} {self.detail}" if self.detail else text

    def message(self) -> str:
        """The full `ActorDiedError` message: base sentence, known fields, reason."""
        lines = [ActorDiedError.BASE_ERROR_MSG]
        for label in ("class_name", "actor_id", "pid", "namespace", "ip"):
            value = getattr(self, label)
            if value is not None:
                lines.append(f"\t{label}: {value}")
        lines.append(self.reason_text())
        return "\n".join(lines)


class ActorDiedError(RayActorError):
    """The actor is dead: killed, crashed, exited, or its `__init__` raised.

    `ActorDiedError(task_error)` (or `from_task_error`) reports a failed creation task and
    includes its traceback; `ActorDiedError(ActorDeathInfo(...))` reports any other death in
    Ray's words. A plain string (a fray_ray extension) is used as the message as it is.
    """

    BASE_ERROR_MSG: Final = "The actor died unexpectedly before finishing this task."

    def __init__(self, cause: RayTaskError | ActorDeathInfo | str | None = None) -> None:
        if isinstance(cause, str):
            super().__init__(None, cause)
            self.args = (cause,)
        elif cause is None:
            super().__init__(None, self.BASE_ERROR_MSG)
            self.args = ()
        elif isinstance(cause, RayTaskError):
            message = f"The actor died because of an error raised in its creation task, {cause}"
            super().__init__(cause.actor_id, message, actor_init_failed=True)
            self.args = (cause,)
        elif isinstance(cause, ActorDeathInfo):
            super().__init__(cause.actor_id, cause.message(), preempted=cause.preempted)
            self.args = ()
        else:
            raise TypeError(
                "ActorDiedError takes a RayTaskError, an ActorDeathInfo, a message or None, "
                f"got {type(cause).__name__}"
            )

    @classmethod
    def from_task_error(cls, task_error: RayTaskError) -> ActorDiedError:
        """The error every call on an actor whose `__init__` raised gets."""
        return cls(task_error)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args, self.__dict__)


class ActorUnavailableError(RayActorError):
    """The actor cannot be reached right now (restarting, network); the call may have run."""

    def __init__(self, error_message: str, actor_id: bytes | str | None) -> None:
        actor_hex = actor_id.hex() if isinstance(actor_id, bytes) else actor_id
        message = (
            f"The actor {actor_hex} is unavailable: {error_message}. The task may or may not "
            "have been executed on the actor."
        )
        super().__init__(actor_hex, message)
        self.args = (error_message, actor_id)


class PendingCallsLimitExceeded(RayError):
    """The actor already has `max_pending_calls` calls queued from this caller."""


class AsyncioActorExit(RayError):
    """Raised inside an async actor by `exit_actor()` to unwind its event loop."""


class ActorAlreadyExistsError(ValueError, RayError):
    """A named actor is created while another live actor holds the name in that namespace."""

    def __init__(self, error_message: str) -> None:
        super().__init__(error_message)
        self.error_message = error_message

    @classmethod
    def for_name(cls, name: str, namespace: str | None) -> ActorAlreadyExistsError:
        """The error for a duplicate `name`, worded as Ray words it."""
        return cls(
            f"The name {name} (namespace={namespace}) is already taken. Please use a different "
            f"name or get the existing actor using ray.get_actor('{name}', "
            f"namespace='{namespace}')"
        )


class ActorHandleNotFoundError(ValueError, RayError):
    """An actor handle refers to an actor this process cannot find."""

    def __init__(self, error_message: str) -> None:
        super().__init__(error_message)
        self.error_message = error_message


# --------------------------------------------------------------------------------------------
# Objects


class ObjectLostError(RayError):
    """Every copy of the object is gone and it cannot be rebuilt."""

    def __init__(self, object_ref_hex: str, owner_address: bytes | None, call_site: str) -> None:
        super().__init__(object_ref_hex, owner_address, call_site)
        self.object_ref_hex = object_ref_hex
        self.owner_address = owner_address
        self.call_site = call_site

    def _base_str(self) -> str:
        prefix = f"Failed to retrieve object {self.object_ref_hex}. "
        if self.call_site:
            return prefix + f"The ObjectRef was created at: {self.call_site}"
        return prefix + "Where this ObjectRef was created was not recorded."

    def _reason(self) -> str:
        return (
            f"All copies of {self.object_ref_hex} have been lost due to node failure. Check the "
            "cluster logs for more information about the failure."
        )

    def __str__(self) -> str:
        return f"{self._base_str()}\n\n{self._reason()}"


class ObjectFetchTimedOutError(ObjectLostError):
    """Fetching the object from its holders timed out."""

    def _reason(self) -> str:
        return (
            f"Fetch for object {self.object_ref_hex} timed out because no locations were found "
            "for the object. This may indicate a system-level bug."
        )


class ObjectFreedError(ObjectLostError):
    """The object was freed explicitly before this `get`."""

    def _reason(self) -> str:
        return (
            "The object was manually freed using the internal `free` call. Please ensure that "
            "`free` is only called once the object is no longer needed."
        )


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (created it with `.remote()`/`put`) exited."""

    def _reason(self) -> str:
        return (
            "The object's owner has exited. This is the Python worker that first created the "
            "ObjectRef via `.remote()` or `ray.put()`. Check the cluster logs for more "
            "information about the Python worker failure."
        )


class ObjectReconstructionFailedError(ObjectLostError):
    """The object was lost and re-running the task that made it failed."""

    def __init__(
        self,
        object_ref_hex: str,
        reason: str | None = None,
        reason_message: str | None = None,
        owner_address: bytes | None = None,
        call_site: str = "",
    ) -> None:
        super().__init__(object_ref_hex, owner_address, call_site)
        self.args = (object_ref_hex, reason, reason_message, owner_address, call_site)
        self.reason = reason
        self.reason_message = reason_message or "Unknown error reason."

    def _reason(self) -> str:
        return f"[{self.reason or 'UNKNOWN'}] {self.reason_message}"


class ReferenceCountingAssertionError(ObjectLostError, AssertionError):
    """The object was deleted by reference counting while still referenced (a bug)."""

    def _reason(self) -> str:
        return (
            "The object has already been deleted by the reference counting protocol. This "
            "should not happen."
        )


class ObjectStoreFullError(RayError):
    """`put` or a task result did not fit in the object store."""

    def __str__(self) -> str:
        return (
            f"{super().__str__()}\nThe local object store is full of objects that are still in "
            "scope and cannot be evicted."
        )


class OutOfDiskError(RayError):
    """An object could not be spilled because the local disk is (nearly) full."""

    def __str__(self) -> str:
        return (
            f"{super().__str__()}\nThe object cannot be created because the local object store "
            "is full and the local disk's utilization is over capacity (95% by default)."
        )


class PlasmaObjectNotAvailable(RayError):
    """An object is not (yet) in the local object store (internal)."""


# --------------------------------------------------------------------------------------------
# System


class GetTimeoutError(RayError, TimeoutError):
    """`ray.get(..., timeout=...)` expired before every object was ready."""


class OutOfMemoryError(RayError):
    """The task or actor was killed because its host ran out of memory."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NodeDiedError(RayError):
    """The node running the task died."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class RaySystemError(RayError):
    """fray_ray itself failed (not the user's code)."""

    def __init__(self, client_exc: Any, traceback_str: str | None = None) -> None:
        super().__init__(client_exc, *(() if traceback_str is None else (traceback_str,)))
        self.client_exc = client_exc
        self.traceback_str = traceback_str

    def __str__(self) -> str:
        text = f"System error: {self.client_exc}"
        if self.traceback_str:
            text += f"\ntraceback: {self.traceback_str}"
        return text


class RayChannelError(RaySystemError):
    """A compiled-graph channel failed (compiled graphs are not supported by fray_ray)."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A compiled-graph channel read or write timed out."""


class RayCgraphCapacityExceeded(RaySystemError):
    """A compiled graph has too many executions in flight."""


class RayDirectTransportError(RaySystemError):
    """A direct (device-to-device) tensor transfer failed."""


class StreamingGeneratorReplayInconsistentError(RaySystemError):
    """A retried streaming generator yielded different objects than its first attempt."""


class RuntimeEnvSetupError(RayError):
    """The task's or actor's `runtime_env` could not be set up."""

    def __init__(self, error_message: str | None = None) -> None:
        super().__init__(*(() if error_message is None else (error_message,)))
        self.error_message = error_message

    def __str__(self) -> str:
        text = "Failed to set up runtime environment."
        return f"{text}\n{self.error_message}" if self.error_message else text


class RpcError(RayError):
    """An RPC between fray_ray processes failed; `rpc_code` is the transport's code, if any."""

    def __init__(self, message: str, rpc_code: int | str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.rpc_code = rpc_code

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.rpc_code), self.__dict__)


class AuthenticationError(RayError):
    """The cluster rejected this process's credentials (missing or wrong bearer token)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return (
            f"{self.message}. Make sure this process has the cluster's bearer token (tasks "
            "receive it in their environment; drivers get it from the cluster they started or "
            "from the configured Iris token)."
        )


class UserCodeException(RayError):
    """Wraps an exception raised by user code inside fray_ray's own machinery."""


class UnserializableException(RayError):
    """A task's exception could not be unpickled; the original traceback text is kept."""

    def __init__(self, original_stack_trace: str) -> None:
        super().__init__(original_stack_trace)
        self._original_stack_trace = original_stack_trace

    def __str__(self) -> str:
        return (
            "Failed to deserialize exception. Make the exception class importable where the "
            "error is read, or register a serializer for it.\nOriginal exception:\n"
            f"{self._original_stack_trace}"
        )


class OufOfBandObjectRefSerializationException(RayError):
    """An ObjectRef was pickled outside fray_ray's own serialization (so it is not tracked)."""


class ObjectRefStreamEndOfStreamError(RayError):
    """A streaming generator has no more items (internal end-of-stream signal)."""


RAY_EXCEPTION_TYPES: Final[list[type[BaseException]]] = [
    PlasmaObjectNotAvailable,
    RayError,
    RayTaskError,
    WorkerCrashedError,
    RayActorError,
    ObjectStoreFullError,
    ObjectLostError,
    ObjectFetchTimedOutError,
    ReferenceCountingAssertionError,
    ObjectReconstructionFailedError,
    OwnerDiedError,
    GetTimeoutError,
    AsyncioActorExit,
    RuntimeEnvSetupError,
    TaskPlacementGroupRemoved,
    ActorPlacementGroupRemoved,
    PendingCallsLimitExceeded,
    LocalRayletDiedError,
    TaskUnschedulableError,
    ActorDiedError,
    ActorUnschedulableError,
    ActorUnavailableError,
    RayChannelError,
    RayChannelTimeoutError,
    OufOfBandObjectRefSerializationException,
    RayCgraphCapacityExceeded,
    UnserializableException,
    ActorAlreadyExistsError,
    ActorHandleNotFoundError,
    AuthenticationError,
]
"""The exception types Ray 2.60 lists in `ray.exceptions.RAY_EXCEPTION_TYPES`, same order."""


# ---- how a task's error crosses processes ---------------------------------------------------
#
# A task's exception crosses processes even when its class cannot.
#
# A RayTaskError carries its cause (the user's exception) as a pickle of its own, next to the
# cause's class name, so a cause that fails to load does not take the whole error with it:
#
# - A cause that cannot be pickled where it was raised (it holds a lock, its `__reduce__`
#   raises, ...) is replaced there by a RayError holding its text, and the reader gets a plain
#   RayTaskError, as in Ray 2.60.
# - A cause that cannot be rebuilt where the error is read (its `__init__` wants other
#   arguments, its module is not importable there, ...) arrives as _UnrebuildableTaskError: Ray's
#   UnserializableException (what Ray raises then), and also a RayTaskError with the function
#   name, the class name and the traceback text.

#: (the cause's class as "module.qualname", its pickle with the wrapper's extra attributes or
#: None when it could not be pickled, why it could not be)
PackedCause = tuple[str, bytes | None, str | None]


def pack_cause(cause: Any, extra: dict[str, Any] | None) -> PackedCause:
    """Pickle a RayTaskError's cause (and the wrapper's other attributes) on their own."""
    kind = type(cause)
    type_name = f"{kind.__module__}.{kind.__qualname__}"
    try:
        return type_name, _cloudpickle().dumps((cause, extra or None)), None
    except Exception as exc:  # noqa: BLE001 - any refusal: the text of the cause still travels
        return type_name, None, f"{type(exc).__name__}: {exc}"


def rebuild_task_error(fields: dict[str, Any], dual: bool, packed: PackedCause) -> RayTaskError:
    """The reader's RayTaskError: with its cause when the cause can be rebuilt here."""
    type_name, blob, problem = packed
    if blob is None:
        cause = RayError(
            f"Exception {type_name} isn't serializable: {problem}.\n"
            f"Original exception details:\n{fields['traceback_str']}"
        )
        return RayTaskError(cause=cause, **fields)
    try:
        cause, extra = pickle.loads(blob)
    except Exception as exc:  # noqa: BLE001 - whatever the class needs, it is not here
        return _UnrebuildableTaskError(type_name, f"{type(exc).__name__}: {exc}", **fields)
    error = RayTaskError(cause=cause, **fields)
    if dual:
        error = error.as_instanceof_cause()
    if extra:
        error.__dict__.update(extra)
    return error


class _UnrebuildableTaskError(UnserializableException, RayTaskError):
    """A task raised an exception whose class cannot be rebuilt here.

    It is Ray's UnserializableException (its message starts "Failed to deserialize exception")
    and a RayTaskError: `function_name`, `traceback_str` (ending with the original class name
    and message) and `type_name` (the class as "module.qualname") are kept; `cause` is a
    RayError with that text.
    """

    def __init__(
        self,
        type_name: str,
        problem: str,
        function_name: str,
        traceback_str: str,
        proctitle: str | None = None,
        pid: int | None = None,
        ip: str | None = None,
        actor_repr: str | None = None,
        actor_id: str | None = None,
    ) -> None:
        cause = RayError(
            f"Exception {type_name} could not be rebuilt here ({problem}).\n"
            f"Original exception details:\n{traceback_str}"
        )
        RayTaskError.__init__(self, function_name, traceback_str, cause, proctitle, pid, ip, actor_repr, actor_id)
        self.type_name = type_name
        self.problem = problem
        self._original_stack_trace = RayTaskError.__str__(self)

    def as_instanceof_cause(self) -> RayTaskError:
        return self  # there is no cause type to combine with

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.type_name, self.problem, self.function_name, self.traceback_str,
                             self.proctitle, self.pid, self.ip, self.actor_repr, self.actor_id))


def _cloudpickle() -> Any:
    import cloudpickle  # loaded with the first error that travels, not with this module

    return cloudpickle
