"""Self-tests of the suite's own machinery (the known_difference marker and the report file).

These run a tiny inner pytest session in a subprocess; they never import a backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

INNER_TESTS = '''
import pytest

@pytest.mark.known_difference(reason="differs on purpose")
def test_marked_and_failing():
    assert False

def test_plain():
    assert True
'''

INNER_NO_REASON = '''
import pytest

@pytest.mark.known_difference
def test_marked_without_reason():
    pass
'''


def _run_inner(tmp_path: Path, source: str, backend: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env.pop("FRAY_RAY_COMPAT_BACKEND", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "compat_tests._plugin", "-p", "no:cacheprovider",
         f"--backend={backend}", "-q", "-c", os.devnull, "--rootdir", str(tmp_path),
         str(tmp_path / "test_inner.py"), *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def test_harness__only_the_selected_backend_is_imported():
    from compat_tests import _backend

    selected = _backend.selected_backend()
    other = next(b for b in _backend.BACKENDS if b != selected)
    assert _backend.loaded_backend() in (None, selected)
    assert other not in sys.modules, f"{other} was imported during a --backend={selected} run"


def test_harness__known_difference_is_xfail_on_fray_ray(tmp_path):
    report = tmp_path / "report.json"
    result = _run_inner(tmp_path, INNER_TESTS, "fray_ray", f"--compat-report={report}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 1 xfailed" in result.stdout
    assert "compat: 1 known differences marked" in result.stdout
    data = json.loads(report.read_text())
    assert data["backend"] == "fray_ray"
    outcomes = {t["name"]: (t["outcome"], t["known_difference"]) for t in data["tests"]}
    assert outcomes == {
        "test_marked_and_failing": ("xfailed", "differs on purpose"),
        "test_plain": ("passed", None),
    }


def test_harness__known_difference_has_no_effect_on_ray(tmp_path):
    result = _run_inner(tmp_path, INNER_TESTS, "ray")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout
    assert "compat: 1 known differences marked" in result.stdout


def test_harness__known_difference_requires_a_reason(tmp_path):
    result = _run_inner(tmp_path, INNER_NO_REASON, "fray_ray")
    assert result.returncode != 0
    assert "needs reason=" in result.stdout + result.stderr
