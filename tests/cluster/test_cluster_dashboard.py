"""The controller's dashboard: who it lets in, and what it shows of the cluster and its sessions."""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import job_name, sh, wait_finished, wait_for, wait_tasks

from fray_ray.cluster import EmbeddedCluster
from fray_ray.cluster._dashboard_auth import COOKIE_PREFIX, session_value
from fray_ray.cluster._dashboard_sessions import FeedError, parse_feed
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.types import JobState, TaskState


def call(
    cluster: EmbeddedCluster, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request, redirects not followed: (status, lower-cased headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def cookie_header(cluster: EmbeddedCluster, value: str) -> dict[str, str]:
    return {"cookie": f"{COOKIE_PREFIX}{cluster.port}={value}"}


def logged_in(cluster: EmbeddedCluster) -> dict[str, str]:
    """The cookie the token link sets, as a request header."""
    assert cluster.token is not None
    status, headers, _ = call(cluster, "/?token=" + cluster.token)
    assert status == 303
    name_value = headers["set-cookie"].split(";", 1)[0]
    return {"cookie": name_value}


# ---- refused access --------------------------------------------------------------------------


def test_without_a_session_the_page_is_a_login_form_and_the_api_refuses(make_cluster) -> None:
    cluster = make_cluster()
    with cluster.client() as client:
        job_id = client.launch_job(sh("echo secret-output", name=job_name("hidden-job")))
        wait_finished(client, job_id)
    status, headers, body = call(cluster, "/")
    assert status == 401
    page = body.decode()
    assert 'name="token"' in page and 'action="/login"' in page
    assert "hidden-job" not in page
    assert "set-cookie" not in headers
    for path in ("/dashboard/api/state", "/dashboard/api/panels", "/dashboard/api/sessions",
                 f"/dashboard/api/logs?job={urllib.parse.quote(job_id)}"):
        status, _, body = call(cluster, path)
        assert status == 401, path
        assert b"hidden-job" not in body and b"secret-output" not in body


def test_a_wrong_token_link_sets_no_cookie(make_cluster) -> None:
    cluster = make_cluster()
    status, headers, body = call(cluster, "/?token=" + "0" * 64)
    assert status == 401
    assert "set-cookie" not in headers
    assert b"not this cluster" in body


def test_forged_cookies_are_refused(make_cluster) -> None:
    cluster = make_cluster()
    assert cluster.token is not None
    forged = [
        session_value("a" * 64),  # a session of another token
        cluster.token,  # the raw token is not a session
        session_value(cluster.token)[:-1] + "0",  # one digit off
        "",
    ]
    for value in forged:
        if value == session_value(cluster.token):
            continue
        status, _, _ = call(cluster, "/dashboard/api/state", headers=cookie_header(cluster, value))
        assert status == 401, value
        status, _, body = call(cluster, "/", headers=cookie_header(cluster, value))
        assert status == 401 and b'name="token"' in body


def test_the_cookie_never_opens_rpc_routes(make_cluster) -> None:
    cluster = make_cluster()
    cookie = logged_in(cluster)
    request = controller_pb2.Controller.ListJobsRequest().SerializeToString()
    status, _, _ = call(
        cluster, "/iris.cluster.ControllerService/ListJobs", method="POST", body=request,
        headers={**cookie, "content-type": "application/proto"},
    )
    assert status == 401


def test_the_login_form_rejects_a_wrong_token_and_an_oversized_body(make_cluster) -> None:
    cluster = make_cluster()
    form = {"content-type": "application/x-www-form-urlencoded"}
    status, headers, body = call(cluster, "/login", method="POST", body=b"token=wrong", headers=form)
    assert status == 401 and "set-cookie" not in headers and b"Wrong token" in body
    status, headers, _ = call(cluster, "/login", method="POST", body=b"token=" + b"x" * 5000, headers=form)
    assert status == 413 and "set-cookie" not in headers
    # Declared too large: refused on the header, before a byte of the body is read.
    connection = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=30)
    try:
        connection.putrequest("POST", "/login")
        connection.putheader("content-length", str(10**9))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413
    finally:
        connection.close()


# ---- getting in ------------------------------------------------------------------------------


def test_the_token_link_sets_a_strict_http_only_session_cookie(make_cluster) -> None:
    cluster = make_cluster()
    assert cluster.token is not None and cluster.dashboard_url == f"{cluster.address}/?token={cluster.token}"
    status, headers, _ = call(cluster, "/?token=" + cluster.token)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    attributes = [part.strip() for part in cookie.split(";")]
    assert attributes[0] == f"{COOKIE_PREFIX}{cluster.port}={session_value(cluster.token)}"
    assert cluster.token not in cookie
    assert "HttpOnly" in attributes and "SameSite=Strict" in attributes
    status, headers, body = call(cluster, "/", headers={"cookie": attributes[0]})
    assert status == 200
    assert b"<h2>Cluster</h2>" in body and b"cpu-0" in body
    assert "script-src 'self'" in headers["content-security-policy"]


def test_the_login_form_opens_a_session(make_cluster) -> None:
    cluster = make_cluster()
    assert cluster.token is not None
    body = urllib.parse.urlencode({"token": cluster.token}).encode()
    status, headers, _ = call(
        cluster, "/login", method="POST", body=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert status == 303
    assert headers["set-cookie"].startswith(f"{COOKIE_PREFIX}{cluster.port}={session_value(cluster.token)};")


def test_scripts_may_use_the_bearer_token(make_cluster) -> None:
    cluster = make_cluster()
    status, _, body = call(cluster, "/dashboard/api/state", headers={"authorization": f"Bearer {cluster.token}"})
    assert status == 200
    assert json.loads(body)["cluster"]["workers"][0]["id"] == "cpu-0"


def test_without_auth_the_dashboard_is_open(make_cluster) -> None:
    cluster = make_cluster(auth=False)
    status, _, body = call(cluster, "/")
    assert status == 200 and b"<h2>Cluster</h2>" in body


def test_a_cluster_without_dashboard_serves_none(make_cluster) -> None:
    cluster = make_cluster(dashboard=False)
    assert cluster.dashboard_url is None
    status, _, _ = call(cluster, "/", headers={"authorization": f"Bearer {cluster.token}"})
    assert status == 501  # no service at / (the RPC router's answer)


def test_static_files_are_public_and_fixed(make_cluster) -> None:
    cluster = make_cluster()
    status, headers, body = call(cluster, "/dashboard/static/dashboard.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript") and b"fetch(" in body
    assert call(cluster, "/dashboard/static/../_dashboard.py")[0] == 404
    assert call(cluster, "/dashboard/static/nothing.js")[0] == 404


# ---- what it shows ---------------------------------------------------------------------------


def test_it_shows_workers_jobs_failures_and_logs(make_cluster) -> None:
    cluster = make_cluster()
    cookie = logged_in(cluster)
    with cluster.client() as client:
        failing = client.launch_job(sh("echo about to fail; exit 3", name=job_name("fails")))
        wait_finished(client, failing)
        running = client.launch_job(sh("echo '<b>started</b>'; exec sleep 60", name=job_name("runs")))
        wait_tasks(client, running, lambda tasks: tasks[0].state == TaskState.RUNNING)
        waiting = client.launch_job(sh("true", name=job_name("too-big"), resources=_cpu(4000)))

        def read_state() -> dict:
            return json.loads(call(cluster, f"/dashboard/api/state?job={urllib.parse.quote(failing)}", headers=cookie)[2])

        def judged() -> dict | None:  # the state once the scheduler's pass has said why the big job waits
            state = read_state()
            reasons = [p["reason"] for p in state["cluster"]["pending"] if p["job"] == waiting]
            return state if reasons and "cpu" in reasons[0] else None

        state = wait_for(judged, what="the big job's reason")
        workers = state["cluster"]["workers"]
        assert workers[0]["used"]["CPU"] == pytest.approx(0.1) and workers[0]["running"] == 1
        jobs = {job["id"]: job for job in state["cluster"]["jobs"]}
        assert jobs[failing]["state"] == "failed" and jobs[failing]["exit_code"] == 3
        assert jobs[running]["state"] == "running"
        pending = [p for p in state["cluster"]["pending"] if p["job"] == waiting]
        assert pending and pending[0]["shape"]["CPU"] == 4.0 and "cpu" in pending[0]["reason"]
        task = state["job"]["task_list"][0]
        assert task["state"] == "failed" and task["exit_code"] == 3 and "exit code 3" in task["error"]

        panels = json.loads(call(cluster, f"/dashboard/api/panels?job={urllib.parse.quote(failing)}", headers=cookie)[2])
        assert "exit code 3" in panels["job"] and "failed" in panels["job"]
        assert "too-big" in panels["cluster"]

        logs = wait_for(lambda: (page := json.loads(
            call(cluster, f"/dashboard/api/logs?job={urllib.parse.quote(running)}", headers=cookie)[2]
        ))["lines"] and page, what="the running job's first line")
        assert [line["text"] for line in logs["lines"]] == ["<b>started</b>"] and logs["cursor"] > 0
        again = call(cluster, f"/dashboard/api/logs?job={urllib.parse.quote(running)}&cursor={logs['cursor']}",
                     headers=cookie)
        assert json.loads(again[2])["lines"] == []
        client.terminate_job(running)
        client.terminate_job(waiting)


def test_a_bad_job_argument_is_a_clear_error(make_cluster) -> None:
    cluster = make_cluster()
    status, _, body = call(cluster, "/dashboard/api/state?job=not-a-job", headers=logged_in(cluster))
    assert status == 400 and b"job" in body
    status, _, body = call(cluster, "/?job=%00", headers=logged_in(cluster))
    assert status == 200  # the page still renders, without a job


def _cpu(millicores: int) -> Any:
    from fray_ray.iris.types import ResourceSpec

    return ResourceSpec(cpu_millicores=millicores)


# ---- Ray sessions panel ----------------------------------------------------------------------


class _Feed(http.server.BaseHTTPRequestHandler):
    token = ""
    document: Any = {}
    seen_authorization: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen_authorization.append(self.headers.get("authorization", ""))
        if self.headers.get("authorization") != f"Bearer {self.token}" or self.path != "/dashboard.json":
            self.send_error(401)
            return
        body = json.dumps(self.document).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def feed_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Feed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_sessions_panel_renders_feeds_and_survives_unreachable_ones(make_cluster, feed_server) -> None:
    cluster = make_cluster()
    cookie = logged_in(cluster)
    _Feed.token = cluster.token or ""
    _Feed.document = {
        "title": "Ray session <one>",
        "sections": [{"title": "Actors", "columns": ["name", "state", "restarts"], "rows": [["Counter", "ALIVE", 0]]}],
    }
    with cluster.client() as client:
        good = client.launch_job(sh("exec sleep 60", name=job_name("session-good")))
        dead = client.launch_job(sh("exec sleep 60", name=job_name("session-dead")))
        for job_id in (good, dead):
            wait_tasks(client, job_id, lambda tasks: tasks[0].state == TaskState.RUNNING)
        client.register_endpoint(f"{good}/fray-ray-dashboard", f"http://127.0.0.1:{feed_server.server_port}",
                                 task_id=f"{good}/0", attempt_id=0)
        closed = http.server.HTTPServer(("127.0.0.1", 0), _Feed)
        closed_port = closed.server_port
        closed.server_close()
        client.register_endpoint(f"{dead}/fray-ray-dashboard", f"http://127.0.0.1:{closed_port}",
                                 task_id=f"{dead}/0", attempt_id=0)
        status, _, body = call(cluster, "/dashboard/api/sessions", headers=cookie)
        assert status == 200
        html = json.loads(body)["html"]
        assert "Ray session &lt;one&gt;" in html and "Counter" in html and "ALIVE" in html
        assert dead in html and "unreachable" in html
        assert _Feed.seen_authorization[-1] == f"Bearer {cluster.token}"
        status, _, page = call(cluster, "/", headers=cookie)
        assert status == 200 and b"Counter" in page and b"unreachable" in page
        client.terminate_job(good)
        client.terminate_job(dead)
        wait_for(lambda: client.job_state(good) == JobState.KILLED)


def test_feed_documents_are_checked() -> None:
    title, sections = parse_feed({"title": "t", "sections": [{"title": "s", "columns": ["a"], "rows": [[1], [None]]}]})
    assert title == "t" and sections[0].rows == ((1,), (None,))
    for bad in ([], {"title": 3}, {"sections": {}}, {"sections": [{"title": "s", "columns": [1], "rows": []}]},
                {"sections": [{"title": "s", "columns": ["a"], "rows": [[{"nested": 1}]]}]}):
        with pytest.raises(FeedError):
            parse_feed(bad)
