"""A new actor starts in an idle executor's process when one can take it (as Ray places actors
in idle workers): still served through the Fray client's `host_actor` and found through Iris's
endpoint registry, alone in that process, which ends with it. Actors that need a job of their
own still get one, and the switch turns lending off."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import fray_ray
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.exceptions import ActorDiedError, RayActorError
from fray_ray.fray import FrayIrisClient, IrisActorGroup
from fray_ray.iris.types import JobState

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 120


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=4),))) as started:
        yield started


@pytest.fixture
def session(cluster: EmbeddedCluster, fresh_shutdown: None) -> EmbeddedCluster:
    fray_ray.init(address=cluster.address, token=cluster.token)
    return cluster


@fray_ray.remote
def whose_process() -> int:
    return os.getpid()


@fray_ray.remote
class Plain:
    def __init__(self, fail: bool = False) -> None:
        if fail:
            raise ValueError("no instance for you")

    def pid(self) -> int:
        return os.getpid()

    def say(self, text: str) -> int:
        print(text)
        return os.getpid()

    def warn(self, text: str) -> int:
        logging.getLogger("lent").warning(text)
        return os.getpid()

    def run_a_task(self) -> int:
        return fray_ray.get(whose_process.remote(), timeout=TIMEOUT)

    def leave(self) -> None:
        fray_ray.actor.exit_actor()


@fray_ray.remote
def configure_logging() -> int:
    logging.basicConfig(format="CONFIGURED BY A TASK %(message)s")
    return os.getpid()


def idle_executor() -> int:
    """The pid of an executor that has just become idle (its task's result is back)."""
    return fray_ray.get(whose_process.remote(), timeout=TIMEOUT)


_captured: list[str] = []


def output(capfd: pytest.CaptureFixture[str]) -> str:
    """Everything the driver printed so far in this test (stdout and stderr)."""
    out, err = capfd.readouterr()
    _captured.append(out + err)
    return "".join(_captured)


@pytest.fixture(autouse=True)
def _fresh_capture() -> Iterator[None]:
    _captured.clear()
    yield


def lent_endpoints(cluster: EmbeddedCluster) -> dict[str, str]:
    """Endpoint name -> job of every actor registered by a lent executor's process."""
    with cluster.client() as client:
        names = [e.name for e in client.list_endpoints("/") if "-exec-" in e.name and "-Plain-" in e.name]
    return {name: name.rpartition("/")[0] for name in names}


def job_state(cluster: EmbeddedCluster, job_id: str) -> JobState:
    with cluster.client() as client:
        return client.job_state(job_id)


def test_an_actor_starts_in_the_idle_executor_and_is_registered_there(session: EmbeddedCluster, capfd: pytest.CaptureFixture[str]) -> None:
    executor = idle_executor()
    actor = Plain.remote()
    assert fray_ray.get(actor.pid.remote(), timeout=TIMEOUT) == executor
    # Its output carries the actor's prefix, as any actor's does.
    assert fray_ray.get(actor.say.remote("said by a lent actor"), timeout=TIMEOUT) == executor
    wait_for(lambda: f"(Plain pid={executor}) said by a lent actor" in output(capfd),
             what="the actor's line in the driver's output")
    # It runs nested work like any actor; that task needs (and gets) another process.
    assert fray_ray.get(actor.run_a_task.remote(), timeout=TIMEOUT) not in (executor, None)
    # Served through host_actor: registered as <the executor's job>/<group>-0, reachable there.
    [(endpoint, job_id)] = wait_for(lambda: lent_endpoints(session), what="the lent actor's endpoint").items()
    replica = endpoint.rpartition("/")[2]
    assert replica.endswith("-0")
    with FrayIrisClient(session.address, token=session.token) as fray_client:
        [handle] = IrisActorGroup(replica.removesuffix("-0"), 1, job_id, fray_client).wait_ready(timeout=TIMEOUT)
        assert handle.ping() is True


def test_a_lent_actor_logs_as_in_a_fresh_worker(session: EmbeddedCluster, capfd: pytest.CaptureFixture[str]) -> None:
    executor = fray_ray.get(configure_logging.remote(), timeout=TIMEOUT)  # a handler on its root logger
    actor = Plain.remote()
    assert fray_ray.get(actor.warn.remote("careful now"), timeout=TIMEOUT) == executor
    seen = wait_for(lambda: "careful now" in (text := output(capfd)) and text, what="the actor's record")
    assert f"(Plain pid={executor}) careful now" in seen and "CONFIGURED BY A TASK" not in seen


def test_two_actors_never_share_a_process(session: EmbeddedCluster) -> None:
    executor = idle_executor()
    first, second = Plain.remote(), Plain.remote()
    pids = fray_ray.get([first.pid.remote(), second.pid.remote()], timeout=TIMEOUT)
    assert len(set(pids)) == 2 and executor in pids
    # The lent executor runs no task any more: tasks go to processes of their own.
    assert idle_executor() not in pids


@pytest.mark.parametrize("options", [
    {"name": "found-by-name"},  # other drivers look it up: a job named after it
    {"max_restarts": 1},  # Iris reruns an actor's job; an executor's job is never rerun
    {"runtime_env": {"env_vars": {"ONLY_HERE": "1"}}},  # another environment than the executor's
], ids=["named", "restartable", "other-env"])
def test_actors_that_need_a_job_of_their_own_get_one(session: EmbeddedCluster, options: dict) -> None:
    executor = idle_executor()
    actor = Plain.options(**options).remote()
    assert fray_ray.get(actor.pid.remote(), timeout=TIMEOUT) != executor
    assert idle_executor() == executor  # still an executor
    fray_ray.kill(actor)


def test_a_lent_actor_ends_with_its_process_and_job(session: EmbeddedCluster) -> None:
    before = lent_endpoints(session)
    executor = idle_executor()
    actor = Plain.remote()
    assert fray_ray.get(actor.pid.remote(), timeout=TIMEOUT) == executor
    # The actor may answer before its endpoint is registered: host_actor registers after it builds it.
    [job] = wait_for(lambda: {job for name, job in lent_endpoints(session).items() if name not in before},
                     what="the lent actor's endpoint")
    assert job_state(session, job) == JobState.RUNNING
    fray_ray.kill(actor)
    with pytest.raises(RayActorError):
        fray_ray.get(actor.pid.remote(), timeout=TIMEOUT)
    wait_for(lambda: not pid_alive(executor), what="the killed actor's process to end")
    wait_for(lambda: job_state(session, job) not in (JobState.RUNNING, JobState.PENDING),
             what="the lent executor's job to end")
    assert not any(j == job for j in lent_endpoints(session).values())  # unregistered with it
    # An actor that leaves on its own ends its process too, and the session goes on.
    executor = idle_executor()
    leaving = Plain.remote()
    assert fray_ray.get(leaving.pid.remote(), timeout=TIMEOUT) == executor
    leaving.leave.remote()
    wait_for(lambda: not pid_alive(executor), what="the process of the actor that left to end")
    with pytest.raises(ActorDiedError):
        fray_ray.get(leaving.pid.remote(), timeout=TIMEOUT)
    assert fray_ray.get(whose_process.remote(), timeout=TIMEOUT) != executor


def test_a_constructor_that_raises_in_a_lent_process(session: EmbeddedCluster) -> None:
    executor = idle_executor()
    broken = Plain.remote(fail=True)
    with pytest.raises(ActorDiedError, match="no instance for you"):
        fray_ray.get(broken.pid.remote(), timeout=TIMEOUT)
    wait_for(lambda: not pid_alive(executor), what="the failed actor's process to end")
    assert fray_ray.get(whose_process.remote(), timeout=TIMEOUT) != executor


def test_the_switch_starts_every_actor_in_a_job_of_its_own(
    cluster: EmbeddedCluster, fresh_shutdown: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FRAY_RAY_ACTORS_IN_IDLE_WORKERS", "0")
    fray_ray.init(address=cluster.address, token=cluster.token)
    executor = idle_executor()
    actor = Plain.remote()
    assert fray_ray.get(actor.pid.remote(), timeout=TIMEOUT) != executor
    assert idle_executor() == executor
