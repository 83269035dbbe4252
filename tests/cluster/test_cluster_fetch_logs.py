"""finelog's FetchLogs on the embedded controller: the paths Iris clients use, compression both
ways, match scopes and filters on real task output; our client's fallback to GetTaskLogs."""

from __future__ import annotations

import gzip
import http.client
import json

import pytest
import zstandard
from cluster_helpers import job_name, sh, wait_finished

from fray_ray.cluster._http import alias_paths, build_app
from fray_ray.cluster._service import ControllerService, EndpointService, LogService
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.rpc import finelog_logging_pb2
from fray_ray.iris.rpc.finelog_logging_connect import LogServiceASGIApplication
from fray_ray.iris.transport import RpcServer, route_by_prefix

FetchLogsRequest = finelog_logging_pb2.FetchLogsRequest
FetchLogsResponse = finelog_logging_pb2.FetchLogsResponse
PATHS = (
    "/finelog.logging.LogService/FetchLogs",  # the June 2026 controller's (and finelog's own)
    "/iris.logging.LogService/FetchLogs",  # before finelog
    "/proxy/system.log-server/finelog.logging.LogService/FetchLogs",  # the newest clients'
)
EXACT, PREFIX, REGEX = (
    finelog_logging_pb2.MATCH_SCOPE_EXACT,
    finelog_logging_pb2.MATCH_SCOPE_PREFIX,
    finelog_logging_pb2.MATCH_SCOPE_REGEX,
)


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def fetch(cluster, request: FetchLogsRequest, path: str = PATHS[0], **headers: str) -> FetchLogsResponse:
    status, answer_headers, body = post(
        cluster.port,
        path,
        request.SerializeToString(),
        {"content-type": "application/proto", "authorization": f"Bearer {cluster.token}", **headers},
    )
    assert status == 200, body
    encoding = answer_headers.get("content-encoding", "identity")
    if encoding == "zstd":
        body = zstandard.ZstdDecompressor().decompress(body)
    elif encoding == "gzip":
        body = gzip.decompress(body)
    return FetchLogsResponse.FromString(body)


def error_of(cluster, request_body: bytes, **headers: str) -> str:
    status, _, body = post(
        cluster.port,
        PATHS[0],
        request_body,
        {"content-type": "application/proto", "authorization": f"Bearer {cluster.token}", **headers},
    )
    assert status != 200
    return json.loads(body)["code"]


@pytest.fixture
def chatty_job(client) -> str:
    """Two tasks; task 0 fails once, so it has attempts 0 and 1. Levels: a Python logging line
    and plain stdout/stderr lines."""
    script = (
        'i=${IRIS_TASK_ID%:*}; i=${i##*/}; a=${IRIS_TASK_ID##*:}; echo "out $i.$a"; echo "err $i.$a" >&2; '
        'echo "WARNING:root:careful $i.$a"; '
        'if [ "$i.$a" = "0.0" ]; then exit 1; fi'
    )
    job_id = client.launch_job(sh(script, name=job_name("fetch"), replicas=2, max_retries_failure=1))
    status = wait_finished(client, job_id)
    assert status.state.name == "SUCCEEDED", status
    return job_id


def test_every_path_and_encoding_serves_the_same_lines(cluster, chatty_job) -> None:
    request = FetchLogsRequest(source=f"{chatty_job}/", match_scope=PREFIX)
    seen = []
    for path in PATHS:
        for accept, expected in (("zstd, gzip", "zstd"), ("gzip", "gzip"), ("", "identity")):
            status, headers, _ = post(
                cluster.port,
                path,
                request.SerializeToString(),
                {
                    "content-type": "application/proto",
                    "authorization": f"Bearer {cluster.token}",
                    **({"accept-encoding": accept} if accept else {}),
                },
            )
            assert status == 200 and headers.get("content-encoding", "identity") == expected, (path, accept, headers)
            seen.append(fetch(cluster, request, path, **({"accept-encoding": accept} if accept else {})))
    assert all(response == seen[0] for response in seen)
    assert len(seen[0].entries) == 9  # three lines from each of three attempts
    # finelog clients compress their requests with zstd; gzip works too
    zstd_body = zstandard.ZstdCompressor().compress(request.SerializeToString())
    assert fetch_raw_body(cluster, zstd_body, "zstd") == seen[0]
    assert fetch_raw_body(cluster, gzip.compress(request.SerializeToString()), "gzip") == seen[0]


def fetch_raw_body(cluster, body: bytes, encoding: str) -> FetchLogsResponse:
    status, _, answer = post(
        cluster.port,
        PATHS[0],
        body,
        {"content-type": "application/proto", "authorization": f"Bearer {cluster.token}", "content-encoding": encoding},
    )
    assert status == 200, answer
    return FetchLogsResponse.FromString(answer)


def test_keys_scopes_and_filters_on_task_output(cluster, chatty_job) -> None:
    job = chatty_job
    every = fetch(cluster, FetchLogsRequest(source=f"{job}/", match_scope=PREFIX))
    assert {e.key for e in every.entries} == {f"{job}/0:0", f"{job}/0:1", f"{job}/1:0"}
    assert all(e.attempt_id == int(e.key.rpartition(":")[2]) for e in every.entries)
    assert {e.data for e in every.entries if e.key == f"{job}/0:1"} == {"out 0.1", "err 0.1", "WARNING:root:careful 0.1"}
    levels = {e.data.split(" ")[0]: e.level for e in every.entries}
    assert levels == {
        "out": finelog_logging_pb2.LOG_LEVEL_INFO,
        "err": finelog_logging_pb2.LOG_LEVEL_ERROR,
        "WARNING:root:careful": finelog_logging_pb2.LOG_LEVEL_WARNING,
    }

    def data(**fields: object) -> set[str]:
        return {e.data for e in fetch(cluster, FetchLogsRequest(**fields)).entries}

    assert data(source=f"{job}/0:1", match_scope=EXACT) == {"out 0.1", "err 0.1", "WARNING:root:careful 0.1"}
    assert data(source=f"{job}/0:", match_scope=PREFIX, substring="out") == {"out 0.0", "out 0.1"}
    assert data(source=f"{job}/[0-9]+:0$", match_scope=REGEX, substring="err") == {"err 0.0", "err 1.0"}
    assert data(source=f"{job}/1:.*", substring="out") == {"out 1.0"}  # the unset scope is REGEX
    assert data(source=f"{job}/", match_scope=PREFIX, min_level="warning") == {
        f"{kind} {n}" for kind in ("err", "WARNING:root:careful") for n in ("0.0", "0.1", "1.0")
    }
    # paging: oldest first, then on from the cursor; tail takes the newest
    first = fetch(cluster, FetchLogsRequest(source=f"{job}/", match_scope=PREFIX, max_lines=4))
    rest = fetch(cluster, FetchLogsRequest(source=f"{job}/", match_scope=PREFIX, cursor=first.cursor))
    assert list(first.entries) + list(rest.entries) == list(every.entries) and len(first.entries) == 4
    newest = fetch(cluster, FetchLogsRequest(source=f"{job}/", match_scope=PREFIX, max_lines=2, tail=True))
    assert list(newest.entries) == list(every.entries)[-2:] and newest.cursor == every.cursor
    newest_ms = max(e.timestamp.epoch_ms for e in every.entries)
    assert fetch(cluster, FetchLogsRequest(source=f"{job}/", match_scope=PREFIX, since_ms=newest_ms)).entries == []
    assert fetch(cluster, FetchLogsRequest(source="/tester/nothing/", match_scope=PREFIX)).entries == []


def test_bad_fetch_requests_get_clear_errors(make_cluster) -> None:
    cluster = make_cluster(read_max_bytes=65536)
    assert error_of(cluster, FetchLogsRequest(source="", match_scope=PREFIX).SerializeToString()) == "invalid_argument"
    assert error_of(cluster, FetchLogsRequest(source="/u/(", match_scope=REGEX).SerializeToString()) == "invalid_argument"
    assert error_of(cluster, FetchLogsRequest(source="/u/", min_level="LOUD").SerializeToString()) == "invalid_argument"
    assert error_of(cluster, b"\xff\xff\xff") == "invalid_argument"
    assert error_of(cluster, b"not zstd at all", **{"content-encoding": "zstd"}) == "invalid_argument"
    bomb = zstandard.ZstdCompressor().compress(b"\x00" * 50_000_000)
    assert len(bomb) < 65536  # a small body that would inflate to 50 MB
    assert error_of(cluster, bomb, **{"content-encoding": "zstd"}) == "resource_exhausted"
    assert error_of(cluster, b"", **{"content-encoding": "br"}) == "unimplemented"
    status, _, _ = post(cluster.port, PATHS[0], b"", {"content-type": "application/proto"})
    assert status == 401  # the log service needs the token like everything else
    with cluster.client() as client:
        assert client.job_states([]) == {}  # still serving


def test_client_reads_logs_through_fetch_logs(client, chatty_job) -> None:
    job = chatty_job
    lines = client.task_logs(job)
    assert sorted(l.data for l in lines if l.data.startswith("out")) == ["out 0.0", "out 0.1", "out 1.0"]
    assert {(l.task_id, l.attempt_id) for l in lines} == {(f"{job}/0", 0), (f"{job}/0", 1), (f"{job}/1", 0)}
    assert [l.data for l in client.task_logs(f"{job}/0:1") if l.source == "stdout"] == ["out 0.1", "WARNING:root:careful 0.1"]
    assert {l.attempt_id for l in client.task_logs(f"{job}/0", attempt_id=0)} == {0}
    assert {l.data for l in client.task_logs(job, attempt_id=1)} == {"out 0.1", "err 0.1", "WARNING:root:careful 0.1"}
    assert len(client.task_logs(job, max_lines=2)) == 2


def test_client_reads_everything_in_pages(client) -> None:
    job_id = client.launch_job(sh("seq 1 2500", name=job_name("long")))
    wait_finished(client, job_id)
    lines = client.task_logs(job_id)  # more than one FetchLogs page (1000 lines each)
    assert [l.data for l in lines] == [str(n) for n in range(1, 2501)]
    assert [l.data for l in client.task_logs(job_id, max_lines=3)] == ["2498", "2499", "2500"]


def test_client_falls_back_to_get_task_logs(cluster, client, chatty_job) -> None:
    """A controller from before finelog: only ControllerService (no log service routes)."""
    controller = cluster.controller
    app = build_app(ControllerService(controller), EndpointService(controller), token="t", read_max_bytes=1 << 20)
    with RpcServer(app, name="pre-finelog-controller") as server, ControllerClient(server.url, token="t") as old:
        lines = old.task_logs(chatty_job)
        assert sorted((l.task_id, l.data) for l in lines) == sorted((l.task_id, l.data) for l in client.task_logs(chatty_job))
        assert old.task_logs("/tester/nothing") == []


def test_client_finds_the_log_service_at_its_older_path(cluster, client, chatty_job) -> None:
    """A server with only `/iris.logging.LogService/FetchLogs` (no ControllerService at all)."""
    older = "/iris.logging.LogService/"
    log_app = LogServiceASGIApplication(LogService(cluster.controller))  # type: ignore[arg-type]
    app = route_by_prefix({older: alias_paths(log_app, {older: "/finelog.logging.LogService/"})})
    with RpcServer(app, name="older-log-service") as server, ControllerClient(server.url) as old:
        lines = old.task_logs(chatty_job)
        assert sorted((l.task_id, l.data) for l in lines) == sorted((l.task_id, l.data) for l in client.task_logs(chatty_job))
