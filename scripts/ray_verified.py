#!/usr/bin/env python3
"""Re-run the compatibility suite on real Ray only for the modules whose inputs changed.

Ray is pinned (the ``ray==X`` of ``.ci/run``), so a compat module whose text, shared files and
Ray version are unchanged can only get the answer Ray gave last time. That answer is kept in
``compat_tests/ray_verified.json`` (the *record*), committed with the tests:

    {
     "record_version": 1,
     "ray_version": "2.60.0",
     "modules": {
      "test_actors.py": {                   # path under compat_tests/
       "digest": "<sha256>",                # decides whether this entry may be used
       "shared_digest": "<sha256>",         # the shared files' part of it (explains a re-run)
       "dashboard": false,                  # run on Ray with its dashboard (ray[default])
       "verified": "<start of the run>", "python": "3.11.x",
       "collection_errors": [...],          # as --compat-report writes them
       "tests": [{"nodeid": ..., "outcome": ..., ...}, ...]  # as --compat-report writes them
      }, ...}}

A module's digest covers everything that can change what Ray answers for it: the module's
bytes; every other file of compat_tests/ except test modules, ``*.md`` and the record
(conftest.py, _plugin.py, _backend.py, helpers.py, pytest.ini, ...); the pinned Ray version;
whether it runs with the dashboard; and the pytest arguments it runs with.

    python scripts/ray_verified.py plan                 # modules whose digest is not recorded
    python scripts/ray_verified.py run --ray-python P [--ray-dashboard-python Q] [--all]
    python scripts/ray_verified.py update               # record what the last run answered
    python scripts/ray_verified.py needs-dashboard      # yes/no: must Ray with its dashboard run?

``run`` runs the planned modules on real Ray (test_state_api.py on Q, a Ray with its dashboard),
fails if any test fails, and writes into ``--out`` (default .ci/reports): ``ray.json``, a
report for ``scripts/compatibility_table.py --ray`` made of the record's entries for unchanged
modules and the fresh results for the others, and ``ray-verified-fresh.json``, the fresh results
in the record's format. ``update`` merges that file into the record; CI never runs it.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMPAT_DIR = "compat_tests"
RECORD_NAME = "ray_verified.json"
CI_SCRIPT = ".ci/run"
FRESH_NAME = "ray-verified-fresh.json"
MERGED_NAME = "ray.json"
RECORD_VERSION = 1
REPORT_VERSION = 1  # of compat_tests/_plugin.py's --compat-report files

# Modules Ray answers only with its dashboard (ray[default], a virtualenv of its own).
DASHBOARD_MODULES = frozenset({"test_state_api.py"})
PLAIN_PYTEST_ARGS = ("-c", "compat_tests/pytest.ini", "--backend=ray", "-q", "-n", "2", "--dist", "loadfile",
                     "--max-worker-restart=0")
# The dashboard's virtualenv has no pytest-xdist: one module, one process.
DASHBOARD_PYTEST_ARGS = ("-c", "compat_tests/pytest.ini", "--backend=ray", "-q", "-p", "no:cacheprovider")
DASHBOARD_ENV = {"FRAY_RAY_COMPAT_REQUIRE_RAY_DASHBOARD": "1"}
FAILING_OUTCOMES = frozenset({"failed", "error", None})
_PIN = re.compile(r"""["']ray(?:\[[a-z,]+\])?==([^"'\s]+)["']""")


class RecordError(Exception):
    """The record, a report or the repository is not in a state this script can trust."""


@dataclass(frozen=True)
class ModuleDigest:
    """What a module's Ray answer depends on, hashed."""

    digest: str
    shared_digest: str
    dashboard: bool


@dataclass(frozen=True)
class ModuleResult:
    """Ray's answer for one module: the tests' records as the compat report writes them."""

    digest: str
    shared_digest: str
    dashboard: bool
    verified: str | None
    python: str | None
    tests: tuple[dict[str, Any], ...]
    collection_errors: tuple[dict[str, Any], ...]

    def failures(self) -> list[str]:
        bad = [f"{t['nodeid']}: {t.get('outcome')}" for t in self.tests if t.get("outcome") in FAILING_OUTCOMES]
        bad += [f"{e.get('nodeid')}: collection error" for e in self.collection_errors]
        return bad if bad or self.tests else ["no test of this module ran"]

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "shared_digest": self.shared_digest, "dashboard": self.dashboard,
                "verified": self.verified, "python": self.python,
                "collection_errors": list(self.collection_errors), "tests": list(self.tests)}


@dataclass(frozen=True)
class Record:
    """The record file's contents: Ray's version and one result per module."""

    ray_version: str
    modules: Mapping[str, ModuleResult]

    def to_json(self) -> dict[str, Any]:
        return {"record_version": RECORD_VERSION, "ray_version": self.ray_version,
                "modules": {name: self.modules[name].to_json() for name in sorted(self.modules)}}


@dataclass(frozen=True)
class Plan:
    """The modules to run on Ray, each with why."""

    modules: Mapping[str, str]  # module -> reason
    total: int

    def describe(self) -> str:
        if not self.modules:
            return f"ray-verified: all {self.total} compat modules match the record; nothing to run on Ray"
        reasons = sorted(set(self.modules.values()))
        head = f"ray-verified: {len(self.modules)} of {self.total} compat modules to run on Ray"
        if len(reasons) == 1 and len(self.modules) == self.total:
            return f"{head} ({reasons[0]})"
        return head + "".join(f"\n  {m}: {r}" for m, r in sorted(self.modules.items()))


# ---- digests --------------------------------------------------------------------------------


def pinned_ray_version(root: Path) -> str:
    """The one Ray version .ci/run installs (``ray==X`` and ``ray[default]==X`` must agree)."""
    path = root / CI_SCRIPT
    try:
        versions = set(_PIN.findall(path.read_text(encoding="utf-8")))
    except OSError as error:
        raise RecordError(f"cannot read {CI_SCRIPT} for the pinned Ray version: {error}") from error
    if len(versions) != 1:
        raise RecordError(f"{CI_SCRIPT} must pin exactly one Ray version (ray==X); found {sorted(versions) or 'none'}")
    return versions.pop()


def _files(root: Path) -> list[Path]:
    compat = root / COMPAT_DIR
    return sorted(p for p in compat.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(compat).parts)


def _name(root: Path, path: Path) -> str:
    return path.relative_to(root / COMPAT_DIR).as_posix()


def _is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") and path.suffix == ".py"


def compat_modules(root: Path) -> list[str]:
    """Every compat test module, as its path under compat_tests/."""
    return [_name(root, p) for p in _files(root) if _is_test_module(p)]


def shared_files(root: Path) -> list[str]:
    """The files of compat_tests/ that every module's answer depends on."""
    return [_name(root, p) for p in _files(root)
            if not _is_test_module(p) and p.suffix not in (".md", ".pyc") and p.name != RECORD_NAME]


def _hash(parts: Iterable[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for label, data in parts:  # length-prefixed, so no two inputs hash alike
        digest.update(f"{len(label)}:{label}{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def current_digests(root: Path) -> dict[str, ModuleDigest]:
    """Each compat module's digest as the files stand now."""
    compat = root / COMPAT_DIR
    ray_version = pinned_ray_version(root)
    shared = _hash([("ray_version", ray_version.encode())]
                   + [(name, (compat / name).read_bytes()) for name in shared_files(root)])
    result = {}
    for module in compat_modules(root):
        dashboard = module in DASHBOARD_MODULES
        args = DASHBOARD_PYTEST_ARGS if dashboard else PLAIN_PYTEST_ARGS
        digest = _hash([("shared", shared.encode()), ("dashboard", str(dashboard).encode()),
                        ("pytest_args", json.dumps(args).encode()), (module, (compat / module).read_bytes())])
        result[module] = ModuleDigest(digest=digest, shared_digest=shared, dashboard=dashboard)
    return result


# ---- the record -----------------------------------------------------------------------------


def record_path(root: Path) -> Path:
    return root / COMPAT_DIR / RECORD_NAME


def _require(condition: bool, where: str, what: str) -> None:
    if not condition:
        raise RecordError(f"{where}: {what}")


def parse_record(data: Any, where: str) -> Record:
    """A record from its JSON, refusing anything malformed (a bad record must not pass as Ray's answer)."""
    _require(isinstance(data, dict), where, "not a JSON object")
    _require(data.get("record_version") == RECORD_VERSION, where, f"record_version is not {RECORD_VERSION}")
    _require(isinstance(data.get("ray_version"), str), where, "no ray_version")
    _require(isinstance(data.get("modules"), dict), where, "no modules")
    modules = {}
    for name, entry in data["modules"].items():
        at = f"{where}: {name}"
        _require(isinstance(entry, dict), at, "not a JSON object")
        for key in ("digest", "shared_digest"):
            _require(isinstance(entry.get(key), str) and len(entry[key]) == 64, at, f"no {key}")
        _require(isinstance(entry.get("dashboard"), bool), at, "no dashboard flag")
        _require(isinstance(entry.get("tests"), list) and isinstance(entry.get("collection_errors"), list),
                 at, "no tests or collection_errors list")
        for test in entry["tests"]:
            _require(isinstance(test, dict) and isinstance(test.get("nodeid"), str)
                     and _module_of(test["nodeid"]) == name, at, f"a test that is not this module's: {test!r:.200}")
            _require("outcome" in test and "area" in test, at, f"{test['nodeid']} has no outcome or area")
        modules[name] = ModuleResult(digest=entry["digest"], shared_digest=entry["shared_digest"],
                                     dashboard=entry["dashboard"], verified=entry.get("verified"),
                                     python=entry.get("python"), tests=tuple(entry["tests"]),
                                     collection_errors=tuple(entry["collection_errors"]))
    return Record(ray_version=data["ray_version"], modules=modules)


def load_record(path: Path) -> Record | None:
    """The record at path, or None when there is none."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RecordError(f"{path}: not JSON ({error})") from error
    return parse_record(data, str(path))


def write_record(path: Path, record: Record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.to_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def usable(record: Record | None, digests: Mapping[str, ModuleDigest]) -> dict[str, ModuleResult]:
    """The record's entries that still stand: recorded under the module's current digest."""
    if record is None:
        return {}
    return {m: r for m, r in record.modules.items() if m in digests and r.digest == digests[m].digest}


def make_plan(record: Record | None, digests: Mapping[str, ModuleDigest], run_all: bool = False) -> Plan:
    """Which modules must run on Ray, and why."""
    standing = usable(record, digests)
    reasons = {}
    for module, digest in digests.items():
        entry = None if record is None else record.modules.get(module)
        if run_all:
            reasons[module] = "--all"
        elif record is None:
            reasons[module] = f"no record ({COMPAT_DIR}/{RECORD_NAME})"
        elif entry is None:
            reasons[module] = "not in the record"
        elif module in standing:
            continue
        elif entry.shared_digest != digest.shared_digest:
            reasons[module] = "shared files or the pinned Ray version changed"
        else:
            reasons[module] = "module changed"
    return Plan(modules=reasons, total=len(digests))


# ---- reports --------------------------------------------------------------------------------


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].removeprefix(COMPAT_DIR + "/")


def results_from_report(report: Mapping[str, Any], modules: Iterable[str],
                        digests: Mapping[str, ModuleDigest]) -> dict[str, ModuleResult]:
    """Split one compat report into per-module results, for the modules that were asked to run."""
    if report.get("report_version") != REPORT_VERSION or report.get("backend") != "ray":
        raise RecordError("not a --backend=ray compat report of a known version")
    wanted = set(modules)
    tests: dict[str, list[dict[str, Any]]] = {m: [] for m in wanted}
    errors: dict[str, list[dict[str, Any]]] = {m: [] for m in wanted}
    for kind, items in (("test", report.get("tests", [])), ("collection error", report.get("collection_errors", []))):
        for item in items:
            module = _module_of(item["nodeid"])
            if module not in wanted:
                raise RecordError(f"the report has a {kind} of {module}, which was not asked to run")
            (tests if kind == "test" else errors)[module].append(item)
    return {m: ModuleResult(digest=digests[m].digest, shared_digest=digests[m].shared_digest,
                            dashboard=digests[m].dashboard, verified=report.get("started"),
                            python=report.get("python"),
                            tests=tuple(sorted(tests[m], key=lambda t: t["nodeid"])),
                            collection_errors=tuple(errors[m]))
            for m in sorted(wanted)}


def merged_report(record: Record | None, fresh: Mapping[str, ModuleResult],
                  digests: Mapping[str, ModuleDigest], ray_version: str) -> dict[str, Any]:
    """A compat report of every module: fresh results where run, else the record's standing entries."""
    standing = usable(record, digests)
    chosen = {}
    for module in sorted(digests):
        result = fresh.get(module) or standing.get(module)
        if result is None or result.digest != digests[module].digest:
            raise RecordError(f"{module}: no Ray result for its current digest (run it on Ray)")
        chosen[module] = result
    tests = [t for r in chosen.values() for t in r.tests]
    times = sorted(r.verified for r in chosen.values() if r.verified)
    return {
        "report_version": REPORT_VERSION,
        "backend": "ray",
        "backend_version": ray_version,
        "python": ", ".join(sorted({r.python for r in chosen.values() if r.python})) or None,
        "started": None,
        "duration_s": None,
        "verified_between": [times[0], times[-1]] if times else None,
        "rerun_modules": sorted(fresh),
        "known_differences": {t["nodeid"]: t["known_difference"] for t in tests if t.get("known_difference")},
        "collection_errors": [e for r in chosen.values() for e in r.collection_errors],
        "tests": tests,
    }


# ---- running on Ray -------------------------------------------------------------------------


def installed_ray_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('ray'))"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RecordError(f"{python} has no Ray installed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def _run_pytest(root: Path, python: str, args: tuple[str, ...], modules: list[str], report: Path,
                extra_env: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    report.unlink(missing_ok=True)
    command = [python, "-m", "pytest", *args, *(f"{COMPAT_DIR}/{m}" for m in modules), f"--compat-report={report}"]
    print("ray-verified: " + " ".join(command), flush=True)
    code = subprocess.run(command, cwd=root, env={**os.environ, **extra_env}).returncode
    if not report.exists():
        raise RecordError(f"pytest exited with {code} and wrote no report ({report})")
    return code, json.loads(report.read_text(encoding="utf-8"))


def run(root: Path, out: Path, ray_python: str | None, dashboard_python: str | None, run_all: bool) -> int:
    """Run the planned modules on Ray; write the fresh results and the merged report into out."""
    digests = current_digests(root)
    ray_version = pinned_ray_version(root)
    record = load_record(record_path(root))
    plan = make_plan(record, digests, run_all)
    print(plan.describe(), flush=True)
    jobs = [(python, option, args, env, [m for m in plan.modules if digests[m].dashboard == dashboard])
            for python, option, args, env, dashboard in (
                (ray_python, "--ray-python", PLAIN_PYTEST_ARGS, {}, False),
                (dashboard_python, "--ray-dashboard-python", DASHBOARD_PYTEST_ARGS, DASHBOARD_ENV, True))]
    for python, option, _, _, modules in jobs:
        if modules and python is None:
            raise RecordError(f"{option} is needed to run {', '.join(modules)}")
        if modules and installed_ray_version(python) != ray_version:
            raise RecordError(f"{python} has Ray {installed_ray_version(python)}, not the pinned {ray_version}")
    out.mkdir(parents=True, exist_ok=True)
    fresh: dict[str, ModuleResult] = {}
    exit_codes = []
    for index, (python, _, args, env, modules) in enumerate(jobs):
        if modules:
            assert python is not None
            code, report = _run_pytest(root, python, args, sorted(modules), out / f"ray-verified-run{index}.json", env)
            exit_codes.append(code)
            fresh.update(results_from_report(report, modules, digests))
    if current_digests(root) != digests:
        raise RecordError("compat_tests/ changed while the modules ran on Ray; run again")
    failures = [f for result in fresh.values() for f in result.failures()]
    if plan.modules:
        write_record(out / FRESH_NAME, Record(ray_version=ray_version, modules=fresh))
    (out / MERGED_NAME).write_text(json.dumps(merged_report(record, fresh, digests, ray_version), indent=1) + "\n",
                                   encoding="utf-8")
    if failures or any(exit_codes):
        print("ray-verified: FAILED on real Ray (a test that Ray fails is a wrong test):", file=sys.stderr)
        for line in failures or [f"pytest exited with {exit_codes}"]:
            print(f"  {line}", file=sys.stderr)
        return 1
    if plan.modules:
        print(f"ray-verified: {len(fresh)} modules passed on Ray {ray_version}; wrote {out / MERGED_NAME} "
              f"(record it with: python scripts/ray_verified.py update --out {out})")
    return 0


def update(root: Path, out: Path) -> int:
    """Merge the fresh results of the last run into the committed record.

    A module that failed on Ray, or changed since it ran, is not recorded (the exit code is 1);
    the others are.
    """
    fresh_path = out / FRESH_NAME
    fresh = load_record(fresh_path)
    if fresh is None:
        raise RecordError(f"no {fresh_path}: run `python scripts/ray_verified.py run ...` first")
    digests = current_digests(root)
    ray_version = pinned_ray_version(root)
    if fresh.ray_version != ray_version:
        raise RecordError(f"{fresh_path} is of Ray {fresh.ray_version}; {CI_SCRIPT} pins {ray_version}")
    refused = {}
    for module, result in fresh.modules.items():
        if result.failures():
            refused[module] = f"failed on Ray ({result.failures()[0]}); fix it and run again"
        elif module not in digests or digests[module].digest != result.digest:
            refused[module] = "changed (or went away) since it ran on Ray; run again"
    path = record_path(root)
    old = load_record(path)
    kept = {} if old is None or old.ray_version != ray_version else {
        m: r for m, r in old.modules.items() if m in digests}
    recorded = {m: r for m, r in fresh.modules.items() if m not in refused}
    modules = {**kept, **recorded}
    write_record(path, Record(ray_version=ray_version, modules=modules))
    dropped = sorted(set(old.modules if old else ()) - set(modules))
    stale = sorted(make_plan(Record(ray_version, modules), digests).modules)
    print(f"ray-verified: recorded {len(recorded)} modules in {path.relative_to(root)}"
          + (f"; dropped {', '.join(dropped)} (no longer in {COMPAT_DIR}/)" if dropped else ""))
    for test in (t for r in recorded.values() for t in r.tests if t.get("outcome") == "skipped"):
        print(f"  note: recorded as skipped on Ray: {test['nodeid']}")
    for module, why in sorted(refused.items()):
        print(f"  not recorded: {module} {why}", file=sys.stderr)
    if stale:
        print(f"  still to run on Ray: {', '.join(stale)}")
    return 1 if refused else 0


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    plan_parser = commands.add_parser("plan", help="print the modules whose digest the record does not hold")
    plan_parser.add_argument("--all", action="store_true", help="plan every module")
    commands.add_parser("needs-dashboard", help="print yes if a module to run needs Ray's dashboard, else no")
    run_parser = commands.add_parser("run", help="run the planned modules on real Ray")
    run_parser.add_argument("--ray-python", help="python of a virtualenv with the pinned ray")
    run_parser.add_argument("--ray-dashboard-python", help="python of a virtualenv with the pinned ray[default]")
    run_parser.add_argument("--all", action="store_true", help="run every module, whatever the record says")
    update_parser = commands.add_parser("update", help="record the results of the last run")
    for sub in (run_parser, update_parser):
        sub.add_argument("--out", type=Path, default=root / ".ci" / "reports",
                         help="where run writes its reports and update reads them (default .ci/reports)")
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            print(make_plan(load_record(record_path(root)), current_digests(root), args.all).describe())
            return 0
        if args.command == "needs-dashboard":
            digests = current_digests(root)
            plan = make_plan(load_record(record_path(root)), digests)
            print("yes" if any(digests[m].dashboard for m in plan.modules) else "no")
            return 0
        if args.command == "run":
            return run(root, args.out, args.ray_python, args.ray_dashboard_python, args.all)
        return update(root, args.out)
    except RecordError as error:
        print(f"ray-verified: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
