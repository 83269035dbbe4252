"""Starting a worker process on a host that shares nothing with the driver but the bundle.

Executors (`executor.start_executor`) and actor hosts (`actor_host.CheckedActorHost`) start
through here (not in local mode, where they are threads of the driver). Before connecting to the
driver, a worker checks what it cannot do without, so a broken host fails at once with a
reason the driver can show (the worker prints it as its last line and exits 1; Iris keeps it
in the task's error):

- the worker's fray_ray is the driver's version (the rule: the worker image or venv has the
  same fray-ray installed; see docs/iris.md, "Give the workers fray_ray");
- the runtime env's `pip`/`uv` packages are installed (they are not when the cluster's workers
  skip setup scripts, as Iris's local process runtime does).

Then it adopts the identity of the TPU host it was placed on where the host did not give it
(`core/host_identity.py`), works from `$IRIS_WORKDIR` (the unpacked bundle: Ray's working_dir), puts the shipped
`py_modules` on the path (for its subprocesses too), records the runtime env that the tasks
and actors it submits inherit, and runs the job's `worker_process_setup_hook`: once per worker
process, before any task or actor. A hook that raises ends the worker as a broken host does
(its tasks fail as crashed workers, its actor dies), as in Ray.
"""

from __future__ import annotations

import os
import re
import sys
import traceback

from fray_ray._private.core import host_identity
from fray_ray._private.core import runtime_env as runtime_env_module
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._version import __version__
from fray_ray.fray.job_info import PY_MODULES_DIR

__all__ = ["WorkerEnvironmentError", "prepare_worker"]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class WorkerEnvironmentError(RuntimeError):
    """This worker's Python cannot run the driver's work (wrong fray_ray, packages missing)."""


def prepare_worker(driver_version: str, runtime_env: RuntimeEnv) -> None:
    """Check this process can serve the driver, then set up its paths. Raises WorkerEnvironmentError."""
    if __version__ != driver_version:
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # fray_ray/
        raise WorkerEnvironmentError(
            f"this worker's fray_ray is {__version__} ({package}, Python "
            f"{sys.executable}) but the driver runs {driver_version}: install fray-ray=={driver_version} in the "
            "cluster's worker image"
        )
    if runtime_env.pip is not None:
        missing = [r for r in runtime_env.pip.packages if not _installed(r)]
        if missing:
            raise WorkerEnvironmentError(
                f"runtime_env {runtime_env.pip.tool} packages {missing} are not installed in this worker's Python "
                f"({sys.executable}): the cluster's workers did not run the job's setup script (Iris's local process "
                "runtime skips setup); install them in the worker image, or use a cluster that runs setup scripts"
            )
    host_identity.adopt()
    workdir = os.environ.get("IRIS_WORKDIR") or os.getcwd()
    if os.path.isdir(workdir):
        os.chdir(workdir)  # relative paths resolve in the shipped working_dir, as in Ray
    extra = [workdir]
    modules = os.path.join(workdir, PY_MODULES_DIR)
    if os.path.isdir(modules):
        extra.append(modules)
        if modules not in sys.path:
            sys.path.insert(1, modules)
    # Subprocesses of tasks import the shipped code as the task itself does.
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*extra, *current]))
    runtime_env_module.set_process_runtime_env(runtime_env)
    if runtime_env.setup_hook is not None:
        _run_setup_hook(runtime_env.setup_hook)


def _run_setup_hook(hook: runtime_env_module.SetupHook) -> None:
    try:
        hook.load()()
    except Exception as exc:  # noqa: BLE001 - reported as why this worker cannot start
        raise WorkerEnvironmentError(
            f"Failed to execute the setup hook method. Function name:{hook.name}\n{traceback.format_exc()}"
        ) from exc


def _installed(requirement: str) -> bool:
    """Whether a requirement's distribution is installed; paths and URLs cannot be checked."""
    if runtime_env_module.is_path_like(requirement):
        return True
    match = _NAME.match(requirement)
    if match is None:
        return True
    import importlib.metadata  # only for runtime_env pip lists: not at every worker's start

    try:
        importlib.metadata.distribution(match.group(1))
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
