"""Numeric option values: non-finite, negative, out-of-range and infeasible ones."""

from __future__ import annotations

import math

import pytest

import fray_ray as ray
from fray_ray import exceptions
from fray_ray._private.options import ActorOptions, TaskOptions
from fray_ray._private.options import quantities as values

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (NAN, ValueError, "cannot convert float NaN to integer"),
        (INF, OverflowError, "cannot convert float infinity to integer"),
        (-INF, ValueError, "cannot be negative"),
        (-0.5, ValueError, "cannot be negative"),
        (0.00001, ValueError, "cannot go beyond 0.0001"),
    ],
)
def test_quantity_checks(value: float, error: type, words: str) -> None:
    with pytest.raises(error, match=words) as info:
        values.check_quantity("num_cpus", value)
    assert "num_cpus" in str(info.value)  # Ray's words, and the option's name


@pytest.mark.parametrize("value", [None, 0, 0.5, 1, 1e9, 2**70, True])
def test_quantities_ray_accepts(value: object) -> None:
    values.check_quantity("num_cpus", value)


def test_parsed_options_check_quantities_too() -> None:
    with pytest.raises(ValueError, match="NaN"):
        TaskOptions(num_cpus=NAN)
    with pytest.raises(OverflowError):
        ActorOptions(resources={"TPU": INF})
    with pytest.raises(ValueError, match="NaN"):
        TaskOptions.from_options({"memory": NAN})


def test_c_integer_options() -> None:
    values.check_c_integers({"max_retries": 2**63 - 1, "max_concurrency": 5, "max_restarts": 2**70})
    for key in values.C_INTEGER_OPTIONS:
        with pytest.raises(OverflowError, match=key):
            values.check_c_integers({key: 2**63})
    with pytest.raises(ValueError, match="num_returns=1000001 is more than fray_ray allows"):
        values.check_c_integers({"num_returns": values.MAX_NUM_RETURNS + 1})
    values.check_c_integers({"num_returns": values.MAX_NUM_RETURNS})


def test_method_call_values_are_read_as_ray_reads_them() -> None:
    assert values.method_num_returns(2.9) == 2  # a C int conversion truncates
    assert values.method_num_returns("streaming") == "streaming"
    assert values.method_call_integer("max_task_retries", -1) == -1
    with pytest.raises(ValueError, match="num_returns must be >= 0, but got -3"):
        values.method_num_returns(-3)
    with pytest.raises(TypeError, match="an integer is required"):
        values.method_num_returns("lots")
    with pytest.raises(OverflowError):
        values.method_call_integer("max_task_retries", INF)
    with pytest.raises(ValueError, match="more than fray_ray allows"):
        values.method_num_returns(values.MAX_NUM_RETURNS + 1)


# ---- on a running session ----------------------------------------------------------------


@ray.remote
def one() -> int:
    return 1


@ray.remote
class Holder:
    def ping(self) -> str:
        return "pong"


@pytest.mark.usefixtures("cluster_session")
@pytest.mark.parametrize(
    "options",
    [{"num_cpus": 1e9}, {"num_gpus": 64}, {"memory": 1e30}, {"resources": {"nowhere": 1}}],
    ids=["cpus", "gpus", "memory", "custom"],
)
def test_infeasible_actor_fails_with_unschedulable_error_naming_the_resource(options: dict) -> None:
    actor = Holder.options(**options).remote()
    with pytest.raises(exceptions.ActorUnschedulableError) as info:
        ray.get(actor.ping.remote(), timeout=60)
    resource = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory", "resources": "nowhere"}[next(iter(options))]
    assert f"asks for {resource}" in str(info.value)
    assert "never" in str(info.value)
    # Its resources were never taken: ordinary work still runs.
    assert ray.get(one.remote(), timeout=60) == 1
    assert ray.get(Holder.remote().ping.remote(), timeout=60) == "pong"


@pytest.mark.usefixtures("cluster_session")
def test_num_returns_beyond_the_cap_is_refused_at_remote() -> None:
    with pytest.raises(ValueError, match="more than fray_ray allows"):
        one.options(num_returns=values.MAX_NUM_RETURNS + 1).remote()
    actor = Holder.remote()
    with pytest.raises(ValueError, match="more than fray_ray allows"):
        actor.ping.options(num_returns=10**9).remote()
    assert ray.get(actor.ping.remote()) == "pong"


@pytest.mark.usefixtures("cluster_session")
def test_max_calls_is_a_decorator_option_only() -> None:
    limited = ray.remote(max_calls=2)(lambda: 3)
    assert ray.get(limited.remote()) == 3
    with pytest.raises(ValueError, match="max_calls"):
        limited.options(max_calls=1)
    with pytest.raises(ValueError, match="max_calls"):
        limited.options(num_cpus=1).options(max_calls=1)
