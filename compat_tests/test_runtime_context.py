"""``ray.get_runtime_context()`` in the driver, in tasks and in actors.

Mirrors Ray's test_runtime_context.py public tests (ray-api.md §1.6). The before-``init``
behaviour is in test_init.py, since it needs a stopped cluster.
"""

from __future__ import annotations

import json
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


# --- every getter in every kind of task, actor and driver -------------------------------------

_GETTERS = (
    "get_job_id", "get_node_id", "get_worker_id", "get_task_id", "get_actor_id", "get_actor_name", "get_task_name",
    "get_task_function_name", "get_assigned_resources", "get_accelerator_ids", "get_placement_group_id",
    "get_node_labels", "get_runtime_env_string", "get_session_name", "is_canceled", "get",
)
_PROPERTIES = ("namespace", "current_actor", "was_current_actor_reconstructed", "runtime_env",
               "should_capture_child_tasks_in_placement_group", "gcs_address")


def _shape(value):
    """What a getter answered, without the values that differ from run to run."""
    if value is None or isinstance(value, bool) or value == "":
        return value
    if isinstance(value, str):
        return f"hex{len(value)}" if re.fullmatch(r"[0-9a-f]{8,}", value) else "str"
    if type(value) is dict:  # a dict subclass (RuntimeEnv) is named by its type
        return {key: _shape(item) for key, item in value.items()}
    if type(value) in (list, float, int):
        return value
    return type(value).__name__


def _answers():
    import warnings

    context = ray.get_runtime_context()
    answers = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # get() is deprecated in Ray
        for name in _GETTERS + _PROPERTIES:
            try:
                value = getattr(context, name)
                answers[name] = _shape(value() if name in _GETTERS else value)
            except Exception as exc:  # noqa: BLE001 - which error is part of the answer
                answers[name] = type(exc).__name__
    answers["function_name"] = context.get_task_function_name()
    return answers


@ray.remote
def _answers_task():
    return _answers()


@ray.remote
def _answers_of_a_child():
    return ray.get(_answers_task.remote())


@ray.remote
class _Answering:
    def answers(self):
        return _answers()

    def answers_of_a_child(self):
        return ray.get(_answers_task.remote())


@ray.remote
class _AsyncAnswering:
    async def answers(self):
        return _answers()


_NO_ACCELERATORS = {kind: [] for kind in ("GPU", "TPU", "NPU", "HPU", "neuron_cores", "FURIOSA", "MBLT", "RBLN", "TTNPU")}


def _expected(kind, *, in_group=False, name=None, cpus=1.0):
    """Ray 2.60's answers in a driver, task, actor method or async actor method."""
    driver = kind == "driver"
    actor = kind in ("actor", "async actor")
    context_ids = {"job_id": "JobID", "node_id": "NodeID", "namespace": "str"}
    if not driver:
        context_ids["task_id"] = "TaskID"
    if actor:
        context_ids["actor_id"] = "ActorID"
    return {
        "get_job_id": "hex8", "get_node_id": "hex56", "get_worker_id": "hex56",
        "get_task_id": None if driver else "hex48",
        "get_actor_id": "hex32" if actor else None,
        "get_actor_name": ("str" if name else "") if actor else None,
        "get_task_name": None if driver else "str",
        "get_task_function_name": None if driver else "str",
        "get_assigned_resources": "AssertionError" if driver else ({"CPU": cpus} if cpus else {}),
        "get_accelerator_ids": _NO_ACCELERATORS,
        "get_placement_group_id": "hex36" if in_group else None,
        "get_node_labels": {"ray.io/node-id": "hex56"},
        "get_runtime_env_string": "str", "get_session_name": "str",
        "is_canceled": {"driver": "RuntimeError", "async actor": "RuntimeError"}.get(kind, False),
        "get": context_ids,
        "namespace": "str",
        "current_actor": "ActorHandle" if actor else "RuntimeError",
        "was_current_actor_reconstructed": "AssertionError" if driver else (False if actor else "AttributeError"),
        "runtime_env": "RuntimeEnv",
        "should_capture_child_tasks_in_placement_group": in_group,
        "gcs_address": "str",
    }


def _split(answers):
    answers = dict(answers)
    return answers.pop("function_name"), answers


def test_runtime_context__every_getter_answers_in_every_context(ray_start_regular_shared):
    from compat_tests._backend import scheduling_strategies, util

    here = __name__
    cases = {
        "driver": (_answers(), _expected("driver"), None),
        "task": (ray.get(_answers_task.remote()), _expected("task"), f"{here}._answers_task"),
        "child task": (ray.get(_answers_of_a_child.remote()), _expected("task"), f"{here}._answers_task"),
        "actor": (ray.get(_Answering.remote().answers.remote()), _expected("actor", cpus=0), f"{here}._Answering.answers"),
        "named actor": (ray.get(_Answering.options(name="compat-answering").remote().answers.remote()),
                        _expected("actor", name=True, cpus=0), f"{here}._Answering.answers"),
        "async actor": (ray.get(_AsyncAnswering.remote().answers.remote()), _expected("async actor", cpus=0),
                        f"{here}._AsyncAnswering.answers"),
        "task of an actor": (ray.get(_Answering.remote().answers_of_a_child.remote()), _expected("task"),
                             f"{here}._answers_task"),
    }
    group = util.placement_group([{"CPU": 1}, {"CPU": 1}])
    ray.get(group.ready())
    try:
        strategy = scheduling_strategies.PlacementGroupSchedulingStrategy(
            group, placement_group_capture_child_tasks=True
        )
        cases["task in a group"] = (ray.get(_answers_task.options(scheduling_strategy=strategy).remote()),
                                    _expected("task", in_group=True), f"{here}._answers_task")
        cases["child task in a group"] = (ray.get(_answers_of_a_child.options(scheduling_strategy=strategy).remote()),
                                          _expected("task", in_group=True), f"{here}._answers_task")
        in_group = _Answering.options(scheduling_strategy=strategy, num_cpus=1).remote()
        cases["actor in a group"] = (ray.get(in_group.answers.remote()), _expected("actor", in_group=True),
                                     f"{here}._Answering.answers")
        ray.kill(in_group)
    finally:
        util.remove_placement_group(group)
    for case, (answers, expected, function_name) in cases.items():
        got_function_name, answers = _split(answers)
        assert answers == expected, case
        assert got_function_name == function_name, case


@ray.remote
def _runtime_env_of_a_task():
    context = ray.get_runtime_context()
    return json.loads(context.get_runtime_env_string()), dict(context.runtime_env)


def test_runtime_context__runtime_env_is_the_jobs_merged_with_the_tasks(shutdown_only):
    ray.init(num_cpus=1, runtime_env={"env_vars": {"FROM_JOB": "1"}})
    context = ray.get_runtime_context()
    assert json.loads(context.get_runtime_env_string()) == {"env_vars": {"FROM_JOB": "1"}}
    assert isinstance(context.runtime_env, dict) and context.runtime_env == {"env_vars": {"FROM_JOB": "1"}}
    merged = {"env_vars": {"FROM_JOB": "1", "FROM_TASK": "2"}}
    assert ray.get(
        _runtime_env_of_a_task.options(runtime_env={"env_vars": {"FROM_TASK": "2"}}).remote()
    ) == (merged, merged)


_SCRIPT = """
import sys
import {backend} as ray

ray.init(num_cpus=1)

@ray.remote
def f():
    return ray.get_runtime_context().get_task_function_name()

@ray.remote
class C:
    def m(self):
        return ray.get_runtime_context().get_task_function_name()

print("NAMES", ray.get(f.remote()), ray.get(C.remote().m.remote()))
ray.shutdown()
"""


def test_runtime_context__task_function_name_in_a_scripts_main_module(tmp_path):
    # Code defined in the script being run is named after the script's file, not `__main__`.
    import subprocess
    import sys

    from compat_tests._backend import BACKEND

    script = tmp_path / "launcher_script.py"
    script.write_text(_SCRIPT.format(backend=BACKEND))
    finished = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert "NAMES launcher_script.f launcher_script.C.m" in finished.stdout
