"""Simulated accelerator hosts say what they are: `fray-ray run --tpu` prints one line at start,
`ray.nodes()` labels each such node `simulated=true` (its resources unchanged, as Ray-shaped
APIs report them), and `fray-ray status` notes them under its totals."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))  # the shared test helpers

from standalone_cluster import standalone_cluster  # noqa: E402

DEADLINE = 180.0

SCRIPT = """
    import ray

    ray.init()
    print("CPU", ray.cluster_resources()["CPU"])
    print("labels", sorted((n["Labels"].get("simulated", "-"), n["Resources"].get("TPU", 0)) for n in ray.nodes()))
"""


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_CLUSTER_CONFIG")}


def test_run_with_a_simulated_tpu_slice_says_so_once_and_labels_its_nodes(tmp_path: Path) -> None:
    script = tmp_path / "tpu_job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run([sys.executable, "-m", "fray_ray", "run", "--tpu", "v5p-16", str(script)], cwd=tmp_path,
                            env=clean_env(), capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    cpu = float(result.stdout.split("CPU ", 1)[1].split()[0])
    assert cpu > os.cpu_count()  # what the slice declares, reported as Ray reports it
    assert "labels [('-', 0), ('true', 4.0), ('true', 4.0)]" in result.stdout
    said = [line for line in result.stderr.splitlines() if "simulated" in line]
    assert len(said) == 1 and said[0].startswith("fray_ray: 2 of the cluster's 3 hosts are simulated on this machine")
    assert f"of the {cpu:g} CPUs" in said[0] and f"this machine's {os.cpu_count()} cores" in said[0]


def test_a_cluster_of_real_hosts_says_nothing_of_simulation(tmp_path: Path) -> None:
    script = tmp_path / "cpu_job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run([sys.executable, "-m", "fray_ray", "run", str(script)], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    assert "labels [('-', 0)]" in result.stdout and "simulated" not in result.stderr


def test_status_notes_simulated_nodes_under_its_totals() -> None:
    with standalone_cluster(["--cpu-workers", "1", "--tpu", "v5p-16"]) as (_, info):
        status = subprocess.run(
            [sys.executable, "-m", "fray_ray", "status", "--address", info["address"], "--token", info["token"]],
            env=clean_env(), capture_output=True, text=True, timeout=DEADLINE,
        )
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    note = lines.index(" (2 of 3 nodes are simulated hosts (attribute simulated=true): the CPUs, memory and "
                       "accelerators they add are declared, not real)")
    assert lines.index("Usage:") < note < lines.index("Usage by node:")
    assert sum("simulated=true" in line for line in lines if line.startswith("   attributes:")) == 2
