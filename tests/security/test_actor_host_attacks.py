"""Attacks on actor hosts' ActorService (Connect over HTTP) from another process.

An actor host unpickles call arguments, so it requires a bearer secret: the cluster's token,
or, when the controller runs without auth, a secret of its own that rightful callers find in
the endpoint's metadata.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import fray_ray
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.fray import FrayIrisClient, ResourceConfig
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import EndpointInfo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from security_helpers import Target, wait_until  # noqa: E402

CALL_PATHS = ("/iris.actor.ActorService/Call", "/iris.actor.ActorService/StartOperation")
ACTOR_ATTACKS = {
    "no_token", "wrong_token", "empty_bearer", "huge_length", "canary_actor_call", "canary_actor_call_wrong_token",
}


@fray_ray.remote(num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.count = 0

    def incr(self) -> int:
        self.count += 1
        return self.count


class Echo:
    def echo(self, value: object) -> object:
        return value


def _attack(attackers, endpoint: EndpointInfo, canary: Path) -> dict[str, dict]:
    url = urlsplit(endpoint.url)
    events = attackers("http", url.hostname, url.port, canary, *CALL_PATHS).run_to_exit()
    outcomes = {event["attack"]: event for event in events if event["path"] == CALL_PATHS[0]}
    outcomes.update({f"{e['attack']}@start": e for e in events if e["path"] == CALL_PATHS[1]})
    return outcomes


def _assert_refused(outcomes: dict[str, dict]) -> None:
    assert {name.split("@")[0] for name in outcomes} == ACTOR_ATTACKS
    for name, outcome in outcomes.items():
        assert outcome["status"] == 401, f"{name}: {outcome}"
        assert outcome["closed"], f"{name}: the actor host kept the connection open: {outcome}"


def test_a_ray_actor_host_refuses_callers_without_the_cluster_token(driver: Target, attackers, canary: Path) -> None:
    counter = Counter.remote()
    assert fray_ray.get(counter.incr.remote()) == 1
    with ControllerClient(driver.controller_url, token=driver.controller_token) as client:
        # the actor answers over the session as soon as it is built; it registers just after
        endpoints = wait_until(lambda: client.list_endpoints(""), what="the actor's endpoint")
    assert endpoints[0].metadata.get("authorization") == f"Bearer {driver.controller_token}"
    _assert_refused(_attack(attackers, endpoints[0], canary))
    assert not canary.exists()
    assert fray_ray.get(counter.incr.remote()) == 2


def test_an_actor_host_requires_its_own_secret_when_the_controller_has_no_auth(attackers, canary: Path) -> None:
    config = ClusterConfig(workers=(cpu_worker("cpu-0", cpu=2),), auth=False)
    with EmbeddedCluster(config) as cluster, FrayIrisClient(cluster.address) as client:
        assert cluster.token is None
        actor = client.create_actor(Echo, name="echo", resources=ResourceConfig(cpu=0, ram="64m", disk="0"))
        with ControllerClient(cluster.address) as controller:
            (endpoint,) = controller.list_endpoints(actor.endpoint, exact=True)
        secret = endpoint.metadata.get("authorization", "")
        assert secret.startswith("Bearer ") and len(secret) > len("Bearer ") + 20
        _assert_refused(_attack(attackers, endpoint, canary))
        assert not canary.exists()
        assert actor.echo.remote(41).result(timeout=60) == 41  # the rightful caller finds the secret
