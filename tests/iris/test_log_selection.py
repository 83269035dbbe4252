"""How the client turns a job, task or attempt id into a FetchLogs source and match scope."""

from __future__ import annotations

import pytest

from fray_ray.iris.logs import LogSelection
from fray_ray.iris.rpc import finelog_logging_pb2
from fray_ray.iris.types import LogLine

EXACT = finelog_logging_pb2.MATCH_SCOPE_EXACT
PREFIX = finelog_logging_pb2.MATCH_SCOPE_PREFIX


def line(task_id: str, attempt: int = 0) -> LogLine:
    return LogLine(task_id, attempt, "stdout", "x", 0)


def test_ids_become_sources_and_scopes() -> None:
    job = LogSelection.of("/alice/train")
    assert (job.source, job.scope, job.only_job) == ("/alice/train/", PREFIX, "/alice/train")
    assert LogSelection.of("/alice/train", include_children=True).only_job == ""
    task = LogSelection.of("/alice/train/3")
    assert (task.source, task.scope, task.task_id) == ("/alice/train/3:", PREFIX, "/alice/train/3")
    attempt = LogSelection.of("/alice/train/3:2")
    assert (attempt.source, attempt.scope, attempt.task_id) == ("/alice/train/3:2", EXACT, "/alice/train/3")
    assert LogSelection.of("/alice/train/3", attempt_id=1).source == "/alice/train/3:1"
    child_job = LogSelection.of("/alice/train/eval")
    assert (child_job.source, child_job.scope) == ("/alice/train/eval/", PREFIX)


def test_a_job_read_keeps_its_own_tasks_and_the_asked_attempt() -> None:
    own = LogSelection.of("/alice/train")
    assert own.keeps(line("/alice/train/0")) and not own.keeps(line("/alice/train/eval/0"))
    assert LogSelection.of("/alice/train", include_children=True).keeps(line("/alice/train/eval/0"))
    second = LogSelection.of("/alice/train", attempt_id=1)
    assert second.keeps(line("/alice/train/0", 1)) and not second.keeps(line("/alice/train/0", 0))


@pytest.mark.parametrize("bad", ["train", "/alice", "/alice/train:1", "/alice//x", ""])
def test_malformed_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a job"):
        LogSelection.of(bad)
