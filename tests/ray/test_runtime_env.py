"""runtime_env on the embedded cluster, whose workers share no directory and no address with the
driver: code travels as the job's bundle (working_dir, py_modules, excludes), packages through
the job's setup script (pip), env_vars merge as in Ray, and what cannot be honoured is an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cloudpickle
import pytest

import fray_ray
from fray_ray.cluster import ClusterConfig, cpu_workers

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parents[2]
THREE_HOSTS = ClusterConfig(workers=cpu_workers(3, cpu=2, memory="4g", disk="10g"))


@pytest.fixture
def session_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> Path:
    """A small project to run from (the project holding the driver is shipped by default)."""
    home = tmp_path / "driver"
    home.mkdir()
    (home / "pyproject.toml").write_text("[project]\nname = 'driver'\n")
    monkeypatch.chdir(home)
    return home


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# -- a multi-file program whose directory is gone once init() returned -----------------------------


PROGRAM = {
    "main.py": """
        import os, shutil, sys
        import fray_ray as ray
        from fray_ray.cluster import ClusterConfig, cpu_workers
        from shapes import geometry
        from shapes.counter import Counter

        here = os.getcwd()
        ray.init(cluster_config=ClusterConfig(workers=cpu_workers(3, cpu=2, memory="4g", disk="10g")))
        shutil.move(here, sys.argv[1])  # the program's directory is gone from where it was

        @ray.remote
        def area(side):
            import os
            from shapes import geometry
            with open("data/unit.txt") as f:  # relative to the shipped working directory
                unit = f.read().strip()
            return f"{geometry.square_area(side)} {unit} at {os.environ['IRIS_ADVERTISE_HOST']}"

        results = ray.get([area.remote(i) for i in range(1, 5)])
        counter = Counter.remote(10)
        print("areas", [r.split(" at ")[0] for r in results])
        print("hosts", sorted({r.split(" at ")[1] for r in results}))
        print("counter", ray.get([counter.add.remote(geometry.square_area(2)) for _ in range(2)]))
        print("actor host", ray.get(counter.where.remote()))
        print("cwd kept", os.path.exists(here))
        ray.shutdown()
    """,
    "shapes/__init__.py": "",
    "shapes/geometry.py": """
        def square_area(side):
            return side * side
    """,
    "shapes/counter.py": """
        import fray_ray as ray

        @ray.remote
        class Counter:
            def __init__(self, start):
                self.total = start

            def add(self, amount):
                self.total += amount
                return self.total

            def where(self):
                import os
                return os.environ["IRIS_ADVERTISE_HOST"]
    """,
    "data/unit.txt": "cm2\n",
    "pyproject.toml": "[project]\nname = 'program'\n",  # a project: all of it is shipped
}


def test_a_program_moved_away_after_init_keeps_working(tmp_path: Path) -> None:
    program = tmp_path / "program"
    for name, text in PROGRAM.items():
        write(program / name, text)
    result = subprocess.run(
        [sys.executable, "main.py", str(tmp_path / "moved")], cwd=program, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS")},
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["areas"] == "['1 cm2', '4 cm2', '9 cm2', '16 cm2']"
    assert lines["counter"] == "[14, 18]"
    assert lines["cwd"] == "kept False"
    # every worker is a host of its own: none uses the driver's 127.0.0.1
    hosts = json.loads(lines["hosts"].replace("'", '"'))
    assert hosts and all(h.startswith("127.") and h != "127.0.0.1" for h in hosts)
    assert lines["actor"].startswith("host 127.") and lines["actor"] != "host 127.0.0.1"


# -- working_dir, py_modules, excludes ----------------------------------------------------------------


def read_shipped(path: str) -> str:
    with open(path) as f:
        return f.read()


def shipped_files() -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), os.environ["IRIS_WORKDIR"])
        for d, _, names in os.walk(os.environ["IRIS_WORKDIR"])
        for n in names
        if not n.startswith(("_callable", "_bytecode_cache"))
    )


def test_working_dir_at_init_and_per_task_with_excludes(session_dir: Path, tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    write(job_dir / "notes.txt", "job level")
    write(job_dir / "big.ckpt", "left out by excludes")
    write(job_dir / "cache/skip.txt", "left out by .gitignore")
    write(job_dir / ".gitignore", "cache/\n")
    write(job_dir / ".git/HEAD", "left out by default")
    other = tmp_path / "other"
    write(other / "notes.txt", "task level")
    fray_ray.init(runtime_env={"working_dir": str(job_dir), "excludes": ["*.ckpt"]}, cluster_config=THREE_HOSTS)
    read = fray_ray.remote(read_shipped)
    listing = fray_ray.remote(shipped_files)
    assert fray_ray.get(read.remote("notes.txt")) == "job level"
    assert fray_ray.get(listing.remote()) == [".gitignore", "notes.txt"]
    # a task's own working_dir replaces the job's (a local directory: a fray_ray extension)
    assert fray_ray.get(read.options(runtime_env={"working_dir": str(other)}).remote("notes.txt")) == "task level"


def test_py_modules_are_importable_in_tasks_and_actors(session_dir: Path, tmp_path: Path) -> None:
    write(tmp_path / "mods/greeting/__init__.py", "def hello(name):\n    return 'hello ' + name\n")
    write(tmp_path / "single/tools_one.py", "ANSWER = 42\n")
    modules = [str(tmp_path / "mods/greeting"), str(tmp_path / "single/tools_one.py")]
    fray_ray.init(runtime_env={"py_modules": modules}, cluster_config=THREE_HOSTS)

    @fray_ray.remote
    def use() -> str:
        import greeting
        import tools_one

        return f"{greeting.hello('task')} {tools_one.ANSWER}"

    @fray_ray.remote
    class User:
        def use(self) -> str:
            import greeting

            return greeting.hello("actor")

    assert fray_ray.get(use.remote()) == "hello task 42"
    assert fray_ray.get(User.remote().use.remote()) == "hello actor"


def env_of(*names: str) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


def test_env_vars_at_init_and_per_task_merge_as_in_ray(session_dir: Path) -> None:
    fray_ray.init(runtime_env={"env_vars": {"JOB_ONLY": "job", "BOTH": "job"}}, cluster_config=THREE_HOSTS)
    probe = fray_ray.remote(env_of)
    names = ("JOB_ONLY", "BOTH", "TASK_ONLY")
    assert fray_ray.get(probe.remote(*names)) == {"JOB_ONLY": "job", "BOTH": "job", "TASK_ONLY": None}
    task_env = {"env_vars": {"BOTH": "task", "TASK_ONLY": "task"}}
    assert fray_ray.get(probe.options(runtime_env=task_env).remote(*names)) == {
        "JOB_ONLY": "job", "BOTH": "task", "TASK_ONLY": "task"
    }

    @fray_ray.remote
    class Probe:
        def env(self, *names: str) -> dict[str, str | None]:
            return env_of(*names)

        def nested(self, *names: str) -> dict[str, str | None]:
            return fray_ray.get(probe.remote(*names))  # a task submitted here inherits the actor's env

    actor = Probe.options(runtime_env={"env_vars": {"TASK_ONLY": "actor"}}).remote()
    expected = {"JOB_ONLY": "job", "BOTH": "job", "TASK_ONLY": "actor"}
    assert fray_ray.get(actor.env.remote(*names)) == expected
    assert fray_ray.get(actor.nested.remote(*names)) == expected


def test_a_working_dir_too_large_fails_at_init_naming_the_size(session_dir: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "weights.bin").write_bytes(os.urandom(26 * 1024 * 1024))  # does not compress
    with pytest.raises(ValueError) as info:
        fray_ray.init(runtime_env={"working_dir": str(big)}, cluster_config=THREE_HOSTS)
    message = str(info.value)
    assert "MiB" in message and "25.0 MiB limit" in message and "weights.bin" in message and "excludes" in message
    assert not fray_ray.is_initialized()
    # excluding it is enough
    fray_ray.init(runtime_env={"working_dir": str(big), "excludes": ["*.bin"]}, cluster_config=THREE_HOSTS)
    assert fray_ray.get(fray_ray.remote(shipped_files).remote()) == []


@pytest.mark.parametrize(
    "env, key",
    [
        ({"conda": "environment.yml"}, "conda"),
        ({"container": {"image": "x"}}, "container"),
        ({"image_uri": "docker.io/x"}, "image_uri"),
        ({"py_executable": "uv run"}, "py_executable"),
        ({"uv": {"packages": ["x"], "uv_version": "0.5"}}, "uv_version"),
        ({"pip": {"packages": ["x"], "pip_version": "==24.0"}}, "pip_version"),
        ({"working_dir": "s3://bucket/code.zip"}, "working_dir"),
        ({"something_new": 1}, "something_new"),
        ({"config": {"unknown_knob": 1}}, "unknown_knob"),
    ],
)
def test_keys_that_cannot_be_honoured_are_errors_everywhere(session_dir: Path, env: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        fray_ray.remote(runtime_env=env)(env_of)
    with pytest.raises(ValueError, match=key):
        fray_ray.remote(env_of).options(runtime_env=env)

    class Plain:
        pass

    with pytest.raises(ValueError, match=key):
        fray_ray.remote(runtime_env=env)(Plain)
    with pytest.raises(ValueError, match=key):
        fray_ray.init(runtime_env=env)
    assert not fray_ray.is_initialized()


# -- pip ------------------------------------------------------------------------------------------


def build_wheel(directory: Path, name: str, version: str, body: str) -> Path:
    """A minimal pure-Python wheel, made by hand (no build tools, no index)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def use_pip_package() -> str:
    import fray_ray_wheel_probe

    return f"{fray_ray_wheel_probe.WHO} via {os.path.basename(os.environ['VIRTUAL_ENV'])}"


def test_pip_packages_are_installed_by_the_jobs_setup_script(session_dir: Path, tmp_path: Path) -> None:
    build_wheel(session_dir / "wheels", "fray_ray_wheel_probe", "0.1", "WHO = 'the wheel'\n")
    env = {
        "pip": ["./wheels/fray_ray_wheel_probe-0.1-py3-none-any.whl"],  # inside the shipped directory
        "env_vars": {"PIP_NO_INDEX": "1", "FRAY_RAY_PIP_ENV_CACHE": str(tmp_path / "pip-envs")},
    }
    fray_ray.init(cluster_config=THREE_HOSTS)
    used = fray_ray.get(fray_ray.remote(use_pip_package).options(runtime_env=env).remote())
    assert used.startswith("the wheel via ")  # imported from the task's $IRIS_VENV, fray_ray still there

    @fray_ray.remote
    class Holder:
        def use(self) -> str:
            return use_pip_package()

    assert fray_ray.get(Holder.options(runtime_env=env).remote().use.remote()).startswith("the wheel via ")
    # without the env the package is not there: it went into the job's environment only
    with pytest.raises(fray_ray.exceptions.RayTaskError, match="fray_ray_wheel_probe"):
        fray_ray.get(fray_ray.remote(use_pip_package).remote())


def test_pip_fails_loudly_where_workers_skip_setup(session_dir: Path) -> None:
    config = ClusterConfig(workers=cpu_workers(2, cpu=2, memory="4g", disk="10g"), run_setup_scripts=False)
    fray_ray.init(cluster_config=config)
    task = fray_ray.remote(env_of).options(runtime_env={"pip": ["surely-not-installed-pkg==1.0"]})
    with pytest.raises(fray_ray.exceptions.RaySystemError, match="surely-not-installed-pkg.*did not run the job's setup"):
        fray_ray.get(task.remote("X"), timeout=120)


# -- workers that cannot start --------------------------------------------------------------------


def bare_python(tmp_path: Path, *, with_fray_ray: bool) -> str:
    """A venv whose Python has cloudpickle (and fray_ray, if asked) but nothing else of ours."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    extra = tmp_path / "extra"
    extra.mkdir()
    import cloudpickle as cp_module

    os.symlink(os.path.dirname(cp_module.__file__), extra / "cloudpickle")
    if with_fray_ray:
        os.symlink(os.path.dirname(fray_ray.__file__), extra / "fray_ray")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "extra.pth").write_text(str(extra) + "\n")
    return str(venv / "bin" / "python")


@pytest.mark.parametrize("missing", ["fray_ray", "msgpack"])
def test_a_worker_that_cannot_start_is_a_clear_error_for_tasks_and_actors(
    session_dir: Path, tmp_path: Path, missing: str
) -> None:
    python = bare_python(tmp_path, with_fray_ray=missing != "fray_ray")
    config = ClusterConfig(workers=cpu_workers(2, cpu=2, memory="4g", disk="10g"), task_python=python)
    fray_ray.init(cluster_config=config)
    with pytest.raises(fray_ray.exceptions.RaySystemError) as task_error:
        fray_ray.get(fray_ray.remote(env_of).remote("X"), timeout=120)
    assert f"No module named '{missing}'" in str(task_error.value)

    @fray_ray.remote
    class Never:
        def ping(self) -> int:
            return 1

    with pytest.raises(fray_ray.exceptions.ActorDiedError) as actor_error:
        fray_ray.get(Never.remote().ping.remote(), timeout=120)
    assert f"No module named '{missing}'" in str(actor_error.value)


# -- where the driver can be reached --------------------------------------------------------------


def session_address() -> str:
    return fray_ray.get_runtime_context().gcs_address


def test_the_session_service_binds_and_advertises_the_node_address(session_dir: Path) -> None:
    fray_ray.init(cluster_config=THREE_HOSTS, _node_ip_address="127.0.0.9")
    address = fray_ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.9:")
    assert fray_ray.get(fray_ray.remote(session_address).remote()) == address  # workers reached it there
    fray_ray.shutdown()
    os.environ["FRAY_RAY_NODE_IP_ADDRESS"] = "127.0.0.10"
    try:
        fray_ray.init(cluster_config=THREE_HOSTS)
        assert fray_ray.get_runtime_context().gcs_address.startswith("127.0.0.10:")
        assert fray_ray.get(fray_ray.remote(env_of).remote("X")) == {"X": None}
    finally:
        del os.environ["FRAY_RAY_NODE_IP_ADDRESS"]


def _mark_setup() -> None:
    os.environ["FRAY_TEST_SETUP_HOOK"] = "ran"


def test_setup_hook_is_parsed_for_the_job_only() -> None:
    from fray_ray._private.core.runtime_env import merge_runtime_envs, parse_runtime_env

    job = parse_runtime_env({"worker_process_setup_hook": _mark_setup}, job=True)
    assert job.setup_hook is not None and job.setup_hook.pickled is not None
    assert job.setup_hook.name.endswith("._mark_setup")
    assert job.as_dict() == {"worker_process_setup_hook": job.setup_hook.name}
    # shipped as bytes: what a worker unpickles runs
    os.environ.pop("FRAY_TEST_SETUP_HOOK", None)
    cloudpickle.loads(cloudpickle.dumps(job)).setup_hook.load()()
    assert os.environ.pop("FRAY_TEST_SETUP_HOOK") == "ran"
    # a task's own env inherits the job's hook
    child = parse_runtime_env({"env_vars": {"A": "1"}})
    assert merge_runtime_envs(job, child).setup_hook == job.setup_hook
    named = parse_runtime_env({"worker_process_setup_hook": "json.dumps"}, job=True)
    assert named.setup_hook is not None and named.setup_hook.load() is json.dumps
    with pytest.raises(TypeError, match="must be a function"):
        parse_runtime_env({"worker_process_setup_hook": 3}, job=True)
    with pytest.raises(TypeError, match="JSON serializable"):
        parse_runtime_env({"worker_process_setup_hook": _mark_setup})
    with pytest.raises(ValueError, match=r"only in init\(runtime_env=...\)"):
        parse_runtime_env({"worker_process_setup_hook": "json.dumps"})
    with pytest.raises(ValueError, match="module.function"):
        parse_runtime_env({"worker_process_setup_hook": "nodots"}, job=True).setup_hook.load()  # type: ignore[union-attr]


def test_setup_hook_runs_on_workers_of_other_hosts(session_dir: Path) -> None:
    # Three hosts, each its own workdir: the hook (a local function, pickled by value) reaches
    # them as bytes, not through a shared path or module.
    def mark() -> None:
        import os

        os.environ["FRAY_TEST_SETUP_HOOK"] = "ran"

    fray_ray.init(runtime_env={"worker_process_setup_hook": mark}, cluster_config=THREE_HOSTS)

    @fray_ray.remote
    def seen() -> tuple[str | None, str]:
        return os.environ.get("FRAY_TEST_SETUP_HOOK"), os.getcwd()

    results = fray_ray.get([seen.remote() for _ in range(3)])
    assert all(mark == "ran" for mark, _ in results)
    assert "FRAY_TEST_SETUP_HOOK" not in os.environ


def test_setup_hook_failure_stops_the_worker(session_dir: Path) -> None:
    def broken() -> None:
        raise RuntimeError("no setup today")

    fray_ray.init(runtime_env={"worker_process_setup_hook": broken}, cluster_config=THREE_HOSTS)

    @fray_ray.remote(max_retries=0)
    def never() -> int:
        return 1

    with pytest.raises(fray_ray.exceptions.RaySystemError, match="could not start"):
        fray_ray.get(never.remote(), timeout=120)


def test_setup_hook_runs_once_in_local_mode(fresh_shutdown: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # local_mode's workers are threads of the driver's process: the hook runs there, once.
    monkeypatch.delenv("FRAY_TEST_SETUP_HOOK", raising=False)
    fray_ray.init(local_mode=True, runtime_env={"worker_process_setup_hook": _mark_setup})

    @fray_ray.remote
    def seen() -> str | None:
        return os.environ.get("FRAY_TEST_SETUP_HOOK")

    try:
        assert fray_ray.get(seen.remote()) == "ran"
    finally:
        os.environ.pop("FRAY_TEST_SETUP_HOOK", None)
