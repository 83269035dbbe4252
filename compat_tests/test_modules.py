"""Modules and names Ray programs import: `ray.cloudpickle`, `ray.types`, `ray.ray_constants`,
`ray._raylet`, `ray.runtime_env`, `ray.util.*` helpers, id types, `__ray_ready__`,
`ObjectRef._on_completed`, and every core module path the module map says is provided.

A missing module makes a whole file of user code fail at import, so each path is imported here.
"""

from __future__ import annotations

import importlib
import pickle
import threading
import warnings

import pytest

from compat_tests._backend import BACKEND, ray

#: Ray 2.60 core module paths (the part after `ray`) that import on both backends.
IMPORTABLE = [
    "actor", "cloudpickle", "cloudpickle.cloudpickle", "cloudpickle.cloudpickle_fast", "cloudpickle.compat",
    "cloudpickle.py_pickle", "cluster_utils", "exceptions", "experimental", "remote_function", "runtime_context",
    "runtime_env", "runtime_env.runtime_env", "types", "util", "util.accelerators", "util.accelerators.accelerators",
    "util.actor_pool", "util.annotations", "util.check_serialize", "util.debug", "util.helpers",
    "util.multiprocessing", "util.multiprocessing.pool",
    "util.placement_group", "util.queue", "util.scheduling_strategies", "util.serialization", "util.state",
    "util.state.api", "util.state.common", "util.state.exception", "util.tpu",
    # stand-ins on fray_ray: they import, calls raise NotImplementedError
    "util.client", "util.collective", "util.metrics", "util.rpdb",
    "_raylet",
]


def _module(relative: str):
    return importlib.import_module(f"{BACKEND}.{relative}")


@pytest.mark.parametrize("relative", IMPORTABLE)
def test_modules__core_module_path_imports(relative):
    assert _module(relative).__name__ == f"{BACKEND}.{relative}"


# --- ray.cloudpickle ------------------------------------------------------------------------


def test_modules__cloudpickle_round_trips_closures():
    cloudpickle = _module("cloudpickle")
    base = 40

    def add(x):
        return x + base

    payload = cloudpickle.dumps(add)
    assert pickle.loads(payload)(2) == 42  # plain pickle reads what cloudpickle writes
    assert cloudpickle.loads(payload)(1) == 41
    assert ray.cloudpickle.dumps is cloudpickle.dumps
    assert issubclass(cloudpickle.CloudPickler, pickle.Pickler)


def test_modules__cloudpickle_submodules():
    compat = _module("cloudpickle.compat")
    py_pickle = _module("cloudpickle.py_pickle")
    assert compat.pickle.loads(compat.pickle.dumps([1, 2])) == [1, 2]
    assert py_pickle.loads(pickle.dumps({"a": 1})) == {"a": 1}


def test_modules__cloudpickle_dumps_debug_names_the_failure():
    cloudpickle = _module("cloudpickle")
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"ray\.cloudpickle\.dumps"):
        cloudpickle.dumps_debug(lock)


# --- ray.types and ObjectRef[T] -------------------------------------------------------------


def test_modules__types_object_ref_is_generic():
    types_module = _module("types")

    assert types_module.ObjectRef[int].__args__ == (int,)
    assert ray.ObjectRef[str].__args__ == (str,)  # the refs calls return can be subscripted too


# --- ray.ray_constants ----------------------------------------------------------------------

#: A few public constants and the values Ray 2.60 gives them.
CONSTANTS = {
    "ID_SIZE": 28,
    "RAY_ADDRESS_ENVIRONMENT_VARIABLE": "RAY_ADDRESS",
    "RAY_NAMESPACE_ENVIRONMENT_VARIABLE": "RAY_NAMESPACE",
    "DEFAULT_OBJECT_STORE_MEMORY_PROPORTION": 0.3,
    "OBJECT_STORE_MINIMUM_MEMORY_BYTES": 75 * 1024 * 1024,
    "DEFAULT_TASK_MAX_RETRIES": 3,
    "DEFAULT_ACTOR_METHOD_NUM_RETURN_VALS": 1,
    "DEFAULT_MAX_CONCURRENCY_THREADED": 1,
    "FUNCTION_SIZE_WARN_THRESHOLD": 10**7,
    "FUNCTION_SIZE_ERROR_THRESHOLD": 10**8,
    "MIN_RESOURCE_GRANULARITY": 0.0001,
    "NEURON_CORES": "neuron_cores",
    "LOGGER_LEVEL": "info",
    "LOGGER_FORMAT": "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s",
}


def test_modules__ray_constants_values():
    from compat_tests._backend import load

    constants = load().ray_constants  # `from ray import ray_constants`, as programs write it
    for name, value in CONSTANTS.items():
        assert getattr(constants, name) == value, name
    assert set(constants.DEFAULT_RESOURCES) == {"CPU", "GPU", "memory", "object_store_memory"}


def test_modules__ray_constants_env_helpers(monkeypatch):
    constants = ray.ray_constants
    monkeypatch.setenv("COMPAT_INT", "7")
    monkeypatch.setenv("COMPAT_BOOL", "true")
    monkeypatch.setenv("COMPAT_FLOAT", "2.5")
    monkeypatch.delenv("COMPAT_UNSET", raising=False)
    assert constants.env_integer("COMPAT_INT", 1) == 7
    assert constants.env_integer("COMPAT_UNSET", 1) == 1
    assert constants.env_bool("COMPAT_BOOL", False) is True
    assert constants.env_float("COMPAT_FLOAT", 0.0) == 2.5
    monkeypatch.setenv("COMPAT_INT", "seven")
    assert constants.env_integer("COMPAT_INT", 1) == 1  # not an integer: the default (Ray warns)
    monkeypatch.setenv("COMPAT_FLOAT", "x")
    assert constants.env_float("COMPAT_FLOAT", 0.5) == 0.5


# --- ray._raylet and the id types -----------------------------------------------------------


def test_modules__raylet_names_are_the_public_ones():
    raylet = _module("_raylet")
    assert raylet.ObjectRef is ray.ObjectRef
    assert raylet.ObjectRefGenerator is ray.ObjectRefGenerator
    assert raylet.DynamicObjectRefGenerator is ray.DynamicObjectRefGenerator
    assert raylet.StreamingObjectRefGenerator is raylet.ObjectRefGenerator
    assert raylet.ObjectID is ray.ObjectID
    assert raylet.NodeID is ray.NodeID and raylet.ActorID is ray.ActorID


def test_modules__id_types():
    node = ray.NodeID.from_random()
    assert len(node.hex()) == 56 and len(node.binary()) == 28
    assert ray.NodeID.from_hex(node.hex()) == node
    assert hash(ray.NodeID(node.binary())) == hash(node)
    assert ray.NodeID.nil().is_nil() and not node.is_nil()
    assert ray.ActorID.size() == 16 and ray.TaskID.size() == 24 and ray.JobID.size() == 4
    assert ray.JobID.from_int(5).int() == 5
    with pytest.raises(ValueError):
        ray.NodeID(b"short")


@ray.remote
def _count(n):
    for i in range(n):  # noqa: UP028 (Ray 2.60 sends into remote generators; a delegated range iterator cannot take it)
        yield i


def test_modules__streaming_generator_is_the_raylet_class(ray_start_regular_shared):
    generator = _count.options(num_returns="streaming").remote(3)
    assert isinstance(generator, _module("_raylet").ObjectRefGenerator)
    assert [ray.get(ref) for ref in generator] == [0, 1, 2]


def test_modules__dynamic_generator_value(ray_start_regular_shared):
    dynamic = ray.get(_count.options(num_returns="dynamic").remote(3))
    assert isinstance(dynamic, ray.DynamicObjectRefGenerator)
    assert [ray.get(ref) for ref in dynamic] == [0, 1, 2]


# --- built-in actor methods and ObjectRef._on_completed -------------------------------------


@ray.remote(num_cpus=0)
class _Holder:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


@ray.remote(num_cpus=0)
class _AsyncHolder:
    async def get(self):
        return 1


def test_modules__actor_ray_ready(ray_start_regular_shared):
    holder, async_holder = _Holder.remote(3), _AsyncHolder.remote()
    assert ray.get([holder.__ray_ready__.remote(), async_holder.__ray_ready__.remote()]) == [True, True]
    ready, _ = ray.wait([holder.__ray_ready__.remote()], timeout=60)
    assert len(ready) == 1


def test_modules__actor_ray_call(ray_start_regular_shared):
    holder = _Holder.remote(40)
    assert ray.get(holder.__ray_call__.remote(lambda self, extra: self.value + extra, 2)) == 42


@ray.remote
def _fail():
    raise ValueError("on purpose")


def test_modules__on_completed_gets_the_value(ray_start_regular_shared):
    seen, done = [], threading.Event()
    ref = ray.put(41)  # held until the callback ran: Ray 2.60 aborts the driver if it is freed first
    ref._on_completed(lambda value: (seen.append(value), done.set()))
    assert done.wait(60)
    assert seen == [41]
    del ref


def test_modules__on_completed_gets_the_error(ray_start_regular_shared):
    seen, done = [], threading.Event()
    ref = _fail.remote()
    ref._on_completed(lambda value: (seen.append(value), done.set()))
    assert done.wait(60)
    assert isinstance(seen[0], ray.exceptions.RayTaskError)
    assert "on purpose" in str(seen[0])
    del ref


# --- ray.runtime_env ------------------------------------------------------------------------


@ray.remote
def _env_var(name):
    import os

    return os.environ.get(name)


def test_modules__runtime_env_classes(ray_start_regular_shared):
    runtime_env_module = _module("runtime_env")
    env = runtime_env_module.RuntimeEnv(env_vars={"COMPAT_MODULES_VAR": "yes"},
                                        config=runtime_env_module.RuntimeEnvConfig(setup_timeout_seconds=120))
    assert isinstance(env, dict) and env.env_vars() == {"COMPAT_MODULES_VAR": "yes"}
    assert env["config"]["setup_timeout_seconds"] == 120
    assert ray.get(_env_var.options(runtime_env=env).remote("COMPAT_MODULES_VAR")) == "yes"
    with pytest.raises(TypeError):
        runtime_env_module.RuntimeEnvConfig(setup_timeout_seconds="60")


# --- ray.util helpers -------------------------------------------------------------------------


def test_modules__util_annotations():
    annotations = _module("util.annotations")

    @annotations.PublicAPI(stability="beta")
    def public():
        return 1

    @annotations.DeveloperAPI
    class Developer:
        pass

    @annotations.Deprecated(message="use something else", warning=True)
    def old():
        return 2

    assert public() == 1 and Developer() is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert old() == 2
    assert any(issubclass(w.category, annotations.RayDeprecationWarning) for w in caught)
    assert issubclass(annotations.RayDeprecationWarning, DeprecationWarning)


def test_modules__util_helper_modules(ray_start_regular_shared):
    debug = _module("util.debug")
    assert debug.log_once("compat-modules-key") is True
    assert debug.log_once("compat-modules-key") is False
    assert callable(_module("util.serialization").register_serializer)
    assert callable(_module("util.check_serialize").inspect_serializability)
    refs = [ray.put(i) for i in range(3)]
    assert sorted(_module("util.helpers").as_completed(refs)) == [0, 1, 2]
    assert _module("util.accelerators.accelerators").NVIDIA_TESLA_V100 == "V100"


def test_modules__experimental_queue_is_the_old_path():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the old path warns on first import
        queue_module = _module("experimental.queue")
    assert queue_module.Queue is _module("util.queue").Queue
