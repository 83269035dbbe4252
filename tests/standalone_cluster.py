"""A standalone cluster (`python -m fray_ray start --json ...`) in a process of its own, for tests.

Tests import it as fate_scenarios is imported (the tests directory on `sys.path`). The cluster
prints one JSON line (address, token, workers) once it serves; a cluster that ends before that
fails the test with its stderr. It is stopped with SIGINT, and killed if it is still there after
`STOP_TIMEOUT_S`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import pytest

STOP_TIMEOUT_S = 60.0


@contextmanager
def standalone_cluster(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, module: str = "fray_ray"
) -> Iterator[tuple[subprocess.Popen, dict]]:
    """Yield (process, the JSON line it printed) of `python -m <module> start --json <args>`
    (`module="fray_ray.cluster"` runs the cluster module, which takes the same flags without `start`)."""
    command = [sys.executable, "-m", module, *(["start", "--block"] if module == "fray_ray" else []), "--json", *args]
    errors = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: nobody reads it while it runs
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                               env=dict(env) if env is not None else None)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:  # it ended before saying where it listens: show why
            process.wait(STOP_TIMEOUT_S)
            errors.seek(0)
            pytest.fail(f"the cluster exited with {process.returncode}: {errors.read()[-3000:]}")
        yield process, json.loads(line)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        errors.close()
