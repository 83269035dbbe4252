"""What `init(address)` ships by default: the project holding the driver (found by its markers,
honouring `.gitignore` and `excludes`), or outside a project only the modules the driver
imported; one line says what and how big. Drivers run as processes of their own against a
standalone cluster, and their tasks list the directory they were shipped."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray._private.driver.shipped_code import default_code
from fray_ray.iris.bytecode_cache import ENV as BYTECODE_CACHE_ENV

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from standalone_cluster import standalone_cluster  # noqa: E402

DEADLINE = 180.0

DRIVER = """
    import os, sys
    import fray_ray as ray
    {imports}

    ray.init(sys.argv[1])

    @ray.remote
    def shipped():
        found = []
        for top, dirs, files in os.walk("."):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [os.path.relpath(os.path.join(top, f), ".") for f in files]
        # the job adds the callable it runs (_callable.pkl, _callable_runner.py, _bytecode_cache.py)
        return sorted(f for f in found if not f.startswith(("_callable", "_bytecode_cache"))), {call}

    files, value = ray.get(shipped.remote())
    print("shipped", files, value, flush=True)
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def fake_main(script: Path) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    return main


def module_from(path: Path, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    return module


def test_a_project_is_found_upwards_from_the_script(tmp_path: Path) -> None:
    project = write(tmp_path / "proj", {"pyproject.toml": "", "scripts/run.py": ""})
    code = default_code(fake_main(project / "scripts" / "run.py"), {})
    assert code.root == str(project.resolve()) and code.only is None
    assert code.what == f"the project {project.resolve()}"


def test_outside_a_project_only_imported_modules_and_the_script_are_shipped(tmp_path: Path) -> None:
    scratch = write(tmp_path / "scratch", {"run.py": "", "mylib.py": "", "pkg/__init__.py": "", "pkg/sub.py": "",
                                           "unrelated.py": "", "env/lib/site-packages/dep.py": ""})
    modules = {
        "mylib": module_from(scratch / "mylib.py", "mylib"),
        "pkg.sub": module_from(scratch / "pkg" / "sub.py", "pkg.sub"),
        "dep": module_from(scratch / "env" / "lib" / "site-packages" / "dep.py", "dep"),  # installed: not ours
        "json": sys.modules["json"],
    }
    code = default_code(fake_main(scratch / "run.py"), modules)
    assert code.root == str(scratch.resolve())
    assert code.only == ("mylib.py", "pkg", "run.py")


def test_modules_reached_through_symlinks_count_where_they_really_are(tmp_path: Path) -> None:
    scratch = write(tmp_path / "scratch", {"run.py": "", "real_mod.py": "", "pkg/__init__.py": ""})
    elsewhere = write(tmp_path / "elsewhere", {"outside.py": ""})
    (elsewhere / "link_mod.py").symlink_to(scratch / "real_mod.py")  # a file linked from outside
    (elsewhere / "linked_pkg").symlink_to(scratch / "pkg", target_is_directory=True)  # a directory
    (scratch / "away.py").symlink_to(elsewhere / "outside.py")  # in the directory, really outside
    modules = {
        "link_mod": module_from(elsewhere / "link_mod.py", "link_mod"),
        "linked_pkg": module_from(elsewhere / "linked_pkg" / "__init__.py", "linked_pkg"),
        "away": module_from(scratch / "away.py", "away"),
    }
    code = default_code(fake_main(scratch / "run.py"), modules)
    assert code.only == ("pkg", "real_mod.py", "run.py")


def test_an_interactive_driver_outside_a_project_ships_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, {"big.bin": "x"})
    monkeypatch.chdir(tmp_path)
    code = default_code(types.ModuleType("__main__"), {})
    assert code.root == str(tmp_path.resolve()) and code.only == ()
    assert code.what.startswith("nothing from")


@pytest.fixture(scope="module")
def standalone() -> Iterator[dict]:
    with standalone_cluster(["--cpu-workers", "1", "--cpu", "2", "--memory", "4g", "--disk", "10g"]) as (_, info):
        yield info


def run_driver(standalone: dict, script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "PYTHONPATH")}
    env["FRAY_RAY_TOKEN"] = standalone["token"]
    return subprocess.run([sys.executable, str(script), standalone["address"]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=DEADLINE)


def test_a_scratch_directory_ships_only_what_the_driver_imported(standalone: dict, tmp_path: Path) -> None:
    scratch = write(tmp_path / "scratch", {
        "driver.py": textwrap.dedent(DRIVER.format(imports="import mylib", call="mylib.answer()")),
        "mylib.py": "def answer():\n    return 42\n",
        "notes.txt": "not code\n",
        "old/experiment.py": "",
    })
    with open(scratch / "huge.bin", "wb") as f:  # far over the bundle limit: shipping it would be refused
        f.truncate(400 * 1024 * 1024)
    result = run_driver(standalone, scratch / "driver.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "shipped ['driver.py', 'mylib.py'] 42" in result.stdout
    announced = [line for line in result.stderr.splitlines() if line.startswith("fray_ray: shipping")]
    assert announced == [
        f"fray_ray: shipping driver.py, mylib.py from {scratch.resolve()} (not a project: only what the driver "
        f"imported) to the cluster's workers: 2 files, 0.0 MiB"
    ], result.stderr[-3000:]


def test_a_project_ships_its_root_less_gitignore_and_excludes(standalone: dict, tmp_path: Path) -> None:
    project = write(tmp_path / "proj", {
        "pyproject.toml": "[project]\nname = 'proj'\n",
        ".gitignore": "outputs/\n",
        "outputs/run1.log": "ignored\n",
        "data/table.csv": "a,b\n",
        "scratch.txt": "left out by excludes\n",
        "scripts/driver.py": textwrap.dedent(DRIVER.format(imports="", call="open('data/table.csv').read()")).replace(
            "ray.init(sys.argv[1])", "ray.init(sys.argv[1], runtime_env={'excludes': ['scratch.txt']})"),
    })
    result = run_driver(standalone, project / "scripts" / "driver.py", project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("shipped ['.gitignore', 'data/table.csv', 'pyproject.toml', 'scripts/driver.py'] a,b"
            in result.stdout), result.stdout
    assert f"fray_ray: shipping the project {project.resolve()} to the cluster's workers: 4 files" in result.stderr


def test_a_copy_of_fray_ray_in_the_project_is_never_shipped(standalone: dict, tmp_path: Path) -> None:
    """Workers run the fray_ray installed in their own Python, as Ray's workers run their own ray:
    a copy in the project (the fray_ray checkout, say) would shadow it on every host."""
    where = "(ray.__file__, os.getcwd())"
    project = write(tmp_path / "proj", {
        "pyproject.toml": "[project]\nname = 'proj'\n",
        "fray_ray/__init__.py": "raise ImportError('the shipped copy of fray_ray was imported')\n",
        "lib/helpers.py": "",
        "tools/driver.py": textwrap.dedent(DRIVER.format(imports="", call=where)),
    })
    result = run_driver(standalone, project / "tools" / "driver.py", project / "tools")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "shipped ['lib/helpers.py', 'pyproject.toml', 'tools/driver.py'] (" in result.stdout, result.stdout
    imported_from, workdir = eval(result.stdout.split("] ", 1)[1])  # noqa: S307 - the test's own tuple
    assert not os.path.realpath(imported_from).startswith(os.path.realpath(workdir) + os.sep)
    assert f"fray_ray: shipping the project {project.resolve()} to the cluster's workers: 3 files" in result.stderr


def test_a_project_over_the_limit_is_refused_at_once_naming_its_largest_entries(
    standalone: dict, tmp_path: Path
) -> None:
    project = write(tmp_path / "proj", {
        ".git/HEAD": "ref: refs/heads/main\n",
        "driver.py": textwrap.dedent(DRIVER.format(imports="", call="None")),
    })
    (project / "checkpoints").mkdir()
    for index in range(3):
        with open(project / "checkpoints" / f"step{index}.ckpt", "wb") as f:
            f.truncate(200 * 1024 * 1024)  # sized, never written: refused from sizes alone
    result = run_driver(standalone, project / "driver.py", project)
    assert result.returncode != 0
    assert "BundleTooLarge" in result.stderr and "largest entries: checkpoints/ (600.0 MiB, 3 files)" in result.stderr
    assert "runtime_env={'excludes': ['checkpoints/', 'driver.py']}" in result.stderr


def test_workers_compile_shipped_modules_through_the_hosts_cache(standalone: dict, tmp_path: Path) -> None:
    source = f"# only this test's: {tmp_path}\ndef answer():\n    return 42\n"
    loaded = "(type(mylib.__spec__.loader).__name__, mylib.answer(), sys.dont_write_bytecode)"
    project = write(tmp_path / "proj", {
        "pyproject.toml": "[project]\nname = 'proj'\n",
        "mylib.py": source,
        "driver.py": textwrap.dedent(DRIVER.format(imports="import mylib", call=loaded)),
    })
    result = run_driver(standalone, project / "driver.py", project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "('CachedSourceLoader', 42, " in result.stdout, result.stdout
    if result.stdout.rstrip().endswith("False)"):  # the workers write bytecode: this file's is in the cache
        key = hashlib.blake2b(source.encode(), digest_size=20).hexdigest()
        assert list(Path(os.environ[BYTECODE_CACHE_ENV]).glob(f"*/{key}.code")), "no cache entry for mylib.py"
