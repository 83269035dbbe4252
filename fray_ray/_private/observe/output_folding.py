"""Folding repeated worker output in the driver, as Ray's log deduplication does.

What Ray documents (configure-logging, "Log deduplication"), which the driver follows for the
lines its workers forward:

- Lines are compared by pattern: their words, leaving out every word with a digit in it. A line
  without any such word (empty, or only numbers) is never folded.
- The first line of a pattern prints at once, and so do later lines of it while they all come
  from that one process (a training loop's per-step lines are not folded). Once a second
  process prints the pattern, its lines, from any process, are held and counted for up to
  RAY_DEDUP_LOGS_AGG_WINDOW_S seconds (5) from the first; then the last of them prints once,
  with ` [repeated Nx across cluster]` after it, and a new window starts. The first fold of a
  session also says how to turn folding off. A pattern whose window ends with nothing held is
  forgotten: its next line prints at once again.
- RAY_DEDUP_LOGS=0 turns folding off; RAY_DEDUP_LOGS_ALLOW_REGEX matches lines never folded,
  RAY_DEDUP_LOGS_SKIP_REGEX lines never printed. They are read when the session starts.

Lines still held when the session ends are printed then, so no count is lost.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ENABLED_ENV = "RAY_DEDUP_LOGS"
WINDOW_ENV = "RAY_DEDUP_LOGS_AGG_WINDOW_S"
ALLOW_ENV = "RAY_DEDUP_LOGS_ALLOW_REGEX"
SKIP_ENV = "RAY_DEDUP_LOGS_SKIP_REGEX"
DEFAULT_WINDOW_S = 5

#: Ray's words after the first fold of a session (the options it names work here too).
HINT = (
    " (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see "
    "https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html#log-deduplication "
    "for more options.)"
)


@dataclasses.dataclass(frozen=True)
class FoldSettings:
    """How repeated lines are folded; `from_environment` reads Ray's variables."""

    enabled: bool = True
    window_s: float = DEFAULT_WINDOW_S
    allow: re.Pattern[str] | None = None  # lines never folded
    skip: re.Pattern[str] | None = None  # lines never printed

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> FoldSettings:
        """ValueError naming the variable when one is malformed."""
        env = os.environ if env is None else env
        enabled = env.get(ENABLED_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
        raw_window = env.get(WINDOW_ENV, str(DEFAULT_WINDOW_S))
        try:
            window = int(raw_window)
        except ValueError:
            raise ValueError(f"{WINDOW_ENV} must be a whole number of seconds, got {raw_window!r}") from None
        if window < 0:
            raise ValueError(f"{WINDOW_ENV} must not be negative, got {window}")
        return cls(enabled, float(window), _regex(env, ALLOW_ENV), _regex(env, SKIP_ENV))


def _regex(env: Mapping[str, str], name: str) -> re.Pattern[str] | None:
    text = env.get(name)
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"{name} is not a valid regular expression ({exc}): {text!r}") from None


def pattern_of(line: str) -> str:
    """What repeats are compared by: the line's words that hold no digit."""
    return " ".join(word for word in line.split() if not any(ch.isdigit() for ch in word))


@dataclasses.dataclass
class _Held:
    """A pattern within its window, and the lines of it held back."""

    started: float  # when the window began (clock seconds)
    sources: set[int | None] = dataclasses.field(default_factory=set)  # pids that printed it
    count: int = 0  # lines held back
    last: str = ""  # the last of them, prefixed


class OutputFolder:
    """Prints forwarded worker lines through `emit(stream_name, text)`, folding repeats.

    `schedule(delay, callback)` runs a callback later (the driver's timer queue); it prints held
    folds when their window ends. Thread-safe: lines arrive from every worker connection.
    """

    def __init__(
        self,
        settings: FoldSettings,
        emit: Callable[[str, str], None],
        schedule: Callable[[float, Callable[[], None]], Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._emit = emit
        self._schedule = schedule
        self._clock = clock
        self._lock = threading.Lock()  # guards the fields below, and orders what is printed
        self._held: dict[tuple[str, str], _Held] = {}  # (stream, pattern) -> its window
        self._hinted = False  # the first fold of the session carries HINT
        self._last_sweep = clock()

    def add(self, pid: int | None, lines: Sequence[Sequence[str]]) -> None:
        """Print `lines` ([stream_name, prefix, line] each) of process `pid`, or hold repeats."""
        settings = self._settings
        with self._lock:
            now = self._clock()
            if now - self._last_sweep >= settings.window_s:
                self._sweep(now)
            for stream_name, prefix, line in lines:
                if settings.skip is not None and settings.skip.search(line):
                    continue
                text = f"({prefix} pid={pid}) {line}"
                pattern = pattern_of(line) if settings.enabled else ""
                if not pattern or (settings.allow is not None and settings.allow.search(line)):
                    self._emit(stream_name, text)
                    continue
                key = (stream_name, pattern)
                held = self._held.get(key)
                if held is not None and now - held.started >= settings.window_s:
                    self._release(key, held, now)
                    held = self._held.get(key)
                if held is None:
                    self._held[key] = _Held(started=now, sources={pid})
                    self._emit(stream_name, text)
                    continue
                held.sources.add(pid)
                if len(held.sources) == 1:  # one process repeating itself: not folded
                    self._emit(stream_name, text)
                    continue
                held.count += 1
                held.last = text
                if held.count == 1:
                    self._schedule(held.started + settings.window_s - now, self.release_due)

    def release_due(self) -> None:
        """Print the folds whose window has ended."""
        with self._lock:
            self._sweep(self._clock())

    def close(self) -> None:
        """Print every line still held (the session is ending)."""
        with self._lock:
            for key, held in list(self._held.items()):
                self._release(key, held, None)

    def _sweep(self, now: float) -> None:
        self._last_sweep = now
        for key, held in list(self._held.items()):
            if now - held.started >= self._settings.window_s:
                self._release(key, held, now)

    def _release(self, key: tuple[str, str], held: _Held, now: float | None) -> None:
        """Print what `held` holds; a pattern still repeating gets a new window from `now`."""
        if not held.count or now is None:
            del self._held[key]
            if not held.count:
                return
        else:
            self._held[key] = _Held(started=now, sources=held.sources)
        text = f"{held.last} [repeated {held.count}x across cluster]"
        if not self._hinted:
            self._hinted = True
            text += HINT
        self._emit(key[0], text)


def print_line(stream_name: str, text: str) -> None:
    """Print a worker's line on the driver's stream of the same name (stdout or stderr)."""
    print(text, file=sys.stderr if stream_name == "stderr" else sys.stdout)
