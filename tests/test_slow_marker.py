"""The `slow` marker holds together: registered, set on every suite that must wait for the full
run, and used the way README.md and `.ci/run` say (the quick check leaves slow tests out, CI
runs everything)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Whole modules that belong to the full run: real Iris peers, the browser, real-Ray comparisons.
SLOW_MODULES = (
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "peers").glob("test_*.py")),
    "tests/test_dashboard_browser.py",
    "tests/test_ray_programs.py",
)


def _module_marks(path: Path) -> list[str]:
    """The marker names of `path`'s module-level `pytestmark` (one mark or a list of them)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return [ast.unparse(value).removeprefix("pytest.mark.").split("(")[0] for value in values]
    return []


def test_the_marker_is_registered() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert any(line.split(":")[0].strip() == "slow" for line in config["markers"])
    # Deselecting is the quick check's choice, not the default: a file run by name runs whole.
    assert "not slow" not in config["addopts"]


@pytest.mark.parametrize("module", SLOW_MODULES)
def test_suites_of_the_full_run_are_marked_slow(module: str) -> None:
    assert "slow" in _module_marks(REPO / module), f"{module} needs `pytestmark = pytest.mark.slow`"


def test_the_peer_suite_is_found() -> None:
    assert len(SLOW_MODULES) > 5, SLOW_MODULES


def test_readme_runs_the_quick_check_and_ci_runs_everything() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert 'python -m pytest -n 2 -m "not slow"' in readme
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    runs = [line for line in ci.splitlines() if re.match(r"\s*python -m pytest -n 2\b(?!.*compat_tests)", line)]
    assert runs, "the full run is missing from .ci/run"
    assert all(" -m " not in line.split("pytest", 1)[1] for line in runs), runs
