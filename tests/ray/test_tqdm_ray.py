"""`fray_ray.experimental.tqdm_ray`: bars in tasks are drawn by the driver, never printed raw."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fray_ray._private.observe.progress_bars import MAGIC, ProgressBars, render
from fray_ray.experimental.tqdm_ray import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from environments import unrelated_environment  # noqa: E402

DEADLINE_S = 300


def _state(**changes: object) -> dict[str, object]:
    state: dict[str, object] = {"__magic_token__": MAGIC, "x": 2, "pos": 0, "desc": "load", "total": 4,
                                "unit": "it", "ip": "10.0.0.2", "pid": 77, "uuid": "u1", "closed": False}
    state.update(changes)
    return state


def test_render_shows_description_fraction_and_counts() -> None:
    line = render(_state())
    assert line.startswith("load:  50%|")
    assert line.endswith("| 2/4 it [pid=77]")
    assert render(_state(total=None, desc="")) == "2 it [pid=77]"


def test_take_draws_bar_lines_and_keeps_the_rest() -> None:
    drawn = io.StringIO()
    bars = ProgressBars(drawn)
    lines = [["stdout", "f", "hello"], ["stdout", "f", json.dumps(_state())], ["stderr", "f", "bye"]]
    assert bars.take(77, lines) == [["stdout", "f", "hello"], ["stderr", "f", "bye"]]
    assert drawn.getvalue() == render(_state()) + "\n"


def test_a_marked_line_that_is_not_a_bar_state_is_printed_as_it_is() -> None:
    bars = ProgressBars(io.StringIO())
    odd = [["stdout", "f", f"talking about {MAGIC} in a sentence"], ["stdout", "f", MAGIC + ' {"x": 1}']]
    assert bars.take(1, odd) == odd


def test_a_bar_without_an_iterable_cannot_be_iterated_and_intervals_are_checked() -> None:
    bar = tqdm(total=2)
    with pytest.raises(ValueError, match="call update"):
        iter(bar).__next__()
    with pytest.raises(ValueError, match="flush_interval_s"):
        tqdm(range(2), flush_interval_s=-1)


SCRIPT = """
    import fray_ray as ray
    from fray_ray.experimental.tqdm_ray import tqdm

    ray.init(num_cpus=2)

    @ray.remote
    def steps(n, interval):
        for _ in tqdm(range(n), desc=f"steps{n}", flush_interval_s=interval):
            pass
        print(f"finished {n}")
        return n

    assert ray.get([steps.remote(3, 0), steps.remote(50, 3600)]) == [3, 50]
    print("driver done")
"""


def test_bars_of_tasks_are_drawn_by_the_driver(tmp_path: Path) -> None:
    script = tmp_path / "bars.py"
    script.write_text(textwrap.dedent(SCRIPT))
    clean = unrelated_environment()
    finished = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=clean, capture_output=True,
                              text=True, timeout=DEADLINE_S)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert MAGIC not in finished.stdout + finished.stderr
    assert "finished 3" in finished.stdout and "driver done" in finished.stdout
    bar_lines = [line for line in finished.stderr.splitlines() if line.startswith("steps3:")]
    # Every step is drawn with no flush interval: 0/3 .. 3/3, then the closed bar once more.
    assert [line.split("|")[-1].split(" [")[0].strip() for line in bar_lines] == [
        "0/3 it", "1/3 it", "2/3 it", "3/3 it", "3/3 it"]
    # An hour's interval: only the first state and the closed one travel.
    long_lines = [line for line in finished.stderr.splitlines() if line.startswith("steps50:")]
    assert len(long_lines) == 2 and long_lines[-1].startswith("steps50: 100%|") and "50/50 it" in long_lines[-1]
