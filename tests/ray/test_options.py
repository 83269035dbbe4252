"""Tests of fray_ray._private.options (and the accelerator names used with `accelerator_type=`).

Expectations marked "observed" come from running Ray 2.60.0 (python 3.11) on the same inputs:
`ray.remote(**opts)(f)` / `ray.remote(**opts)(C)` / `.options(**opts)` / `ray.method(...)`,
recording the exception type and message, or the warning, each one produced.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pickle
import warnings
from typing import Any

import pytest

import fray_ray.util.accelerators as accelerators
from fray_ray._private.options import (
    ACTOR_OPTION_KEYS,
    ALL_OPTION_KEYS,
    METHOD_OPTION_KEYS,
    TASK_OPTION_KEYS,
    UNSET,
    ActorOptions,
    MethodOptions,
    TaskOptions,
    check_decorator_options,
    check_remote_target,
    is_async_actor_class,
    is_generator_function,
    split_method_args,
    split_remote_args,
    validate_actor_options,
    validate_method_options,
    validate_task_options,
)
from fray_ray.util.scheduling_strategies import (
    In,
    NodeAffinitySchedulingStrategy,
    NodeLabelSchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

COMMON = [
    "label_selector", "fallback_strategy", "accelerator_type", "memory", "name", "num_cpus",
    "num_gpus", "object_store_memory", "placement_group", "placement_group_bundle_index",
    "placement_group_capture_child_tasks", "resources", "runtime_env", "scheduling_strategy",
    "enable_task_events", "_labels",
]
# Observed: the "Valid ones are [...]" lists of Ray 2.60's unknown-keyword errors.
RAY_TASK_KEYS = COMMON + [
    "max_calls", "max_retries", "num_returns", "retry_exceptions",
    "_generator_backpressure_num_objects", "_num_objects_per_yield",
]
RAY_ACTOR_KEYS = COMMON + [
    "concurrency_groups", "enable_tensor_transport", "lifetime", "max_concurrency",
    "max_restarts", "max_task_retries", "max_pending_calls", "namespace", "get_if_exists",
    "allow_out_of_order_execution", "_actor_generator_backpressure_num_objects",
]
RAY_METHOD_KEYS = [
    "num_returns", "concurrency_group", "max_task_retries", "retry_exceptions",
    "_generator_backpressure_num_objects", "_num_objects_per_yield", "enable_task_events",
    "tensor_transport",
]


def test_key_tables_match_ray() -> None:
    assert list(TASK_OPTION_KEYS) == RAY_TASK_KEYS
    assert list(ACTOR_OPTION_KEYS) == RAY_ACTOR_KEYS
    assert list(METHOD_OPTION_KEYS) == RAY_METHOD_KEYS
    # Observed: the order of the list in Ray's "@ray.remote decorator must be applied..." error.
    assert list(ALL_OPTION_KEYS[:8]) == [
        "max_calls", "max_retries", "num_cpus", "num_returns", "object_store_memory",
        "retry_exceptions", "_generator_backpressure_num_objects", "_num_objects_per_yield",
    ]
    assert set(ALL_OPTION_KEYS) == set(RAY_TASK_KEYS) | set(RAY_ACTOR_KEYS)


def test_unknown_keyword_messages_match_ray() -> None:
    with pytest.raises(ValueError) as task_error:
        validate_task_options({"foo": 1})
    assert str(task_error.value) == (
        f"Invalid option keyword foo for remote functions. Valid ones are {RAY_TASK_KEYS}."
    )
    with pytest.raises(ValueError) as actor_error:
        validate_actor_options({"max_retries": 1})
    assert str(actor_error.value) == (
        f"Invalid option keyword max_retries for actors. Valid ones are {RAY_ACTOR_KEYS}."
    )


T, G, A = "task", "generator", "actor"

# (kind, options, exception type, exact message) — all observed with Ray 2.60.0.
RAY_ERRORS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    (T, {"num_cpus": "a"}, TypeError,
     "The type of keyword 'num_cpus' must be (<class 'float'>, <class 'int'>, <class "
     "'NoneType'>), but received type <class 'str'>"),
    (T, {"num_cpus": -1}, ValueError, "The quantity of resource num_cpus cannot be negative"),
    (A, {"num_cpus": -1}, ValueError, "The quantity of resource num_cpus cannot be negative"),
    (T, {"num_cpus": 0.00001}, ValueError,
     "The precision of the fractional quantity of resource num_cpus cannot go beyond 0.0001"),
    (T, {"num_gpus": -1}, ValueError, "The quantity of resource num_gpus cannot be negative"),
    (T, {"memory": -1}, ValueError, "The quantity of resource memory cannot be negative"),
    (T, {"object_store_memory": 0}, ValueError,
     "Setting 'object_store_memory' is not implemented for tasks"),
    (T, {"object_store_memory": 1.5}, TypeError,
     "The type of keyword 'object_store_memory' must be (<class 'int'>, <class 'NoneType'>), "
     "but received type <class 'float'>"),
    (A, {"object_store_memory": -1}, ValueError,
     "The keyword 'object_store_memory' only accepts None, 0 or a positive integer."),
    (T, {"resources": {"CPU": 1}}, ValueError,
     "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' in 'resources' "
     "keyword"),
    (A, {"resources": {"GPU": 1}}, ValueError,
     "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' in 'resources' "
     "keyword"),
    (T, {"resources": {"X": -1}}, ValueError, "The quantity of resource X cannot be negative"),
    (T, {"resources": [("X", 1)]}, TypeError,
     "The type of keyword 'resources' must be (<class 'dict'>, <class 'NoneType'>), but "
     "received type <class 'list'>"),
    (T, {"max_retries": -2}, ValueError,
     "The keyword 'max_retries' only accepts None, 0, -1 or a positive integer, where -1 "
     "represents infinity."),
    (T, {"max_retries": 1.5}, TypeError,
     "The type of keyword 'max_retries' must be (<class 'int'>, <class 'NoneType'>), but "
     "received type <class 'float'>"),
    (T, {"num_returns": 1.0}, TypeError,
     "The type of keyword 'num_returns' must be (<class 'int'>, <class 'str'>, <class "
     "'NoneType'>), but received type <class 'float'>"),
    (T, {"num_returns": "streaming"}, ValueError,
     "num_returns='streaming' can only be used with generator functions (functions that use "
     "'yield'). The decorated function is not a generator function."),
    (T, {"retry_exceptions": [int]}, ValueError,
     "retry_exceptions must be either a boolean or a list of exceptions"),
    (T, {"retry_exceptions": None}, TypeError,
     "The type of keyword 'retry_exceptions' must be (<class 'bool'>, <class 'list'>, <class "
     "'tuple'>), but received type <class 'NoneType'>"),
    (T, {"max_calls": -1}, ValueError,
     "The keyword 'max_calls' only accepts None, 0 or a positive integer."),
    (T, {"name": 1}, TypeError,
     "The type of keyword 'name' must be (<class 'str'>, <class 'NoneType'>), but received "
     "type <class 'int'>"),
    (T, {"runtime_env": 1}, TypeError,
     "The type of keyword 'runtime_env' must be (<class 'dict'>, <class 'NoneType'>), but "
     "received type <class 'int'>"),
    (T, {"runtime_env": {"env_vars": {"A": 1}}}, TypeError,
     "runtime_env['env_vars'] must be of type Dict[str, str], but the value 1 is of type "
     "<class 'int'>"),
    (T, {"runtime_env": {"env_vars": {1: "a"}}}, TypeError,
     "runtime_env['env_vars'] must be of type Dict[str, str], but the key 1 is of type "
     "<class 'int'>"),
    (T, {"runtime_env": {"env_vars": ["A"]}}, TypeError,
     "runtime_env['env_vars'] must be of type Dict[str, str], got <class 'list'>"),
    (T, {"runtime_env": {"pip": 1}}, TypeError,
     "runtime_env['pip'] must be of type str or List[str], got <class 'int'>"),
    (T, {"enable_task_events": 1}, TypeError,
     "The type of keyword 'enable_task_events' must be <class 'bool'>, but received type "
     "<class 'int'>"),
    (T, {"label_selector": {"a b": "c"}}, ValueError,
     "Invalid label key name `a b`. Name must be 63 chars or less beginning and ending with an "
     "alphanumeric character ([a-z0-9A-Z]) with dashes (-), underscores (_),dots (.), and "
     "alphanumerics between."),
    (T, {"label_selector": {"a/b/c": "d"}}, ValueError,
     "Invalid label key prefix `a/b`. Prefix must be a series of DNS labels separated by dots "
     "(.), not longer than 253 characters in total."),
    (T, {"label_selector": {"a": "in(b"}}, ValueError,
     "Invalid label selector value `in(b`. The label selector value should contain optional "
     "operators and a label value. Supported operators are: ! and {'in'}. Value must be 63 "
     "chars or less beginning and ending with an alphanumeric character ([a-z0-9A-Z]) with "
     "dashes (-), underscores (_),dots (.), and alphanumerics between."),
    (T, {"fallback_strategy": [1]}, ValueError,
     "Each element in fallback_strategy must be a dictionary."),
    (T, {"fallback_strategy": [{"x": 1}]}, ValueError,
     "Unsupported option found: 'x'. Only ['label_selector'] is currently supported."),
    (T, {"fallback_strategy": [{"label_selector": 1}]}, ValueError,
     'The value of "label_selector" must be a dictionary.'),
    (T, {"placement_group_bundle_index": "a"}, TypeError,
     "The type of keyword 'placement_group_bundle_index' must be <class 'int'>, but received "
     "type <class 'str'>"),
    (T, {"placement_group_capture_child_tasks": 1}, TypeError,
     "The type of keyword 'placement_group_capture_child_tasks' must be (<class 'bool'>, "
     "<class 'NoneType'>), but received type <class 'int'>"),
    (T, {"_generator_backpressure_num_objects": 0}, ValueError,
     "_generator_backpressure_num_objects=0 is not allowed. Use a value > 0. If the value is "
     "equal to 1, the behavior is identical to Python generator (generator 1 object whenever "
     "`next` is called). Use -1 to disable this feature. "),
    (T, {"_num_objects_per_yield": 0}, ValueError,
     "_num_objects_per_yield is a private streaming generator option that must be set to a "
     "positive integer."),
    (A, {"_actor_generator_backpressure_num_objects": 0}, ValueError,
     "_actor_generator_backpressure_num_objects must be > 0 to cap the actor's total "
     "unconsumed generator objects, or -1 to disable. Got 0."),
    (A, {"max_concurrency": -1}, ValueError,
     "The keyword 'max_concurrency' only accepts None, 0 or a positive integer."),
    (A, {"max_concurrency": 1.5}, TypeError,
     "The type of keyword 'max_concurrency' must be (<class 'int'>, <class 'NoneType'>), but "
     "received type <class 'float'>"),
    (A, {"max_restarts": -2}, ValueError,
     "The keyword 'max_restarts' only accepts None, 0, -1 or a positive integer, where -1 "
     "represents infinity."),
    (A, {"max_task_retries": -2}, ValueError,
     "The keyword 'max_task_retries' only accepts None, 0, -1 or a positive integer, where -1 "
     "represents infinity."),
    (A, {"max_pending_calls": -2}, ValueError,
     "The keyword 'max_pending_calls' only accepts None, 0, -1 or a positive integer, where -1 "
     "represents infinity."),
    (A, {"lifetime": "bogus"}, ValueError,
     "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."),
    (A, {"lifetime": 1}, TypeError,
     "The type of keyword 'lifetime' must be (<class 'str'>, <class 'NoneType'>), but "
     "received type <class 'int'>"),
    (A, {"namespace": 1}, TypeError,
     "The type of keyword 'namespace' must be (<class 'str'>, <class 'NoneType'>), but "
     "received type <class 'int'>"),
    (A, {"get_if_exists": True}, ValueError,
     "The actor name must be specified to use `get_if_exists`."),
    (A, {"get_if_exists": 1, "name": "x"}, TypeError,
     "The type of keyword 'get_if_exists' must be <class 'bool'>, but received type <class "
     "'int'>"),
    (A, {"concurrency_groups": 1}, TypeError,
     "The type of keyword 'concurrency_groups' must be (<class 'list'>, <class 'dict'>, <class "
     "'NoneType'>), but received type <class 'int'>"),
    (A, {"allow_out_of_order_execution": 1}, TypeError,
     "The type of keyword 'allow_out_of_order_execution' must be (<class 'bool'>, <class "
     "'NoneType'>), but received type <class 'int'>"),
]


def _build(kind: str, options: dict[str, Any]) -> Any:
    if kind == A:
        return ActorOptions.from_options(options)
    return TaskOptions.from_options(options, is_generator=kind == G)


@pytest.mark.parametrize(
    ("kind", "options", "kind_of_error", "message"),
    RAY_ERRORS,
    ids=[f"{kind}-{options}" for kind, options, _, _ in RAY_ERRORS],
)
def test_validation_errors_match_ray(
    kind: str, options: dict[str, Any], kind_of_error: type[Exception], message: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(kind_of_error) as error:
            _build(kind, options)
    assert str(error.value) == message


def test_scheduling_strategy_type_error_lists_the_accepted_classes() -> None:
    with pytest.raises(TypeError) as error:
        TaskOptions.from_options({"scheduling_strategy": 1})
    assert str(error.value).startswith(
        "The type of keyword 'scheduling_strategy' must be (<class 'NoneType'>, <class 'str'>, "
        "<class 'fray_ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy'>"
    )


# Accepted by Ray 2.60.0 (observed): these must not raise.
RAY_ACCEPTS: list[tuple[str, dict[str, Any]]] = [
    (T, {"num_cpus": 0}), (T, {"num_cpus": 0.5}), (T, {"num_cpus": 0.0001}),
    (T, {"num_cpus": 1.23456}), (T, {"num_cpus": None}), (T, {"num_cpus": True}),
    (T, {"memory": 1.5}), (T, {"resources": {"TPU": 4, "TPU-v4-8-head": 1}}),
    (T, {"resources": {"X": 0.5}}), (T, {"resources": {"memory": 1}}), (T, {"resources": None}),
    (T, {"max_retries": -1}), (T, {"max_retries": None}), (T, {"num_returns": 0}),
    (T, {"num_returns": 2}), (T, {"num_returns": None}), (T, {"num_returns": True}),
    (G, {"num_returns": "streaming"}), (G, {"num_returns": 2}),
    (T, {"retry_exceptions": True}), (T, {"retry_exceptions": [ValueError]}),
    (T, {"retry_exceptions": (ValueError,)}), (T, {"retry_exceptions": []}),
    (T, {"max_calls": 1}), (T, {"max_calls": None}), (T, {"name": ""}),
    (T, {"accelerator_type": "A100"}), (T, {"runtime_env": {"pip": ["x"], "env_vars": {"A": "b"}}}),
    (T, {"scheduling_strategy": "DEFAULT"}), (T, {"scheduling_strategy": "SPREAD"}),
    (T, {"scheduling_strategy": None}),
    (T, {"scheduling_strategy": NodeLabelSchedulingStrategy({"a": In("b")})}),
    (T, {"scheduling_strategy": PlacementGroupSchedulingStrategy(None)}),
    (T, {"label_selector": {"a": "!b", "c": "in(d, e)", "f": "!in(g)", "h": ""}}),
    (T, {"label_selector": {"ray.io/accelerator-type": "TPU", "Bad_Prefix/x": "y"}}),
    (T, {"label_selector": {"a" * 63: "b"}}), (T, {"fallback_strategy": []}),
    (T, {"fallback_strategy": [{"label_selector": {"a": "b"}}]}), (T, {"_labels": {"a": 1}}),
    (T, {"placement_group": None}), (T, {"placement_group": "default"}),
    (T, {"placement_group_capture_child_tasks": True}),
    (T, {"placement_group_bundle_index": 0, "scheduling_strategy": "SPREAD"}),
    (T, {"_generator_backpressure_num_objects": -1}), (T, {"_num_objects_per_yield": 1}),
    (A, {"max_concurrency": 0}), (A, {"max_concurrency": None}), (A, {"max_restarts": -1}),
    (A, {"max_task_retries": -1}), (A, {"max_task_retries": None}),
    (A, {"max_pending_calls": 0}), (A, {"lifetime": "detached"}),
    (A, {"lifetime": "non_detached"}), (A, {"lifetime": None}),
    (A, {"get_if_exists": True, "name": "x"}), (A, {"get_if_exists": False}),
    (A, {"concurrency_groups": {"io": 2}}), (A, {"allow_out_of_order_execution": True}),
    (A, {"enable_tensor_transport": True}), (A, {"_actor_generator_backpressure_num_objects": 1}),
    (A, {"label_selector": {"a": "b"}}),
]


@pytest.mark.parametrize(("kind", "options"), RAY_ACCEPTS, ids=[str(o) for _, o in RAY_ACCEPTS])
def test_options_ray_accepts(kind: str, options: dict[str, Any]) -> None:
    built = _build(kind, options)
    assert built.given == options


def test_checks_ray_makes_at_submit_time_happen_when_options_are_built() -> None:
    # Observed: Ray accepts these in @remote/.options() and raises the same errors at .remote().
    with pytest.raises(ValueError, match=r"Invalid scheduling_strategy value spread\. Valid"):
        TaskOptions.from_options({"scheduling_strategy": "spread"})
    with pytest.raises(ValueError, match="If placement group is not set, the value of bundle"):
        TaskOptions.from_options({"placement_group_bundle_index": 0})
    with pytest.raises(ValueError, match="^Actor name cannot be an empty string.$"):
        ActorOptions.from_options({"name": ""})
    with pytest.raises(ValueError, match="is not a valid namespace. Pass None"):
        ActorOptions.from_options({"namespace": ""})


def test_deprecation_warnings_like_ray() -> None:
    # Observed: Ray warns (RayDeprecationWarning, a DeprecationWarning) for both.
    with pytest.warns(DeprecationWarning, match="num_returns='dynamic' is deprecated"):
        options = TaskOptions.from_options({"num_returns": "dynamic"}, is_generator=True)
    assert options.num_returns == "dynamic"
    with pytest.warns(DeprecationWarning, match="Setting 'object_store_memory' for actors"):
        ActorOptions.from_options({"object_store_memory": 100})


def test_values_ray_rejects_by_accident_are_rejected_with_the_same_type() -> None:
    # Observed: Ray fails on these inside its own checks (e.g. "'<' not supported between
    # instances of 'str' and 'int'"); fray_ray raises the same type with a clear message.
    with pytest.raises(TypeError, match="quantity of resource X must be a number"):
        TaskOptions.from_options({"resources": {"X": "1"}})
    with pytest.raises(TypeError, match="only accepts None, a non-negative integer"):
        TaskOptions.from_options({"num_returns": "x"})
    with pytest.raises(TypeError, match="None is not allowed"):
        ActorOptions.from_options({"max_restarts": None})
    with pytest.raises(TypeError, match="Label selector values must be strings"):
        TaskOptions.from_options({"label_selector": {"a": 1}})


# ---- parsed values ----------------------------------------------------------------------------


def test_task_defaults() -> None:
    options = TaskOptions.from_options({})
    assert options.given == {}
    assert (options.num_cpus, options.num_gpus, options.memory) == (1.0, 0.0, 0)
    assert (options.max_retries, options.retry_exceptions, options.max_calls) == (3, False, 0)
    assert options.num_returns == 1
    assert TaskOptions.from_options({}, is_generator=True).num_returns == "streaming"
    assert TaskOptions.from_options({"num_returns": None}, is_generator=True).num_returns == (
        "streaming"
    )
    assert options.resource_demand() == {"CPU": 1.0, "GPU": 0.0, "memory": 0}


def test_task_fields_are_normalised() -> None:
    options = TaskOptions.from_options(
        {
            "num_cpus": 2,
            "num_gpus": 1,
            "memory": 1.5,
            "resources": {"TPU": 4, "unused": 0},
            "retry_exceptions": [ValueError],
            "_labels": {"a": "b"},
            "_generator_backpressure_num_objects": 4,
        }
    )
    assert options.resource_demand() == {"CPU": 2.0, "GPU": 1.0, "memory": 2, "TPU": 4.0}
    assert options.retry_exceptions == (ValueError,)
    assert options.labels == {"a": "b"}
    assert options.generator_backpressure_num_objects == 4
    assert options.given["num_cpus"] == 2  # as given, like Ray's _default_options


def test_runtime_env_vars_and_keys_that_cannot_be_honoured() -> None:
    options = TaskOptions.from_options({"runtime_env": {"env_vars": {"A": "1"}, "pip": ["numpy"]}})
    assert options.runtime_env_vars() == {"A": "1"}
    assert TaskOptions.from_options({}).runtime_env_vars() == {}
    # a key fray_ray cannot honour is an error naming it, never accepted and dropped
    for env, key in [({"working_dir": "s3://x/y.zip"}, "working_dir"), ({"pip": ["x"], "bogus": 1}, "bogus"),
                     ({"conda": "env.yml"}, "conda")]:
        with pytest.raises(ValueError, match=key):
            TaskOptions.from_options({"runtime_env": env})


def test_merge_layers_options_key_by_key() -> None:
    decorated = TaskOptions.from_options({"num_cpus": 2, "resources": {"a": 1}, "max_calls": 1})
    merged = decorated.merge({"resources": {"b": 1}, "max_retries": 0})
    assert merged.given == {"num_cpus": 2, "resources": {"b": 1}, "max_calls": 1, "max_retries": 0}
    assert merged.resources == {"b": 1.0}
    assert decorated.resources == {"a": 1.0}  # the original is unchanged
    assert merged.merge({"num_cpus": None}).num_cpus == 1.0  # None means "default" again
    generator = TaskOptions.from_options({}, is_generator=True)
    assert generator.merge({"max_retries": 1}).num_returns == "streaming"
    with pytest.raises(ValueError, match="Invalid option keyword max_restarts"):
        decorated.merge({"max_restarts": 1})


def test_options_are_frozen_and_picklable() -> None:
    options = TaskOptions.from_options({"num_cpus": 2, "retry_exceptions": [KeyError]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.num_cpus = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(options)) == options
    assert repr(UNSET) == "UNSET" and not UNSET
    assert pickle.loads(pickle.dumps(UNSET)) is UNSET


def test_direct_construction_is_checked() -> None:
    with pytest.raises(ValueError):
        TaskOptions(num_cpus=-1)
    with pytest.raises(ValueError):
        TaskOptions(num_returns="streaming")
    with pytest.raises(ValueError):
        ActorOptions(max_restarts=-5)
    with pytest.raises(ValueError):
        ActorOptions(get_if_exists=True)


def test_actor_defaults() -> None:
    options = ActorOptions.from_options({})
    assert options.num_cpus is UNSET
    assert (options.max_restarts, options.max_task_retries, options.max_pending_calls) == (0, 0, -1)
    assert options.max_concurrency == 1
    assert ActorOptions.from_options({}, is_async=True).max_concurrency == 1000
    assert ActorOptions.from_options({"max_concurrency": 0}, is_async=True).max_concurrency == 1000
    assert ActorOptions.from_options({"max_concurrency": 4}).max_concurrency == 4
    assert options.lifetime is None and not options.detached
    assert ActorOptions.from_options({"lifetime": "detached"}).detached
    assert options.concurrency_groups == {}


@pytest.mark.parametrize(
    ("given", "to_place", "while_alive"),
    [
        # Observed with Ray 2.60.0 through get_assigned_resources() and available_resources();
        # "to place" through init(num_cpus=0), where {} and {"memory": 1} stay pending.
        ({}, 1.0, 0.0),
        ({"num_cpus": None}, 1.0, 0.0),
        ({"num_cpus": 4}, 4.0, 4.0),
        ({"num_gpus": 0}, 1.0, 1.0),
        ({"resources": {"a": 1}}, 1.0, 1.0),
        ({"memory": 1}, 1.0, 0.0),
    ],
)
def test_actor_cpu_demand(given: dict[str, Any], to_place: float, while_alive: float) -> None:
    options = ActorOptions.from_options(given)
    assert options.scheduling_demand()["CPU"] == to_place
    assert options.resource_demand()["CPU"] == while_alive


def test_actor_merge_rules() -> None:
    decorated = ActorOptions.from_options({"name": "x", "concurrency_groups": {"io": 2}})
    # Observed: get_if_exists is fine when the name came from the decorator...
    assert decorated.merge({"get_if_exists": True}).get_if_exists
    assert decorated.merge({"num_cpus": 1}).concurrency_groups == {"io": 2}
    # ...and concurrency_groups cannot be set in .options().
    with pytest.raises(ValueError) as error:
        decorated.merge({"concurrency_groups": {"io": 1}})
    assert str(error.value) == "Setting 'concurrency_groups' is not supported in '.options()'."
    with pytest.raises(ValueError, match="Setting 'concurrency_groups' is not supported"):
        validate_actor_options({"concurrency_groups": {}}, in_options=True)


def test_concurrency_group_forms() -> None:
    assert ActorOptions.from_options({"concurrency_groups": [("io", 2)]}).concurrency_groups == {
        "io": 2
    }
    listed = [{"name": "io", "max_concurrency": 3}]
    assert ActorOptions.from_options({"concurrency_groups": listed}).concurrency_groups == {"io": 3}
    with pytest.raises(ValueError, match="must be >= 1"):
        ActorOptions.from_options({"concurrency_groups": {"io": 0}})
    with pytest.raises(TypeError, match="must be an int"):
        ActorOptions.from_options({"concurrency_groups": {"io": "a"}})
    with pytest.raises(TypeError):
        ActorOptions.from_options({"concurrency_groups": ["io"]})


def test_scheduling_strategies_pass_through() -> None:
    strategy = NodeAffinitySchedulingStrategy("AB" * 28, soft=True)
    options = TaskOptions.from_options({"scheduling_strategy": strategy})
    assert options.scheduling_strategy is strategy


# ---- decorator forms --------------------------------------------------------------------------


def _function() -> None:
    pass


def _generator() -> Any:
    yield 1


async def _coroutine() -> None:
    pass


async def _async_generator() -> Any:
    yield 1


class _SyncActor:
    def method(self) -> None:
        pass


class _AsyncActor:
    async def method(self) -> None:
        pass


def test_remote_decorator_forms() -> None:
    assert split_remote_args((_function,), {}) == (_function, {})
    assert split_remote_args((), {"num_cpus": 1}) == (UNSET, {"num_cpus": 1})
    assert split_remote_args((), {"foo": 1}) == (UNSET, {"foo": 1})  # checked when applied


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((_function,), {"num_cpus": 1}), ((1,), {}), (("x",), {}), ((None,), {}),
     ((_function, _function), {})],
    ids=["empty-parens", "function-and-options", "int", "str", "None", "two-functions"],
)
def test_remote_decorator_misuse_raises_assertion_error(args: tuple[Any, ...], kwargs: Any) -> None:
    # Observed: AssertionError "The @ray.remote decorator must be applied either with no
    # arguments and no parentheses, ... for example '@ray.remote(num_returns=2, resources=
    # {"CustomResource": 1})'."
    with pytest.raises(AssertionError) as error:
        split_remote_args(args, kwargs)
    message = str(error.value)
    assert message.startswith(
        "The @ray.remote decorator must be applied either with no arguments and no parentheses, "
        "for example '@ray.remote', or it must be applied using some of the arguments in the "
        "list ['max_calls', 'max_retries', 'num_cpus',"
    )
    assert message.endswith(
        "for example '@ray.remote(num_returns=2, resources={\"CustomResource\": 1})'."
    )
    with pytest.raises(AssertionError):
        check_decorator_options({})


def test_remote_targets() -> None:
    assert check_remote_target(_function) == "function"
    assert check_remote_target(lambda: 1) == "function"
    assert check_remote_target(_async_generator) == "function"  # observed: allowed
    assert check_remote_target(_SyncActor) == "class"
    with pytest.raises(ValueError, match="^'async def' should not be used for remote tasks."):
        check_remote_target(_coroutine)
    for target in (len, print):
        with pytest.raises(TypeError) as error:
            check_remote_target(target)
        assert str(error.value) == (
            "The @ray.remote decorator must be applied to either a function or a class."
        )


def test_function_and_class_kinds() -> None:
    assert is_generator_function(_generator) and is_generator_function(_async_generator)
    assert not is_generator_function(_function)
    assert is_async_actor_class(_AsyncActor) and not is_async_actor_class(_SyncActor)


def test_method_decorator_forms() -> None:
    # Observed: ray.method(f) returns f; ray.method() and ray.method(num_returns=2) decorate.
    assert split_method_args((_function,), {}) == (_function, {})
    assert split_method_args((), {}) == (UNSET, {})
    assert split_method_args((), {"num_returns": 2}) == (UNSET, {"num_returns": 2})
    with pytest.raises(AssertionError) as unknown:
        split_method_args((), {"num_cpus": 1})
    assert str(unknown.value) == (
        "Unexpected keyword argument to @ray.method: 'num_cpus'. The supported keyword "
        f"arguments are {RAY_METHOD_KEYS}"
    )
    with pytest.raises(AssertionError) as misuse:
        split_method_args((_function,), {"num_returns": 2})
    assert str(misuse.value) == (
        "The @ray.method decorator must be applied using no arguments or at least one of the "
        f"arguments in the list {RAY_METHOD_KEYS}, for example '@ray.method(num_returns=2)'."
    )


def test_method_option_values() -> None:
    # Observed (Ray checks these when the call is submitted): num_returns=-1 → ValueError
    # "num_returns must be >= 0, but got -1."; retry_exceptions=1 → AssertionError.
    with pytest.raises(ValueError) as negative:
        validate_method_options({"num_returns": -1})
    assert str(negative.value) == "num_returns must be >= 0, but got -1."
    with pytest.raises(TypeError):
        validate_method_options({"num_returns": "x"})
    with pytest.raises(AssertionError, match="retry_exceptions can either be boolean"):
        validate_method_options({"retry_exceptions": 1})
    with pytest.raises(ValueError, match="can only be used with generator functions"):
        validate_method_options({"num_returns": "streaming"})
    assert validate_method_options({"name": "x"}, in_options=True) == {"name": "x"}
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_cpus'"):
        validate_method_options({"num_cpus": 1}, in_options=True)
    with pytest.raises(AssertionError):
        validate_method_options({"name": "x"})


def test_method_options_resolve_against_the_actor() -> None:
    actor = ActorOptions.from_options({"max_task_retries": 2})
    plain = MethodOptions.from_options({})
    assert plain.num_returns == 1 and plain.task_retries(actor) == 2
    assert MethodOptions.from_options({}, is_generator=True).num_returns == "streaming"
    own = MethodOptions.from_options({"max_task_retries": 0, "tensor_transport": "nccl"})
    assert own.task_retries(actor) == 0 and own.tensor_transport == "NCCL"
    merged = own.merge({"num_returns": 2, "name": "call"})
    assert (merged.num_returns, merged.name, merged.max_task_retries) == (2, "call", 0)


# ---- accelerator names ------------------------------------------------------------------------


def test_accelerator_names_match_ray() -> None:
    # Observed with Ray 2.60.0 (ray.util.accelerators and its accelerators submodule).
    assert accelerators.NVIDIA_H100 == "H100"
    assert accelerators.NVIDIA_A100 == "A100"
    assert accelerators.NVIDIA_TESLA_V100 == "V100"
    assert accelerators.GOOGLE_TPU_V4 == "TPU-V4"
    assert accelerators.GOOGLE_TPU_V5P == "TPU-V5P"
    assert accelerators.GOOGLE_TPU_V5LITEPOD == "TPU-V5LITEPOD"
    assert accelerators.GOOGLE_TPU_V6E == "TPU-V6E"
    assert accelerators.GOOGLE_TPU_V7X == "TPU-V7X"
    assert accelerators.AMD_INSTINCT_MI300x == "AMD-Instinct-MI300X-OAM"
    assert accelerators.INTEL_GAUDI == "Intel-GAUDI"
    assert accelerators.AWS_NEURON_CORE == "aws-neuron-core"
    assert accelerators.APPLE_M1_PRO == "M1-Pro"
    # Everything Ray's package lists in __all__ is exported here too.
    ray_all = {
        "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_T4", "NVIDIA_TESLA_P4",
        "NVIDIA_TESLA_K80", "NVIDIA_TESLA_A10G", "NVIDIA_L4", "NVIDIA_A100", "NVIDIA_A100_40G",
        "NVIDIA_A100_80G", "NVIDIA_H100", "INTEL_MAX_1550", "INTEL_MAX_1100", "INTEL_GAUDI",
        "AMD_INSTINCT_MI100", "AMD_INSTINCT_MI210", "AMD_INSTINCT_MI250", "AMD_INSTINCT_MI250x",
        "AMD_INSTINCT_MI300x", "AMD_RADEON_R9_200_HD_7900", "AMD_RADEON_HD_7900",
        "AWS_NEURON_CORE", "GOOGLE_TPU_V2", "GOOGLE_TPU_V3", "GOOGLE_TPU_V4", "GOOGLE_TPU_V5P",
        "GOOGLE_TPU_V5LITEPOD", "GOOGLE_TPU_V6E", "GOOGLE_TPU_V7X", "METAX_C500", "METAX_C550",
        "MOBILINT_ARIES", "MOBILINT_REGULUS", "APPLE_M1", "APPLE_M1_PRO", "APPLE_M1_MAX",
        "APPLE_M1_ULTRA", "APPLE_M2", "APPLE_M2_PRO", "APPLE_M2_MAX", "APPLE_M2_ULTRA",
        "APPLE_M3", "APPLE_M3_PRO", "APPLE_M3_MAX", "APPLE_SILICON", "NVIDIA_TESLA_A100", "tpu",
    }
    assert ray_all <= set(accelerators.__all__)


def test_deprecated_accelerator_name_warns() -> None:
    # Observed: RayDeprecationWarning "NVIDIA_TESLA_A100 is deprecated, use NVIDIA_A100 instead."
    with pytest.warns(DeprecationWarning, match="NVIDIA_TESLA_A100 is deprecated"):
        assert accelerators.NVIDIA_TESLA_A100 == "A100"
    with pytest.raises(AttributeError):
        accelerators.NOT_A_DEVICE  # noqa: B018


@pytest.mark.skipif(
    importlib.util.find_spec("fray_ray.util.tpu") is None, reason="fray_ray.util.tpu not written yet"
)
def test_accelerators_tpu_is_util_tpu() -> None:
    import fray_ray.util.tpu

    assert accelerators.tpu is fray_ray.util.tpu


def test_an_actor_spec_made_without_options_has_the_tables_defaults() -> None:
    # ActorCreationSpec sits below the options table, so it spells Ray's defaults out itself.
    from fray_ray._private.core.task_spec import ActorCreationSpec
    from fray_ray._private.options.model import Context, Kind
    from fray_ray._private.options.table import default

    fields = {f.name: f.default for f in dataclasses.fields(ActorCreationSpec)}
    assert fields["max_concurrency"] == default(Kind.ACTOR, "max_concurrency", Context())
    assert fields["max_restarts"] == default(Kind.ACTOR, "max_restarts")
    assert fields["max_task_retries"] == default(Kind.ACTOR, "max_task_retries")
