"""``ray.util.joblib``: ``register_ray()`` makes ``"ray"`` a joblib backend whose batches run
in a pool of actors. Needs joblib installed (skipped without it, on either backend).
"""

from __future__ import annotations

import os

import pytest

from compat_tests._backend import LazyModule, ray

joblib = pytest.importorskip("joblib")
util_joblib = LazyModule("util.joblib")


def square(value):
    return value * value


def process_id(_value):
    return os.getpid()


def fail_on_three(value):
    if value == 3:
        raise KeyError(f"bad {value}")
    return value


def test_joblib__parallel_backend_ray_runs_in_other_processes(ray_start_regular_shared):
    util_joblib.register_ray()
    with joblib.parallel_backend("ray"):
        squares = joblib.Parallel(n_jobs=2)(joblib.delayed(square)(i) for i in range(20))
        pids = set(joblib.Parallel(n_jobs=2, batch_size=1)(joblib.delayed(process_id)(i) for i in range(8)))
    assert squares == [i * i for i in range(20)]
    assert os.getpid() not in pids


def test_joblib__backend_by_name_and_all_cpus(ray_start_regular_shared):
    util_joblib.register_ray()
    results = joblib.Parallel(n_jobs=-1, backend="ray")(joblib.delayed(square)(i) for i in range(6))
    assert results == [i * i for i in range(6)]


def test_joblib__one_job_runs_in_the_caller(ray_start_regular_shared):
    util_joblib.register_ray()
    with joblib.parallel_backend("ray"):
        assert joblib.Parallel(n_jobs=1)(joblib.delayed(process_id)(i) for i in range(2)) == [os.getpid()] * 2


def test_joblib__a_call_s_exception_is_raised(ray_start_regular_shared):
    util_joblib.register_ray()
    with joblib.parallel_backend("ray"), pytest.raises(KeyError, match="bad 3"):
        joblib.Parallel(n_jobs=2)(joblib.delayed(fail_on_three)(i) for i in range(5))


def test_joblib__ray_remote_args_reach_the_actors(ray_start_regular_shared):
    util_joblib.register_ray()

    def resources(_value):
        return ray.get_runtime_context().get_assigned_resources()

    with joblib.parallel_backend("ray", ray_remote_args={"num_cpus": 1}):
        assigned = joblib.Parallel(n_jobs=2)(joblib.delayed(resources)(i) for i in range(2))
    assert assigned == [{"CPU": 1.0}, {"CPU": 1.0}]
