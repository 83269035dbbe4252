"""The Fray examples in examples/ run with one command each, against the cluster they start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# example file -> lines its output must contain
EXPECTED = {
    "fray_distributed_job.py": [
        "job finished: succeeded",
        "  replica 0/2 on GPUs 0,1: step 2",
        "  replica 1/2 on GPUs 0,1: step 2",
    ],
    "fray_parameter_server.py": [
        "first update: [-0.5, -1.0, -2.0]",
        # the replica ready first got both updates, the three others one
        "final weights: [[-1.5, -2.0, -3.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]",
    ],
    "fray_hosted_logger.py": ["job finished: succeeded", "  logged: hello from task 1"],
    "fray_tpu_gang.py": [
        "job finished: succeeded",
        "  TPU host 0 of slice slice-a (v5p-16, hosts 127.0.0.2,127.0.0.3)",
        "  TPU host 1 of slice slice-a (v5p-16, hosts 127.0.0.2,127.0.0.3)",
    ],
}


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_runs(example: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / example)], capture_output=True, text=True, timeout=180, cwd=EXAMPLES.parent
    )
    assert result.returncode == 0, f"{example} exited {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}"
    lines = result.stdout.splitlines()
    missing = [line for line in EXPECTED[example] if line not in lines]
    assert not missing, f"{example} did not print {missing}; it printed:\n{result.stdout}"
