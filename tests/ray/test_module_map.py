"""The module map: every Ray 2.60 core module path imports under `import ray` or raises an
ImportError saying why and what to use instead; COMPATIBILITY.md's module table is current."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fray_ray._module_map import MODULE_MAP, ModuleEntry, ModuleStatus, import_error_message, lookup, status_of

ROOT = Path(__file__).resolve().parents[2]
RAY_MODULES = (ROOT / "scripts" / "ray_2_60_core_modules.txt").read_text().split()
SCRIPT = ROOT / "scripts" / "module_map_table.py"

#: Imports every path under install() and reports, per path, "ok" or the ImportError's text.
_PROBE = """
import importlib, json, sys
import fray_ray
fray_ray.install()
results = {}
for path in json.loads(sys.stdin.read()):
    try:
        importlib.import_module(path)
        results[path] = "ok"
    except ImportError as exc:
        results[path] = "ImportError: " + str(exc)
    except Exception as exc:
        results[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(results))
"""


def test_every_ray_core_module_has_an_entry() -> None:
    assert len(RAY_MODULES) > 400
    assert [path for path in RAY_MODULES if lookup(path) is None] == []


def test_each_path_imports_or_says_what_to_use_instead() -> None:
    probe = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(RAY_MODULES), capture_output=True,
                           text=True, timeout=600, check=True)
    results = json.loads(probe.stdout.splitlines()[-1])
    wrong = {}
    for path in RAY_MODULES:
        status, outcome = status_of(path), results[path]
        if status is ModuleStatus.NOT_PROVIDED:
            first_missing = _first_missing(path, results)
            if not outcome.startswith("ImportError: ") or import_error_message(first_missing) not in outcome:
                wrong[path] = outcome
        elif outcome != "ok":
            wrong[path] = outcome
    assert wrong == {}


def _first_missing(path: str, results: dict[str, str]) -> str:
    """The outermost module on `path` that fray_ray lacks: the one an import fails on."""
    parts = path.split(".")
    for cut in range(2, len(parts) + 1):
        prefix = ".".join(parts[:cut])
        if status_of(prefix) is ModuleStatus.NOT_PROVIDED:
            return prefix
    return path


def test_import_errors_name_the_reason() -> None:
    assert "fray-ray submit" in import_error_message("ray.job_submission")
    assert "Iris dashboard" in import_error_message("ray.dashboard.modules.job")
    assert "tqdm" in import_error_message("ray.experimental.tqdm_ray")
    assert "ray.experimental.queue" in import_error_message("ray.experimental.channel")
    assert "Run this program on Ray itself" in import_error_message("ray.data")


def test_import_error_is_a_module_not_found_error_naming_the_module() -> None:
    probe = subprocess.run(
        [sys.executable, "-c",
         "import fray_ray; fray_ray.install()\n"
         "try:\n    import ray.job_submission\n"
         "except ModuleNotFoundError as exc:\n    print(exc.name)"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert probe.stdout.strip() == "ray.job_submission"


def test_partial_entries_say_what_is_missing() -> None:
    with pytest.raises(ValueError, match="say what is missing"):
        ModuleEntry("ray.something", ModuleStatus.PARTIAL)
    with pytest.raises(ValueError, match="names a ray module"):
        ModuleEntry("numpy", ModuleStatus.PROVIDED)
    assert all(entry.note for entry in MODULE_MAP if entry.status is not ModuleStatus.PROVIDED)


def test_status_below_a_partial_package_is_not_provided() -> None:
    assert status_of("ray.experimental") is ModuleStatus.PARTIAL
    assert status_of("ray.experimental.queue") is ModuleStatus.PROVIDED
    assert status_of("ray.experimental.channel.common") is ModuleStatus.NOT_PROVIDED
    assert status_of("ray.util.client.worker") is ModuleStatus.STAND_IN


def test_compatibility_notes_table_is_current() -> None:
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    notes = (ROOT / "compat_tests" / "NOTES.md").read_text()
    assert all(f"- `{path}`: " in notes for path in RAY_MODULES)


def _real_ray_package() -> Path | None:
    python = os.environ.get("FRAY_RAY_REAL_RAY_PYTHON")
    if not python:
        return None
    found = sorted(Path(python).absolute().parent.parent.glob("lib/python3*/site-packages/ray"))
    return found[0] if found else None


@pytest.mark.skipif(_real_ray_package() is None, reason="FRAY_RAY_REAL_RAY_PYTHON names no Ray installation")
def test_module_list_matches_the_installed_ray() -> None:
    listed = subprocess.run([sys.executable, str(SCRIPT), "--list-ray", str(_real_ray_package())],
                            capture_output=True, text=True, timeout=120, check=True)
    assert listed.stdout.split() == RAY_MODULES
