"""A driver in a memory-limited cgroup sizes its object store from that limit and spills
instead of being OOM-killed (it used to size the store from the machine's memory)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fray_ray.cluster._cgroups import MemoryCgroups

MiB = 1024 * 1024
CGROUP_LIMIT = 640 * MiB

DRIVER = """
import json, sys
import numpy as np
import fray_ray as ray

spill = json.dumps({"type": "filesystem", "params": {"directory_path": sys.argv[1]}})
ray.init(num_cpus=1, _system_config={"object_spilling_config": spill})
from fray_ray._private.core import runtime_state
limit = ray.cluster_resources()["object_store_memory"]
refs = [ray.put(np.full(50 * 1024 * 1024 // 8, i, dtype=np.int64)) for i in range(20)]  # 1000 MiB
values = [int(ray.get(ref)[-1]) for ref in refs]
spilled = len(runtime_state.current().objects.spilled_ids())
ray.shutdown()
print(json.dumps({"limit": limit, "values": values, "spilled": spilled}))
"""


def test_a_driver_in_a_small_cgroup_spills_instead_of_dying(tmp_path) -> None:
    cgroups = MemoryCgroups.open()
    if cgroups is None:
        pytest.skip("this machine does not let this process make a memory cgroup (no writable memory "
                    "controller in its cgroup hierarchy, or FRAY_RAY_MEMORY_CGROUPS=0)")
    try:
        cgroup = cgroups.attempt(1, CGROUP_LIMIT)
        assert cgroup is not None
        done = subprocess.run(cgroup.wrap([sys.executable, "-c", DRIVER, str(tmp_path)]),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"driver exited {done.returncode}: {cgroup.exit_report(done.returncode)}\n{done.stderr[-3000:]}"
        assert cgroup.oom_kills() == 0
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["limit"] == pytest.approx(0.3 * CGROUP_LIMIT, rel=0.01)
        assert result["values"] == list(range(20))
        assert result["spilled"] >= 10
    finally:
        cgroups.close()
    assert list(tmp_path.iterdir()) == []  # the driver removed its spill directory
