"""Progress bars of tasks and actors, drawn by the driver (`fray_ray.experimental.tqdm_ray`).

A bar in a worker prints its state as one JSON line carrying `MAGIC`; the line reaches the
driver with the rest of the worker's output (see `logs`), where `ProgressBars.take` pulls it
out before the output is printed and draws the bar instead. A bar in the driver itself hands
its state to the same `ProgressBars` directly. Bars are keyed by (pid, uuid), so two workers'
bars never mix.

Drawing: one line per state, `desc: 40%|████      | 4/10 [pid=123]`. On a terminal, a bar
that updates again with nothing printed in between is redrawn in place (carriage return);
anything else starts a new line, so logs stay readable when stderr is a file or a pipe.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

__all__ = ["MAGIC", "ProgressBars", "driver_bars", "render"]

#: Marks a line as a bar's state (the same token as Ray's).
MAGIC = "__ray_tqdm_magic_token__"
_WIDTH = 20


def render(state: Mapping[str, Any]) -> str:
    """One line for a bar's state."""
    desc = str(state.get("desc") or "")
    n = state.get("x", 0)
    total = state.get("total")
    unit = state.get("unit") or "it"
    where = f" [pid={state['pid']}]" if state.get("pid") is not None else ""
    head = f"{desc}: " if desc else ""
    if isinstance(total, (int, float)) and total > 0:
        fraction = min(max(n / total, 0.0), 1.0)
        filled = int(fraction * _WIDTH)
        bar = "█" * filled + " " * (_WIDTH - filled)
        return f"{head}{fraction:4.0%}|{bar}| {n}/{total} {unit}{where}"
    return f"{head}{n} {unit}{where}"


class ProgressBars:
    """The bars the driver draws, and where (`stream`; stderr unless given)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._bars: dict[tuple[Any, str], dict[str, Any]] = {}
        self._in_place: tuple[Any, str] | None = None  # the bar the cursor sits after, if any

    def update(self, state: Mapping[str, Any]) -> None:
        """Draw `state` (a bar's `_get_state()`); a closed bar is drawn once more and forgotten."""
        key = (state.get("pid"), str(state.get("uuid")))
        stream = self._stream or sys.stderr
        line = render(state)
        with self._lock:
            redraw = self._in_place == key and _is_terminal(stream)
            if redraw:
                stream.write("\r\x1b[2K" + line)
            else:
                stream.write(("\n" if self._in_place is not None and _is_terminal(stream) else "") + line)
            if state.get("closed"):
                self._bars.pop(key, None)
            else:
                self._bars[key] = dict(state)
            if _is_terminal(stream) and not state.get("closed"):
                self._in_place = key
            else:
                stream.write("\n")
                self._in_place = None
            stream.flush()

    def before_print(self) -> None:
        """End a bar's line left open on a terminal, so the next print starts a line of its own."""
        with self._lock:
            if self._in_place is not None:
                (self._stream or sys.stderr).write("\n")
                self._in_place = None

    def take(self, pid: int | None, lines: Sequence[Sequence[str]]) -> list[Sequence[str]]:
        """Draw the bar states among a worker's forwarded `lines`; the other lines, to print."""
        rest: list[Sequence[str]] = []
        for entry in lines:
            text = entry[-1]
            if MAGIC in text:
                state = _state_of(text)
                if state is not None:
                    state.setdefault("pid", pid)
                    self.update(state)
                    continue
            rest.append(entry)
        if rest:
            self.before_print()
        return rest


def _state_of(text: str) -> dict[str, Any] | None:
    try:
        state = json.loads(text[text.index("{"):])
    except (ValueError, TypeError):
        return None
    return state if isinstance(state, dict) and state.get("__magic_token__") == MAGIC else None


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_driver_bars = ProgressBars()


def driver_bars() -> ProgressBars:
    """The driver process's bars: the ones its workers' lines and its own bars are drawn in."""
    return _driver_bars
