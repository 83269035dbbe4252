"""FetchLogs semantics without a cluster: match scopes, line levels, filters and paging."""

from __future__ import annotations

import pytest

from fray_ray.cluster._log_query import (
    DEFAULT_MAX_LINES,
    LogLevel,
    LogQuery,
    answer,
    attempt_of,
    line_level,
    regex_literal_lead,
)
from fray_ray.cluster._logs import LogRecord
from fray_ray.iris.errors import InvalidArgument
from fray_ray.iris.rpc import finelog_logging_pb2

KEYS = [
    "/u/j/0:0",
    "/u/j/0:1",
    "/u/j/1:0",
    "/u/j/10:0",
    "/u/j/kid/0:0",
    "/u/j2/0:0",
    "/u/job+x/0:0",
]


def query(source: str, scope: int = finelog_logging_pb2.MATCH_SCOPE_PREFIX, **fields: object) -> LogQuery:
    return LogQuery.from_proto(finelog_logging_pb2.FetchLogsRequest(source=source, match_scope=scope, **fields))


def selected(q: LogQuery) -> list[str]:
    matches = q.key_matcher()
    return [key for key in KEYS if matches(key)]


def test_exact_scope_is_literal_equality() -> None:
    assert selected(query("/u/j/0:1", finelog_logging_pb2.MATCH_SCOPE_EXACT)) == ["/u/j/0:1"]
    assert selected(query("/u/job+x/0:0", finelog_logging_pb2.MATCH_SCOPE_EXACT)) == ["/u/job+x/0:0"]
    assert selected(query("/u/j/0", finelog_logging_pb2.MATCH_SCOPE_EXACT)) == []


def test_prefix_scope_is_literal_and_covers_child_jobs() -> None:
    assert selected(query("/u/j/0:")) == ["/u/j/0:0", "/u/j/0:1"]
    assert selected(query("/u/j/")) == ["/u/j/0:0", "/u/j/0:1", "/u/j/1:0", "/u/j/10:0", "/u/j/kid/0:0"]
    assert selected(query("/u/job+x/")) == ["/u/job+x/0:0"]  # '+' is just a character here
    with pytest.raises(InvalidArgument, match="source is required"):
        query("")


def test_regex_scope_and_the_unset_scope_search_the_key() -> None:
    regex = finelog_logging_pb2.MATCH_SCOPE_REGEX
    assert selected(query(r"/u/j/[0-9]+:0$", regex)) == ["/u/j/0:0", "/u/j/1:0", "/u/j/10:0"]
    assert selected(query(r"/u/j/1.*", regex)) == ["/u/j/1:0", "/u/j/10:0"]  # a literal then .* is a prefix
    assert selected(query(r"/u/j2", regex)) == ["/u/j2/0:0"]  # a plain literal is a prefix, not a search
    assert selected(query(r".*kid.*", regex)) == ["/u/j/kid/0:0"]  # no literal lead: searched anywhere
    unset = finelog_logging_pb2.MATCH_SCOPE_UNSPECIFIED
    assert selected(query(r"/u/j/(0|1):0", unset)) == ["/u/j/0:0", "/u/j/1:0"]
    with pytest.raises(InvalidArgument, match="not a valid regular expression"):
        query("/u/j/(", regex)
    with pytest.raises(InvalidArgument, match="longer than"):
        query("a" * 2000 + "(", regex)


def test_regex_literal_lead() -> None:
    assert regex_literal_lead("/job/test/.*") == "/job/test/"
    assert regex_literal_lead("/job/test/0") == "/job/test/0"
    assert regex_literal_lead("^/job") == ""
    assert regex_literal_lead("/a+b") == "/a"  # '+' needs its character
    assert regex_literal_lead("ab?c") == "a"  # '?', '*' and '{' make the one before optional
    assert regex_literal_lead("ab*c") == "a"
    assert regex_literal_lead("ab{0,3}c") == "a"
    assert regex_literal_lead("a*b") == ""


def test_unknown_scope_and_level_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="match_scope"):
        query("/u/j/", 7)
    with pytest.raises(InvalidArgument, match="min_level"):
        query("/u/j/", min_level="LOUD")
    assert query("/u/j/", min_level="warning").min_level is LogLevel.WARNING
    assert query("/u/j/").max_lines == DEFAULT_MAX_LINES


def test_line_levels() -> None:
    assert line_level("stderr", "I20260102 12:34:56 1 iris starting") is LogLevel.INFO
    assert line_level("stdout", "W20260102 12:34:56 1 careful") is LogLevel.WARNING
    assert line_level("stderr", "WARNING:root:disk almost full") is LogLevel.WARNING
    assert line_level("stdout", "CRITICAL boom") is LogLevel.CRITICAL
    assert line_level("stdout", "plain output") is LogLevel.INFO
    assert line_level("stderr", "Traceback (most recent call last):") is LogLevel.ERROR
    assert line_level("build", "compiling") is LogLevel.UNKNOWN
    assert line_level("stdout", "Installing") is LogLevel.INFO  # 'I' not followed by a digit
    assert attempt_of("/u/j/0:3") == 3 and attempt_of("/u/j/0") == 0 and attempt_of("/a:1:2") == 2


def records() -> list[tuple[str, LogRecord]]:
    lines = [
        ("/u/j/0:0", LogRecord(1, 1000, "stdout", "I20260101 00:00:00 1 x hello", 0)),
        ("/u/j/1:0", LogRecord(2, 1001, "stderr", "WARNING:root:careful", 0)),
        ("/u/j/0:1", LogRecord(3, 1002, "stdout", "hello again", 1)),
        ("/u/j/0:1", LogRecord(4, 1003, "stderr", "boom", 1)),
        ("/u/j/1:0", LogRecord(5, 1004, "build", "no level here", 0)),
    ]
    return list(reversed(lines))  # the store hands lines over in no particular order


def test_answer_orders_by_sequence_and_sets_keys_attempts_levels_and_cursor() -> None:
    response = answer(query("/u/j/"), records())
    assert [(e.key, e.data, e.attempt_id) for e in response.entries] == [
        ("/u/j/0:0", "I20260101 00:00:00 1 x hello", 0),
        ("/u/j/1:0", "WARNING:root:careful", 0),
        ("/u/j/0:1", "hello again", 1),
        ("/u/j/0:1", "boom", 1),
        ("/u/j/1:0", "no level here", 0),
    ]
    assert [e.level for e in response.entries] == [2, 3, 2, 4, 0]
    assert response.entries[0].timestamp.epoch_ms == 1000
    assert response.cursor == 5


def test_answer_filters_and_pages() -> None:
    def data(**fields: object) -> list[str]:
        return [e.data for e in answer(query("/u/j/", **fields), records()).entries]

    assert data(max_lines=2) == ["I20260101 00:00:00 1 x hello", "WARNING:root:careful"]
    assert data(max_lines=2, tail=True) == ["boom", "no level here"]
    assert data(cursor=3) == ["boom", "no level here"]
    assert data(since_ms=1002) == ["boom", "no level here"]  # strictly after since_ms
    assert data(substring="hello") == ["I20260101 00:00:00 1 x hello", "hello again"]
    # UNKNOWN-level lines pass every min_level, as finelog's do
    assert data(min_level="WARNING") == ["WARNING:root:careful", "boom", "no level here"]
    assert data(min_level="error") == ["boom", "no level here"]
    empty = answer(query("/u/j/", cursor=9), records())
    assert list(empty.entries) == [] and empty.cursor == 9
