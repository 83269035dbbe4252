"""Resolution of `current_client()`: explicit client, then Iris task context, then a LocalClient.

The Iris branch (IRIS_TASK_ID set, no explicit client) is covered with the Iris backend.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from fray_ray.fray import Entrypoint, JobRequest, LocalClient, current_client, set_current_client

DEADLINE = 20.0


def test_default_is_a_fresh_local_client() -> None:
    first = current_client()
    second = current_client()
    try:
        assert isinstance(first, LocalClient)
        assert first is not second  # not cached: each caller owns what it gets
    finally:
        first.shutdown()
        second.shutdown()


def test_default_does_not_need_the_iris_backend() -> None:
    # In a fresh interpreter where importing the Iris backend fails, the local default still works.
    script = textwrap.dedent(
        """
        import os, sys
        os.environ.pop("IRIS_TASK_ID", None)
        sys.modules["fray_ray.fray.iris_backend"] = None
        from fray_ray.fray import LocalClient, current_client
        client = current_client()
        client.shutdown()
        print(type(client).__name__)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "LocalClient"


def test_set_current_client_sets_and_restores(client: LocalClient) -> None:
    with set_current_client(client) as yielded:
        assert yielded is client
        assert current_client() is client
    restored = current_client()
    try:
        assert restored is not client
    finally:
        restored.shutdown()


def test_set_current_client_restores_after_exception(client: LocalClient) -> None:
    outer = LocalClient(max_threads=1)
    try:
        with set_current_client(outer):
            with pytest.raises(RuntimeError, match="inside"):
                with set_current_client(client):
                    assert current_client() is client
                    raise RuntimeError("inside")
            assert current_client() is outer
    finally:
        outer.shutdown()


def test_explicit_client_overrides_iris_detection(client: LocalClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_TASK_ID", "/alice/train/0:0")
    with set_current_client(client):
        assert current_client() is client


def test_explicit_client_is_per_thread_unless_context_is_copied(client: LocalClient) -> None:
    seen: list[object] = []
    with set_current_client(client):
        plain = threading.Thread(target=lambda: seen.append(current_client()))
        plain.start()
        plain.join(DEADLINE)
    try:
        # A bare thread starts with an empty context, so it resolves its own default.
        assert seen[0] is not client
    finally:
        seen[0].shutdown()  # type: ignore[attr-defined]


def test_jobs_see_the_submitters_client(client: LocalClient) -> None:
    chosen = LocalClient(max_threads=1)
    seen: list[object] = []
    try:
        with set_current_client(chosen):
            entrypoint = Entrypoint.from_callable(lambda: seen.append(current_client()))
            job = client.submit(JobRequest(name="sees", entrypoint=entrypoint))
        job.wait(timeout=DEADLINE)
        assert seen == [chosen]
    finally:
        chosen.shutdown()
