"""Named actors are visible to every driver of a cluster, not only to the one that made them; one
killed by another driver first hands its creator the results it holds for it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import fray_ray as ray
from fray_ray._private.core import runtime_state
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from waiting import pid_alive, wait_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_shutdown")


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def incr(self, by: int = 1) -> int:
        self.n += by
        return self.n


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedCluster]:
    """A cluster this driver has joined in namespace "shared"; other drivers join it with its token."""
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as running:
        monkeypatch.setenv("FRAY_RAY_TOKEN", running.token)
        ray.init(running.address, namespace="shared")
        yield running


def _other_driver(address: str, token: str, body: str) -> str:
    script = f"import fray_ray as ray\nray.init({address!r}, namespace='shared')\n" + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", script + "\nray.shutdown()\n"], capture_output=True, text=True, timeout=180,
        env={**os.environ, "FRAY_RAY_TOKEN": token},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_second_driver_finds_and_calls_a_named_actor(cluster: EmbeddedCluster) -> None:
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


def test_a_second_driver_cannot_take_a_name_in_use(cluster: EmbeddedCluster) -> None:
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


#: The reader thread of a second driver's stream connection to an actor's gate.
_GATE_READER = "remote-actor-Counter-reader"


def test_a_second_driver_calls_over_the_actors_gate_with_its_own_objects(cluster: EmbeddedCluster) -> None:
    """Calls from another driver go over the stream protocol, pipelined and in order; their
    object arguments (large ones too) and errors travel as the owner's do."""
    counter = Counter.options(name="gated").remote()
    ray.get(counter.incr.remote())
    out = _other_driver(cluster.address, cluster.token, f"""
        import threading
        import fray_ray.exceptions as exceptions

        counter = ray.get_actor("gated")
        print(ray.get([counter.incr.remote() for _ in range(200)])[-1])
        print(ray.get(counter.incr.remote(ray.put(1000))))
        big = ray.put(list(range(300_000)))  # beyond what travels inline with a call
        print(ray.get(counter.incr.remote(len(ray.get(big)))))

        @ray.remote
        def fails():
            raise KeyError("upstream")

        try:
            ray.get(counter.incr.remote(fails.remote()))
        except exceptions.RayTaskError as exc:
            print("argument error:", isinstance(exc, KeyError))
        try:
            ray.get(counter.incr.remote("x"))
        except TypeError:
            print("method error: TypeError")
        print("gate:", any(t.name == {_GATE_READER!r} for t in threading.enumerate()))
    """)
    assert out.splitlines() == [
        "201", "1201", "301201", "argument error: True", "method error: TypeError", "gate: True",
    ]
    assert ray.get(counter.incr.remote()) == 301202


def test_a_second_driver_whose_gate_connection_is_refused_calls_through_actor_service(
    cluster: EmbeddedCluster,
) -> None:
    counter = Counter.options(name="ungated").remote()
    ray.get(counter.incr.remote())
    out = _other_driver(cluster.address, cluster.token, f"""
        import threading
        from fray_ray._private.driver import remote_actors

        def with_a_wrong_token(init):
            def init_(self, *args):
                *rest, gate = args
                init(self, *rest, dict(gate, token="not-the-gate-token"))
            return init_

        remote_actors.RemoteActor.__init__ = with_a_wrong_token(remote_actors.RemoteActor.__init__)
        counter = ray.get_actor("ungated")
        print(ray.get([counter.incr.remote() for _ in range(5)]))
        print("gate:", any(t.name == {_GATE_READER!r} for t in threading.enumerate()))
    """)
    assert out.splitlines() == ["[2, 3, 4, 5, 6]", "gate: False"]


@ray.remote(max_concurrency=2)
class Blocker:
    def __init__(self) -> None:
        self.started = False

    def block(self) -> None:
        self.started = True
        import time

        time.sleep(120)

    def has_started(self) -> bool:
        return self.started


def test_a_second_driver_sees_its_running_call_die_with_the_actor(cluster: EmbeddedCluster) -> None:
    blocker = Blocker.options(name="blocker").remote()
    ray.get(blocker.has_started.remote())
    script = textwrap.dedent(f"""
        import fray_ray as ray
        import fray_ray.exceptions as exceptions
        ray.init({cluster.address!r}, namespace="shared")
        ref = ray.get_actor("blocker").block.remote()
        try:
            ray.get(ref, timeout=100)
        except exceptions.RayActorError:
            print("the call died with the actor")
        ray.shutdown()
    """)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "FRAY_RAY_TOKEN": cluster.token}) as other:
        try:
            wait_for(lambda: ray.get(blocker.has_started.remote()), timeout=120)
            ray.kill(blocker)
            out, err = other.communicate(timeout=60)
        finally:
            other.kill()
    assert other.returncode == 0, err
    assert out.splitlines() == ["the call died with the actor"]


def test_a_driver_that_kills_another_drivers_named_actor_cannot_look_it_up_again(cluster: EmbeddedCluster) -> None:
    _other_driver(cluster.address, cluster.token, """
        @ray.remote
        class Counter:
            def incr(self):
                return 1

        ray.get(Counter.options(name="doomed", lifetime="detached").remote().incr.remote())
    """)  # its creator has gone: it lives on, detached
    out = _other_driver(cluster.address, cluster.token, """
        import fray_ray.exceptions as exceptions

        counter = ray.get_actor("doomed")
        print(ray.get(counter.incr.remote()))
        ray.kill(counter)
        try:  # at once, as in Ray: the name is free while the process is still ending
            ray.get_actor("doomed")
        except ValueError:
            print("gone at once")
        try:
            ray.get(counter.incr.remote())
        except exceptions.ActorDiedError:
            print("its handle is dead")
    """)
    assert out.splitlines() == ["1", "gone at once", "its handle is dead"]
    with pytest.raises(ValueError):
        ray.get_actor("doomed")  # nor can any other driver


@ray.remote
class Maker:
    def make(self, value: int) -> bytes:
        return bytes([value]) * (4 << 20)  # over the inline limit: it stays in the actor's process

    def pid(self) -> int:
        return os.getpid()


def test_a_result_the_actor_holds_outlives_another_drivers_kill(cluster: EmbeddedCluster) -> None:
    maker = Maker.options(name="maker").remote()
    ref = maker.make.remote(7)
    ray.wait([ref])
    objects = runtime_state.current().objects
    assert objects.holders([ref.binary()])  # held by the actor
    pid = ray.get(maker.pid.remote())
    _other_driver(cluster.address, cluster.token, """
        ray.kill(ray.get_actor("maker"))
    """)
    wait_for(lambda: not pid_alive(pid), what="the actor's process to end")
    assert not objects.holders([ref.binary()])  # the actor handed it to this driver before it went
    assert ray.get(ref, timeout=60)[:1] == bytes([7])
