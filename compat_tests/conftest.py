"""Fixtures of the compatibility suite, named after the Ray test fixtures they stand in for.

Cluster fixtures (all call only the public ``init``/``shutdown``):

* ``shutdown_only``: starts nothing; the test calls ``ray.init`` itself; ``ray.shutdown()``
  afterwards.
* ``ray_start_regular``: a fresh cluster for one test, ``num_cpus=1``.
* ``ray_start_2_cpus`` / ``ray_start_10_cpus``: the same with 2 or 10 CPUs.
  These three accept overrides of the ``init`` keyword arguments through indirect
  parametrisation, as Ray's do: ``@pytest.mark.parametrize("ray_start_regular",
  [{"num_cpus": 2}], indirect=True)``.
* ``ray_start_regular_shared``: one cluster shared by the tests of a module, started with
  ``DEFAULT_SHARED_CLUSTER`` (4 CPUs and ``{"custom": 3}``) unless the module sets
  ``SHARED_CLUSTER = {...}``. Starting a cluster costs seconds on real Ray, so this is the
  fixture to prefer. If a test in the same module uses one of the fixtures above, the shared
  cluster is stopped for it and started again for the next test that asks for it.

  ``--shared-cluster-scope=module`` stops the shared cluster at the end of each module, as
  Ray's fixture does. ``--shared-cluster-scope=session`` keeps it running into the next module
  when that module asks for the same ``init`` arguments, which saves one cluster start per
  module. The default is ``session`` on ``--backend=ray`` (a start costs 2-6 s there; tests are
  written not to depend on a fresh cluster) and ``module`` on ``--backend=fray_ray`` (cheap
  starts, and a module that leaves work behind cannot disturb the next one).

Every cluster is started with ``namespace="default_test_namespace"``, as Ray's fixtures do.
The pytest hooks (``--backend``, the ``known_difference`` marker, ``--compat-report``) live in
``_plugin.py``; helpers such as ``SignalActor`` and ``wait_for_condition`` in ``helpers.py``.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from compat_tests._backend import DEFAULT_SHARED_CLUSTER, TEST_NAMESPACE, selected_backend
from compat_tests._plugin import (  # noqa: F401  (hooks, re-exported for pytest)
    pytest_addoption,
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_collectreport,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
    shared_cluster_scope,
)


class _Clusters:
    """Tracks which fixture started the running cluster, so fixtures can share or replace it."""

    def __init__(self) -> None:
        self.owner: str | None = None  # "shared", "exclusive" or None (nothing we started)
        self.kwargs: dict[str, Any] | None = None
        self.context: Any = None

    @staticmethod
    def _ray():
        from compat_tests._backend import ray

        return ray

    def start(self, owner: str, kwargs: dict[str, Any]) -> Any:
        self.stop()
        ray = self._ray()
        defaults: dict[str, Any] = {"namespace": TEST_NAMESPACE}
        if selected_backend() == "ray":
            # Ray's dashboard (installed with ray[default]) adds seconds to every init; only the
            # state API's module needs it, and asks for Ray's default (SHARED_CLUSTER).
            defaults["include_dashboard"] = False
        self.context = ray.init(**{**defaults, **kwargs})
        self.owner, self.kwargs = owner, dict(kwargs)
        return self.context

    def stop(self) -> None:
        ray = self._ray()
        if ray.is_initialized():
            # ObjectRefs caught in reference cycles (a kept traceback, say) must die in the session
            # that owns them: collected in a later session, Ray 2.60 aborts the process on the
            # unknown owner (core_worker.cc "ObjectUnknownOwner"), ending an xdist worker.
            gc.collect()
            ray.shutdown()
        self.owner, self.kwargs, self.context = None, None, None

    def ensure_shared(self, kwargs: dict[str, Any]) -> Any:
        if self.owner == "shared" and self.kwargs == kwargs and self._ray().is_initialized():
            return self.context
        return self.start("shared", kwargs)


_clusters = _Clusters()


def _exclusive(request: pytest.FixtureRequest, num_cpus: int):
    kwargs = {"num_cpus": num_cpus, **getattr(request, "param", {})}
    context = _clusters.start("exclusive", kwargs)
    try:
        yield context
    finally:
        _clusters.stop()


@pytest.fixture
def shutdown_only():
    """The test starts its own cluster; it is shut down afterwards."""
    _clusters.stop()
    try:
        yield None
    finally:
        _clusters.stop()


@pytest.fixture
def ray_start_regular(request):
    yield from _exclusive(request, num_cpus=1)


@pytest.fixture
def ray_start_2_cpus(request):
    yield from _exclusive(request, num_cpus=2)


@pytest.fixture
def ray_start_10_cpus(request):
    yield from _exclusive(request, num_cpus=10)


@pytest.fixture(scope="module")
def _shared_cluster_kwargs(request):
    kwargs = dict(getattr(request.module, "SHARED_CLUSTER", DEFAULT_SHARED_CLUSTER))
    yield kwargs
    if _clusters.owner == "shared" and shared_cluster_scope(request.config) == "module":
        _clusters.stop()


@pytest.fixture
def ray_start_regular_shared(_shared_cluster_kwargs):
    """A cluster shared by the tests of one module (see the module docstring)."""
    return _clusters.ensure_shared(_shared_cluster_kwargs)


@pytest.fixture(scope="session", autouse=True)
def _no_cluster_left_behind():
    """Stop whatever cluster is still running when the session ends."""
    yield
    from compat_tests import _backend

    if _backend.loaded_backend() is not None:
        _clusters.stop()
