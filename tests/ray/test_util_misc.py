"""Tests of the fray_ray.util package: its exports and the helpers of its private modules.

Covers as_completed and map_unordered, list_named_actors, get_node_ip_address,
inspect_serializability and custom serializers, log_once, and the unsupported names. Expectations
marked "observed" were checked against Ray 2.60.0.
"""

from __future__ import annotations

import asyncio
import copyreg
import doctest
import importlib.util
import inspect
import io
import threading
import types

import pytest

import fray_ray as ray
import fray_ray.util as util
from fray_ray.util import _cluster_info, _completion, _log_once, _serialization
from fray_ray.util._serialization import FailureTuple


@pytest.fixture(scope="module", autouse=True)
def session():
    ray.init(local_mode=True, num_cpus=4)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Gate:
    def __init__(self):
        self.opened = asyncio.Event()

    async def wait(self):
        await self.opened.wait()

    async def open(self):
        self.opened.set()


@ray.remote(num_cpus=0)
class Named:
    def ping(self):
        return "pong"


@ray.remote
def square(x):
    return x * x


@ray.remote(num_cpus=0)
def after(gate, value):
    ray.get(gate.wait.remote())
    return value


@ray.remote
def fail(message):
    raise ValueError(message)


@pytest.fixture
def gate():
    gate = Gate.remote()
    yield gate
    ray.get(gate.open.remote())


def _module_exists(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# ---- exports -------------------------------------------------------------------------------

# Observed: ray.util.__all__ in Ray 2.60.0.
RAY_UTIL_ALL = [
    "accelerators", "ActorPool", "as_completed", "disable_log_once_globally", "enable_periodic_logging",
    "iter", "log_once", "pdb", "placement_group", "placement_group_table", "get_placement_group",
    "get_current_placement_group", "get_node_instance_id", "get_node_ip_address", "map_unordered",
    "remove_placement_group", "ray_debugpy", "inspect_serializability", "collective", "connect",
    "disconnect", "register_serializer", "deregister_serializer", "list_named_actors",
]
PLACEMENT_GROUP_NAMES = {
    "placement_group", "placement_group_table", "get_placement_group", "get_current_placement_group",
    "remove_placement_group", "PlacementGroup",
}


def test_every_name_of_ray_util_all_is_there():
    have_placement_groups = _module_exists("fray_ray.util.placement_group")
    for name in RAY_UTIL_ALL:
        if name in PLACEMENT_GROUP_NAMES and not have_placement_groups:
            continue
        assert getattr(util, name) is not None, name
        assert name in dir(util)


def test_public_functions_show_the_public_module():
    assert util.as_completed.__module__ == "fray_ray.util"
    assert repr(util.map_unordered).startswith("<function map_unordered")
    assert util.ActorPool is util.actor_pool.ActorPool
    assert util.ActorPool.__module__ == "fray_ray.util.actor_pool"


def test_submodules_are_importable_and_lazy_attributes():
    import fray_ray.util.queue

    assert util.queue is fray_ray.util.queue
    assert util.scheduling_strategies.PlacementGroupSchedulingStrategy is not None
    assert util.accelerators.NVIDIA_H100 == "H100"
    with pytest.raises(AttributeError):
        util.no_such_name  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fray_ray.util.no_such_module")


def test_signatures_match_ray():
    # Observed with inspect.signature on Ray 2.60.0.
    def shape(function):
        return [(p.name, p.kind.name, p.default) for p in inspect.signature(function).parameters.values()]

    empty = inspect.Parameter.empty
    assert shape(util.as_completed) == [
        ("refs", "POSITIONAL_OR_KEYWORD", empty),
        ("chunk_size", "KEYWORD_ONLY", 10),
        ("yield_obj_refs", "KEYWORD_ONLY", False),
        ("kwargs", "VAR_KEYWORD", empty),
    ]
    assert shape(util.map_unordered) == [
        ("fn", "POSITIONAL_OR_KEYWORD", empty),
        ("items", "POSITIONAL_OR_KEYWORD", empty),
        ("backpressure_size", "KEYWORD_ONLY", 100),
        ("chunk_size", "KEYWORD_ONLY", 10),
        ("yield_obj_refs", "KEYWORD_ONLY", False),
        ("kwargs", "VAR_KEYWORD", empty),
    ]
    assert shape(util.list_named_actors) == [("all_namespaces", "POSITIONAL_OR_KEYWORD", False)]
    assert shape(util.get_node_ip_address) == [("address", "POSITIONAL_OR_KEYWORD", None)]
    assert [p[0] for p in shape(util.inspect_serializability)] == ["base_obj", "name", "depth", "print_file"]
    assert shape(util.register_serializer)[1:] == [
        ("serializer", "KEYWORD_ONLY", empty),
        ("deserializer", "KEYWORD_ONLY", empty),
    ]


@pytest.mark.skipif(not _module_exists("fray_ray.util.placement_group"), reason="placement_group.py not written yet")
def test_placement_group_stays_the_function_after_importing_the_submodule():
    # Observed: in Ray, ray.util.placement_group is the function, even via `import ... as`.
    import fray_ray.util.placement_group as imported

    assert callable(imported) and callable(util.placement_group)
    assert util.placement_group is importlib.import_module("fray_ray.util.placement_group").placement_group
    assert util.PlacementGroup is importlib.import_module("fray_ray.util.placement_group").PlacementGroup


# ---- as_completed and map_unordered --------------------------------------------------------


def test_as_completed_values_and_refs():
    refs = [square.remote(i) for i in range(25)]
    assert sorted(util.as_completed(refs)) == [i * i for i in range(25)]
    assert set(util.as_completed(refs, yield_obj_refs=True)) == set(refs)
    assert list(util.as_completed([])) == []
    assert list(util.as_completed(tuple(refs[:2]))) == [0, 1]  # any iterable of refs


def test_as_completed_yields_finished_chunks_first(gate):
    refs = [square.remote(1), after.remote(gate, "slow"), square.remote(2)]
    stream = util.as_completed(refs, chunk_size=2)
    assert [next(stream), next(stream)] == [1, 4]  # one chunk, in the order of refs
    ray.get(gate.open.remote())
    assert list(stream) == ["slow"]


def test_as_completed_raises_a_failed_ref_with_its_chunk():
    # Observed: the whole chunk is fetched at once, so its good values are not yielded first.
    refs = [square.remote(3), fail.remote("in chunk")]
    ray.wait(refs, num_returns=2)
    with pytest.raises(ValueError, match="in chunk"):
        next(util.as_completed(refs, chunk_size=2))


def test_as_completed_checks_arguments_when_called():
    ref = square.remote(1)
    with pytest.raises(ValueError):
        util.as_completed([ref], chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size"):
        util.as_completed([ref], num_returns=1)
    with pytest.raises(TypeError):
        util.as_completed([1])
    with pytest.raises(TypeError):
        util.as_completed(ref)
    with pytest.raises(ValueError):
        list(util.as_completed([ref, ref]))  # duplicates, from wait
    with pytest.raises(TypeError):
        list(util.as_completed([ref], no_such_wait_option=1))
    assert list(util.as_completed([ref], timeout=30, fetch_local=True)) == [1]


class Recording:
    """Stands in for a remote function and records which items were started."""

    def __init__(self, function):
        self.function = function
        self.started = []

    def remote(self, item):
        self.started.append(item)
        return self.function.remote(item)


def test_map_unordered_values_and_refs():
    assert sorted(util.map_unordered(square, range(30))) == [i * i for i in range(30)]
    assert sorted(util.map_unordered(square, range(30), backpressure_size=3, chunk_size=2)) == [
        i * i for i in range(30)
    ]
    assert sorted(util.map_unordered(square, range(5), backpressure_size=None)) == [0, 1, 4, 9, 16]
    refs = list(util.map_unordered(square, range(3), yield_obj_refs=True))
    assert sorted(ray.get(refs)) == [0, 1, 4]
    assert list(util.map_unordered(square, [])) == []


def test_map_unordered_starts_tasks_while_iterating_within_the_window():
    # Observed: nothing starts before the first next(); then at most backpressure_size run.
    fn = Recording(square)
    results = util.map_unordered(fn, range(6), backpressure_size=2, chunk_size=1)
    assert fn.started == []
    next(results)
    assert fn.started == [0, 1]
    next(results)
    assert fn.started == [0, 1, 2]
    assert len(list(results)) == 4
    assert fn.started == list(range(6))


def test_map_unordered_errors_and_arguments():
    with pytest.raises(ValueError, match="boom"):
        list(util.map_unordered(fail, ["boom"]))
    for bad in ({"backpressure_size": 0}, {"backpressure_size": -1}, {"chunk_size": 0}, {"num_returns": 2}):
        with pytest.raises(ValueError):
            util.map_unordered(square, [1], **bad)


# ---- cluster information -------------------------------------------------------------------


def test_list_named_actors():
    here = Named.options(name="util-misc-here").remote()
    there = Named.options(name="util-misc-there", namespace="util-misc-elsewhere").remote()
    ray.get([here.ping.remote(), there.ping.remote()])
    names = util.list_named_actors()
    assert "util-misc-here" in names and "util-misc-there" not in names
    everything = util.list_named_actors(all_namespaces=True)
    assert {"name": "util-misc-there", "namespace": "util-misc-elsewhere"} in everything
    assert {"name": "util-misc-here", "namespace": ray.get_runtime_context().namespace} in everything
    ray.kill(here)
    ray.kill(there)


def test_get_node_ip_address(monkeypatch):
    monkeypatch.delenv("IRIS_ADVERTISE_HOST", raising=False)
    assert util.get_node_ip_address() == "127.0.0.1"
    assert util.get_node_ip_address() == ray.nodes()[0]["NodeManagerAddress"]
    assert ray.get(ray.remote(util.get_node_ip_address).remote()) == "127.0.0.1"
    monkeypatch.setenv("IRIS_ADVERTISE_HOST", "10.1.2.3")
    assert util.get_node_ip_address() == "10.1.2.3"
    assert util.get_node_ip_address(address="10.0.0.1:6379") == "10.1.2.3"


def test_get_node_instance_id():
    assert util.get_node_instance_id() == ""


# ---- serialization -------------------------------------------------------------------------

LOCK = threading.Lock()


class Holder:
    def __init__(self):
        self.value = 1
        self.lock = threading.Lock()


class Outer:
    def __init__(self):
        self.inner = Holder()


def uses_global_lock():
    return LOCK.locked()


def check(obj, **kwargs):
    out = io.StringIO()
    ok, failures = util.inspect_serializability(obj, print_file=out, **kwargs)
    return ok, {failure.path: failure for failure in failures}, out.getvalue()


def test_inspect_serializability_of_a_fine_object():
    ok, failures, report = check({"a": [1, 2.0, "three"]}, name="data")
    assert ok and failures == {}
    assert "data can be serialized" in report


def test_inspect_serializability_finds_the_attribute():
    outer = Outer()
    ok, failures, report = check(outer, name="outer")
    assert not ok
    assert list(failures) == [("outer", "inner", "lock")]
    failure = failures[("outer", "inner", "lock")]
    assert failure.obj is outer.inner.lock and failure.parent is outer.inner and failure.name == "lock"
    assert "outer -> inner -> lock" in report


def test_inspect_serializability_depth_limits_the_search():
    ok, failures, _ = check(Outer(), name="outer", depth=1)
    assert not ok and list(failures) == [("outer", "inner")]
    ok, failures, _ = check(Outer(), depth=0)
    assert not ok and list(failures) == [()]
    assert failures[()].name == "unknown" and failures[()].parent is None


def test_inspect_serializability_looks_into_functions_and_containers():
    lock = threading.Lock()

    def closure():
        return lock

    ok, failures, _ = check(closure, name="closure")
    assert not ok and list(failures) == [("closure", "lock")]
    ok, _, _ = check(uses_global_lock)
    assert ok  # importable: cloudpickle pickles it by reference, globals and all
    # The same code as a function of __main__ is pickled by value, with the globals it uses.
    by_value = types.FunctionType(uses_global_lock.__code__, {"__name__": "__main__", "LOCK": LOCK}, "fn")
    ok, failures, _ = check(by_value, name="fn")
    assert not ok and list(failures) == [("fn", "LOCK")]
    ok, failures, _ = check([1, {"key": lock}], name="items")
    assert not ok and list(failures) == [("items", "[1]", "['key']")]


def test_inspect_serializability_survives_cycles_and_prints_to_stdout(capsys):
    holder = Holder()
    holder.me = holder
    ok, failures = util.inspect_serializability(holder)
    assert not ok and {f.path for f in failures} == {("lock",)}
    assert "lock" in capsys.readouterr().out
    first = FailureTuple(object(), (), None)
    assert len({first, FailureTuple(first.obj, (), None)}) == 2  # compared by identity


class Guarded:
    def __init__(self, value):
        self.value = value
        self.lock = threading.Lock()


def test_register_serializer_round_trips_through_put_and_tasks():
    with pytest.raises(TypeError):
        ray.put(Guarded(1))
    util.register_serializer(Guarded, serializer=lambda g: g.value, deserializer=Guarded)
    try:
        assert ray.get(ray.put(Guarded(7))).value == 7
        assert ray.get(ray.remote(lambda g: g.value).remote(Guarded(8))) == 8
    finally:
        util.deregister_serializer(Guarded)
    with pytest.raises(TypeError):
        ray.put(Guarded(1))
    util.deregister_serializer(Guarded)  # a second time does nothing


def test_deregister_leaves_other_copyreg_entries_alone():
    class Foreign:
        pass

    def reduce(obj):
        return Foreign, ()

    copyreg.pickle(Foreign, reduce)
    try:
        util.deregister_serializer(Foreign)
        assert copyreg.dispatch_table[Foreign] is reduce
    finally:
        del copyreg.dispatch_table[Foreign]
    with pytest.raises(TypeError):
        util.register_serializer("not a class", serializer=str, deserializer=str)


# ---- log_once ------------------------------------------------------------------------------


@pytest.fixture
def fresh_log_once(monkeypatch):
    """Run with log_once's process-wide state reset, and restore it afterwards."""
    monkeypatch.setattr(_log_once, "_mode", _log_once._Mode.ONCE)
    monkeypatch.setattr(_log_once, "_last_true", {})
    now = [1000.0]
    monkeypatch.setattr(_log_once, "_clock", lambda: now[0])
    return now


def test_log_once(fresh_log_once):
    # Observed: True, False, then True for a new key; periodic mode re-arms keys; disabled
    # mode answers False.
    assert [util.log_once("a"), util.log_once("a"), util.log_once("b")] == [True, False, True]
    util.enable_periodic_logging()
    assert not util.log_once("a")
    fresh_log_once[0] += _log_once.PERIOD_S
    assert util.log_once("a") and not util.log_once("a")
    util.disable_log_once_globally()
    assert not util.log_once("c")


# ---- unsupported parts ---------------------------------------------------------------------


def test_unsupported_modules_import_and_fail_when_called():
    import fray_ray.util.collective as collective
    import fray_ray.util.collective.types as collective_types
    from fray_ray.util.iter import from_items

    with pytest.raises(NotImplementedError, match=r"collective\.allreduce.*torch\.distributed"):
        collective.allreduce([1.0])
    with pytest.raises(NotImplementedError):
        collective_types.Backend()
    with pytest.raises(NotImplementedError, match=r"iter\.from_items"):
        from_items([1, 2])
    with pytest.raises(NotImplementedError, match="breakpoint"):
        util.pdb.set_trace()
    with pytest.raises(AttributeError):
        collective._private_probe  # noqa: B018
    assert util.collective is collective


def test_ray_client_functions_fail_when_called():
    with pytest.raises(NotImplementedError, match="iris://"):
        util.connect("ray://head:10001")
    with pytest.raises(NotImplementedError):
        util.disconnect()


# ---- docstring examples --------------------------------------------------------------------


@pytest.mark.parametrize("module", [util, _completion, _cluster_info, _serialization, _log_once])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
