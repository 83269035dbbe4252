"""The public API's types as a user's type checker sees them.

Small user programs are written to a temp dir and checked with `mypy --strict`. Each line
says what mypy must say about it: `# R: <type>` for the type `reveal_type` prints there, `# E:
<code>` for an error with that code. Every other line must be clean, so a typing change that
loses a type (everything `Any` again) or rejects good code fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray.actor import ActorClass, ActorHandle, ActorMethod, ActorProxy
from fray_ray.remote_function import RemoteFunction

REPO_ROOT = Path(fray_ray.__file__).resolve().parents[1]

TASKS = """
import fray_ray as ray
from fray_ray import ObjectRef

@ray.remote
def f(x: int) -> int:
    return x + 1

@ray.remote(num_cpus=1, max_retries=0)
def g(x: int, suffix: str = "") -> str:
    return str(x) + suffix

@ray.remote
def nothing() -> None:
    return None

reveal_type(ray.get(f.remote(1)))  # R: int
reveal_type(ray.get(g.remote(1, suffix="!")))  # R: str
reveal_type(ray.get(nothing.remote()))  # R: None
reveal_type(f.remote(1))  # R: fray_ray._private.core.object_ref.ObjectRef[int]
# a ref stands for its value as an argument, as in Ray
reveal_type(ray.get(g.remote(f.remote(1))))  # R: str
reveal_type(ray.get(f.options(num_cpus=2).remote(1)))  # R: int
reveal_type(ray.get([f.remote(1), f.remote(2)]))  # R: list[int]
reveal_type(ray.get(f.remote(1), timeout=5.0))  # R: int
reveal_type(ray.put([1.5]))  # R: fray_ray._private.core.object_ref.ObjectRef[list[float]]
reveal_type(ray.get(ray.put("s")))  # R: str
ready, pending = ray.wait([f.remote(1), f.remote(2)], num_returns=1)
reveal_type(ready)  # R: list[fray_ray._private.core.object_ref.ObjectRef[int]]
annotated: ObjectRef[int] = f.remote(1)
value: int = ray.get(annotated)
"""

MISUSE = """
import fray_ray as ray

@ray.remote
def f(x: int) -> int:
    return x + 1

x: int = f.remote(1)  # E: assignment
y = f.remote(1) + 1  # E: operator
name: str = ray.get(f.remote(1))  # E: assignment
ray.get(f.remote(1)).upper()  # E: attr-defined
f(1)  # E: operator
ray.get(1)  # E: call-overload
ray.get((f.remote(1),))  # E: call-overload
ray.method(num_return=1)  # E: call-overload
"""

ACTORS = """
import fray_ray as ray

class Counter:
    def __init__(self, start: int) -> None:
        self.value = start

    @ray.method(num_returns=1)
    def add(self, by: int) -> int:
        self.value += by
        return self.value

    @ray.method(max_task_retries=0)
    async def ratio(self) -> float:
        return self.value / 2

    @ray.method(num_returns=1)
    def twice(self) -> int:
        return self.add(1) + self.add(1)  # inside the actor, a method is a plain method

    @ray.method
    def label(self) -> str:
        return str(self.value)

    @ray.method
    async def later(self) -> int:
        return self.value

CounterActor = ray.remote(Counter)
reveal_type(CounterActor)  # R: fray_ray.actor.ActorClass[actors.Counter]
counter = CounterActor.remote(0)
reveal_type(ray.get(counter.add.remote(2)))  # R: Any | int
reveal_type(ray.get(counter.ratio.remote()))  # R: Any | float
reveal_type(ray.get(counter.add.options(name="add").remote(2)))  # R: Any | int
# bare @ray.method types a method as @ray.method(...) does
reveal_type(ray.get(counter.label.remote()))  # R: Any | str
reveal_type(ray.get(counter.later.remote()))  # R: Any | int
named = CounterActor.options(name="c").remote(0)
total: int = ray.get(counter.add.remote(1)) + ray.get(named.twice.remote())
wrong: str = ray.get(counter.add.remote(1))  # E: assignment
ray.get(counter.add.remote(1)).upper()  # E: union-attr
counter.add.remote(1) + 1  # E: operator
ray.kill(counter)
looked_up = ray.get_actor("c")
reveal_type(looked_up.anything.remote())  # R: fray_ray._private.core.object_ref.ObjectRef[Any]
"""

MYPY_CONFIG = """
[mypy]
strict = True
# Only the programs' own lines are under test here; the package is checked by .ci/run.
[mypy-fray_ray.*]
ignore_errors = True
"""

_MARKER = re.compile(r"#\s*(R|E):\s*(.+?)\s*$")
_MYPY_LINE = re.compile(r"^(?P<file>[\w.]+\.py):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")


def _expected(source: str) -> tuple[dict[int, str], dict[int, str]]:
    reveals: dict[int, str] = {}
    errors: dict[int, str] = {}
    for number, line in enumerate(source.splitlines(), start=1):
        match = _MARKER.search(line)
        if match:
            (reveals if match.group(1) == "R" else errors)[number] = match.group(2)
    return reveals, errors


def _normal(type_text: str) -> str:
    return type_text.replace("builtins.", "")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str, str]]]:
    """Run mypy once over every program; per file, its (line, kind, text) messages."""
    directory = tmp_path_factory.mktemp("typing")
    programs = {"tasks.py": TASKS, "misuse.py": MISUSE, "actors.py": ACTORS}
    for name, source in programs.items():
        (directory / name).write_text(textwrap.dedent(source).lstrip("\n"))
    (directory / "mypy.ini").write_text(MYPY_CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(directory / ".cache"),
         "--show-error-codes", "--no-error-summary", "--hide-error-context", *programs],
        cwd=directory,
        env={"MYPYPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 2: mypy itself failed
    messages: dict[str, list[tuple[int, str, str]]] = {name: [] for name in programs}
    for line in result.stdout.splitlines():
        match = _MYPY_LINE.match(line)
        assert match is not None or not line.strip(), f"unparsed mypy output: {line!r}"
        if match:
            messages[match["file"]].append((int(match["line"]), match["kind"], match["text"]))
    return messages


def _check(program: str, source: str, messages: dict[str, list[tuple[int, str, str]]]) -> None:
    reveals, errors = _expected(textwrap.dedent(source).lstrip("\n"))
    seen_reveals: dict[int, str] = {}
    seen_errors: dict[int, str] = {}
    for line, kind, text in messages[program]:
        revealed = re.fullmatch(r'Revealed type is "(.*)"', text)
        if kind == "note" and revealed:
            seen_reveals[line] = _normal(revealed.group(1))
        elif kind == "error":
            code = re.search(r"\[([\w-]+)\]$", text)
            assert code is not None, text
            # one line may get the same error once per member of a union
            assert seen_errors.get(line, code.group(1)) == code.group(1), f"{program}:{line}: {text}"
            seen_errors[line] = code.group(1)
    assert seen_reveals == reveals, messages[program]
    assert seen_errors == errors, messages[program]


def test_task_results_have_the_function_return_type(mypy_output: dict[str, list[tuple[int, str, str]]]) -> None:
    _check("tasks.py", TASKS, mypy_output)


def test_using_a_ref_as_its_value_is_reported(mypy_output: dict[str, list[tuple[int, str, str]]]) -> None:
    _check("misuse.py", MISUSE, mypy_output)


def test_actor_method_results_are_typed(mypy_output: dict[str, list[tuple[int, str, str]]]) -> None:
    _check("actors.py", ACTORS, mypy_output)


def test_generic_types_can_be_subscripted_at_runtime() -> None:
    # Users annotate with these; subscripting must work outside a type checker too.
    annotations: list[Any] = [
        fray_ray.ObjectRef[int],
        RemoteFunction[[int], str],
        ActorClass[int],
        ActorHandle[int],
        ActorMethod[int],
        ActorProxy[int],
    ]
    assert [getattr(a, "__origin__", None) for a in annotations[:5]] == [
        fray_ray.ObjectRef, RemoteFunction, ActorClass, ActorHandle, ActorMethod,
    ]
    assert isinstance(fray_ray.ObjectRef.nil(), fray_ray.ObjectRef)
