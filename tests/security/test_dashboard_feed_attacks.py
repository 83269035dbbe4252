"""A session's dashboard feed under attack: strangers holding connections open with request heads
that trickle in must neither keep their connections past one deadline nor keep the controller's
own (authenticated) fetch out, which the Ray sessions panel shows."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from security_helpers import wait_until

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.driver.dashboard_feed import FEED_PATH, MAX_CONNECTIONS, MAX_UNVERIFIED

#: More strangers than the feed has room for, verified or not.
STRANGERS = MAX_UNVERIFIED + MAX_CONNECTIONS + 8
PROBLEM = 'class="state bad problem"'


@pytest.fixture(scope="module")
def session() -> Iterator[dict[str, Any]]:
    if fray_ray.is_initialized():
        fray_ray.shutdown()
    fray_ray.init(num_cpus=1, include_dashboard=True, namespace="security-feed")
    runtime: Any = runtime_state.current()
    cluster = runtime._owned[0]
    try:
        yield {"cluster": cluster, "feed": runtime.dashboard_feed, "title": runtime.session_name}
    finally:
        fray_ray.shutdown()


def _get(address: str, path: str, token: str | None) -> tuple[int, bytes]:
    host, port = address.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=60)
    try:
        connection.request("GET", path, headers={"authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _sessions_panel(cluster: Any) -> str:
    """The controller's Ray sessions panel: it fetches every feed with the cluster's token."""
    status, body = _get(cluster.address, "/dashboard/api/sessions", cluster.token)
    assert status == 200
    return str(json.loads(body)["html"])


@pytest.mark.slow  # over 10 s on its own
def test_trickling_strangers_neither_hold_the_feed_nor_crowd_out_the_controller(session, attackers) -> None:
    cluster, feed = session["cluster"], session["feed"]
    wait_until(lambda: session["title"] in _sessions_panel(cluster), what="the session on the dashboard")
    host, port = feed.address.removeprefix("http://").rsplit(":", 1)
    trickle = attackers("trickle", host.strip("[]"), port, STRANGERS, FEED_PATH)
    opened = trickle.wait_for(lambda e: e.get("event") == "opened")
    assert opened["opened"] == STRANGERS
    # While they trickle in, the controller's fetches are served: no session shows a problem.
    for _ in range(3):
        panel = _sessions_panel(cluster)
        assert session["title"] in panel and PROBLEM not in panel, panel
        status, _ = _get(feed.address, FEED_PATH, cluster.token)
        assert status == 200
    # Every stranger is closed (evicted for a newer one, or at its head's deadline) long before
    # its head is complete: a byte every 2 s never extends a connection's time.
    [outcome] = trickle.run_to_exit()
    assert outcome["closed_by_server"] == STRANGERS, outcome
    assert outcome["most_bytes_sent"] < outcome["total"], outcome
    status, _ = _get(feed.address, FEED_PATH, None)
    assert status == 401
    panel = _sessions_panel(cluster)
    assert session["title"] in panel and PROBLEM not in panel
