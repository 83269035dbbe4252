"""Submission wrappers as pure command rewrites, and the commands they write run locally.

The end-to-end run of `processes_per_task` on simulated GPU hosts is in test_iris_client.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fray_ray.fray import CpuConfig, GpuConfig, TpuConfig
from fray_ray.fray._multiprocess_main import process_environments
from fray_ray.fray._submit_wrappers import NSYS_TASKS_ENV, nsys_tasks, wrap_multiprocess, wrap_nsys
from fray_ray.iris.entrypoint import command_entrypoint

DEADLINE = 60

# A command that prints the variables the launcher sets, as one JSON line.
_SHOW_ENV = (
    sys.executable,
    "-c",
    # one os.write per line: the processes share the pipe, and small writes do not interleave
    "import json, os; os.write(1, (json.dumps({k: os.environ.get(k) for k in ('LOCAL_RANK', "
    "'LOCAL_WORLD_SIZE', 'RANK', 'WORLD_SIZE', 'NODE_RANK', 'CUDA_VISIBLE_DEVICES')}) + '\\n').encode())",
)


def _task_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_", "CUDA_", "FRAY_RAY_NSYS"))}
    env.update(IRIS_PYTHON=sys.executable, IRIS_WORKDIR=str(tmp_path), IRIS_TASK_ID="/u/job/1:2", IRIS_NUM_TASKS="2")
    env.update(extra)
    return env


# -- multiprocess ----------------------------------------------------------------------------------


def test_one_process_per_task_leaves_the_command_alone() -> None:
    entrypoint = command_entrypoint(["echo", "hi"])
    assert wrap_multiprocess(entrypoint, 1, GpuConfig("H100", 8)) is entrypoint


def test_multiprocess_wraps_the_argv_and_keeps_workdir_files() -> None:
    entrypoint = command_entrypoint(["train", "--lr", "0.1"])
    entrypoint = type(entrypoint)(argv=entrypoint.argv, workdir_files={"a.txt": b"x"})
    wrapped = wrap_multiprocess(entrypoint, 4, GpuConfig("H100", 8))
    assert wrapped.argv[:2] == ("bash", "-c")
    assert "-m fray_ray.fray._multiprocess_main" in wrapped.argv[2]
    assert wrapped.argv[3:] == (
        "fray-multiprocess",
        "--nproc",
        "4",
        "--devices-per-proc",
        "2",
        "--",
        "train",
        "--lr",
        "0.1",
    )
    assert dict(wrapped.workdir_files) == {"a.txt": b"x"}


def test_gpu_count_must_divide_evenly() -> None:
    with pytest.raises(ValueError, match=r"processes_per_task=3 cannot split 8 GPU\(s\)"):
        wrap_multiprocess(command_entrypoint(["x"]), 3, GpuConfig("H100", 8))


def test_cpu_tasks_get_no_devices_and_tpu_tasks_are_refused() -> None:
    wrapped = wrap_multiprocess(command_entrypoint(["x"]), 2, CpuConfig())
    assert wrapped.argv[3:8] == ("fray-multiprocess", "--nproc", "2", "--devices-per-proc", "0")
    with pytest.raises(ValueError, match="TPU"):
        wrap_multiprocess(command_entrypoint(["x"]), 2, TpuConfig("v5p-8"))


def test_process_environments_split_the_task_devices() -> None:
    environ = {"IRIS_TASK_ID": "/u/job/1:0", "IRIS_NUM_TASKS": "2", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    envs = process_environments(2, 2, environ)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["4,5", "6,7"]
    assert [(e["LOCAL_RANK"], e["RANK"], e["WORLD_SIZE"], e["NODE_RANK"]) for e in envs] == [
        ("0", "2", "4", "1"),
        ("1", "3", "4", "1"),
    ]
    with pytest.raises(ValueError, match="need 4 devices"):
        process_environments(2, 2, {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_the_wrapped_command_starts_each_process_with_its_share(tmp_path: Path) -> None:
    wrapped = wrap_multiprocess(command_entrypoint(_SHOW_ENV), 2, GpuConfig("V100", 2))
    env = _task_env(tmp_path, CUDA_VISIBLE_DEVICES="2,3")
    out = subprocess.run(wrapped.argv, env=env, capture_output=True, text=True, timeout=DEADLINE, check=True)
    seen = sorted((json.loads(line) for line in out.stdout.splitlines()), key=lambda e: e["LOCAL_RANK"])
    assert seen == [
        {
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "2",
            "RANK": "2",
            "WORLD_SIZE": "4",
            "NODE_RANK": "1",
            "CUDA_VISIBLE_DEVICES": "2",
        },
        {
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "RANK": "3",
            "WORLD_SIZE": "4",
            "NODE_RANK": "1",
            "CUDA_VISIBLE_DEVICES": "3",
        },
    ]


def test_one_failing_process_fails_the_task_and_stops_the_others(tmp_path: Path) -> None:
    script = "import os, sys, time\nif os.environ['LOCAL_RANK'] == '1': sys.exit(7)\ntime.sleep(60)"
    wrapped = wrap_multiprocess(command_entrypoint([sys.executable, "-c", script]), 2, CpuConfig())
    out = subprocess.run(wrapped.argv, env=_task_env(tmp_path), capture_output=True, text=True, timeout=DEADLINE)
    assert out.returncode == 7
    assert "local rank 1 exited with 7" in out.stderr


# -- Nsight Systems ---------------------------------------------------------------------------------


def test_nsys_selection_comes_from_the_job_then_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NSYS_TASKS_ENV, raising=False)
    assert nsys_tasks({}) is None
    monkeypatch.setenv(NSYS_TASKS_ENV, "0, 2")
    assert nsys_tasks({}) == "0,2"
    assert nsys_tasks({NSYS_TASKS_ENV: "all"}) == "all"
    assert nsys_tasks({NSYS_TASKS_ENV: ""}) is None  # the job can switch it off


def test_wrap_nsys_is_a_pure_rewrite() -> None:
    wrapped = wrap_nsys(command_entrypoint(["train"]), "0,2", "/reports")
    assert wrapped.argv[:2] == ("bash", "-c")
    assert "nsys profile" in wrapped.argv[2]
    assert wrapped.argv[3:] == ("fray-nsys", "0,2", "/reports", "--", "train")
    with pytest.raises(ValueError, match="task indices"):
        wrap_nsys(command_entrypoint(["train"]), "first")


@pytest.fixture
def fake_nsys(tmp_path: Path) -> Path:
    """A stand-in `nsys` on PATH that records its arguments and runs the profiled command."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    # called as: nsys profile --force-overwrite=true -o <report> <command...>
    script.write_text('#!/bin/sh\necho "$@" > "$FAKE_NSYS_LOG"\nshift 4\nexec "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_selected_tasks_run_under_nsys_with_the_report_in_the_workdir(tmp_path: Path, fake_nsys: Path) -> None:
    log = tmp_path / "nsys-args"
    env = _task_env(tmp_path, PATH=f"{fake_nsys}{os.pathsep}{os.environ['PATH']}", FAKE_NSYS_LOG=str(log))
    wrapped = wrap_nsys(command_entrypoint(["echo", "ran"]), "0,1")
    out = subprocess.run(wrapped.argv, env=env, capture_output=True, text=True, timeout=DEADLINE, check=True)
    assert out.stdout.strip() == "ran"
    assert log.read_text().split() == [
        "profile",
        "--force-overwrite=true",
        "-o",
        f"{tmp_path}/nsys/task-1-attempt-2",
        "echo",
        "ran",
    ]
    assert (tmp_path / "nsys").is_dir()


def test_other_tasks_run_plainly_and_missing_nsys_is_a_clear_failure(tmp_path: Path) -> None:
    env = _task_env(tmp_path, PATH="/usr/bin:/bin")
    plain = subprocess.run(
        wrap_nsys(command_entrypoint(["echo", "plain"]), "0").argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert (plain.returncode, plain.stdout.strip()) == (0, "plain")
    missing = subprocess.run(
        wrap_nsys(command_entrypoint(["echo", "x"]), "all").argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert missing.returncode == 127
    assert "nsys is not on PATH" in missing.stderr
