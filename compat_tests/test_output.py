"""What tasks and actors print and log reaches the driver's output (``log_to_driver``, on by
default): each line prefixed with the task or actor class name and the worker's pid,
``(name pid=N)`` (Ray adds ``, ip=...`` for other nodes and colours the prefix on a terminal),
stdout lines on the driver's stdout, stderr lines (where ``logging`` writes) on its stderr.
Python ``logging`` in a worker behaves as in a plain Python process whose root logger is at
WARNING: ``logging.warning`` prints ``WARNING:root:<message>``, records below WARNING are
dropped unless the worker code configures a lower level.
"""

from __future__ import annotations

import logging
import os
import re
import uuid

import pytest

from compat_tests._backend import ray
from compat_tests.helpers import wait_for_condition

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Captured:
    """Everything the driver wrote so far (capfd hands out each piece once)."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self._capfd = capfd
        self.out = ""
        self.err = ""

    def _read(self) -> None:
        new = self._capfd.readouterr()
        self.out += _ANSI.sub("", new.out)
        self.err += _ANSI.sub("", new.err)

    def line(self, stream: str, text: str) -> str:
        """The first line of `stream` ("out" or "err") holding `text`, waiting for it."""
        found: list[str] = []

        def arrived() -> bool:
            self._read()
            found[:] = [line for line in getattr(self, stream).splitlines() if text in line]
            return bool(found)

        wait_for_condition(arrived, timeout=60)
        return found[0]


def _prefixed(line: str, name: str, pid: int) -> str:
    """The line without its `(name pid=N[, ip=...]) ` prefix; AssertionError if it has another."""
    match = re.match(rf"^\({re.escape(name)} pid={pid}(?:, ip=[0-9a-fA-F.:]+)?\) (.*)$", line)
    assert match is not None, line
    return match.group(1)


@ray.remote
def emit(tag: str) -> int:
    print(f"printed {tag}")
    logging.warning("logged %s", tag)
    logging.info("dropped %s", tag)
    return os.getpid()


def test_output__task_prints_and_logging_reach_the_driver(ray_start_regular_shared, capfd):
    tag = uuid.uuid4().hex[:8]
    pid = ray.get(emit.remote(tag))
    captured = Captured(capfd)
    assert _prefixed(captured.line("out", f"printed {tag}"), "emit", pid) == f"printed {tag}"
    assert _prefixed(captured.line("err", f"logged {tag}"), "emit", pid) == f"WARNING:root:logged {tag}"
    assert f"dropped {tag}" not in captured.err


@ray.remote
class Reporter:
    def __init__(self) -> None:
        self.log = logging.getLogger("compat.reporter")
        self.log.setLevel(logging.INFO)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.log.addHandler(handler)
        self.log.propagate = False

    def report(self, tag: str) -> int:
        self.log.info("configured %s", tag)
        self.log.debug("below the level %s", tag)
        return os.getpid()


def test_output__actor_logging_at_the_level_configured_in_the_worker(ray_start_regular_shared, capfd):
    tag = uuid.uuid4().hex[:8]
    reporter = Reporter.remote()
    pid = ray.get(reporter.report.remote(tag))
    captured = Captured(capfd)
    line = captured.line("err", f"configured {tag}")
    assert _prefixed(line, "Reporter", pid) == f"INFO compat.reporter: configured {tag}"
    assert f"below the level {tag}" not in captured.err


@ray.remote
class Described:
    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"Described(index={self.index})"

    def say(self, tag: str) -> int:
        print(f"described {tag}")
        return os.getpid()


def test_output__actor_repr_is_the_log_prefix(ray_start_regular_shared, capfd):
    # An actor class that defines __repr__ names its lines with it (Ray's docs show
    # "(MyActor(index=2) pid=...)"), so two actors of one class can be told apart.
    tag = uuid.uuid4().hex[:8]
    actor = Described.remote(2)
    pid = ray.get(actor.say.remote(tag))
    captured = Captured(capfd)
    assert _prefixed(captured.line("out", f"described {tag}"), "Described(index=2)", pid) == f"described {tag}"


@ray.remote
def count_with_a_bar(n: int, tag: str) -> int:
    from compat_tests._backend import LazyModule

    tqdm = LazyModule("experimental.tqdm_ray").tqdm
    total = sum(1 for _ in tqdm(range(n), desc=f"bar {tag}", flush_interval_s=0))
    print(f"counted {tag}")
    return total


def test_output__tqdm_ray_bars_in_tasks_never_show_their_wire_lines(ray_start_regular_shared, capfd):
    # A bar in a task sends its state to the driver as marked lines; the driver draws the bar
    # (or, on Ray without tqdm installed, nothing) and never prints those lines themselves.
    tag = uuid.uuid4().hex[:8]
    assert ray.get(count_with_a_bar.remote(4, tag)) == 4
    captured = Captured(capfd)
    captured.line("out", f"counted {tag}")
    assert "__ray_tqdm_magic_token__" not in captured.out + captured.err


def test_output__tqdm_ray_bar_in_the_driver_counts():
    from compat_tests._backend import LazyModule

    bar = LazyModule("experimental.tqdm_ray").tqdm(total=3, desc="driver bar")
    bar.update(2)
    assert (bar.n, bar.total) == (2, 3)
    bar.close()


_UNAWAITED_SCRIPT = """
import {backend} as ray

ray.init(num_cpus=1)


@ray.remote
def never_awaited(tag):
    print("unawaited task says", tag, flush=True)


never_awaited.remote({tag!r})
print("driver reached the end", flush=True)
"""


def test_output__unawaited_task_output_is_printed_before_exit(tmp_path):
    # A script that ends without waiting for its task still shows what the task printed.
    import subprocess
    import sys

    from compat_tests._backend import selected_backend

    tag = uuid.uuid4().hex[:8]
    script = tmp_path / "unawaited.py"
    script.write_text(_UNAWAITED_SCRIPT.format(backend=selected_backend(), tag=tag))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    out = _ANSI.sub("", done.stdout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "driver reached the end" in out
    lines = [line for line in out.splitlines() if f"unawaited task says {tag}" in line]
    assert lines, out + done.stderr[-2000:]
    assert re.match(r"^\(never_awaited pid=\d+(, ip=[0-9a-fA-F.:]+)?\) unawaited task says ", lines[0])



@ray.remote
def train_steps(tag: str, steps: int) -> int:
    for step in range(steps):
        print("step", step, "grad norm", 0.067 - step / 1000, tag, flush=True)
    return steps


def test_output__one_process_repeating_a_pattern_is_not_folded(ray_start_regular_shared, capfd):
    # Log deduplication folds a pattern only once a second process prints it: a training loop's
    # per-step lines from one worker all reach the driver, none marked "[repeated Nx ...]".
    captured = Captured(capfd)
    tag = "tag" + uuid.uuid4().hex
    assert ray.get(train_steps.remote(tag, 15)) == 15
    captured.line("out", "step 14 grad norm")
    lines = [line for line in captured.out.splitlines() if tag in line]
    assert len(lines) == 15, captured.out
    assert not any("repeated" in line for line in lines), lines
    assert [int(line.split("step ", 1)[1].split()[0]) for line in lines] == list(range(15))
