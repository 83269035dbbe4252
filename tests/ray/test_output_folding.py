"""Repeated worker output is folded in the driver as Ray folds it (RAY_DEDUP_LOGS and friends).

The folder is tested on its own with a hand-driven clock; whole scripts run as real drivers
whose tasks print from worker processes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private.observe.output_folding import HINT, FoldSettings, OutputFolder, pattern_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from environments import unrelated_environment  # noqa: E402

DEADLINE_S = 180.0


class Console:
    """What the folder printed, a clock the test moves, and the callbacks it scheduled."""

    def __init__(self) -> None:
        self.now = 100.0
        self.printed: list[tuple[str, str]] = []
        self.scheduled: list[tuple[float, Callable[[], None]]] = []

    def folder(self, **settings: object) -> OutputFolder:
        return OutputFolder(FoldSettings(**settings), lambda stream, text: self.printed.append((stream, text)),
                            lambda delay, callback: self.scheduled.append((self.now + delay, callback)),
                            clock=lambda: self.now)

    def advance(self, seconds: float) -> None:
        """Move the clock and run the callbacks that are due, as the driver's timer thread would."""
        self.now += seconds
        due = [callback for when, callback in self.scheduled if when <= self.now]
        self.scheduled = [(when, callback) for when, callback in self.scheduled if when > self.now]
        for callback in due:
            callback()

    def texts(self) -> list[str]:
        return [text for _, text in self.printed]


def out(*lines: str) -> list[list[str]]:
    return [["stdout", "f", line] for line in lines]


def test_pattern_leaves_out_words_with_digits() -> None:
    assert pattern_of("Hello there, I am a task 0.2058") == "Hello there, I am a task"
    assert pattern_of("step 3/10 loss=0.25 done") == "step done"
    assert pattern_of("42") == pattern_of("") == pattern_of("   ") == ""


def test_first_line_prints_and_repeats_fold_into_the_last_one() -> None:
    console = Console()
    folder = console.folder()
    folder.add(1, out("hello from task 0"))
    folder.add(2, out("hello from task 1", "hello from task 2"))
    folder.add(1, out("hello from task 3"))
    assert console.texts() == ["(f pid=1) hello from task 0"]
    console.advance(5)
    assert console.texts()[1] == "(f pid=1) hello from task 3 [repeated 3x across cluster]" + HINT


def test_a_pattern_still_repeating_keeps_folding_and_the_hint_comes_once() -> None:
    console = Console()
    folder = console.folder()
    folder.add(1, out("tick"))
    folder.add(2, out("tick"))
    console.advance(5)
    folder.add(1, out("tick", "tick", "tick"))  # in the next window: held, not printed
    assert console.texts() == ["(f pid=1) tick", "(f pid=2) tick [repeated 1x across cluster]" + HINT]
    console.advance(5)
    assert console.texts()[2] == "(f pid=1) tick [repeated 3x across cluster]"
    console.advance(5)  # a window with nothing held: the pattern is forgotten
    folder.add(1, out("tick"))
    assert console.texts()[3] == "(f pid=1) tick"


def test_distinct_lines_and_unfoldable_lines_always_print() -> None:
    console = Console()
    folder = console.folder()
    lines = ["alpha", "beta", "alpha beta", "", "", "7", "8", "gamma"]
    folder.add(1, out(*lines))
    assert console.texts() == [f"(f pid=1) {line}" for line in lines]


def test_streams_fold_apart_and_keep_their_stream() -> None:
    console = Console()
    folder = console.folder()
    folder.add(1, [["stdout", "f", "same"], ["stderr", "f", "same"]])
    folder.add(2, [["stderr", "f", "same"]])
    folder.close()
    assert console.printed == [("stdout", "(f pid=1) same"), ("stderr", "(f pid=1) same"),
                               ("stderr", "(f pid=2) same [repeated 1x across cluster]" + HINT)]


def test_close_prints_what_is_held() -> None:
    console = Console()
    folder = console.folder()
    folder.add(3, out("x y"))
    folder.add(4, out("x y", "x y"))
    folder.close()
    assert console.texts() == ["(f pid=3) x y", "(f pid=4) x y [repeated 2x across cluster]" + HINT]


def test_one_process_repeating_itself_is_not_folded_until_another_joins() -> None:
    # Ray folds a pattern only once two processes have printed it: a training loop's per-step
    # lines all print.
    console = Console()
    folder = console.folder()
    folder.add(7, out("grad norm 0.067", "grad norm 0.061", "grad norm 0.058"))
    assert console.texts() == ["(f pid=7) grad norm 0.067", "(f pid=7) grad norm 0.061", "(f pid=7) grad norm 0.058"]
    folder.add(8, out("grad norm 0.070"))  # a second process: from now on the pattern folds
    folder.add(7, out("grad norm 0.052"))
    assert len(console.texts()) == 3
    console.advance(5)
    assert console.texts()[3] == "(f pid=7) grad norm 0.052 [repeated 2x across cluster]" + HINT


def test_switched_off_every_line_prints() -> None:
    console = Console()
    folder = console.folder(enabled=False)
    folder.add(1, out(*["same"] * 50))
    folder.close()
    assert console.texts() == ["(f pid=1) same"] * 50


def test_allow_and_skip_patterns() -> None:
    console = Console()
    folder = console.folder(allow=re.compile("ABC"), skip=re.compile("^noise"))
    folder.add(1, out("ABC", "noise 1", "noise", "DEF"))
    folder.add(2, out("ABC", "DEF"))
    folder.close()
    assert console.texts() == ["(f pid=1) ABC", "(f pid=1) DEF", "(f pid=2) ABC",
                               "(f pid=2) DEF [repeated 1x across cluster]" + HINT]


def test_settings_from_the_environment() -> None:
    assert FoldSettings.from_environment({}) == FoldSettings()
    assert not FoldSettings.from_environment({"RAY_DEDUP_LOGS": "0"}).enabled
    assert FoldSettings.from_environment({"RAY_DEDUP_LOGS_AGG_WINDOW_S": "30"}).window_s == 30
    with pytest.raises(ValueError, match="RAY_DEDUP_LOGS_AGG_WINDOW_S"):
        FoldSettings.from_environment({"RAY_DEDUP_LOGS_AGG_WINDOW_S": "soon"})
    with pytest.raises(ValueError, match="RAY_DEDUP_LOGS_ALLOW_REGEX"):
        FoldSettings.from_environment({"RAY_DEDUP_LOGS_ALLOW_REGEX": "("})


def test_a_malformed_setting_fails_init_before_anything_starts(monkeypatch: pytest.MonkeyPatch,
                                                               fresh_shutdown: None) -> None:
    monkeypatch.setenv("RAY_DEDUP_LOGS_AGG_WINDOW_S", "-1")
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS", "FRAY_RAY_LOCAL_MODE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="RAY_DEDUP_LOGS_AGG_WINDOW_S"):
        fray_ray.init(num_cpus=1)
    assert not fray_ray.is_initialized()


# ---- real drivers ------------------------------------------------------------------------------

SCRIPT = """
    import fray_ray as ray

    ray.init(num_cpus=2)

    @ray.remote(max_calls=1)  # a process of its own each: the line comes from 20 processes
    def shout(i):
        print("the same line from every task")
        return i

    @ray.remote
    def chatty(n):
        for _ in range(n):
            print("one task repeating itself")
        print("a line of its own")
        print("and another one")

    assert ray.get([shout.remote(i) for i in range(20)]) == list(range(20))
    ray.get(chatty.remote(500))
    print("driver done")
"""


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "prints.py"
    script.write_text(textwrap.dedent(SCRIPT))
    clean = unrelated_environment()
    clean.update(env)
    finished = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=clean, capture_output=True,
                              text=True, timeout=DEADLINE_S)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return finished


def counted(stdout: str, line: str) -> tuple[int, int]:
    """(output lines of `line`, how many lines of it they stand for)."""
    shown = total = 0
    for text in stdout.splitlines():
        match = re.fullmatch(rf"\(\w+ pid=\d+\) {re.escape(line)}(?: \[repeated (\d+)x across cluster\].*)?", text)
        if match:
            shown += 1
            total += int(match.group(1)) if match.group(1) else 1
    return shown, total


def test_repeats_from_tasks_are_folded_and_counted(tmp_path: Path) -> None:
    # A window longer than the run, so exactly the first line and one fold appear.
    finished = run(tmp_path, RAY_DEDUP_LOGS_AGG_WINDOW_S="600")
    assert counted(finished.stdout, "the same line from every task") == (2, 20)
    # one process repeating itself is not folded (as in Ray: a training loop's lines all print)
    assert counted(finished.stdout, "one task repeating itself") == (500, 500)
    assert counted(finished.stdout, "a line of its own") == (1, 1)
    assert counted(finished.stdout, "and another one") == (1, 1)
    assert "driver done" in finished.stdout
    assert finished.stdout.count("Set RAY_DEDUP_LOGS=0 to disable log deduplication") == 1


def test_with_the_default_window_nothing_is_lost(tmp_path: Path) -> None:
    finished = run(tmp_path)
    shown, total = counted(finished.stdout, "the same line from every task")
    assert total == 20
    assert counted(finished.stdout, "one task repeating itself") == (500, 500)


def test_switched_off_every_line_appears(tmp_path: Path) -> None:
    finished = run(tmp_path, RAY_DEDUP_LOGS="0")
    assert counted(finished.stdout, "the same line from every task") == (20, 20)
    assert counted(finished.stdout, "one task repeating itself") == (500, 500)
    assert counted(finished.stdout, "a line of its own") == (1, 1)
    assert "repeated" not in finished.stdout
