"""Large task results held by the worker that made them, on the real Iris controller
(marin-iris 2026-06 LocalCluster): read from the driver and from another task, rebuilt from
lineage after the holder's process is killed, and lost with a reason when it cannot be."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DEADLINE = 240.0

PROGRAM = """
    import os, signal, sys, time
    import fray_ray as ray
    from fray_ray._private.core import runtime_state

    ray.init(sys.argv[1])
    SIZE = 4 << 20

    @ray.remote
    def make(value):
        return os.getpid(), bytes([value]) * SIZE

    @ray.remote
    def split(pair):
        return pair[0]

    @ray.remote
    def total(pair):
        return sum(pair[1][::4096]) * 4096

    def killed_holder(ref):
        pid = ray.get(split.remote(ref))
        os.kill(pid, signal.SIGKILL)
        while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
            time.sleep(0.05)

    driver = runtime_state.current()
    ref = make.options(max_retries=1).remote(3)
    print("task", ray.get(total.remote(ref)) == 3 * SIZE, flush=True)
    print("held", bool(driver.objects.holders([ref.binary()])), flush=True)
    print("driver", ray.get(ref)[1] == bytes([3]) * SIZE, flush=True)
    killed_holder(ref)
    print("rebuilt", int(ray.get(ref, timeout=180)[1][0]), flush=True)

    lost = make.options(max_retries=0).remote(4)
    ray.wait([lost])
    killed_holder(lost)
    try:
        ray.get(lost, timeout=180)
        print("lost no error", flush=True)
    except ray.exceptions.ObjectLostError as exc:
        print("lost", type(exc).__name__, "max_retries=0" in str(exc), flush=True)
    ray.shutdown()
"""


def test_held_results_are_read_rebuilt_and_lost_on_the_real_controller(june: str, tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text(textwrap.dedent(PROGRAM))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN")}
    result = subprocess.run([sys.executable, "main.py", june], cwd=tmp_path, capture_output=True, text=True,
                            timeout=DEADLINE, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    lines = result.stdout.splitlines()
    for expected in ("held True", "task True", "driver True", "rebuilt 3", "lost ObjectReconstructionFailedError True"):
        assert expected in lines, result.stdout + result.stderr[-4000:]
