"""Named actors are visible to every driver of a cluster, not only to the one that made them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import fray_ray as ray
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

pytestmark = pytest.mark.usefixtures("fresh_shutdown")


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def incr(self, by: int = 1) -> int:
        self.n += by
        return self.n


def _other_driver(address: str, token: str, body: str) -> str:
    script = f"import fray_ray as ray\nray.init({address!r}, namespace='shared')\n" + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", script + "\nray.shutdown()\n"], capture_output=True, text=True, timeout=180,
        env={**__import__("os").environ, "FRAY_RAY_TOKEN": token},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_second_driver_finds_and_calls_a_named_actor(monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        monkeypatch.setenv("FRAY_RAY_TOKEN", cluster.token)
        ray.init(cluster.address, namespace="shared")
        counter = Counter.options(name="counter").remote()
        assert ray.get(counter.incr.remote()) == 1
        out = _other_driver(cluster.address, cluster.token, """
            counter = ray.get_actor("counter")
            print(ray.get(counter.incr.remote(10)), ray.get([counter.incr.remote() for _ in range(3)]))
            try:
                ray.get_actor("counter", namespace="elsewhere")
            except ValueError:
                print("not visible in another namespace")

        """)
        assert out.splitlines() == ["11 [12, 13, 14]", "not visible in another namespace"]
        assert ray.get(counter.incr.remote()) == 15  # the calls of both drivers reached one actor


def test_a_second_driver_cannot_take_a_name_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        monkeypatch.setenv("FRAY_RAY_TOKEN", cluster.token)
        ray.init(cluster.address, namespace="shared")
        counter = Counter.options(name="taken").remote()
        ray.get(counter.incr.remote())
        out = _other_driver(cluster.address, cluster.token, """
            import fray_ray.exceptions as exceptions

            @ray.remote
            class Other:
                def ping(self):
                    return "pong"

            try:
                Other.options(name="taken").remote()
            except exceptions.ActorAlreadyExistsError:
                print("name taken")
            same = Other.options(name="taken", get_if_exists=True).remote()
            print(type(same).__name__)
        """)
        assert out.splitlines() == ["name taken", "ActorHandle"]
