"""What a `FetchLogs` request selects from captured task output, by finelog's contract.

Task output is keyed `/user/job/<index>:<attempt>`, as Iris keys it. A request names keys by
its match scope (EXACT: the key itself; PREFIX: keys starting with the source; REGEX, and the
unset scope: a pattern searched in the key, where a pattern that is a literal, or a literal
followed by `.*`, means that prefix), then filters lines (after the cursor's sequence number,
newer than `since_ms`, containing `substring`, at `min_level` or above), and keeps the oldest
`max_lines` (or the newest, with `tail`). Pure functions; the controller supplies the lines.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fray_ray.cluster._logs import LogRecord
from fray_ray.iris.errors import InvalidArgument
from fray_ray.iris.rpc import finelog_logging_pb2

#: Lines answered when a request leaves `max_lines` at 0 (finelog's default).
DEFAULT_MAX_LINES = 1000
#: Longest REGEX pattern accepted; patterns run in this process, so they stay small.
MAX_PATTERN_CHARS = 1024


class MatchScope(enum.IntEnum):
    UNSPECIFIED = 0  # read as REGEX
    EXACT = 1
    PREFIX = 2
    REGEX = 3


class LogLevel(enum.IntEnum):
    UNKNOWN = 0  # passes every min_level
    DEBUG = 1
    INFO = 2
    WARNING = 3
    ERROR = 4
    CRITICAL = 5


_LEVEL_LETTERS = {"D": LogLevel.DEBUG, "I": LogLevel.INFO, "W": LogLevel.WARNING, "E": LogLevel.ERROR, "C": LogLevel.CRITICAL}
# Python logging's default format ("WARNING:name:message") and plain "ERROR message" lines.
_LEVEL_WORD = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)[:\s]")
_STREAM_LEVEL = {"stdout": LogLevel.INFO, "stderr": LogLevel.ERROR}
# Characters that end a pattern's literal lead (finelog's list).
_REGEX_SPECIAL = frozenset(".*+?[](){}^$|\\")


def line_level(source: str, data: str) -> LogLevel:
    """A line's level: from a level prefix (Iris's `I20260102 12:34:56 ...` style or a level
    word), else its stream's (stdout INFO, stderr ERROR), else UNKNOWN."""
    if len(data) >= 2 and data[0] in _LEVEL_LETTERS and data[1].isdigit():
        return _LEVEL_LETTERS[data[0]]
    word = _LEVEL_WORD.match(data)
    if word is not None:
        return LogLevel[word.group(1)]
    return _STREAM_LEVEL.get(source, LogLevel.UNKNOWN)


def parse_level(name: str) -> LogLevel:
    """`min_level` as sent (case-insensitive); empty means no filter."""
    if not name:
        return LogLevel.UNKNOWN
    try:
        level = LogLevel[name.strip().upper()]
    except KeyError:
        level = LogLevel.UNKNOWN
    if level is LogLevel.UNKNOWN:
        raise InvalidArgument(f"min_level {name!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    return level


def regex_literal_lead(pattern: str) -> str:
    """The literal text every match of `pattern` starts with (when it matches at position 0).

    It ends at the first special character; a `*`, `?` or `{` there makes the character before
    it optional, so that one is dropped too.
    """
    for index, char in enumerate(pattern):
        if char in _REGEX_SPECIAL:
            return pattern[: index - 1] if char in "*?{" and index > 0 else pattern[:index]
    return pattern


def attempt_of(key: str) -> int:
    """The attempt number after a key's last `:` (0 when there is none)."""
    _, sep, suffix = key.rpartition(":")
    return int(suffix) if sep and suffix.isdigit() else 0


@dataclass(frozen=True)
class LogQuery:
    """One FetchLogs request, validated."""

    source: str
    scope: MatchScope
    since_ms: int = 0
    cursor: int = 0
    substring: str = ""
    max_lines: int = DEFAULT_MAX_LINES
    tail: bool = False
    min_level: LogLevel = LogLevel.UNKNOWN

    @classmethod
    def from_proto(cls, request: finelog_logging_pb2.FetchLogsRequest) -> LogQuery:
        try:
            scope = MatchScope(request.match_scope)
        except ValueError:
            raise InvalidArgument(f"unknown match_scope {request.match_scope}") from None
        if scope is MatchScope.UNSPECIFIED:
            scope = MatchScope.REGEX
        if scope is MatchScope.PREFIX and not request.source:
            raise InvalidArgument("FetchLogs source is required for MATCH_SCOPE_PREFIX")
        query = cls(
            source=request.source,
            scope=scope,
            since_ms=max(0, request.since_ms),
            cursor=max(0, request.cursor),
            substring=request.substring,
            max_lines=request.max_lines if request.max_lines > 0 else DEFAULT_MAX_LINES,
            tail=request.tail,
            min_level=parse_level(request.min_level),
        )
        query.key_matcher()  # a bad pattern is the caller's error, reported now
        return query

    def key_matcher(self) -> Callable[[str], bool]:
        """A predicate on keys for this query's source and scope."""
        source = self.source
        if self.scope is MatchScope.EXACT:
            return lambda key: key == source
        if self.scope is MatchScope.PREFIX:
            return lambda key: key.startswith(source)
        if len(source) > MAX_PATTERN_CHARS:
            raise InvalidArgument(f"FetchLogs pattern is longer than {MAX_PATTERN_CHARS} characters")
        lead = regex_literal_lead(source)
        if source[len(lead) :] in ("", ".*"):
            return lambda key: key.startswith(lead)
        try:
            pattern = re.compile(source)
        except re.error as exc:
            raise InvalidArgument(f"FetchLogs source {source!r} is not a valid regular expression: {exc}") from None
        return lambda key: key.startswith(lead) and pattern.search(key) is not None

    def passes(self, record: LogRecord) -> bool:
        """The line-level filters: cursor, since_ms, substring, min_level."""
        if record.seq <= self.cursor:
            return False
        if self.since_ms and record.timestamp_ms <= self.since_ms:
            return False
        if self.substring and self.substring not in record.data:
            return False
        if self.min_level:
            level = line_level(record.source, record.data)
            return level is LogLevel.UNKNOWN or level >= self.min_level
        return True


def answer(query: LogQuery, keyed_records: Iterable[tuple[str, LogRecord]]) -> finelog_logging_pb2.FetchLogsResponse:
    """The response for `query` over (key, line) pairs of the keys it selected."""
    selected = sorted(((key, r) for key, r in keyed_records if query.passes(r)), key=lambda pair: pair[1].seq)
    selected = selected[-query.max_lines :] if query.tail else selected[: query.max_lines]
    response = finelog_logging_pb2.FetchLogsResponse(cursor=max((r.seq for _, r in selected), default=query.cursor))
    for key, record in selected:
        entry = response.entries.add(
            source=record.source,
            data=record.data,
            attempt_id=attempt_of(key),
            level=int(line_level(record.source, record.data)),
            key=key,
        )
        entry.timestamp.epoch_ms = record.timestamp_ms
    return response
