"""Errors users meet: their class, their words and their traceback text, as Ray 2.60 gives them.

Mirrors Ray's test_traceback.py (what a task's error shows), test_actor.py (subclassing an
actor class) and test_queue.py (bad ``actor_options``) checks.
"""

from __future__ import annotations

import threading

import pytest

from compat_tests._backend import actor_module, exceptions, ray, util_queue


@ray.remote
class _Base:
    def ping(self):
        return "pong"


def test_errors__subclassing_an_actor_class_names_both_classes(ray_start_regular_shared):
    with pytest.raises(actor_module.ActorClassInheritanceException) as info:

        class Derived(_Base):  # noqa: F841 - defining it is what raises
            pass

    message = str(info.value)
    assert message.startswith("Attempted to define subclass 'Derived' of actor class '_Base'.")
    assert "inherit from a non-actor base class" in message
    assert ray.get(_Base.remote().ping.remote()) == "pong"  # the actor class itself still works


@pytest.mark.parametrize("bad", ["x", 3, ["num_cpus", 1]])
def test_errors__queue_actor_options_must_be_a_mapping(ray_start_regular_shared, bad):
    with pytest.raises(TypeError):
        util_queue.Queue(actor_options=bad)


def test_errors__queue_accepts_actor_options(ray_start_regular_shared):
    queue = util_queue.Queue(actor_options={"num_cpus": 0})
    queue.put("item")
    assert queue.get(timeout=60) == "item"


class _HoldsALock(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled


def test_errors__traceback_of_a_function_shipped_by_value_names_its_file_and_line(ray_start_regular_shared):
    # A function defined inside another is pickled by value; its traceback still shows this
    # file and the failing source line.
    @ray.remote(max_retries=0)
    def fails_here():
        raise ValueError("raised in a local function")

    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(fails_here.remote())
    text = str(info.value)
    assert f'File "{__file__}"' in text
    assert 'raise ValueError("raised in a local function")' in text
    assert "ValueError: raised in a local function" in text


def test_errors__unpicklable_exception_keeps_type_name_and_traceback(ray_start_regular_shared):
    @ray.remote(max_retries=0)
    def raises_unpicklable():
        raise _HoldsALock("cannot travel")

    @ray.remote
    class Holder:
        def fail(self):
            raise _HoldsALock("cannot travel from an actor")

    for ref, message in (
        (raises_unpicklable.remote(), "cannot travel"),
        (Holder.remote().fail.remote(), "cannot travel from an actor"),
    ):
        with pytest.raises(exceptions.RayTaskError) as info:
            ray.get(ref)
        error = info.value
        assert not isinstance(error, _HoldsALock)  # the class could not travel: a plain RayTaskError
        assert isinstance(error.cause, exceptions.RayError)
        text = str(error)
        assert f"_HoldsALock: {message}" in text
        assert f'raise _HoldsALock("{message}")' in text  # the traceback's source line
