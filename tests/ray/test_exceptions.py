"""Tests of fray_ray.exceptions: Ray's class tree, messages, and the dual-typed RayTaskError.

Where a test states what Ray does, the expectation was observed by running Ray 2.60.0 (python
3.11): printing `dir(ray.exceptions)`, each class's `__mro__` and `inspect.signature`, building
each error and printing `str()`, and raising errors from real tasks and actors.
"""

from __future__ import annotations

import inspect
import logging
import os
import pickle
from typing import Any

import cloudpickle
import pytest

import fray_ray.exceptions as E

# Observed with Ray 2.60.0: every exception class of ray.exceptions and its MRO (class names).
RAY_MRO: dict[str, list[str]] = {
    "ActorAlreadyExistsError": ["ValueError", "RayError", "Exception"],
    "ActorDiedError": ["RayActorError", "RayError", "Exception"],
    "ActorHandleNotFoundError": ["ValueError", "RayError", "Exception"],
    "ActorPlacementGroupRemoved": ["RayError", "Exception"],
    "ActorUnavailableError": ["RayActorError", "RayError", "Exception"],
    "ActorUnschedulableError": ["RayError", "Exception"],
    "AsyncioActorExit": ["RayError", "Exception"],
    "AuthenticationError": ["RayError", "Exception"],
    "CrossLanguageError": ["RayError", "Exception"],
    "GetTimeoutError": ["RayError", "TimeoutError", "OSError", "Exception"],
    "LocalRayletDiedError": ["RayError", "Exception"],
    "NodeDiedError": ["RayError", "Exception"],
    "ObjectFetchTimedOutError": ["ObjectLostError", "RayError", "Exception"],
    "ObjectFreedError": ["ObjectLostError", "RayError", "Exception"],
    "ObjectLostError": ["RayError", "Exception"],
    "ObjectReconstructionFailedError": ["ObjectLostError", "RayError", "Exception"],
    "ObjectRefStreamEndOfStreamError": ["RayError", "Exception"],
    "ObjectStoreFullError": ["RayError", "Exception"],
    "OufOfBandObjectRefSerializationException": ["RayError", "Exception"],
    "OutOfDiskError": ["RayError", "Exception"],
    "OutOfMemoryError": ["RayError", "Exception"],
    "OwnerDiedError": ["ObjectLostError", "RayError", "Exception"],
    "PendingCallsLimitExceeded": ["RayError", "Exception"],
    "PlasmaObjectNotAvailable": ["RayError", "Exception"],
    "RayActorError": ["RayError", "Exception"],
    "RayCgraphCapacityExceeded": ["RaySystemError", "RayError", "Exception"],
    "RayChannelError": ["RaySystemError", "RayError", "Exception"],
    "RayChannelTimeoutError": [
        "RayChannelError", "RaySystemError", "RayError", "TimeoutError", "OSError", "Exception",
    ],
    "RayDirectTransportError": ["RaySystemError", "RayError", "Exception"],
    "RayError": ["Exception"],
    "RaySystemError": ["RayError", "Exception"],
    "RayTaskError": ["RayError", "Exception"],
    "ReferenceCountingAssertionError": [
        "ObjectLostError", "RayError", "AssertionError", "Exception",
    ],
    "RpcError": ["RayError", "Exception"],
    "RuntimeEnvSetupError": ["RayError", "Exception"],
    "StreamingGeneratorReplayInconsistentError": ["RaySystemError", "RayError", "Exception"],
    "TaskCancelledError": ["RayError", "Exception"],
    "TaskPlacementGroupRemoved": ["RayError", "Exception"],
    "TaskUnschedulableError": ["RayError", "Exception"],
    "UnserializableException": ["RayError", "Exception"],
    "UserCodeException": ["RayError", "Exception"],
    "WorkerCrashedError": ["RayError", "Exception"],
}

# Observed with Ray 2.60.0 (inspect.signature of __init__, without self).
RAY_PARAMETERS: dict[str, list[str]] = {
    "ActorAlreadyExistsError": ["error_message"],
    "ActorDiedError": ["cause"],
    "ActorUnavailableError": ["error_message", "actor_id"],
    "CrossLanguageError": ["ray_exception"],
    "NodeDiedError": ["message"],
    "ObjectLostError": ["object_ref_hex", "owner_address", "call_site"],
    "ObjectReconstructionFailedError": [
        "object_ref_hex", "reason", "reason_message", "owner_address", "call_site",
    ],
    "OutOfMemoryError": ["message"],
    "RayActorError": ["actor_id", "error_msg", "actor_init_failed", "preempted"],
    "RaySystemError": ["client_exc", "traceback_str"],
    "RayTaskError": [
        "function_name", "traceback_str", "cause", "proctitle", "pid", "ip", "actor_repr",
        "actor_id",
    ],
    "RpcError": ["message", "rpc_code"],
    "RuntimeEnvSetupError": ["error_message"],
    "TaskCancelledError": ["task_id", "error_message"],
    "TaskUnschedulableError": ["error_message"],
    "UnserializableException": ["original_stack_trace"],
}

TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: bad'


def _exception_classes() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(E).items()
        if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
    }


def _mro_names(cls: type) -> list[str]:
    return [c.__name__ for c in cls.__mro__[1:] if c not in (BaseException, object)]


class MyError(Exception):
    """A user error with a constructor argument and a class-level default attribute."""

    code = 0

    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code

    @property
    def doubled(self) -> int:
        return self.code * 2


def _task_error(cause: Any, **kw: Any) -> E.RayTaskError:
    return E.RayTaskError.create("f", TRACEBACK, cause, pid=7, ip="10.0.0.1", **kw)


# ---- the class tree ---------------------------------------------------------------------------


def test_public_exception_classes_are_rays() -> None:
    assert set(_exception_classes()) == set(RAY_MRO)


@pytest.mark.parametrize("name", sorted(RAY_MRO))
def test_mro_matches_ray(name: str) -> None:
    cls = getattr(E, name)
    assert _mro_names(cls) == RAY_MRO[name]
    assert cls.__module__ == "fray_ray.exceptions"
    assert cls.__doc__


@pytest.mark.parametrize("name", sorted(RAY_PARAMETERS))
def test_constructor_parameters_match_ray(name: str) -> None:
    parameters = list(inspect.signature(getattr(E, name).__init__).parameters)[1:]
    assert parameters == RAY_PARAMETERS[name]


def test_ray_exception_types_list() -> None:
    # Observed with Ray 2.60.0: RAY_EXCEPTION_TYPES starts with these, in this order.
    names = [cls.__name__ for cls in E.RAY_EXCEPTION_TYPES]
    assert names[:4] == ["PlasmaObjectNotAvailable", "RayError", "RayTaskError", "WorkerCrashedError"]
    assert len(names) == 30 and names[-1] == "AuthenticationError"


def test_dual_base_classes_catch_as_builtin() -> None:
    with pytest.raises(TimeoutError):
        raise E.GetTimeoutError("Get timed out: some object(s) not ready.")
    with pytest.raises(ValueError):
        raise E.ActorAlreadyExistsError("taken")
    with pytest.raises(AssertionError):
        raise E.ReferenceCountingAssertionError("ab", None, "")


# ---- messages (observed with Ray 2.60.0 unless noted) -----------------------------------------

HEX = "ab" * 28

RAY_MESSAGES: list[tuple[str, Any, str]] = [
    ("RayError()", lambda: E.RayError(), ""),
    ("TaskCancelledError()", lambda: E.TaskCancelledError(), ""),
    ("TaskCancelledError(msg)", lambda: E.TaskCancelledError(error_message="boom"), "boom"),
    ("TaskCancelledError(id)", lambda: E.TaskCancelledError("abc"), "Task: abc was cancelled. "),
    ("TaskCancelledError(id, m)", lambda: E.TaskCancelledError("abc", "m"), "Task: abc was cancelled. m"),
    ("TaskUnschedulableError", lambda: E.TaskUnschedulableError("m"), "The task is not schedulable: m"),
    ("ActorUnschedulableError", lambda: E.ActorUnschedulableError("m"), "The actor is not schedulable: m"),
    (
        "TaskPlacementGroupRemoved",
        lambda: E.TaskPlacementGroupRemoved(),
        "The placement group corresponding to this task has been removed.",
    ),
    (
        "ActorPlacementGroupRemoved",
        lambda: E.ActorPlacementGroupRemoved(),
        "The placement group corresponding to this Actor has been removed.",
    ),
    ("ActorAlreadyExistsError", lambda: E.ActorAlreadyExistsError("m"), "m"),
    (
        "RayActorError()",
        lambda: E.RayActorError(),
        "The actor experienced an error before finishing this task.",
    ),
    ("RayActorError(id, msg)", lambda: E.RayActorError("abc", "msg"), "msg"),
    ("ActorDiedError()", lambda: E.ActorDiedError(), "The actor died unexpectedly before finishing this task."),
    (
        "ActorUnavailableError",
        lambda: E.ActorUnavailableError("m", b"\x01" * 16),
        "The actor 01010101010101010101010101010101 is unavailable: m. The task may or may not "
        "have been executed on the actor.",
    ),
    (
        "ObjectFetchTimedOutError",
        lambda: E.ObjectFetchTimedOutError(HEX, None, "cs"),
        f"Failed to retrieve object {HEX}. The ObjectRef was created at: cs\n\nFetch for object "
        f"{HEX} timed out because no locations were found for the object. This may indicate a "
        "system-level bug.",
    ),
    (
        "ObjectFreedError",
        lambda: E.ObjectFreedError(HEX, None, "cs"),
        f"Failed to retrieve object {HEX}. The ObjectRef was created at: cs\n\nThe object was "
        "manually freed using the internal `free` call. Please ensure that `free` is only called "
        "once the object is no longer needed.",
    ),
    (
        "ReferenceCountingAssertionError",
        lambda: E.ReferenceCountingAssertionError(HEX, None, "cs"),
        f"Failed to retrieve object {HEX}. The ObjectRef was created at: cs\n\nThe object has "
        "already been deleted by the reference counting protocol. This should not happen.",
    ),
    ("GetTimeoutError", lambda: E.GetTimeoutError("m"), "m"),
    ("OutOfMemoryError", lambda: E.OutOfMemoryError("m"), "m"),
    ("NodeDiedError", lambda: E.NodeDiedError("m"), "m"),
    ("RaySystemError", lambda: E.RaySystemError("x"), "System error: x"),
    ("RaySystemError+tb", lambda: E.RaySystemError("x", "TB"), "System error: x\ntraceback: TB"),
    ("RayChannelTimeoutError", lambda: E.RayChannelTimeoutError("x"), "System error: x"),
    ("RuntimeEnvSetupError()", lambda: E.RuntimeEnvSetupError(), "Failed to set up runtime environment."),
    (
        "RuntimeEnvSetupError(m)",
        lambda: E.RuntimeEnvSetupError("m"),
        "Failed to set up runtime environment.\nm",
    ),
    ("RpcError", lambda: E.RpcError("m", rpc_code=14), "m"),
]


@pytest.mark.parametrize(("label", "make", "expected"), RAY_MESSAGES, ids=[c[0] for c in RAY_MESSAGES])
def test_message_matches_ray(label: str, make: Any, expected: str) -> None:
    assert str(make()) == expected


def test_messages_that_drop_ray_specific_hints_keep_rays_first_sentence() -> None:
    # Ray 2.60 ends these with hints about Ray's own files and commands; the first sentence is
    # the same.
    assert str(E.WorkerCrashedError()).startswith(
        "The worker died unexpectedly while executing this task."
    )
    assert str(E.LocalRayletDiedError()).startswith("The task's local raylet died.")
    lost = str(E.ObjectLostError(HEX, None, "cs"))
    assert lost.startswith(f"Failed to retrieve object {HEX}. The ObjectRef was created at: cs\n\n")
    assert f"All copies of {HEX} have been lost due to node failure." in lost
    assert "The object's owner has exited." in str(E.OwnerDiedError(HEX, None, "cs"))
    assert str(E.ObjectStoreFullError("m")).startswith(
        "m\nThe local object store is full of objects that are still in scope and cannot be "
        "evicted."
    )
    assert str(E.ObjectReconstructionFailedError(HEX)).endswith("[UNKNOWN] Unknown error reason.")
    assert str(E.UnserializableException("st")).startswith("Failed to deserialize exception.")
    assert str(E.UnserializableException("st")).endswith("Original exception:\nst")
    assert str(E.AuthenticationError("bad token")).startswith("bad token. ")


def test_error_attributes_match_ray() -> None:
    # Observed with Ray 2.60.0 through vars(error).
    actor_error = E.RayActorError("abc", "msg", actor_init_failed=True, preempted=True)
    assert (actor_error.actor_id, actor_error.error_msg) == ("abc", "msg")
    assert actor_error.actor_init_failed and actor_error.preempted
    assert E.ActorUnavailableError("m", b"\x01" * 16).actor_id == "01" * 16
    assert E.RpcError("m", rpc_code=14).rpc_code == 14
    assert E.TaskUnschedulableError("m").error_message == "m"
    lost = E.ObjectLostError(HEX, b"owner", "cs")
    assert (lost.object_ref_hex, lost.owner_address, lost.call_site) == (HEX, b"owner", "cs")
    assert E.RaySystemError("x", "tb").client_exc == "x"
    assert E.TaskCancelledError("abc", "m").args == ("abc", "m")


def test_actor_already_exists_message() -> None:
    # Observed with Ray 2.60.0: A.options(name="dup").remote() twice.
    error = E.ActorAlreadyExistsError.for_name("dup", None)
    assert str(error) == (
        "The name dup (namespace=None) is already taken. Please use a different name or get the "
        "existing actor using ray.get_actor('dup', namespace='None')"
    )


# ---- RayTaskError ---------------------------------------------------------------------------


def test_task_error_is_caught_as_the_user_type_and_as_ray_task_error() -> None:
    error = _task_error(ZeroDivisionError("division by zero"))
    assert type(error).__name__ == "RayTaskError(ZeroDivisionError)"
    # Observed with Ray 2.60.0: RayTaskError(E) → RayTaskError → RayError → E → ...
    assert _mro_names(type(error)) == [
        "RayTaskError", "RayError", "ZeroDivisionError", "ArithmeticError", "Exception",
    ]
    with pytest.raises(ZeroDivisionError):
        raise error
    with pytest.raises(E.RayTaskError):
        raise error
    assert isinstance(error.cause, ZeroDivisionError)
    assert error.args == (error.cause,)


def test_task_error_keeps_user_attributes() -> None:
    error = _task_error(MyError(404))
    assert isinstance(error, MyError)
    assert error.code == 404  # an instance attribute shadowing a class default
    assert error.doubled == 808  # computed from the copied state
    assert error.cause.code == 404


def test_task_error_str_starts_with_ray_header_then_traceback() -> None:
    # Observed with Ray 2.60.0: "ray::boom() (pid=5760, ip=192.0.2.2)\n  File ..." (Ray also
    # wraps the "ray::boom()" part in ANSI colour codes; fray_ray does not).
    error = _task_error(ValueError("bad"))
    assert str(error) == 'ray::f() (pid=7, ip=10.0.0.1)\n  File "x.py", line 1, in f\nValueError: bad'


def test_actor_task_error_header_names_actor() -> None:
    # Observed with Ray 2.60.0: "ray::A.m() (pid=..., ip=..., actor_id=..., repr=A(x=1))".
    error = E.RayTaskError.create(
        "A.m", TRACEBACK, ValueError("bad"), pid=1, ip="h", actor_repr="A(x=1)", actor_id="ab"
    )
    assert str(error).splitlines()[0] == "ray::A.m() (pid=1, ip=h, actor_id=ab, repr=A(x=1))"


def test_plain_task_error_fields_and_defaults() -> None:
    error = E.RayTaskError("f", "boom", ValueError("x"))
    assert type(error) is E.RayTaskError
    assert error.pid == os.getpid()
    assert isinstance(error.ip, str) and error.ip
    assert error.proctitle == "ray::f"
    assert str(error).startswith(f"ray::f() (pid={os.getpid()}, ")
    assert str(error).endswith("\nboom")
    assert error.as_instanceof_cause().cause is error.cause


def test_as_instanceof_cause_is_idempotent_and_shares_classes() -> None:
    first = _task_error(KeyError("k"))
    assert first.as_instanceof_cause() is first
    assert type(_task_error(KeyError("j"))) is type(first)


class _RefusesSubclasses(Exception):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("final")


class _NoMixing(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> type:
        if len(bases) > 1:
            raise TypeError("no mixing")
        return super().__new__(mcs, name, bases, ns)


class _MetaRefuses(Exception, metaclass=_NoMixing):
    pass


class _ArgsProperty(Exception):
    @property
    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        return ("fixed",)


@pytest.mark.parametrize(
    "cause",
    [_RefusesSubclasses("x"), _MetaRefuses("x"), _ArgsProperty("x"), "not an exception"],
    ids=["init_subclass", "metaclass", "args-property", "non-exception"],
)
def test_unsubclassable_cause_falls_back_to_plain_task_error(
    cause: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fray_ray.exceptions"):
        error = _task_error(cause)
    assert type(error) is E.RayTaskError
    assert error.cause is cause
    assert str(error).startswith("ray::f() (pid=7, ip=10.0.0.1)")


def test_nested_failure_still_matches_original_type() -> None:
    # Observed with Ray 2.60.0: a task that ray.get()s a failed task raises
    # RayTaskError(ZeroDivisionError) whose cause is the original ZeroDivisionError.
    inner = _task_error(ZeroDivisionError("division by zero"))
    try:
        raise inner
    except E.RayTaskError as caught:
        outer = E.RayTaskError.from_exception(caught, "outer", pid=8, ip="h")
    assert isinstance(outer, ZeroDivisionError)
    assert type(outer.cause) is ZeroDivisionError
    text = str(outer)
    assert text.startswith("ray::outer() (pid=8, ip=h)\n")
    assert "fray_ray.exceptions.RayTaskError(ZeroDivisionError): ray::f() (pid=7" in text


def test_failed_argument_error() -> None:
    # Observed with Ray 2.60.0: the header of the consuming task, then "At least one of the
    # input arguments for this task could not be computed:" and the argument's error.
    argument_error = _task_error(ZeroDivisionError("division by zero"))
    error = E.RayTaskError.for_failed_argument("consumer", argument_error, pid=1, ip="h")
    assert isinstance(error, ZeroDivisionError)
    lines = str(error).splitlines()
    assert lines[0] == "ray::consumer() (pid=1, ip=h)"
    assert lines[1] == "  At least one of the input arguments for this task could not be computed:"
    assert lines[2].startswith("fray_ray.exceptions.RayTaskError(ZeroDivisionError): ray::f()")


def _user_function() -> None:
    raise KeyError("missing")


def test_from_exception_formats_user_frames() -> None:
    try:
        _user_function()
    except KeyError as exc:
        error = E.RayTaskError.from_exception(exc, "_user_function", pid=1, ip="h")
    assert isinstance(error, KeyError)
    assert "in _user_function" in str(error)
    assert str(error).endswith("KeyError: 'missing'")
    assert "Traceback (most recent call last)" not in str(error)


@pytest.mark.parametrize("dumps_loads", [pickle, cloudpickle], ids=["pickle", "cloudpickle"])
def test_task_error_survives_pickling(dumps_loads: Any) -> None:
    error = _task_error(MyError(404), actor_repr="A()", actor_id="ab")
    copy = dumps_loads.loads(dumps_loads.dumps(error))
    assert type(copy).__name__ == "RayTaskError(MyError)"
    assert isinstance(copy, MyError) and isinstance(copy, E.RayTaskError)
    assert str(copy) == str(error)
    assert copy.code == 404
    assert (copy.actor_id, copy.actor_repr, copy.pid) == ("ab", "A()", 7)
    plain = E.RayTaskError("f", "TB", _RefusesSubclasses("x"), pid=1, ip="h", actor_repr="r")
    plain_copy = dumps_loads.loads(dumps_loads.dumps(plain))
    assert type(plain_copy) is E.RayTaskError and plain_copy.actor_repr == "r"


def test_builtin_state_of_cause_is_kept() -> None:
    os_error = _task_error(FileNotFoundError(2, "nofile"))
    assert isinstance(os_error, FileNotFoundError)
    assert (os_error.errno, os_error.strerror) == (2, "nofile")
    assert _task_error(StopIteration(5)).value == 5


def test_exception_group_cause_works_with_except_star() -> None:
    error = _task_error(ExceptionGroup("grp", [ValueError(1)]))
    assert isinstance(error, ExceptionGroup)
    caught = []
    try:
        raise error
    except* ValueError as group:
        caught.append(group)
    assert len(caught) == 1


def test_base_exception_causes_order_like_ray() -> None:
    # Observed with Ray 2.60.0 MROs.
    interrupt = _task_error(KeyboardInterrupt())
    assert _mro_names(type(interrupt)) == [
        "RayTaskError", "RayError", "Exception", "KeyboardInterrupt",
    ]
    cancelled = _task_error(E.TaskCancelledError())
    assert _mro_names(type(cancelled)) == [
        "RayTaskError", "TaskCancelledError", "RayError", "Exception",
    ]


# ---- actor deaths -----------------------------------------------------------------------------


def test_creation_task_failure_message() -> None:
    # Observed with Ray 2.60.0: every call on an actor whose __init__ raised.
    creation = E.RayTaskError(
        "B.__init__", "Traceback (most recent call last):\n  File x\nRuntimeError: boom",
        RuntimeError("boom"), "ray::B.__init__", 5, "1.1.1.1", "B()", "aa",
    )
    error = E.ActorDiedError.from_task_error(creation)
    assert str(error) == (
        "The actor died because of an error raised in its creation task, ray::B.__init__() "
        "(pid=5, ip=1.1.1.1, actor_id=aa, repr=B())\n  File x\nRuntimeError: boom"
    )
    assert error.actor_init_failed and error.actor_id == "aa"
    assert error.args == (creation,)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_killed_actor_message() -> None:
    # Observed with Ray 2.60.0 after ray.kill(actor).
    info = E.ActorDeathInfo(
        E.ActorDeathReason.KILLED, class_name="A", actor_id="04ab", pid=6605, namespace="ns",
        ip="192.0.2.2",
    )
    error = E.ActorDiedError(info)
    assert str(error) == (
        "The actor died unexpectedly before finishing this task.\n\tclass_name: A\n\tactor_id: "
        "04ab\n\tpid: 6605\n\tnamespace: ns\n\tip: 192.0.2.2\nThe actor is dead because it was "
        "killed by `ray.kill`."
    )
    assert error.actor_id == "04ab" and not error.actor_init_failed
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is E.ActorDiedError and str(copy) == str(error)


def test_process_death_and_exit_messages() -> None:
    # Observed with Ray 2.60.0: kill -9 of the actor process, and exit_actor().
    died = str(E.ActorDiedError(E.ActorDeathInfo("process_died", class_name="A", detail="gone")))
    assert died.endswith(
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
        "Worker exit detail: gone"
    )
    exited = str(E.ActorDiedError(E.ActorDeathInfo(E.ActorDeathReason.EXITED)))
    assert exited.startswith("The actor died unexpectedly before finishing this task.\nThe actor")
    assert "Worker exit type: INTENDED_USER_EXIT" in exited
    assert exited.endswith("exit_actor() is called.")
    preempted = E.ActorDiedError(E.ActorDeathInfo("node_died", preempted=True))
    assert preempted.preempted


def test_actor_died_error_accepts_a_message_and_rejects_other_causes() -> None:
    assert str(E.ActorDiedError("The actor A died: host lost.")) == "The actor A died: host lost."
    with pytest.raises(TypeError):
        E.ActorDiedError(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        E.ActorDeathInfo("no-such-reason")  # type: ignore[arg-type]


# ---- transport --------------------------------------------------------------------------------

PICKLABLE: list[Any] = [
    E.RayError("x"),
    E.CrossLanguageError(ValueError("v")),
    E.TaskCancelledError("t", "m"),
    E.LocalRayletDiedError(),
    E.WorkerCrashedError(),
    E.RayActorError("a", "m", actor_init_failed=True),
    E.ActorDiedError(),
    E.ActorUnavailableError("m", b"\x01"),
    E.ActorUnschedulableError("m"),
    E.ActorPlacementGroupRemoved(),
    E.TaskPlacementGroupRemoved(),
    E.TaskUnschedulableError("m"),
    E.PendingCallsLimitExceeded("m"),
    E.AsyncioActorExit(),
    E.ActorAlreadyExistsError("m"),
    E.ActorHandleNotFoundError("m"),
    E.ObjectLostError(HEX, None, "cs"),
    E.ObjectFetchTimedOutError(HEX, None, "cs"),
    E.ObjectFreedError(HEX, None, "cs"),
    E.OwnerDiedError(HEX, b"", "cs"),
    E.ObjectReconstructionFailedError(HEX, "LINEAGE_EVICTED", "evicted"),
    E.ReferenceCountingAssertionError(HEX, None, "cs"),
    E.ObjectStoreFullError("m"),
    E.OutOfDiskError("m"),
    E.PlasmaObjectNotAvailable(),
    E.GetTimeoutError("m"),
    E.OutOfMemoryError("m"),
    E.NodeDiedError("m"),
    E.RaySystemError("x", "tb"),
    E.RayChannelError("x"),
    E.RayChannelTimeoutError("x"),
    E.RayCgraphCapacityExceeded("x"),
    E.RayDirectTransportError("x"),
    E.StreamingGeneratorReplayInconsistentError("x"),
    E.RuntimeEnvSetupError("m"),
    E.RpcError("m", 14),
    E.AuthenticationError("m"),
    E.UserCodeException("m"),
    E.UnserializableException("st"),
    E.OufOfBandObjectRefSerializationException("m"),
    E.ObjectRefStreamEndOfStreamError(),
]


def test_every_class_has_a_pickling_case() -> None:
    covered = {type(error).__name__ for error in PICKLABLE} | {"RayTaskError"}
    assert covered == set(RAY_MRO)


@pytest.mark.parametrize("error", PICKLABLE, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_type_message_and_state(error: BaseException) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    # Exceptions compare by identity, so state is compared through repr.
    assert {k: repr(v) for k, v in vars(copy).items()} == {k: repr(v) for k, v in vars(error).items()}
