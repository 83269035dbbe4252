"""``runtime_env``: a job-level ``working_dir`` ships code and files to the workers (which run
from it), ``env_vars`` set at ``init`` and per task merge key by key, and malformed fields are
rejected at decoration with Ray's errors. Remote functions here are defined inside the tests and
use only the standard library: the workers see the shipped directory, not this suite."""

from __future__ import annotations

import pytest

from compat_tests._backend import ray


def test_runtime_env__working_dir_at_init_ships_modules_and_files(shutdown_only, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "rtenv_shipped_module.py").write_text("def triple(x):\n    return 3 * x\n")
    (project / "settings.txt").write_text("from the working dir\n")
    ray.init(num_cpus=1, runtime_env={"working_dir": str(project)})

    @ray.remote
    def use(x):
        import rtenv_shipped_module

        with open("settings.txt") as f:  # workers run from the working directory
            return rtenv_shipped_module.triple(x), f.read().strip()

    assert ray.get(use.remote(2)) == (6, "from the working dir")


def test_runtime_env__env_vars_at_init_and_per_task_merge(shutdown_only, tmp_path):
    (tmp_path / "empty").mkdir()
    ray.init(
        num_cpus=1,
        runtime_env={"working_dir": str(tmp_path / "empty"), "env_vars": {"RTENV_JOB": "job", "RTENV_BOTH": "job"}},
    )

    @ray.remote
    def read():
        import os

        return [os.environ.get(k) for k in ("RTENV_JOB", "RTENV_BOTH", "RTENV_TASK")]

    assert ray.get(read.remote()) == ["job", "job", None]
    task_env = {"env_vars": {"RTENV_BOTH": "task", "RTENV_TASK": "task"}}
    assert ray.get(read.options(runtime_env=task_env).remote()) == ["job", "task", "task"]


@pytest.mark.parametrize(
    "runtime_env, error, match",
    [
        ({"env_vars": {"A": 1}}, TypeError, "must be of type Dict"),
        ({"env_vars": "A=1"}, TypeError, "must be of type Dict"),
        ({"working_dir": 123}, TypeError, "working_dir"),
        ({"py_modules": "module_dir"}, TypeError, "py_modules"),
        ({"excludes": "*.log"}, TypeError, "excludes"),
        ({"pip": 123}, TypeError, "pip"),
        ({"pip": {"packages": ["x"], "bogus": 1}}, ValueError, "can only have these fields"),
        ({"pip": ["x"], "uv": ["y"]}, ValueError, "cannot be specified at the same time"),
        ({"working_dir": "/definitely/not/a/dir/here"}, ValueError, "not a valid path"),
    ],
)
def test_runtime_env__malformed_fields_are_rejected_at_decoration(runtime_env, error, match):
    def f():
        return 1

    with pytest.raises(error, match=match):
        ray.remote(runtime_env=runtime_env)(f)
