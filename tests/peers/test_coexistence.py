"""fray_ray and marin-iris in one process, in either import order, for the June 2026 release and
the newest one: fray_ray keeps its generated descriptors in its own DescriptorPool, so both can
register `iris.*` names, and each does a real round trip on one embedded cluster."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MAIN = Path(__file__).with_name("coexistence_main.py")


def run_both(python: str, pythonpath: str, order: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    result = subprocess.run([python, str(MAIN), order], capture_output=True, text=True, timeout=300, env=env)
    reports = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert reports, f"no report (exit {result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}"
    return json.loads(reports[-1][len("REPORT ") :])


def check(report: dict) -> None:
    assert "error" not in report, report["error"]
    assert report["imported"] is True
    assert report["pools"] == {"iris_in_default": True, "ours_in_default": False}
    assert report["ours_state"] == "SUCCEEDED"
    assert report["ours_logs"] == ["side by side"]
    assert report["ours_workers"] == report["iris_workers"] == ["both-0"]
    assert report["iris_state"] == 4  # JOB_STATE_SUCCEEDED
    assert report["iris_logs"] == [["/both/hello/0:0", "side by side"]]


@pytest.mark.parametrize("order", ["fray_ray-first", "iris-first"])
def test_with_the_june_release(peer_controller_python: str, fray_ray_pythonpath, order: str) -> None:
    check(run_both(peer_controller_python, fray_ray_pythonpath(peer_controller_python), order))


@pytest.mark.parametrize("order", ["fray_ray-first", "iris-first"])
def test_with_the_newest_release(peer_client_python: str, fray_ray_pythonpath, order: str) -> None:
    check(run_both(peer_client_python, fray_ray_pythonpath(peer_client_python), order))
