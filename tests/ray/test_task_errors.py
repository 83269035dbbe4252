"""Task errors whose cause cannot be pickled or rebuilt still carry its class name and traceback."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path

import cloudpickle
import pytest

import fray_ray as ray
from fray_ray import exceptions
from fray_ray._private.core.execution import make_task_error
from fray_ray._private.objects.serialization import SerializedValue, deserialize, serialize_error
from fray_ray.exceptions import _UnrebuildableTaskError


class NeedsTwo(Exception):
    """Pickles as NeedsTwo(code), which __init__ refuses."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code)
        self.detail = detail


class HoldsALock(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class RefusesPickling(Exception):
    def __reduce__(self):
        raise RuntimeError("no pickling for this one")


class Coded(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the test wants the traceback
        return make_task_error(caught, "job.step")


def _round_trip(exc: BaseException) -> BaseException:
    return deserialize(serialize_error(_raised(exc)))


def test_ordinary_cause_keeps_its_type_and_attributes() -> None:
    error = _round_trip(Coded(404))
    assert isinstance(error, Coded) and isinstance(error, exceptions.RayTaskError)
    assert error.code == 404 and error.cause.code == 404
    assert pickle.loads(pickle.dumps(error)).code == 404  # plain pickle too


def test_cause_that_cannot_be_rebuilt_becomes_unrebuildable_task_error() -> None:
    error = _round_trip(NeedsTwo(7, "the detail"))
    assert type(error) is _UnrebuildableTaskError
    assert isinstance(error, exceptions.RayTaskError)
    assert isinstance(error, exceptions.UnserializableException)
    assert error.type_name == f"{__name__}.NeedsTwo"
    assert "missing 1 required positional argument" in error.problem
    assert error.function_name == "job.step"
    assert error.traceback_str.rstrip().endswith("NeedsTwo: 7")
    assert "in _raised" in error.traceback_str
    text = str(error)
    assert text.startswith("Failed to deserialize exception.")
    assert "ray::job.step()" in text and "NeedsTwo: 7" in text
    assert isinstance(error.cause, exceptions.RayError) and "NeedsTwo" in str(error.cause)
    again = pickle.loads(pickle.dumps(error))  # it travels on as itself
    assert type(again) is _UnrebuildableTaskError and str(again) == text


@pytest.mark.parametrize("cause", [HoldsALock("holds a lock"), RefusesPickling("refuses")], ids=["lock", "reduce"])
def test_cause_that_cannot_be_pickled_becomes_plain_task_error(cause: BaseException) -> None:
    error = _round_trip(cause)
    assert type(error) is exceptions.RayTaskError
    kind = type(cause).__name__
    assert f"{kind}: " in error.traceback_str and f"{kind}: " in str(error)
    assert isinstance(error.cause, exceptions.RayError)
    assert f"Exception {__name__}.{kind} isn't serializable" in str(error.cause)


def test_other_unpicklable_errors_keep_name_and_traceback() -> None:
    class Local(Exception):
        pass

    error = Local("inner")
    error.lock = threading.Lock()
    try:
        raise error
    except Local as caught:
        stored = serialize_error(caught)
    read = deserialize(stored)
    assert isinstance(read, exceptions.RaySystemError)
    assert "Local: inner" in str(read) and "could not be pickled" in str(read)
    assert "raise error" in read.traceback_str


def test_an_unreadable_stored_error_is_a_system_error() -> None:
    import sys

    module = type(sys)("vanishing_module")
    exec("class Gone(Exception):\n    pass\n", module.__dict__)
    sys.modules["vanishing_module"] = module
    try:
        payload = pickle.dumps(module.Gone("x"))
    finally:
        del sys.modules["vanishing_module"]
    read = deserialize(SerializedValue(payload, is_error=True))
    assert isinstance(read, exceptions.RaySystemError)
    assert "cannot be rebuilt here" in str(read) and "vanishing_module" in str(read)


def test_traceback_text_leaves_out_fray_ray_frames() -> None:
    error = _raised(ValueError("bad"))
    assert "fray_ray" + os.sep not in error.traceback_str
    assert "in _raised" in error.traceback_str


def test_older_pickles_without_a_packed_cause_still_load() -> None:
    from fray_ray.exceptions import _rebuild_task_error

    fields = {"function_name": "f", "traceback_str": "Traceback\nValueError: x", "cause": ValueError("x"),
              "proctitle": None, "pid": 1, "ip": "127.0.0.1", "actor_repr": None, "actor_id": None}
    error = _rebuild_task_error(fields, True)
    assert isinstance(error, ValueError) and isinstance(error, exceptions.RayTaskError)


# ---- with real worker processes ----------------------------------------------------------


@ray.remote(max_retries=0)
def raise_kind(kind: str, module_dir: str | None = None) -> None:
    if kind == "needs-two":
        raise NeedsTwo(3, "detail")
    if kind == "lock":
        raise HoldsALock("locked")
    if kind == "hidden":
        import sys

        Path(module_dir, "only_here_errors.py").write_text("class OnlyHere(Exception):\n    pass\n")
        sys.path.insert(0, module_dir)
        try:
            import only_here_errors
        finally:
            sys.path.remove(module_dir)
        raise only_here_errors.OnlyHere("from the worker's own module")
    raise AssertionError(kind)


@ray.remote
class Raiser:
    def needs_two(self) -> None:
        raise NeedsTwo(5, "detail")

    def ok(self) -> str:
        return "alive"


@pytest.mark.usefixtures("cluster_session")
def test_unrebuildable_exception_from_a_worker() -> None:
    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(raise_kind.remote("needs-two"))
    assert isinstance(info.value, exceptions.UnserializableException)
    assert info.value.type_name.endswith("NeedsTwo")
    assert "NeedsTwo: 3" in str(info.value)
    assert info.value.pid != os.getpid()


@pytest.mark.usefixtures("cluster_session")
def test_exception_from_a_module_only_the_worker_has(tmp_path: Path) -> None:
    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(raise_kind.remote("hidden", str(tmp_path)))
    assert info.value.type_name == "only_here_errors.OnlyHere"
    assert "only_here_errors.OnlyHere: from the worker's own module" in str(info.value)
    assert "No module named 'only_here_errors'" in info.value.problem


@pytest.mark.usefixtures("cluster_session")
def test_unpicklable_exception_from_a_worker() -> None:
    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(raise_kind.remote("lock"))
    assert type(info.value) is exceptions.RayTaskError
    assert "HoldsALock: locked" in str(info.value)


@pytest.mark.usefixtures("cluster_session")
def test_unrebuildable_exception_from_an_actor_method_names_the_actor() -> None:
    actor = Raiser.remote()
    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(actor.needs_two.remote())
    assert isinstance(info.value, exceptions.UnserializableException)
    assert "Raiser.needs_two" in str(info.value) and "NeedsTwo: 5" in str(info.value)
    assert info.value.actor_id == actor._ray_actor_id.hex()
    assert ray.get(actor.ok.remote()) == "alive"


@pytest.mark.usefixtures("cluster_session")
def test_unrebuildable_error_passed_on_as_an_argument() -> None:
    failed = raise_kind.remote("needs-two")

    @ray.remote
    def consume(value: object) -> object:
        return value

    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(consume.remote(failed))
    assert "NeedsTwo" in str(info.value)


def test_cloudpickle_round_trip_of_a_dual_error() -> None:
    error = _raised(Coded(1))
    again = cloudpickle.loads(cloudpickle.dumps(error))
    assert isinstance(again, Coded) and isinstance(again, exceptions.RayTaskError)
