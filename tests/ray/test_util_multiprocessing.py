"""Tests of fray_ray.util.multiprocessing and fray_ray.util.joblib beyond the compatibility
suite (compat_tests/test_multiprocessing_pool.py, test_joblib.py): argument checks at the call
site, where callbacks run, keywords Ray's pool lacks, the joblib backend's settings, and the
docstring examples. Pools run on an embedded cluster: every process is a real worker.
"""

from __future__ import annotations

import doctest
import logging
import os
import threading

import joblib
import pytest

import fray_ray as ray
import fray_ray.util.joblib as fray_joblib
import fray_ray.util.multiprocessing as fray_multiprocessing
from fray_ray.util.joblib import ray_backend
from fray_ray.util.multiprocessing import Pool
from fray_ray.util.multiprocessing import pool as pool_module


def square(value):
    return value * value


def add(left, right):
    return left + right


def mark_process(tag):
    os.environ["POOL_UNIT_TAG"] = tag


def process_tag(_value):
    return os.environ.get("POOL_UNIT_TAG")


@pytest.fixture
def pool(cluster_session):
    pool = Pool(processes=2)
    yield pool
    pool.terminate()


# ---- argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"processes": "2"}, TypeError, "processes must be an int"),
        ({"processes": 2.0}, TypeError, "processes must be an int"),
        ({"maxtasksperchild": "3"}, TypeError, "maxtasksperchild must be an int"),
        ({"ray_remote_args": [("num_cpus", 1)]}, TypeError, "ray_remote_args must be a dict"),
    ],
)
def test_bad_pool_arguments_fail_before_anything_starts(fresh_shutdown, kwargs, error, message):
    with pytest.raises(error, match=message):
        Pool(**kwargs)
    assert not ray.is_initialized()


def test_processes_below_one_fail_before_a_cluster_starts(fresh_shutdown):
    with pytest.raises(ValueError, match="must be >0"):
        Pool(processes=0)
    assert not ray.is_initialized()


@pytest.mark.parametrize("chunksize", [0, -2])
def test_chunksize_below_one_is_an_error(pool, chunksize):
    for call in (
        lambda: pool.map(square, [1, 2], chunksize=chunksize),
        lambda: pool.imap(square, [1, 2], chunksize=chunksize),
        lambda: pool.imap_unordered(square, [1, 2], chunksize=chunksize),
    ):
        with pytest.raises(ValueError, match="chunksize must be 1 or more"):
            call()


def test_context_is_ignored_with_a_warning(cluster_session, caplog):
    with caplog.at_level(logging.WARNING, logger=pool_module.__name__), Pool(processes=1, context="spawn") as pool:
        assert pool.apply(square, (3,)) == 9
    assert any("context" in record.getMessage() for record in caplog.records)


# ---- behaviour -----------------------------------------------------------------------------


def test_callbacks_run_one_at_a_time_off_the_calling_thread(pool):
    threads = []
    results = [pool.apply_async(square, (i,), callback=lambda _: threads.append(threading.get_ident()))
               for i in range(6)]
    assert [result.get(timeout=60) for result in results] == [i * i for i in range(6)]
    assert len(set(threads)) == 1
    assert threads[0] != threading.get_ident()


def test_map_async_callback_gets_results_in_input_order(pool):
    received = []
    pool.map_async(square, range(20), chunksize=1, callback=received.append).get(timeout=60)
    assert received == [[i * i for i in range(20)]]


def test_a_raising_callback_is_logged_and_the_result_still_ready(pool, caplog):
    def broken(_value):
        raise RuntimeError("callback broke")

    with caplog.at_level(logging.ERROR, logger=pool_module.__name__):
        result = pool.apply_async(square, (2,), callback=broken)
        assert result.get(timeout=60) == 4
    assert any(record.exc_info and "callback broke" in str(record.exc_info[1]) for record in caplog.records)


def test_starmap_async_takes_chunksize_by_keyword(pool):
    assert pool.starmap_async(add, [(1, 2), (3, 4), (5, 6)], chunksize=1).get(timeout=60) == [3, 7, 11]


def test_imap_without_chunksize_chooses_one_for_a_list(pool):
    assert list(pool.imap(square, list(range(30)), chunksize=None)) == [i * i for i in range(30)]


def test_imap_reads_its_input_only_as_results_are_taken(pool):
    read = []

    def source():
        for value in range(10):
            read.append(value)
            yield value

    results = pool.imap(square, source())
    assert len(read) <= 3  # one item per process, and the look-ahead that finds the end
    assert next(results) == 0
    assert list(results) == [i * i for i in range(1, 10)]
    assert read == list(range(10))


def test_terminate_ends_the_actors(cluster_session):
    pool = Pool(processes=2)
    actors = list(pool._workers._slots)
    pool.terminate()
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.__ray_ready__.remote(), timeout=60)


# ---- joblib --------------------------------------------------------------------------------


def test_joblib_backend_passes_pool_options_and_drops_local_process_settings(cluster_session):
    fray_joblib.register_ray()
    with joblib.parallel_backend("ray", initializer=mark_process, initargs=("joblib",)):
        tags = joblib.Parallel(n_jobs=2, max_nbytes="1M", mmap_mode="r")(
            joblib.delayed(process_tag)(i) for i in range(4)
        )
    assert tags == ["joblib"] * 4


def test_joblib_all_cpus_is_the_cluster_s(cluster_session):
    assert ray_backend.RayBackend().effective_n_jobs(-1) == int(ray.cluster_resources()["CPU"])


# ---- docstring examples --------------------------------------------------------------------


@pytest.mark.parametrize("module", [fray_multiprocessing, pool_module, fray_joblib])
def test_docstring_examples_run(cluster_session, module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
