"""Locating the peer venvs (real Iris releases from PyPI, built by scripts/peer_venv.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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
