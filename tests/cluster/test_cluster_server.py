"""The controller's HTTP surface: auth, Connect encodings, and bodies that must not hurt it."""

from __future__ import annotations

import gzip
import http.client
import json
import socket

import pytest
from cluster_helpers import job_name, sh, wait_finished

from fray_ray.cluster._http import build_app
from fray_ray.cluster._service import ControllerService, EndpointService
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.errors import IrisRpcError, Unauthenticated
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.transport import RpcServer
from fray_ray.iris.types import JobState

Controller = controller_pb2.Controller
STATE_PATH = "/iris.cluster.ControllerService/GetJobState"


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def proto_headers(token: str | None, **extra: str) -> dict[str, str]:
    headers = {"content-type": "application/proto", **extra}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def error_code(body: bytes) -> str:
    return json.loads(body)["code"]


def assert_still_serving(cluster) -> None:
    with cluster.client() as client:
        assert client.job_states([]) == {}


def test_every_rpc_needs_the_token(cluster) -> None:
    assert cluster.token and len(cluster.token) >= 32
    for token in (None, "wrong-token"):
        with ControllerClient(cluster.address, token=token) as anonymous:
            with pytest.raises(Unauthenticated):
                anonymous.job_states([])
            with pytest.raises(Unauthenticated):
                anonymous.list_endpoints("/")
            assert anonymous.healthy()  # /health is public
    status, body = post(cluster.port, "/iris.cluster.EndpointService/ListEndpoints", b"", proto_headers(None))
    assert status == 401 and error_code(body) == "unauthenticated"
    assert_still_serving(cluster)


def test_auth_can_be_disabled_explicitly(make_cluster) -> None:
    cluster = make_cluster(auth=False)
    assert cluster.token is None
    with ControllerClient(cluster.address) as client:
        job_id = client.launch_job(sh('test -z "$IRIS_AUTH_TOKEN"', name=job_name("open")))
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED


def test_json_encoding(cluster) -> None:
    with cluster.client() as client:
        job_id = client.launch_job(sh("true", name=job_name("json")))
        wait_finished(client, job_id)
    headers = {"content-type": "application/json", "authorization": f"Bearer {cluster.token}"}
    status, body = post(cluster.port, STATE_PATH, json.dumps({"jobIds": [job_id, "/x/y"]}).encode(), headers)
    assert status == 200 and json.loads(body) == {"states": {job_id: "JOB_STATE_SUCCEEDED"}}


def test_malformed_bodies_get_invalid_argument(cluster) -> None:
    status, body = post(cluster.port, STATE_PATH, b"\xff\xff\xff\xff garbage", proto_headers(cluster.token))
    assert status == 400 and error_code(body) == "invalid_argument"
    headers = {"content-type": "application/json", "authorization": f"Bearer {cluster.token}"}
    for bad in (b"{not json", b'{"noSuchField": 1}', b'{"jobIds": 5}'):
        status, body = post(cluster.port, STATE_PATH, bad, headers)
        assert error_code(body) == "invalid_argument", bad
    status, body = post(cluster.port, STATE_PATH, b"", proto_headers(cluster.token, **{"content-encoding": "br"}))
    assert error_code(body) == "unimplemented"
    status, body = post(cluster.port, "/iris.cluster.ControllerService/NoSuchMethod", b"", proto_headers(cluster.token))
    assert status >= 400
    assert_still_serving(cluster)


def test_oversized_and_compressed_bodies(make_cluster) -> None:
    cluster = make_cluster(read_max_bytes=65536)
    big = Controller.GetJobStateRequest(job_ids=["/u/" + "x" * 100] * 1000).SerializeToString()
    assert len(big) > 65536
    status, body = post(cluster.port, STATE_PATH, big, proto_headers(cluster.token))
    assert error_code(body) == "resource_exhausted"
    # no content-length: the limit holds while streaming
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=10)
    try:
        conn.request("POST", STATE_PATH, body=iter([big[:30000], big[30000:]]), headers=proto_headers(cluster.token))
        response = conn.getresponse()
        assert error_code(response.read()) == "resource_exhausted"
    finally:
        conn.close()
    bomb = gzip.compress(b"\x00" * 50_000_000)
    assert len(bomb) < 65536  # a small body that would inflate to 50 MB
    status, body = post(cluster.port, STATE_PATH, bomb, proto_headers(cluster.token, **{"content-encoding": "gzip"}))
    assert error_code(body) == "resource_exhausted"
    small = gzip.compress(Controller.GetJobStateRequest(job_ids=["/u/j"]).SerializeToString())
    status, body = post(cluster.port, STATE_PATH, small, proto_headers(cluster.token, **{"content-encoding": "gzip"}))
    assert status == 200 and Controller.GetJobStateResponse.FromString(body).states == {}
    assert_still_serving(cluster)


def test_truncated_and_abandoned_requests(cluster) -> None:
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", cluster.port), timeout=5) as sock:
            sock.sendall(
                f"POST {STATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\n"
                f"Authorization: Bearer {cluster.token}\r\nContent-Length: 1000\r\n\r\n".encode()
                + b"\x0a\x03abc"
            )
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=5) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        sock.recv(1024)
    assert_still_serving(cluster)


class _BrokenController:
    """A controller whose job lookups crash, to prove handler bugs become `internal` errors."""

    def job_states(self, job_ids):
        raise RuntimeError("simulated bug")

    def list_endpoints(self, request):
        return Controller.ListEndpointsResponse()


def test_handler_exceptions_become_internal_errors() -> None:
    broken = _BrokenController()
    app = build_app(ControllerService(broken), EndpointService(broken), token="t", read_max_bytes=1 << 20)  # type: ignore[arg-type]
    with RpcServer(app, name="broken-controller") as server, ControllerClient(server.url, token="t") as client:
        for _ in range(2):
            with pytest.raises(IrisRpcError) as info:
                client.job_states(["/u/j"])
            assert info.value.code == "internal" and "simulated bug" in info.value.message
        assert client.list_endpoints("/") == []  # still serving
