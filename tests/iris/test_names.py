"""Job, task and attempt names."""

from __future__ import annotations

import pytest

from fray_ray.iris.names import JobName, TaskAttempt, TaskName, resolve_job_user


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
