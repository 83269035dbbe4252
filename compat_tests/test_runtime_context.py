"""``ray.get_runtime_context()`` in the driver, in tasks and in actors.

Mirrors Ray's test_runtime_context.py public tests (ray-api.md §1.6). The before-``init``
behaviour is in test_init.py, since it needs a stopped cluster.
"""

from __future__ import annotations

import re

import pytest

from compat_tests._backend import TEST_NAMESPACE, ray

HEX = re.compile(r"[0-9a-f]+")


def _ids():
    context = ray.get_runtime_context()
    return {
        "job": context.get_job_id(),
        "task": context.get_task_id(),
        "actor": context.get_actor_id(),
        "node": context.get_node_id(),
    }


@ray.remote
def _task_ids():
    return _ids()


@ray.remote
class _IdActor:
    def ids(self):
        return _ids()

    def context_keys(self):
        return sorted(ray.get_runtime_context().get().keys())

    def resources(self):
        return ray.get_runtime_context().get_assigned_resources()

    def actor_name(self):
        return ray.get_runtime_context().get_actor_name()

    def task_name(self):
        return ray.get_runtime_context().get_task_name()

    def me(self):
        return ray.get_runtime_context().current_actor

    def echo(self, value):
        return value


def test_runtime_context__ids(ray_start_regular_shared):
    driver = _ids()
    task = ray.get(_task_ids.remote())
    actor = ray.get(_IdActor.remote().ids.remote())

    for ids in (driver, task, actor):
        assert isinstance(ids["job"], str) and HEX.fullmatch(ids["job"])
        assert isinstance(ids["node"], str) and re.fullmatch(r"[0-9a-f]{56}", ids["node"])
    assert driver["job"] == task["job"] == actor["job"]
    assert driver["node"] == task["node"] == actor["node"]  # one node

    assert driver["task"] is None and driver["actor"] is None
    assert re.fullmatch(r"[0-9a-f]{48}", task["task"]) and task["actor"] is None
    assert re.fullmatch(r"[0-9a-f]{48}", actor["task"])
    assert re.fullmatch(r"[0-9a-f]{32}", actor["actor"])
    assert ray.get(_task_ids.remote())["task"] != task["task"]  # one id per task


def test_runtime_context__get_context_dict(ray_start_regular_shared):
    driver = ray.get_runtime_context().get()
    assert {"job_id", "node_id", "namespace"} <= set(driver)
    assert "task_id" not in driver and "actor_id" not in driver
    assert driver["namespace"] == TEST_NAMESPACE

    @ray.remote
    def task_keys():
        return sorted(ray.get_runtime_context().get().keys())

    assert set(ray.get(task_keys.remote())) == {"job_id", "node_id", "namespace", "task_id"}
    assert set(ray.get(_IdActor.remote().context_keys.remote())) == {
        "job_id", "node_id", "namespace", "task_id", "actor_id",
    }


def test_runtime_context__namespace(ray_start_regular_shared):
    assert ray.get_runtime_context().namespace == TEST_NAMESPACE

    @ray.remote
    def namespace_in_task():
        return ray.get_runtime_context().namespace

    assert ray.get(namespace_in_task.remote()) == TEST_NAMESPACE


def test_runtime_context__current_actor(ray_start_regular_shared):
    actor = _IdActor.remote()
    me = ray.get(actor.me.remote())
    assert ray.get(me.echo.remote("through current_actor")) == "through current_actor"
    assert ray.get(me.ids.remote())["actor"] == ray.get(actor.ids.remote())["actor"]
    with pytest.raises(RuntimeError):
        ray.get_runtime_context().current_actor  # the driver is not an actor


def test_runtime_context__get_assigned_resources(ray_start_regular_shared):
    @ray.remote
    def assigned():
        return ray.get_runtime_context().get_assigned_resources()

    assert ray.get(assigned.remote()) == {"CPU": 1.0}
    assert ray.get(assigned.options(num_cpus=0.5).remote()) == {"CPU": 0.5}
    assert ray.get(assigned.options(num_cpus=1, resources={"custom": 1}).remote()) == {
        "CPU": 1.0,
        "custom": 1.0,
    }
    assert ray.get(_IdActor.remote().resources.remote()) == {}
    assert ray.get(_IdActor.options(num_cpus=1).remote().resources.remote()) == {"CPU": 1.0}


def test_runtime_context__actor_name(ray_start_regular_shared):
    named = _IdActor.options(name="compat-runtime-context-named").remote()
    assert ray.get(named.actor_name.remote()) == "compat-runtime-context-named"
    assert not ray.get(_IdActor.remote().actor_name.remote())  # unnamed: empty
    assert ray.get_runtime_context().get_actor_name() is None  # the driver


def test_runtime_context__task_name(ray_start_regular_shared):
    @ray.remote
    def task_name():
        return ray.get_runtime_context().get_task_name()

    assert ray.get(task_name.options(name="custom-task-name").remote()) == "custom-task-name"
    assert ray.get(_IdActor.remote().task_name.remote()).endswith("task_name")


def test_runtime_context__accelerator_ids_on_cpu(ray_start_regular_shared):
    @ray.remote
    def accelerators():
        return ray.get_runtime_context().get_accelerator_ids(), ray.get_gpu_ids()

    ids, gpus = ray.get(accelerators.remote())
    assert isinstance(ids, dict) and ids.get("GPU") == []
    assert all(v == [] for v in ids.values())
    assert gpus == []
    assert ray.get_gpu_ids() == []


def _id_properties():
    import warnings

    context = ray.get_runtime_context()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = {name: getattr(context, name) for name in ("job_id", "node_id", "task_id", "actor_id")}
    hexes = {name: (None if value is None else value.hex()) for name, value in ids.items()}
    kinds = {name: type(value).__name__ for name, value in ids.items()}
    deprecations = sum(issubclass(w.category, DeprecationWarning) for w in caught)
    return hexes, kinds, deprecations, _ids()


@ray.remote
def _task_id_properties():
    return _id_properties()


@ray.remote
class _IdPropertiesActor:
    def ids(self):
        return _id_properties()


def test_runtime_context__deprecated_id_properties_return_id_objects(ray_start_regular_shared):
    hexes, kinds, deprecations, ids = ray.get(_task_id_properties.remote())
    assert kinds == {"job_id": "JobID", "node_id": "NodeID", "task_id": "TaskID", "actor_id": "NoneType"}
    assert (hexes["job_id"], hexes["node_id"], hexes["task_id"]) == (ids["job"], ids["node"], ids["task"])
    assert deprecations == 4  # each property warns; the get_*_id() methods are the current API

    hexes, kinds, _, ids = ray.get(_IdPropertiesActor.remote().ids.remote())
    assert kinds["actor_id"] == "ActorID" and kinds["task_id"] == "TaskID"
    assert hexes["actor_id"] == ids["actor"] and hexes["task_id"] == ids["task"]


def test_runtime_context__id_properties_on_the_driver(ray_start_regular_shared):
    context = ray.get_runtime_context()
    with pytest.warns(DeprecationWarning):
        job_id = context.job_id
    assert isinstance(job_id, ray.JobID) and job_id.hex() == context.get_job_id()
    with pytest.warns(DeprecationWarning):
        node_id = context.node_id
    assert isinstance(node_id, ray.NodeID) and node_id.hex() == context.get_node_id()
    # task_id and actor_id are for workers only: Ray asserts so on the driver.
    with pytest.warns(DeprecationWarning), pytest.raises(AssertionError):
        context.task_id
    with pytest.warns(DeprecationWarning), pytest.raises(AssertionError):
        context.actor_id


@ray.remote
def _function_and_task_names():
    context = ray.get_runtime_context()
    return context.get_task_function_name(), context.get_task_name()


@ray.remote
class _NamedMethods:
    def names(self):
        context = ray.get_runtime_context()
        return context.get_task_function_name(), context.get_task_name()


def test_runtime_context__task_function_name_is_module_qualified(ray_start_regular_shared):
    # The function name is module.qualname and ignores the `name` option; the task name does not.
    assert ray.get(_function_and_task_names.remote()) == (
        f"{__name__}._function_and_task_names",
        "_function_and_task_names",
    )
    assert ray.get(_function_and_task_names.options(name="renamed").remote()) == (
        f"{__name__}._function_and_task_names",
        "renamed",
    )
    assert ray.get(_NamedMethods.remote().names.remote()) == (f"{__name__}._NamedMethods.names", "_NamedMethods.names")
    assert ray.get_runtime_context().get_task_function_name() is None  # the driver
