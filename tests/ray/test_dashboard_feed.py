"""A Ray session on its cluster's dashboard: the driver's feed, its registration, Ray's options."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.driver.dashboard_feed import FEED_ENDPOINT, DashboardFeed
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 60.0, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}; last {value!r}")
        time.sleep(0.05)


def get(url: str, path: str, *, method: str = "GET", token: str | None = None) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, headers={"authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# ---- the feed server -------------------------------------------------------------------------


def _feed(sections: Callable[[], list[dict[str, Any]]], registered: list[tuple[str, str]]) -> DashboardFeed:
    return DashboardFeed(
        sections, title="a session", token="secret", host="127.0.0.1", advertise_host="127.0.0.1",
        job_id=lambda: "/tester/session-1",
        register=lambda job_id, address: registered.append((job_id, address)) or "endpoint-1",
        unregister=lambda endpoint_id: registered.append(("unregistered", endpoint_id)),
    )


def test_the_feed_serves_its_sections_only_with_the_token() -> None:
    registered: list[tuple[str, str]] = []
    rows = [["Counter", "ALIVE"]]
    feed = _feed(lambda: [{"title": "Actors", "columns": ["class", "state"], "rows": rows}], registered).start()
    try:
        wait_for(lambda: registered, what="the registration")
        assert registered == [("/tester/session-1", feed.address)]
        assert get(feed.address, "/dashboard.json")[0] == 401
        assert get(feed.address, "/dashboard.json", token="wrong")[0] == 401
        assert get(feed.address, "/other", token="secret")[0] == 404
        assert get(feed.address, "/dashboard.json", method="POST", token="secret")[0] == 405
        status, body = get(feed.address, "/dashboard.json", token="secret")
        assert status == 200
        assert json.loads(body) == {"title": "a session", "sections": [
            {"title": "Actors", "columns": ["class", "state"], "rows": [["Counter", "ALIVE"]]}]}
    finally:
        feed.close()
    assert registered[-1] == ("unregistered", "endpoint-1")


def test_the_feed_serves_state_rows_by_kind_only_with_the_token() -> None:
    asked: list[str] = []

    def state(kind: str) -> list[dict[str, Any]] | None:
        asked.append(kind)
        if kind == "broken":
            raise RuntimeError("rows unreadable")
        return [{"actor_id": "ab" * 16, "state": "ALIVE"}] if kind == "actors" else None

    feed = DashboardFeed(
        lambda: [], title="a session", token="secret", host="127.0.0.1", advertise_host="127.0.0.1",
        job_id=lambda: None, register=lambda job_id, address: "endpoint-1", unregister=lambda endpoint_id: None,
        state=state, session="session-1234abcd",
    ).start()
    try:
        assert get(feed.address, "/state/actors")[0] == 401
        assert get(feed.address, "/state/actors", token="wrong")[0] == 401
        assert asked == []  # refused before anything is read
        assert get(feed.address, "/state/actors", method="POST", token="secret")[0] == 405
        status, body = get(feed.address, "/state/actors", token="secret")
        assert status == 200
        assert json.loads(body) == {"session": "session-1234abcd", "rows": [{"actor_id": "ab" * 16, "state": "ALIVE"}]}
        status, body = get(feed.address, "/state/volcanoes", token="secret")
        assert status == 404 and b"tasks, actors, objects, placement_groups" in body
        status, body = get(feed.address, "/state/broken", token="secret")
        assert status == 500 and b"rows unreadable" in body
        assert get(feed.address, "/state/actors", token="secret")[0] == 200  # still serving
    finally:
        feed.close()


def test_a_feed_without_a_state_reader_answers_404() -> None:
    feed = _feed(lambda: [], []).start()
    try:
        assert get(feed.address, "/state/actors", token="secret")[0] == 404
    finally:
        feed.close()


def test_the_state_reader_reads_the_drivers_rows_by_kind() -> None:
    from fray_ray._private.driver.state_feed import STATE_KINDS, state_kind, state_reader

    class Driver:
        pass

    read = state_reader(Driver())
    assert read("nodes") is None and read("../actors") is None  # only the four session kinds
    assert set(STATE_KINDS) == {"tasks", "actors", "objects", "placement_groups"}
    assert state_kind("/state/tasks") == "tasks" and state_kind("/dashboard.json") is None


def test_a_failing_section_source_is_an_error_answer_not_a_dead_server() -> None:
    calls = []

    def sections() -> list[dict[str, Any]]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("not yet")
        return []

    feed = _feed(sections, []).start()
    try:
        status, body = get(feed.address, "/dashboard.json", token="secret")
        assert status == 500 and b"not yet" in body
        assert get(feed.address, "/dashboard.json", token="secret")[0] == 200
    finally:
        feed.close()


def test_a_closed_feed_releases_its_port() -> None:
    feed = _feed(lambda: [], []).start()
    address = feed.address
    feed.close()
    host, port = address.removeprefix("http://").rsplit(":", 1)
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=5).close()


# ---- a session on its cluster's dashboard -----------------------------------------------------


def _sessions_html(address: str, token: str | None) -> str:
    status, body = get(address, "/dashboard/api/sessions", token=token)
    assert status == 200
    return json.loads(body)["html"]


@pytest.mark.usefixtures("fresh_shutdown")
def test_init_with_include_dashboard_shows_the_session_and_shutdown_removes_it(capsys) -> None:
    context = fray_ray.init(num_cpus=2, include_dashboard=True)
    cluster = runtime_state.current()._owned[0]
    assert context.dashboard_url == cluster.address.removeprefix("http://")
    assert f"the dashboard is at {cluster.dashboard_url}" in capsys.readouterr().err

    @fray_ray.remote
    class Counter:
        def add(self) -> int:
            return 1

    @fray_ray.remote(max_retries=0)
    def explode() -> None:
        raise ValueError("boom for the dashboard")

    @fray_ray.remote
    def count_rows(n: int) -> int:
        from fray_ray.util.metrics import Counter as MetricCounter

        MetricCounter("dashboard_rows", tag_keys=("stage",)).inc(n, tags={"stage": "load"})
        return n

    counter = Counter.remote()
    assert fray_ray.get(counter.add.remote()) == 1
    assert fray_ray.get(count_rows.remote(3)) == 3
    failed = explode.remote()
    with pytest.raises(ValueError):
        fray_ray.get(failed)
    html = wait_for(lambda: (text := _sessions_html(cluster.address, cluster.token)) and "ALIVE" in text and text,
                    what="the session's feed on the dashboard")
    assert "Counter" in html and "ValueError: boom for the dashboard" in html
    lease_job = runtime_state.current().launcher.lease.job_id
    # The task's metric, in the session's section and at the controller's /metrics (one scrape
    # target for every session, each sample labelled with its session), behind the token.
    sample = f'ray_dashboard_rows{{session="{lease_job}",stage="load"}} 3.0'
    scraped = wait_for(lambda: (answer := get(cluster.address, "/metrics", token=cluster.token))[0] == 200
                       and sample in answer[1].decode() and answer[1].decode(), what="the metric at /metrics")
    assert "# TYPE ray_dashboard_rows counter" in scraped and "fray_ray_dashboard_unreachable_sessions 0" in scraped
    assert get(cluster.address, "/metrics")[0] == 401
    assert "dashboard_rows" in _sessions_html(cluster.address, cluster.token)
    feed = runtime_state.current().dashboard_feed
    # The same session's state rows, as `fray-ray list` reads them.
    status, body = get(feed.address, "/state/tasks", token=cluster.token)
    assert status == 200
    state = json.loads(body)
    assert state["session"] == runtime_state.current().session_name
    [failed_row] = [row for row in state["rows"] if row["state"] == "FAILED"]
    assert failed_row["func_or_class_name"].endswith("explode") and "boom for the dashboard" in failed_row["error_message"]
    status, body = get(feed.address, "/state/actors", token=cluster.token)
    assert status == 200 and [row["state"] for row in json.loads(body)["rows"]] == ["ALIVE"]
    assert get(feed.address, "/state/tasks")[0] == 401
    with cluster.client() as client:
        endpoints = client.list_endpoints(f"{lease_job}/{FEED_ENDPOINT}", exact=True)
        assert [e.address for e in endpoints] == [feed.address]
    feed_address = feed.address
    fray_ray.shutdown()
    host, port = feed_address.removeprefix("http://").rsplit(":", 1)
    with pytest.raises(OSError):  # the feed stopped serving with the session
        socket.create_connection((host, int(port)), timeout=5).close()


@pytest.mark.usefixtures("fresh_shutdown")
def test_a_session_on_a_cluster_started_elsewhere_shows_without_asking() -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        fray_ray.init(address=cluster.address, token=cluster.token)

        @fray_ray.remote
        class Holder:
            def ping(self) -> str:
                return "pong"

        holder = Holder.remote()
        assert fray_ray.get(holder.ping.remote()) == "pong"
        wait_for(lambda: "ALIVE" in _sessions_html(cluster.address, cluster.token), what="the session's feed")
        lease_job = runtime_state.current().launcher.lease.job_id
        fray_ray.shutdown()
        with cluster.client() as client:
            assert client.list_endpoints(f"{lease_job}/{FEED_ENDPOINT}", exact=True) == []
        assert "No Ray session" in _sessions_html(cluster.address, cluster.token)


@pytest.mark.usefixtures("fresh_shutdown")
def test_default_init_serves_the_dashboard_but_starts_no_session_job() -> None:
    context = fray_ray.init(num_cpus=1)
    runtime = runtime_state.current()
    cluster = runtime._owned[0]
    assert runtime.dashboard_feed is None and runtime.launcher.lease.job_id is None
    assert context.dashboard_url == cluster.address.removeprefix("http://")
    assert get(cluster.address, "/", token=cluster.token)[0] == 200


@pytest.mark.usefixtures("fresh_shutdown")
def test_include_dashboard_false_serves_none() -> None:
    context = fray_ray.init(num_cpus=1, include_dashboard=False)
    cluster = runtime_state.current()._owned[0]
    assert context.dashboard_url == "" and cluster.dashboard_url is None
    assert get(cluster.address, "/", token=cluster.token)[0] == 501


@pytest.mark.usefixtures("fresh_shutdown")
def test_dashboard_port_and_host_choose_where_the_embedded_controller_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = fray_ray.init(num_cpus=1, dashboard_host="127.0.0.1", dashboard_port=port)
    assert context.dashboard_url == f"127.0.0.1:{port}"
    assert runtime_state.current()._owned[0].port == port


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"include_dashboard": "yes"}, TypeError),
        ({"dashboard_port": 70000}, ValueError),
        ({"dashboard_port": "8265"}, ValueError),
        ({"dashboard_host": ""}, TypeError),
    ],
)
@pytest.mark.usefixtures("fresh_shutdown")
def test_bad_dashboard_options_fail_before_anything_starts(options: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        fray_ray.init(num_cpus=1, **options)
    assert not fray_ray.is_initialized()
