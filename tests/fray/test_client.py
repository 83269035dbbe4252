"""The `Client` job contract (run against LocalClient), its errors, and `wait_all`."""

from __future__ import annotations

import ast
import pickle
import sys
import threading
from pathlib import Path

import pytest

import fray_ray
from fray_ray.fray import (
    Client,
    Entrypoint,
    JobAlreadyExists,
    JobFailed,
    JobHandle,
    JobRequest,
    JobStatus,
    LocalClient,
    wait_all,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for import_graph
from import_graph import import_cycles  # noqa: E402

DEADLINE = 20.0


def _request(name: str, fn, *args) -> JobRequest:
    return JobRequest(name=name, entrypoint=Entrypoint.from_callable(fn, args=args))


def _succeed() -> None:
    pass


def _fail() -> None:
    raise RuntimeError("intentional failure")


def _block(gate: threading.Event) -> None:
    assert gate.wait(DEADLINE), "test never opened the gate"


@pytest.fixture
def gate() -> threading.Event:
    """An Event that jobs wait on; opened at teardown at the latest, so no job outlives a test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def gated(client: LocalClient, gate: threading.Event):
    """Submit a job that runs until `gate` opens. Opens the gate before the client shuts down."""

    def submit(name: str, **kwargs) -> JobHandle:
        return client.submit(_request(name, _block, gate), **kwargs)

    yield submit
    gate.set()


def test_local_client_satisfies_the_protocols(client: LocalClient) -> None:
    assert isinstance(client, Client)
    assert isinstance(client.submit(_request("p", _succeed)), JobHandle)


def test_submit_callable_succeeds(client: LocalClient) -> None:
    job = client.submit(_request("ok", _succeed))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert job.status() is JobStatus.SUCCEEDED


def test_submit_callable_failure(client: LocalClient) -> None:
    job = client.submit(_request("bad", _fail))
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    assert job.status() is JobStatus.FAILED


def test_submit_callable_failure_raises_the_original_exception(client: LocalClient) -> None:
    job = client.submit(_request("bad", _fail))
    with pytest.raises(RuntimeError, match="intentional failure"):
        job.wait(timeout=DEADLINE)


def test_job_id_contains_name(client: LocalClient) -> None:
    job = client.submit(_request("my-named-job", _succeed))
    assert "my-named-job" in job.job_id
    job.wait(timeout=DEADLINE)


def test_status_transitions(client: LocalClient, gate: threading.Event, gated) -> None:
    job = gated("transitions")
    assert job.status() in (JobStatus.PENDING, JobStatus.RUNNING)
    gate.set()
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED


def test_status_is_pending_while_queued() -> None:
    gate = threading.Event()
    with LocalClient(max_threads=1) as client:
        try:
            first = client.submit(_request("first", _block, gate))
            second = client.submit(_request("second", _succeed))
            assert second.status() is JobStatus.PENDING
        finally:
            gate.set()
        assert wait_all([first, second], timeout=DEADLINE) == [JobStatus.SUCCEEDED] * 2


def test_wait_times_out(client: LocalClient, gated) -> None:
    job = gated("slow")
    with pytest.raises(TimeoutError, match="slow"):
        job.wait(timeout=0.05)


def test_terminate_marks_stopped_while_thread_still_runs(client: LocalClient, gate: threading.Event) -> None:
    started = threading.Event()
    finished = threading.Event()

    def work() -> None:
        started.set()
        gate.wait(DEADLINE)
        finished.set()

    job = client.submit(_request("stoppable", work))
    assert started.wait(DEADLINE)
    job.terminate()
    assert job.status() is JobStatus.STOPPED
    assert not finished.is_set()  # a thread cannot be killed: it is still inside work()
    assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED  # STOPPED is returned, not raised
    gate.set()
    assert finished.wait(DEADLINE)
    assert job.status() is JobStatus.STOPPED  # the late success does not overwrite STOPPED


# -- names: unique among unfinished jobs --------------------------------------------------------


def test_adopt_existing_returns_the_running_job(client: LocalClient, gate: threading.Event, gated) -> None:
    first = gated("shared")
    again = client.submit(_request("shared", _fail), adopt_existing=True)
    assert again.job_id == first.job_id
    gate.set()
    assert again.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED  # the first job's outcome, not _fail's


def test_job_already_exists_carries_handle(client: LocalClient, gated) -> None:
    first = gated("unique")
    with pytest.raises(JobAlreadyExists) as info:
        client.submit(_request("unique", _succeed), adopt_existing=False)
    assert info.value.job_name == "unique"
    assert info.value.handle is not None
    assert info.value.handle.job_id == first.job_id


def test_job_already_exists_without_handle() -> None:
    error = JobAlreadyExists("orphan")
    assert (error.job_name, error.handle) == ("orphan", None)
    assert "orphan" in str(error)


@pytest.mark.parametrize("adopt", [False, True])
def test_finished_job_name_can_be_reused(client: LocalClient, adopt: bool) -> None:
    first = client.submit(_request("again", _succeed), adopt_existing=adopt)
    assert first.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    second = client.submit(_request("again", _succeed), adopt_existing=adopt)
    assert second.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert second.job_id != first.job_id


def test_name_with_spaces_is_rejected() -> None:
    with pytest.raises(ValueError, match="spaces"):
        _request("has a space", _succeed)


# -- errors -------------------------------------------------------------------------------------


def test_job_failed_carries_id_and_status_and_pickles() -> None:
    error = JobFailed("local-x-1234", JobStatus.FAILED)
    assert (error.job_id, error.failed_status) == ("local-x-1234", JobStatus.FAILED)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.job_id, copy.failed_status) == ("local-x-1234", JobStatus.FAILED)
    assert isinstance(error, RuntimeError)


# -- wait_all -----------------------------------------------------------------------------------


def test_wait_all_all_succeed(client: LocalClient) -> None:
    jobs = [client.submit(_request(f"all-{i}", _succeed)) for i in range(5)]
    assert wait_all(jobs, timeout=DEADLINE) == [JobStatus.SUCCEEDED] * 5


def test_wait_all_mixed_failure_raises_job_failed(client: LocalClient) -> None:
    good = client.submit(_request("good", _succeed))
    bad = client.submit(_request("bad", _fail))
    with pytest.raises(JobFailed) as info:
        wait_all([good, bad], timeout=DEADLINE)
    assert info.value.job_id == bad.job_id
    assert info.value.failed_status is JobStatus.FAILED


def test_wait_all_treats_stopped_as_failure(client: LocalClient, gated) -> None:
    job = gated("to-stop")
    job.terminate()
    with pytest.raises(JobFailed) as info:
        wait_all([job], timeout=DEADLINE)
    assert info.value.failed_status is JobStatus.STOPPED


def test_wait_all_no_raise_returns_statuses_in_input_order(client: LocalClient) -> None:
    jobs = [
        client.submit(_request("n0", _fail)),
        client.submit(_request("n1", _succeed)),
        client.submit(_request("n2", _fail)),
    ]
    statuses = wait_all(jobs, timeout=DEADLINE, raise_on_failure=False)
    assert statuses == [JobStatus.FAILED, JobStatus.SUCCEEDED, JobStatus.FAILED]


def test_wait_all_empty() -> None:
    assert wait_all([]) == []


def test_wait_all_timeout(client: LocalClient, gated) -> None:
    quick = client.submit(_request("quick", _succeed))
    slow = gated("slow")
    with pytest.raises(TimeoutError, match=slow.job_id):
        wait_all([quick, slow], timeout=0.2)
    slow.terminate()  # still controllable after the timeout
    assert slow.status() is JobStatus.STOPPED


class _ScriptedHandle:
    """A JobHandle whose status() walks through a fixed list; counts polls."""

    def __init__(self, job_id: str, statuses: list[JobStatus]) -> None:
        self.job_id = job_id
        self._statuses = statuses
        self.polls = 0

    def status(self) -> JobStatus:
        status = self._statuses[min(self.polls, len(self._statuses) - 1)]
        self.polls += 1
        return status


def test_wait_all_stops_polling_finished_jobs() -> None:
    done = _ScriptedHandle("done", [JobStatus.SUCCEEDED])
    later = _ScriptedHandle("later", [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED])
    assert wait_all([later, done], timeout=DEADLINE) == [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]
    assert done.polls == 1
    assert later.polls == 3


# -- layering -----------------------------------------------------------------------------------


def _fray_ray_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name for name in names if name == "fray_ray" or name.startswith("fray_ray.")}


def test_fray_layer_imports_only_itself_and_iris() -> None:
    package = Path(fray_ray.__file__).parent
    for path in sorted((package / "fray").glob("*.py")):
        for name in _fray_ray_imports(path):
            assert name.startswith(("fray_ray.fray", "fray_ray.iris")), f"{path.name} imports {name}"
    for path in sorted((package / "iris").rglob("*.py")):
        for name in _fray_ray_imports(path):  # neither the Fray layer nor the Ray layer above it
            assert name.startswith("fray_ray.iris"), f"{path} imports {name}"


def test_fray_package_has_no_import_cycle() -> None:
    # Every import counts, also those inside functions and under TYPE_CHECKING.
    package = Path(fray_ray.__file__).parent / "fray"
    assert import_cycles(package, "fray_ray.fray") == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    assert import_cycles(tmp_path, "pkg") == [["pkg.a", "pkg.b"]]
