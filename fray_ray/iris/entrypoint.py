"""Iris entrypoints: plain commands, and callables shipped as `_callable.pkl` plus a runner.

The callable layout is Iris's: the command is
`bash -c "exec $IRIS_PYTHON -u $IRIS_WORKDIR/_callable_runner.py"` and the worker writes
`_callable.pkl` (cloudpickle of `(fn, args, kwargs)`) and the runner into the task's workdir,
here with `_bytecode_cache.py` beside them (`bytecode_cache.py`: compiled shipped code shared
by the host's workers). The runner text below is our own; a task launched by any Iris-speaking client runs it the same
way. The return value is discarded, as in Iris: results travel back over actor RPC.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle

from fray_ray.iris import bytecode_cache
from fray_ray.iris.types import Entrypoint

CALLABLE_FILE = "_callable.pkl"
RUNNER_FILE = "_callable_runner.py"
#: `bytecode_cache.py`, shipped beside the runner, which imports it before anything else.
BYTECODE_CACHE_FILE = "_bytecode_cache.py"
CALLABLE_COMMAND = ("bash", "-c", f"exec $IRIS_PYTHON -u $IRIS_WORKDIR/{RUNNER_FILE}")

RUNNER_SOURCE = '''\
"""Run the callable pickled next to this file: fn(*args, **kwargs); a raise exits 1."""
import logging
import os
import sys
import traceback


def main():
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname).1s%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
    workdir = os.environ.get("IRIS_WORKDIR") or os.path.dirname(os.path.abspath(__file__))
    # Tasks run from their workdir; imports should see the submitter's modules first.
    if workdir not in sys.path:
        sys.path.insert(0, workdir)
    try:  # the host's compiled code for the shipped sources (bytecode_cache.py)
        import _bytecode_cache

        _bytecode_cache.install(workdir)
    except Exception:  # noqa: BLE001 - without it, imports compile as usual
        pass
    try:
        import cloudpickle

        with open(os.path.join(workdir, "_callable.pkl"), "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
    except BaseException:
        print("iris runner: cannot load the callable from _callable.pkl:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        sys.exit(1)
    try:
        fn(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        sys.exit(1)
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    main()
'''


def _register_unimportable_modules(fn: object, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Ship code by value when the task could not import it: `__main__` and test modules."""
    for obj in (fn, *args, *kwargs.values()):
        module_name = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
        module = sys.modules.get(module_name or "")
        if module is None or module_name in ("__main__", "builtins"):
            continue
        top = module_name.split(".")[0]
        file = getattr(module, "__file__", "") or ""
        if top in ("tests", "compat_tests", "conftest") or "/tests/" in file or file.rsplit("/", 1)[-1].startswith("test_"):
            try:
                cloudpickle.register_pickle_by_value(module)
            except (ValueError, TypeError):
                pass


def pickle_callable(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> bytes:
    """cloudpickle `(fn, args, kwargs)`, shipping test and script modules by value."""
    kwargs = dict(kwargs or {})
    _register_unimportable_modules(fn, args, kwargs)
    return cloudpickle.dumps((fn, tuple(args), kwargs))


def callable_entrypoint(
    fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> Entrypoint:
    """An entrypoint that runs fn(*args, **kwargs) in the task."""
    return Entrypoint(
        argv=CALLABLE_COMMAND,
        workdir_files={
            CALLABLE_FILE: pickle_callable(fn, args, kwargs),
            RUNNER_FILE: RUNNER_SOURCE.encode(),
            BYTECODE_CACHE_FILE: _bytecode_cache_source(),
        },
    )


@functools.cache
def _bytecode_cache_source() -> bytes:
    with open(bytecode_cache.__file__, "rb") as file:
        return file.read()


def command_entrypoint(argv: Sequence[str]) -> Entrypoint:
    """An entrypoint that runs argv as it is."""
    if not argv:
        raise ValueError("a command entrypoint needs at least one argument")
    return Entrypoint(argv=tuple(str(a) for a in argv))
