"""Named actors: ``name``, ``namespace``, ``get_actor``, ``get_if_exists``, ``lifetime``.

Mirrors Ray's test_actor.py named-actor tests and test_get_or_create_actor.py, plus
``ray.util.list_named_actors`` (ray-api.md §1.2, §1.4).
"""

from __future__ import annotations

import gc
import os
import uuid

import pytest

from compat_tests._backend import TEST_NAMESPACE, exceptions, ray, util
from compat_tests.helpers import wait_for_condition


@ray.remote(num_cpus=0)
class Named:
    def __init__(self, value=0):
        self.value = value

    def identity(self):
        return os.getpid(), self.value


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _lookup_fails(name, namespace=None):
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


def test_actor__get_non_existing_named_actor(ray_start_regular_shared):
    with pytest.raises(ValueError, match="Failed to look up actor"):
        ray.get_actor(_unique("never-created"))
    with pytest.raises(ValueError):
        ray.get_actor("")


def test_actor__get_actor_by_name(ray_start_regular_shared):
    name = _unique("by-name")
    actor = Named.options(name=name).remote(3)
    found = ray.get_actor(name)
    assert ray.get(found.identity.remote()) == ray.get(actor.identity.remote())
    assert ray.get(ray.get_actor(name, namespace=TEST_NAMESPACE).identity.remote())[1] == 3

    @ray.remote
    def lookup_in_task(actor_name):
        return ray.get(ray.get_actor(actor_name).identity.remote())[1]

    assert ray.get(lookup_in_task.remote(name)) == 3


def test_actor__duplicate_name_raises_actor_already_exists(ray_start_regular_shared):
    name = _unique("dup")
    actor = Named.options(name=name).remote()
    ray.get(actor.identity.remote())
    with pytest.raises(exceptions.ActorAlreadyExistsError):
        Named.options(name=name).remote()
    with pytest.raises(ValueError):
        Named.options(name=name).remote()
    assert issubclass(exceptions.ActorAlreadyExistsError, ValueError)
    assert issubclass(exceptions.ActorAlreadyExistsError, exceptions.RayError)


def test_actor__actor_namespace(ray_start_regular_shared):
    name = _unique("spaced")
    other = Named.options(name=name, namespace="compat-other").remote("other")
    assert ray.get(other.identity.remote())[1] == "other"
    # Not visible from the job's own namespace...
    with pytest.raises(ValueError):
        ray.get_actor(name)
    # ...but found when the namespace is given.
    assert ray.get(ray.get_actor(name, namespace="compat-other").identity.remote())[1] == "other"
    # The same name is free in another namespace.
    mine = Named.options(name=name).remote("mine")
    assert ray.get(ray.get_actor(name).identity.remote())[1] == "mine"
    del mine


def test_actor__named_actor_cache(ray_start_regular_shared):
    name = _unique("cached")
    actor = Named.options(name=name).remote(1)
    found = ray.get_actor(name)
    assert ray.get(found.identity.remote())[1] == 1
    ray.kill(found, no_restart=True)
    wait_for_condition(lambda: _lookup_fails(name))
    # The name can be taken again.
    again = Named.options(name=name).remote(2)
    assert ray.get(ray.get_actor(name).identity.remote())[1] == 2
    del actor, again


def test_actor__named_actor_option_validation(ray_start_regular_shared):
    with pytest.raises(TypeError):
        Named.options(name=3)
    with pytest.raises(ValueError):
        Named.options(name="").remote()
    with pytest.raises(ValueError):
        Named.options(name=_unique("life"), lifetime="forever")
    with pytest.raises(ValueError):
        Named.options(get_if_exists=True).remote()  # get_if_exists needs a name


def test_get_or_create_actor__simple(ray_start_regular_shared):
    name = _unique("goc")
    first = Named.options(name=name, get_if_exists=True).remote("first")
    second = Named.options(name=name, get_if_exists=True).remote("second")
    pid_first, value_first = ray.get(first.identity.remote())
    pid_second, value_second = ray.get(second.identity.remote())
    assert pid_first == pid_second
    assert value_first == value_second == "first"  # the second constructor call never ran
    fresh = Named.options(name=_unique("goc-new"), get_if_exists=True).remote("new")
    assert ray.get(fresh.identity.remote())[1] == "new"


def test_get_or_create_actor__shared_actor(ray_start_regular_shared):
    name = _unique("goc-shared")

    @ray.remote
    def get_or_create(actor_name):
        actor = Named.options(name=actor_name, get_if_exists=True, lifetime="detached").remote(
            "shared"
        )
        return ray.get(actor.identity.remote())

    try:
        results = ray.get([get_or_create.remote(name) for _ in range(4)])
        assert len(set(results)) == 1 and results[0][1] == "shared"
    finally:
        ray.kill(ray.get_actor(name))


def test_named__detached_actor(ray_start_regular_shared):
    name = _unique("detached")
    detached = Named.options(name=name, lifetime="detached").remote("kept")
    pid, _ = ray.get(detached.identity.remote())
    del detached
    gc.collect()
    # A detached actor outlives its handles; it is reachable by name until killed.
    assert ray.get(ray.get_actor(name).identity.remote()) == (pid, "kept")
    ray.kill(ray.get_actor(name))
    wait_for_condition(lambda: _lookup_fails(name))


def test_named__get_actor_after_kill_raises_at_once(ray_start_regular_shared):
    name = _unique("killed")
    actor = Named.options(name=name, lifetime="detached").remote()
    ray.get(actor.identity.remote())
    ray.kill(ray.get_actor(name))
    # No waiting: the name is free as soon as ray.kill returns.
    with pytest.raises(ValueError, match=name):
        ray.get_actor(name)


def test_named__non_detached_named_actor_dies_with_its_handles(ray_start_regular_shared):
    name = _unique("owned")
    detached_name = _unique("detached-peer")
    handle = Named.options(name=name).remote()
    peer = Named.options(name=detached_name, lifetime="detached").remote()
    ray.get([handle.identity.remote(), peer.identity.remote()])
    del handle, peer
    gc.collect()
    wait_for_condition(lambda: _lookup_fails(name), timeout=60)
    assert ray.get(ray.get_actor(detached_name).identity.remote())
    ray.kill(ray.get_actor(detached_name))


def test_util__list_named_actors(ray_start_regular_shared):
    here, there = _unique("listed"), _unique("listed-there")
    a = Named.options(name=here).remote()
    b = Named.options(name=there, namespace="compat-listing").remote()
    ray.get([a.identity.remote(), b.identity.remote()])
    names = util.list_named_actors()
    assert here in names and there not in names
    assert all(isinstance(n, str) for n in names)
    everything = util.list_named_actors(all_namespaces=True)
    assert {"name": here, "namespace": TEST_NAMESPACE} in everything
    assert {"name": there, "namespace": "compat-listing"} in everything
    ray.kill(a)
    wait_for_condition(lambda: here not in util.list_named_actors())
    del b
