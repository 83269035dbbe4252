"""The compatibility suite's pytest plugin: backend choice, known differences, result file.

``compat_tests/conftest.py`` re-exports these hooks; a separate pytest run can load them with
``-p compat_tests._plugin`` (the harness self-test does).

* ``--backend=fray_ray|ray`` (default ``fray_ray``) picks the implementation under test. The
  choice goes into the environment (``_backend.ENV_VAR``) in ``pytest_configure``, which runs
  before any test module is collected, so test modules import only the selected backend.
* ``@pytest.mark.known_difference(reason="...")`` marks a behaviour fray_ray is known to do
  differently. The reason is required. On ``ray`` the marker does nothing (Ray must pass); on
  ``fray_ray`` the test runs as a non-strict xfail. The run ends with the line
  ``compat: N known differences marked``.
* ``--compat-report=PATH`` writes one JSON record per test (outcome, area, backend, known
  difference reason); ``scripts/compatibility_table.py`` turns such files into COMPATIBILITY.md.

The suite runs under pytest-xdist (``-n 2``, as `.ci/run` does): each xdist worker starts its own
clusters, the known-difference reason travels with each test's report (``user_properties``), and
only the controlling process writes the report file.

Every run gets its own ``RAY_TMPDIR``: ``ray.init()`` with no address joins the last cluster
whose address file it finds there, so without it one xdist worker would join (and lose) a cluster
another worker started, and a cluster the user started would capture the suite.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests import _backend
from compat_tests._backend import BACKENDS, DEFAULT_BACKEND, ENV_VAR

MARKER = "known_difference"
REPORT_VERSION = 1
_REPO_ROOT = Path(__file__).resolve().parent.parent

_known_key = pytest.StashKey[dict]()  # nodeid -> reason, for the selected items
_results_key = pytest.StashKey[dict]()  # nodeid -> result record
_collect_errors_key = pytest.StashKey[list]()  # collection failures (file, message)
_started_key = pytest.StashKey[float]()
_tmpdir_key = pytest.StashKey[str]()

# The report hooks (collectreport, runtest_logreport) receive no config; pytest_configure
# records it here and pytest_unconfigure clears it.
_current_config: pytest.Config | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat", "fray_ray compatibility suite")
    group.addoption(
        "--backend",
        action="store",
        choices=BACKENDS,
        default=DEFAULT_BACKEND,
        help="implementation under test: fray_ray (default) or ray (real Ray, to validate tests)",
    )
    group.addoption(
        "--shared-cluster-scope",
        action="store",
        choices=("module", "session"),
        default=None,
        help="how long ray_start_regular_shared keeps a cluster: per module, or across modules "
        "asking for the same init arguments (default: session on ray, module on fray_ray)",
    )
    group.addoption(
        "--compat-report",
        action="store",
        default=None,
        metavar="PATH",
        help="write per-test results as JSON for scripts/compatibility_table.py",
    )


def pytest_configure(config: pytest.Config) -> None:
    backend = config.getoption("--backend")
    loaded = _backend.loaded_backend()
    if loaded is not None and loaded != backend:
        raise pytest.UsageError(f"backend {loaded!r} already imported, cannot switch to {backend!r}")
    os.environ[ENV_VAR] = backend
    # Worker processes of the backend inherit the environment; make sure they can import
    # ``compat_tests`` (module-level remote functions are pickled by reference).
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(_REPO_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(_REPO_ROOT), *paths])
    config.addinivalue_line(
        "markers",
        f"{MARKER}(reason): fray_ray is known to behave differently here; reason names the "
        "difference (required). xfail on --backend=fray_ray, no effect on --backend=ray.",
    )
    config.stash[_known_key] = {}
    config.stash[_results_key] = {}
    config.stash[_collect_errors_key] = []
    config.stash[_started_key] = time.time()
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    config.stash[_tmpdir_key] = tempfile.mkdtemp(prefix=f"compat-{worker}-")
    os.environ["RAY_TMPDIR"] = config.stash[_tmpdir_key]
    global _current_config
    _current_config = config


def pytest_unconfigure(config: pytest.Config) -> None:
    if _tmpdir_key in config.stash:
        shutil.rmtree(config.stash[_tmpdir_key], ignore_errors=True)
    global _current_config
    if _current_config is config:
        _current_config = None


def shared_cluster_scope(config: pytest.Config) -> str:
    """``module`` or ``session``: see ``--shared-cluster-scope`` and conftest.py."""
    scope = config.getoption("--shared-cluster-scope")
    if scope is None:
        scope = "session" if config.getoption("--backend") == "ray" else "module"
    return scope


def known_difference_reason(item: pytest.Item) -> str | None:
    """The reason of the item's ``known_difference`` marker, or None when it has none.

    Raises ``pytest.UsageError`` when the marker is present without a non-empty reason.
    """
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return None
    reason = marker.kwargs.get("reason", marker.args[0] if marker.args else None)
    if not isinstance(reason, str) or not reason.strip():
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.{MARKER} needs reason=\"...\" naming the difference"
        )
    return reason.strip()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = config.getoption("--backend")
    for item in items:
        reason = known_difference_reason(item)
        if reason is None:
            continue
        # Reports carry user_properties to the xdist controller, which collects nothing itself.
        item.user_properties.append((MARKER, reason))
        if backend == "fray_ray":
            item.add_marker(pytest.mark.xfail(reason=f"known difference: {reason}", strict=False))


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_collection_finish(session: pytest.Session) -> None:
    known = session.config.stash[_known_key]
    for item in session.items:
        reason = known_difference_reason(item)
        if reason is not None:
            known[item.nodeid] = reason


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed and _current_config is not None:
        _current_config.stash[_collect_errors_key].append(
            {"nodeid": report.nodeid, "message": _short(report.longreprtext)}
        )


def _area_of(nodeid: str) -> str:
    filename = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    stem = filename[:-3] if filename.endswith(".py") else filename
    return stem[len("test_"):] if stem.startswith("test_") else stem


def _short(text: str, limit: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2 :]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _current_config
    if config is None:
        return
    for name, value in report.user_properties:
        if name == MARKER:
            config.stash[_known_key][report.nodeid] = value
    results = config.stash[_results_key]
    record = results.get(report.nodeid)
    if record is None:
        record = results[report.nodeid] = {
            "nodeid": report.nodeid,
            "area": _area_of(report.nodeid),
            "name": report.nodeid.split("::", 1)[-1],
            "outcome": None,
            "duration": 0.0,
            "message": None,
        }
    record["duration"] += report.duration
    outcome = None
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        else:
            outcome = report.outcome  # passed / failed / skipped
    elif report.failed:  # setup or teardown error
        outcome = "error"
    elif report.skipped and report.when == "setup":
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    if outcome is not None and record["outcome"] != "error":
        record["outcome"] = outcome
        if report.failed or outcome in ("xfailed", "skipped"):
            record["message"] = _short(report.longreprtext)


def _installed_version(backend: str) -> str | None:
    try:
        return importlib.metadata.version(backend.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return None


def _report_payload(session: pytest.Session) -> dict[str, Any]:
    config = session.config
    backend = config.getoption("--backend")
    module = sys.modules.get(backend)  # not imported in an xdist controller: ask the installed package
    version = getattr(module, "__version__", None) or _installed_version(backend)
    known = config.stash[_known_key]
    tests = []
    for nodeid, record in config.stash[_results_key].items():
        tests.append({**record, "known_difference": known.get(nodeid)})
    return {
        "report_version": REPORT_VERSION,
        "backend": backend,
        "backend_version": version,
        "python": sys.version.split()[0],
        "started": _dt.datetime.fromtimestamp(config.stash[_started_key], _dt.UTC)
        .isoformat(timespec="seconds"),
        "duration_s": round(time.time() - config.stash[_started_key], 1),
        "known_differences": known,
        "collection_errors": config.stash[_collect_errors_key],
        "tests": tests,
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--compat-report")
    if path and not _is_xdist_worker(session.config):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(_report_payload(session), indent=1) + "\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    backend = config.getoption("--backend")
    count = len(config.stash[_known_key])
    effect = "run as xfail" if backend == "fray_ray" else "no effect on this backend"
    terminalreporter.write_line(
        f"compat: {count} known differences marked (backend={backend}; {effect})"
    )
    path = config.getoption("--compat-report")
    if path:
        terminalreporter.write_line(f"compat: results written to {path}")
