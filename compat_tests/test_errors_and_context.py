"""Errors users meet when they misuse an API: their class and their words, as Ray 2.60 gives them.

Mirrors Ray's test_actor.py (subclassing an actor class) and test_queue.py (bad
``actor_options``) checks.
"""

from __future__ import annotations

import pytest

from compat_tests._backend import actor_module, ray, util_queue


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
