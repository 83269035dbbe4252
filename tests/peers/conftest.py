"""Locating the peer venvs (real Iris releases from PyPI, built by scripts/peer_venv.sh), and
making this checkout of fray_ray importable by their Pythons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

# The suite runs with --import-mode=importlib, which leaves sys.path alone; the test modules
# here import their shared helpers by this directory's (unique) module names.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from june_controller import start_controller, stop_controller  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CLIENT_ENV = "FRAY_RAY_PEER_CLIENT_PYTHON"
CONTROLLER_ENV = "FRAY_RAY_PEER_CONTROLLER_PYTHON"


def _peer_python(kind: str, env_var: str, probe_imports: str) -> tuple[str | None, str]:
    """The peer venv's python from `env_var`, else `.ci/venvs/<kind>`; or why there is none."""
    default = REPO / ".ci" / "venvs" / kind / "bin" / "python"
    candidate = os.environ.get(env_var) or (str(default) if default.exists() else None)
    if candidate is None:
        return None, (
            f"PEER VENV MISSING: set {env_var} to the python of a venv built by "
            f"`scripts/peer_venv.sh {kind} DIR` (or build it at {default.parent.parent})"
        )
    probe = subprocess.run([candidate, "-c", f"import {probe_imports}"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"PEER VENV BROKEN: {candidate} cannot import {probe_imports}: {probe.stderr.strip()[-500:]}"
    return candidate, ""


@pytest.fixture(scope="session")
def peer_client_python() -> str:
    """The newest marin-iris/marin-fray client venv (Python 3.12); skips loudly without it."""
    python, reason = _peer_python("client", CLIENT_ENV, "iris.client.client, rigging.auth")
    if python is None:
        pytest.skip(reason)
    return python


@pytest.fixture(scope="session")
def peer_controller_python() -> str:
    """The 2026-06 marin-iris venv whose controller starts here (Python 3.11); skips without it."""
    python, reason = _peer_python("controller", CONTROLLER_ENV, "iris")
    if python is None:
        pytest.skip(reason)
    return python


_INSTALLED_VERSIONS = (
    "import importlib.metadata as m, json, sys\n"
    "found = {}\n"
    "for name in json.loads(sys.argv[1]):\n"
    "    try:\n"
    "        found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        found[name] = None\n"
    "print(json.dumps(found))\n"
)


def fray_ray_pythonpath_for(python: str, target: Path) -> str:
    """A PYTHONPATH under which the peer venv's `python` imports fray_ray from this checkout:
    the checkout itself, then `target`, into which pip installs those of fray_ray's own
    dependencies that the venv lacks (or has in a version fray_ray does not accept). The peer
    venv itself is never modified."""
    requirements = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    probe = subprocess.run(
        [python, "-c", _INSTALLED_VERSIONS, json.dumps([r.name for r in requirements])],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    versions = json.loads(probe.stdout)
    missing = [
        str(r)
        for r in requirements
        if versions[r.name] is None or not r.specifier.contains(versions[r.name], prereleases=True)
    ]
    if missing:
        install = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(target), *missing],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert install.returncode == 0, f"installing {missing} for {python} failed:\n{install.stderr[-3000:]}"
    return os.pathsep.join([str(REPO), str(target)])


@pytest.fixture(scope="session")
def fray_ray_pythonpath(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """`fray_ray_pythonpath(peer_python)` → PYTHONPATH for running fray_ray under that Python
    (dependencies installed once per session into a temp dir that pytest removes)."""
    made: dict[str, str] = {}

    def for_python(python: str) -> str:
        if python not in made:
            made[python] = fray_ray_pythonpath_for(python, tmp_path_factory.mktemp("fray-ray-deps"))
        return made[python]

    return for_python


@pytest.fixture(scope="module")
def june(peer_controller_python: str, fray_ray_pythonpath, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A June controller whose workers' Python imports fray_ray (and its dependencies)."""
    process, address = start_controller(
        peer_controller_python, tmp_path_factory.mktemp("june-home"), fray_ray_pythonpath(peer_controller_python)
    )
    try:
        yield address
    finally:
        stop_controller(process)
