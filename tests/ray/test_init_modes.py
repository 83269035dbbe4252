"""init() modes: an address of a running cluster, local mode, errors."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import fray_ray as ray
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_shutdown")


@ray.remote
def pid_and_task() -> tuple[int, str | None]:
    return os.getpid(), os.environ.get("IRIS_TASK_ID")


def test_init_by_address_uses_that_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        monkeypatch.setenv("FRAY_RAY_TOKEN", cluster.token)
        ray.init(cluster.address.replace("http://", "iris://"))
        pid, task_id = ray.get(pid_and_task.remote(), timeout=120)
        assert pid != os.getpid() and task_id is not None  # an Iris task of that cluster
        with cluster.client() as controller:
            assert any(job.job_id.split("/")[-1].startswith("session-") for job in controller.list_jobs(""))
        ray.shutdown()


def test_address_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        monkeypatch.setenv("FRAY_RAY_ADDRESS", cluster.address)
        monkeypatch.setenv("FRAY_RAY_TOKEN", cluster.token)
        context = ray.init()
        assert context.address_info["address"] == cluster.address
        assert ray.get(pid_and_task.remote(), timeout=120)[1] is not None
        ray.shutdown()


def test_wrong_token_is_a_clear_error_at_init(monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        monkeypatch.setenv("FRAY_RAY_TOKEN", "not-the-token")
        with pytest.raises(Exception, match="(?i)token|unauthenticated") as info:
            ray.init(cluster.address)
        assert cluster.address in str(info.value) or "token" in str(info.value).lower()
        assert not ray.is_initialized()


def test_nothing_listening_at_the_address_fails_at_init() -> None:
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        ray.init("iris://127.0.0.1:1")
    assert not ray.is_initialized()


def test_ray_client_addresses_are_refused() -> None:
    with pytest.raises(ValueError, match="Ray Client"):
        ray.init("ray://somewhere:10001")


def test_local_mode_runs_tasks_in_this_process() -> None:
    ray.init(local_mode=True, num_cpus=2)
    assert ray.get(pid_and_task.remote())[0] == os.getpid()


def test_auto_init_on_first_use() -> None:
    assert not ray.is_initialized()
    assert ray.get(ray.put("auto")) == "auto"
    assert ray.is_initialized()


def test_a_function_runs_in_each_session_and_keeps_none_of_them_alive() -> None:
    import gc
    import weakref

    from fray_ray._private.core import runtime_state

    for mode in ({"local_mode": True}, {"num_cpus": 1}):
        ray.init(**mode)
        assert ray.get(pid_and_task.remote())[0] > 0
        finished = weakref.ref(runtime_state.current())
        ray.shutdown()

        def collected(session: weakref.ref = finished) -> bool:  # a thread of it may take a moment to end
            gc.collect()
            return session() is None

        wait_for(collected, timeout=30, what="the ended session to be collected")  # nothing keeps it alive
