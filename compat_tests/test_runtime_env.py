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


def _count_setup_runs():
    # A worker_process_setup_hook: counts its runs in this process's environment.
    import os

    os.environ["RTENV_SETUP_RUNS"] = str(int(os.environ.get("RTENV_SETUP_RUNS", "0")) + 1)


def _failing_setup():
    raise RuntimeError("the setup hook failed")


def test_runtime_env__setup_hook_function_runs_once_per_worker(shutdown_only, tmp_path):
    import os

    (tmp_path / "empty").mkdir()
    ray.init(num_cpus=1, runtime_env={"working_dir": str(tmp_path / "empty"),
                                      "worker_process_setup_hook": _count_setup_runs})

    @ray.remote
    def runs():
        import os

        return os.environ.get("RTENV_SETUP_RUNS"), os.getpid()

    @ray.remote(num_cpus=0)
    class Reader:
        def runs(self):
            import os

            return os.environ.get("RTENV_SETUP_RUNS")

    first, pid = ray.get(runs.remote(), timeout=120)
    assert first == "1"
    again, same_pid = ray.get(runs.remote(), timeout=120)
    if same_pid == pid:  # the same worker process: the hook did not run again
        assert again == "1"
    assert ray.get(Reader.remote().runs.remote(), timeout=120) == "1"
    assert "RTENV_SETUP_RUNS" not in os.environ  # not in the driver


def test_runtime_env__setup_hook_module_function_name(shutdown_only, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "rtenv_setup_module.py").write_text(
        "import os\n\ndef setup():\n    os.environ['RTENV_NAMED_HOOK'] = 'ran'\n"
    )
    ray.init(num_cpus=1, runtime_env={"working_dir": str(project),
                                      "worker_process_setup_hook": "rtenv_setup_module.setup"})

    @ray.remote
    def seen():
        import os

        return os.environ.get("RTENV_NAMED_HOOK")

    assert ray.get(seen.remote(), timeout=120) == "ran"


def test_runtime_env__failing_setup_hook_kills_the_actor_worker(shutdown_only, tmp_path):
    from compat_tests._backend import exceptions

    (tmp_path / "empty").mkdir()
    ray.init(num_cpus=1, runtime_env={"working_dir": str(tmp_path / "empty"),
                                      "worker_process_setup_hook": _failing_setup})

    @ray.remote(num_cpus=0)
    class Actor:
        def ping(self):
            return "pong"

    with pytest.raises(exceptions.ActorDiedError):
        ray.get(Actor.remote().ping.remote(), timeout=120)


@pytest.mark.known_difference(
    reason="A worker that cannot start fails its waiting tasks at once with RaySystemError naming "
    "its job's exit; Ray retries the task and then raises WorkerCrashedError."
)
def test_runtime_env__failing_setup_hook_fails_tasks_as_crashed_workers(shutdown_only, tmp_path):
    from compat_tests._backend import exceptions

    (tmp_path / "empty").mkdir()
    ray.init(num_cpus=1, runtime_env={"working_dir": str(tmp_path / "empty"),
                                      "worker_process_setup_hook": _failing_setup})

    @ray.remote(max_retries=0)
    def task():
        return 1

    with pytest.raises(exceptions.WorkerCrashedError):
        ray.get(task.remote(), timeout=120)


def test_runtime_env__setup_hook_checks(shutdown_only):
    ray.init(num_cpus=1)
    with pytest.raises(TypeError, match="not JSON serializable"):
        @ray.remote(runtime_env={"worker_process_setup_hook": _count_setup_runs})
        def per_task():
            return 1
    ray.shutdown()
    with pytest.raises(TypeError, match="worker_process_setup_hook must be a function"):
        ray.init(num_cpus=1, runtime_env={"worker_process_setup_hook": 5})


@pytest.mark.known_difference(
    reason="fray_ray refuses a task's own worker_process_setup_hook name (ValueError) instead of "
    "ignoring it: it never drops an option silently."
)
def test_runtime_env__setup_hook_name_in_task_options_is_ignored(shutdown_only):
    ray.init(num_cpus=1)

    @ray.remote
    def seen():
        import os

        return os.environ.get("RTENV_NAMED_HOOK")

    hooked = seen.options(runtime_env={"worker_process_setup_hook": "rtenv_setup_module.setup"})
    assert ray.get(hooked.remote(), timeout=120) is None
