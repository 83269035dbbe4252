#!/usr/bin/env python3
"""Turn compatibility-suite result files into COMPATIBILITY.md.

The suite writes one JSON file per run (``pytest compat_tests --backend=... --compat-report=PATH``,
see ``compat_tests/_plugin.py``). This script reads the run against real Ray and the run against
fray_ray (either may be missing, and is then shown as "not run") and writes, per Ray API area
(one test file each), how many behaviours pass on each, followed by fray_ray's known differences
with their reasons and the tests that still fail.

Usage::

    python -m pytest compat_tests --backend=ray --compat-report=/tmp/compat-ray.json
    python -m pytest compat_tests --backend=fray_ray --compat-report=/tmp/compat-fray.json
    python scripts/compatibility_table.py --ray /tmp/compat-ray.json \\
        --fray-ray /tmp/compat-fray.json -o COMPATIBILITY.md

Only the standard library is used; the script never imports Ray or fray_ray.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Areas in reading order, with the title shown in the table. Unknown areas are appended.
AREAS: dict[str, str] = {
    "init": "`init` / `shutdown` / auto-init",
    "remote_functions": "Remote functions: definition, arguments, options",
    "objects": "Objects: `get` / `put` / `wait`",
    "object_store": "Object store memory and spilling",
    "object_refs": "`ObjectRef`, futures and asyncio",
    "exceptions": "Exceptions",
    "actors": "Actors",
    "actor_restarts": "Actor fault tolerance: restarts and retries",
    "option_values": "Option values: non-finite, negative, out of range",
    "named_actors": "Named actors, namespaces, `get_if_exists`",
    "async_actors": "Async actors",
    "concurrency_groups": "Concurrency groups",
    "generators": "Generators (streaming, `num_returns`)",
    "cancel": "`ray.cancel`",
    "runtime_context": "Runtime context",
    "output": "Task and actor output in the driver: prints and `logging`",
    "cluster_resources": "Cluster resources and nodes",
    "actor_resources": "Resources actors hold; what waits when the cluster is full",
    "placement_groups": "Placement groups",
    "scheduling": "Scheduling strategies",
    "actor_pool": "`ray.util.ActorPool`",
    "queue": "`ray.util.queue.Queue`",
    "util": "`ray.util.as_completed` / `map_unordered`",
    "runtime_env": "`runtime_env`: working_dir, env_vars, validation",
    "modules": "Modules and names programs import (`ray.cloudpickle`, `ray._raylet`, ...)",
    "init_auto": "`init(address=\"auto\")`: finding a running cluster",
    "cluster_utils": "`ray.cluster_utils.Cluster`: many nodes on one machine",
    "functions_and_actors": "Functions and actors: recursion, class attributes, exits, restarts, closures",
    "errors_and_context": "Errors, cancel and context: unpicklable errors, cancelled calls, tracebacks",
    "state_api": "State API (`ray.util.state`) and `ray.timeline()`",
    "metrics": "Application metrics (`ray.util.metrics`)",
}
# Differences no test can show (where files go, what is enforced), written by hand and
# appended to the generated table.
NOTES = Path(__file__).resolve().parent.parent / "compat_tests" / "NOTES.md"
# The suite's self-tests: not Ray behaviours.
EXCLUDED_AREAS = {"harness"}
PASSING = {"passed", "xpassed"}


@dataclass
class Run:
    """One run of the suite, read from its JSON report."""

    backend: str
    version: str | None
    started: str | None
    duration_s: float | None
    tests: dict[str, dict[str, Any]]  # nodeid -> record
    collection_errors: list[dict[str, Any]] = field(default_factory=list)
    # A report merged from compat_tests/ray_verified.json (scripts/ray_verified.py): when the
    # results it holds were run, and the modules run afresh for it.
    verified_between: list[str] | None = None
    rerun_modules: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Run:
        data = json.loads(path.read_text())
        tests = {
            t["nodeid"]: t for t in data.get("tests", []) if t["area"] not in EXCLUDED_AREAS
        }
        return cls(
            backend=data.get("backend", "?"),
            version=data.get("backend_version"),
            started=data.get("started"),
            duration_s=data.get("duration_s"),
            tests=tests,
            collection_errors=data.get("collection_errors", []),
            verified_between=data.get("verified_between"),
            rerun_modules=data.get("rerun_modules", []),
        )

    def describe(self) -> str:
        parts = [f"`{self.backend}`"]
        if self.version:
            parts.append(self.version)
        if self.started:
            parts.append(f"run {self.started}")
        if self.verified_between:
            first, last = self.verified_between
            span = first if first == last else f"{first} to {last}"
            parts.append(f"recorded in `compat_tests/ray_verified.json` (run {span}; "
                         f"{len(self.rerun_modules)} modules re-run for this report)")
        if self.duration_s is not None:
            parts.append(f"{self.duration_s:.0f} s")
        return ", ".join(parts)


def _load(path: str | None, expected_backend: str) -> Run | None:
    if not path:
        return None
    file = Path(path)
    if not file.exists():
        print(f"note: {file} does not exist; the {expected_backend} column says 'not run'",
              file=sys.stderr)
        return None
    run = Run.load(file)
    if run.backend != expected_backend:
        raise SystemExit(f"{file} is a run of backend {run.backend!r}, not {expected_backend!r}")
    return run


def _area_of(nodeid: str, record: dict[str, Any] | None) -> str:
    if record is not None:
        return record["area"]
    stem = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return stem.removeprefix("test_")


def _cell(run: Run | None, nodeids: list[str]) -> str:
    if run is None:
        return "not run"
    passed = sum(1 for n in nodeids if run.tests.get(n, {}).get("outcome") in PASSING)
    return f"{passed}/{len(nodeids)}"


def _outcome(run: Run | None, nodeid: str) -> str:
    if run is None:
        return "not run"
    record = run.tests.get(nodeid)
    return "not collected" if record is None else record["outcome"]


def render(ray_run: Run | None, fray_run: Run | None) -> str:
    runs = [r for r in (ray_run, fray_run) if r is not None]
    nodeids: dict[str, str] = {}  # nodeid -> area, over both runs
    for run in runs:
        for nodeid, record in run.tests.items():
            nodeids.setdefault(nodeid, _area_of(nodeid, record))
    areas: dict[str, list[str]] = {}
    for nodeid, area in nodeids.items():
        areas.setdefault(area, []).append(nodeid)
    ordered = [a for a in AREAS if a in areas] + sorted(a for a in areas if a not in AREAS)
    known = {} if fray_run is None else {
        n: r["known_difference"] for n, r in fray_run.tests.items() if r.get("known_difference")
    }
    if ray_run is not None and fray_run is None:
        # Marks are also recorded on the Ray run (where they have no effect).
        known = {n: r["known_difference"] for n, r in ray_run.tests.items()
                 if r.get("known_difference")}

    lines = [
        "# fray_ray compatibility with Ray 2.60",
        "",
        "Generated by `scripts/compatibility_table.py` from the results of the compatibility "
        "suite (`compat_tests/`), which states Ray's documented behaviours as tests and runs "
        "them against both real Ray and fray_ray. Each row is one Ray API area (one test file); "
        "a cell counts the behaviours (tests) that pass.",
        "",
        f"* Ray run: {ray_run.describe() if ray_run else 'not run'}",
        f"* fray_ray run: {fray_run.describe() if fray_run else 'not run'}",
        "",
        "| Ray API area | tests | Ray 2.60 | fray_ray | known differences |",
        "|---|---:|---:|---:|---:|",
    ]
    total: list[str] = []
    for area in ordered:
        ids = sorted(areas[area])
        total.extend(ids)
        title = AREAS.get(area, area)
        marked = sum(1 for n in ids if n in known)
        lines.append(
            f"| {title} (`test_{area}.py`) | {len(ids)} | {_cell(ray_run, ids)} | "
            f"{_cell(fray_run, ids)} | {marked} |"
        )
    lines.append(
        f"| **total** | **{len(total)}** | **{_cell(ray_run, total)}** | "
        f"**{_cell(fray_run, total)}** | **{sum(1 for n in total if n in known)}** |"
    )

    lines += ["", "## Known differences", ""]
    if not known:
        lines.append("None marked (`@pytest.mark.known_difference(reason=...)`).")
    else:
        lines += ["| test | reason | fray_ray outcome |", "|---|---|---|"]
        for nodeid in sorted(known, key=lambda n: (ordered.index(nodeids[n]), n)):
            reason = known[nodeid].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{nodeid}` | {reason} | {_outcome(fray_run, nodeid)} |")

    if fray_run is not None:
        todo = [n for n in sorted(nodeids) if n not in known
                and _outcome(fray_run, n) not in PASSING | {"skipped"}]
        lines += ["", "## Not yet passing on fray_ray (no known difference marked)", ""]
        lines += [f"* `{n}`: {_outcome(fray_run, n)}" for n in todo] or ["None."]
        if fray_run.collection_errors:
            lines += ["", "Files that failed to import on fray_ray:", ""]
            lines += [f"* `{e['nodeid']}`" for e in fray_run.collection_errors]
    if ray_run is not None:
        wrong = [n for n in sorted(ray_run.tests) if _outcome(ray_run, n) not in PASSING]
        if wrong or ray_run.collection_errors:
            lines += ["", "## Failing on real Ray (these tests are wrong and must be fixed)", ""]
            lines += [f"* `{n}`: {_outcome(ray_run, n)}" for n in wrong]
            lines += [f"* `{e['nodeid']}`: collection error" for e in ray_run.collection_errors]
    if NOTES.exists():
        lines += ["", NOTES.read_text().strip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray", metavar="JSON", help="report of the run with --backend=ray")
    parser.add_argument("--ray-extra", metavar="JSON", action="append", default=[],
                        help="report of a run of some modules with --backend=ray on another Ray install "
                             "(ray[default] for the state API); its results stand for those tests")
    parser.add_argument("--fray-ray", metavar="JSON",
                        help="report of the run with --backend=fray_ray")
    parser.add_argument("-o", "--output", metavar="MD", default="COMPATIBILITY.md",
                        help="where to write the table (default: COMPATIBILITY.md; '-' = stdout)")
    args = parser.parse_args(argv)
    ray_run = _load(args.ray, "ray")
    for extra_path in args.ray_extra:
        extra = _load(extra_path, "ray")
        if ray_run is not None and extra is not None:
            ray_run.tests.update(extra.tests)
    fray_run = _load(args.fray_ray, "fray_ray")
    if ray_run is None and fray_run is None:
        parser.error("give at least one existing report (--ray and/or --fray-ray)")
    text = render(ray_run, fray_run)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
