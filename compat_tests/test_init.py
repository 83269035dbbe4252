"""``ray.init`` / ``ray.shutdown`` / ``ray.is_initialized`` and auto-init.

Mirrors Ray's test_ray_init.py public tests and test_runtime_context.py's before-init tests
(ray-api.md §1.1). Every test here starts its own cluster (``shutdown_only``), so the file is
kept short: a cluster start costs seconds on real Ray.
"""

from __future__ import annotations

import warnings

import pytest

from compat_tests._backend import exceptions, ray


@pytest.mark.known_difference(
    reason="fray_ray keeps init(local_mode=True): it runs everything on threads of the driver for "
    "debuggers; Ray 2.60 removed local mode and raises RuntimeError"
)
def test_ray_init__invalid_keyword(shutdown_only):
    assert not ray.is_initialized()
    with pytest.raises(RuntimeError, match="not_a_keyword"):
        ray.init(num_cpus=1, not_a_keyword=1)
    # local_mode was removed from Ray; asking for it is an error.
    with pytest.raises(RuntimeError, match="local_mode"):
        ray.init(num_cpus=1, local_mode=True)
    assert not ray.is_initialized()
    ray.shutdown()  # shutting down a stopped runtime is fine
    assert not ray.is_initialized()


def test_ray_init__state_apis_before_init_raise(shutdown_only):
    # The cluster-state functions do not start a cluster.
    with pytest.raises(exceptions.RaySystemError):
        ray.available_resources()
    with pytest.raises(exceptions.RaySystemError):
        ray.cluster_resources()
    assert not ray.is_initialized()


def test_ray_init__context_and_reinit(shutdown_only):
    context = ray.init(num_cpus=1, namespace="compat-init")
    assert ray.is_initialized()
    node_id = ray.get_runtime_context().get_node_id()
    assert context.address_info["node_id"] == node_id
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert context["node_id"] == node_id  # dict-style access (deprecated)
    assert "session_dir" in context
    assert "no-such-key" not in context
    assert context.get("no-such-key", "fallback") == "fallback"
    assert ray.get_runtime_context().namespace == "compat-init"

    with pytest.raises(RuntimeError, match="init twice"):
        ray.init(num_cpus=1)
    again = ray.init(num_cpus=1, ignore_reinit_error=True)
    assert again is not None and ray.is_initialized()

    # The context is also a context manager that shuts the runtime down.
    with context:
        assert ray.get(ray.put("inside")) == "inside"
    assert not ray.is_initialized()
    ray.shutdown()
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    "ray_start_regular", [{"num_cpus": 3, "resources": {"compat_custom": 2}}], indirect=True
)
def test_ray_init__resources_and_fixture_parameters(ray_start_regular):
    # init(num_cpus=, resources=) shape the cluster; the fixtures pass their arguments through
    # and accept overrides, as Ray's do.
    resources = ray.cluster_resources()
    assert resources["CPU"] == 3.0 and resources["compat_custom"] == 2.0
    assert ray.get_runtime_context().namespace == "default_test_namespace"


def test_ray_init__auto_init_on_remote(shutdown_only):
    @ray.remote
    def one():
        return 1

    assert not ray.is_initialized()
    assert ray.get(one.remote()) == 1  # starts a local cluster implicitly
    assert ray.is_initialized()
    assert ray.cluster_resources().get("CPU", 0) >= 1
    namespace = ray.get_runtime_context().namespace
    # Without namespace=, the job gets its own anonymous namespace.
    assert isinstance(namespace, str) and namespace and namespace != "default_test_namespace"
    ray.shutdown()
    assert not ray.is_initialized()


def test_runtime_context__get_runtime_context_auto_inits(shutdown_only):
    # Ray's older test_no_auto_init expected the opposite; in 2.60 get_runtime_context is one
    # of ray.AUTO_INIT_APIS and starts a cluster like .remote()/get/put do.
    assert not ray.is_initialized()
    context = ray.get_runtime_context()
    assert ray.is_initialized()
    assert isinstance(context.get_job_id(), str)
    assert context.get_task_id() is None
