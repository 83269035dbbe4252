"""Setup scripts for Iris workers: Python packages installed before a job's command runs.

Iris runs a job's setup scripts on the worker before its command, each in a fresh `bash`, with
the task's `IRIS_*` environment; the command then runs with `$IRIS_VENV` activated if a script
left a virtualenv there. `pip_setup_script` writes such a script for a list of requirements:

- the environment is a virtualenv layered on the worker's own Python (`$IRIS_PYTHON`): a `.pth`
  file adds that Python's site directories, so everything the image provides (fray_ray,
  cloudpickle, ...) stays importable and the new packages come first;
- it is built once per distinct (interpreter, requirements) on a host, in a cache directory
  (`$FRAY_RAY_PIP_ENV_CACHE`, else `$XDG_CACHE_HOME/fray-ray/pip-envs`, else `~/.cache/...`),
  under a lock, and linked into each task's `$IRIS_VENV`; requirements that are local paths
  (say, a wheel inside the workspace bundle) also key it by the bundle and the files' digests;
- packages install with `uv pip` when the worker has uv, else with the worker Python's pip.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Sequence

__all__ = ["PIP_ENV_CACHE_ENV", "is_local_requirement", "pip_setup_script"]

#: Where built package environments are cached on a worker host.
PIP_ENV_CACHE_ENV = "FRAY_RAY_PIP_ENV_CACHE"

_TEMPLATE = r"""set -e
cd "$IRIS_WORKDIR"
python_bin="$(command -v "${IRIS_PYTHON:-python3}")"
venv="${IRIS_VENV:-$IRIS_WORKDIR/.venv}"
cache="${FRAY_RAY_PIP_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fray-ray/pip-envs}"
mkdir -p "$cache"
requirements=(__REQUIREMENTS__)
local_requirements=(__LOCAL__)
key_input="$("$python_bin" -c 'import sys; print(sys.executable, sys.version)') __DIGEST__"
if [ "${#local_requirements[@]}" -gt 0 ]; then
  key_input="$key_input ${IRIS_BUNDLE_ID:-}"
  for path in "${local_requirements[@]}"; do
    if [ -f "$path" ]; then key_input="$key_input $(sha256sum "$path" | cut -c1-64)"; fi
  done
fi
env_dir="$cache/$(printf '%s' "$key_input" | sha256sum | cut -c1-24)"
exec 9>"$env_dir.lock"
flock 9
if [ ! -f "$env_dir/.fray-ray-complete" ]; then
  echo "fray-ray: building a package environment for: ${requirements[*]}"
  rm -rf "$env_dir"
  "$python_bin" -m venv --without-pip "$env_dir"
  site_dir="$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$python_bin" - "$site_dir/_fray_ray_base.pth" <<'PY'
import site, sys
dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if d]
with open(sys.argv[1], "w") as pth:
    pth.write("import site; list(map(site.addsitedir, %r))\n" % dirs)
PY
  if command -v uv >/dev/null 2>&1; then
    __TIMEOUT__uv pip install --python "$env_dir/bin/python" __OPTIONS__"${requirements[@]}"
  elif "$python_bin" -m pip --version >/dev/null 2>&1; then
    __TIMEOUT__"$env_dir/bin/python" -m pip install --disable-pip-version-check --no-input __OPTIONS__"${requirements[@]}"
  else
    echo "fray-ray: cannot install ${requirements[*]}: the worker has neither uv nor pip for $python_bin" >&2
    exit 1
  fi
__CHECK__  touch "$env_dir/.fray-ray-complete"
fi
flock -u 9
rm -rf "$venv"
ln -s "$env_dir" "$venv"
"""


def is_local_requirement(requirement: str) -> bool:
    """A requirement naming a file or directory (relative to the task's workdir, or absolute)."""
    return requirement.startswith(("./", "../", "/", "file:")) or requirement in (".", "..")


def pip_setup_script(
    requirements: Sequence[str],
    *,
    install_options: Sequence[str] = (),
    check: bool = False,
    timeout_s: float | None = None,
) -> str:
    """A setup script installing `requirements` (pip requirement strings) into `$IRIS_VENV`.

    `install_options` are extra `pip install` arguments; `check` runs `pip check` afterwards;
    `timeout_s` bounds the install. ValueError for an empty list.
    """
    if not requirements:
        raise ValueError("pip_setup_script needs at least one requirement")
    quoted = " ".join(shlex.quote(r) for r in requirements)
    local = " ".join(shlex.quote(r) for r in requirements if is_local_requirement(r))
    digest = hashlib.sha256(
        "\0".join([*requirements, "--", *install_options, "check" if check else ""]).encode()
    ).hexdigest()[:32]
    options = "".join(shlex.quote(o) + " " for o in install_options)
    limit = f"timeout {int(timeout_s)} " if timeout_s else ""
    check_line = '  "$env_dir/bin/python" -m pip check\n' if check else ""
    return (
        _TEMPLATE.replace("__REQUIREMENTS__", quoted)
        .replace("__LOCAL__", local)
        .replace("__DIGEST__", digest)
        .replace("__OPTIONS__", options)
        .replace("__TIMEOUT__", limit)
        .replace("__CHECK__", check_line)
    )
