"""Job, task and attempt names."""

from __future__ import annotations

import pytest

from fray_ray.iris.names import (
    MAX_JOB_NAME_BYTES,
    MAX_SEGMENT_BYTES,
    JobName,
    TaskAttempt,
    TaskName,
    resolve_job_user,
    validate_endpoint_name,
)


def test_root_and_child_names() -> None:
    root = JobName.from_wire("/alice/train")
    assert root.is_root and root.depth == 1 and root.user == "alice" and root.name == "train"
    child = root.child("eval")
    assert child.wire == "/alice/train/eval" and child.parent == root and child.depth == 2
    assert child.namespace == "/alice/train" and root.is_ancestor_of(child) and not child.is_ancestor_of(root)


def test_task_and_attempt_round_trip() -> None:
    task = JobName.from_wire("/alice/train").task(3)
    assert task.wire == "/alice/train/3"
    attempt = TaskAttempt.from_wire("/alice/train/3:2")
    assert attempt.task == task and attempt.attempt_id == 2 and attempt.wire == "/alice/train/3:2"
    assert TaskAttempt.from_wire("/alice/train/3").attempt_id == 0  # older Iris omits :0
    assert TaskName.from_wire("/alice/train/eval/0").job.wire == "/alice/train/eval"


@pytest.mark.parametrize("wire", ["", "alice/train", "/alice", "/alice//train", "/alice/my job", "/alice/ "])
def test_malformed_job_names_are_rejected(wire: str) -> None:
    with pytest.raises(ValueError):
        JobName.from_wire(wire)


def test_child_segment_with_space_or_slash_is_rejected() -> None:
    root = JobName.root("alice", "train")
    for bad in ("has space", "a/b", "", ":x"):
        with pytest.raises(ValueError, match="invalid job name segment"):
            root.child(bad)


@pytest.mark.parametrize("wire", ["/alice/train/x:1", "/alice/train/0:x", "/alice/0"])
def test_malformed_task_attempts_are_rejected(wire: str) -> None:
    with pytest.raises(ValueError):
        TaskAttempt.from_wire(wire)


def test_user_comes_from_iris_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_USER", "bob")
    assert resolve_job_user() == "bob"
    monkeypatch.setenv("IRIS_USER", "a b/c")
    assert resolve_job_user() == "a_b_c"


@pytest.mark.parametrize(
    "wire",
    [
        "/user/../../etc",
        "/user/a/..",
        "/user/./job",
        "/../job",
        "/user/job\x00x",
        "/user/jo\x07b",
        "/user/job\u2028x",
        "/user/job\u202ex",  # a right-to-left override: a format character, not printable
        "/user/" + "j" * 256,
        "/user/" + "/".join(["abcdefghij"] * 100),  # every segment fine, the whole too long
        "/user/" + "x" * 10_000,
    ],
)
def test_traversal_control_and_oversized_job_names_are_rejected(wire: str) -> None:
    with pytest.raises(ValueError):
        JobName.from_wire(wire)


def test_limits_are_inclusive_and_unicode_is_counted_in_bytes() -> None:
    assert JobName.from_wire("/user/" + "j" * MAX_SEGMENT_BYTES).name == "j" * MAX_SEGMENT_BYTES
    with pytest.raises(ValueError, match="longer than 255 bytes"):
        JobName.from_wire("/user/" + "é" * 128)  # 256 bytes of UTF-8
    assert JobName.from_wire("/user/tâche-été").name == "tâche-été"
    long_ok = "/u/" + "/".join(["x" * 99] * 10)
    assert len(long_ok.encode()) <= MAX_JOB_NAME_BYTES and JobName.from_wire(long_ok).depth == 10


def test_error_messages_do_not_echo_huge_names() -> None:
    with pytest.raises(ValueError) as info:
        JobName.from_wire("/user/" + "x" * 10_000)
    assert len(str(info.value)) < 300 and "10006 characters" in str(info.value)


def test_task_names_need_ascii_indices_and_keep_colons_inside_job_segments() -> None:
    assert TaskAttempt.from_wire("/user/a:b/0:3").task.job.wire == "/user/a:b"
    assert TaskAttempt.from_wire("/user/a:b/0").attempt_id == 0
    for bad in ("/user/job/²", "/user/job/0:²", "/user/job/" + "9" * 10, "/user/../0", "/user/job/0:1\x00"):
        with pytest.raises(ValueError):
            TaskAttempt.from_wire(bad)


@pytest.mark.parametrize(
    "name",
    [
        "/user/job/actor-0",
        "/system/log-server",
        "my-actor",
        "abc123/my-actor",
        "_workerpool_x:worker-0",
        "/u/j/my actor-0",
    ],
)
def test_endpoint_names_real_clients_send_are_accepted(name: str) -> None:
    assert validate_endpoint_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "/", "/user//x", "/user/job/", "/user/../x", "a/./b", "/user/ /x", "x\x00", "/u/" + "e" * 2050]
)
def test_bad_endpoint_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        validate_endpoint_name(name)


def test_user_segment_drops_control_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_USER", "ev\x1bil")
    assert resolve_job_user() == "ev_il"
