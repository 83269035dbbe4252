"""scripts/ray_verified.py: which compat modules re-run on real Ray, and what the record may stand for.

Each test builds a small repository (a compat_tests/ folder and a .ci/run that pins Ray) in a
temporary directory. `run` is exercised with a stand-in interpreter that answers like pytest with
--compat-report (one record per test function it finds), so no Ray is needed here; the real run
on Ray is .ci/run's.
"""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


rv = _load("ray_verified")
table = _load("compatibility_table")

CI_RUN = """#!/usr/bin/env bash
pip install -q "ray==2.60.0" numpy
pip install -q "ray[default]==2.60.0" numpy
"""
FILES = {
    "compat_tests/__init__.py": "",
    "compat_tests/conftest.py": "# fixtures\n",
    "compat_tests/_plugin.py": "# hooks\n",
    "compat_tests/helpers.py": "def helper():\n    return 1\n",
    "compat_tests/pytest.ini": "[pytest]\n",
    "compat_tests/README.md": "# the suite\n",
    "compat_tests/NOTES.md": "# notes\n",
    "compat_tests/test_alpha.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
    "compat_tests/test_beta.py": "def test_three():\n    pass\n",
    "compat_tests/test_state_api.py": "def test_state():\n    pass\n",
}

# Stands in for a Ray virtualenv's python: prints the Ray version, and for `-m pytest` writes a
# compat report with one passed test per `def test_` of each file it is given (FAILS in a name
# makes that test fail). Each call is appended to calls.jsonl next to it.
FAKE_PYTHON = '''#!{python}
import json, os, re, sys
from pathlib import Path
here = Path(__file__).parent
args = sys.argv[1:]
if args[:1] == ["-c"]:
    print(os.environ.get("FAKE_RAY_VERSION", "2.60.0"))
    sys.exit(0)
files = [a for a in args if a.endswith(".py")]
report = next(a.split("=", 1)[1] for a in args if a.startswith("--compat-report="))
with open(here / "calls.jsonl", "a") as log:
    log.write(json.dumps({{"python": sys.argv[0], "files": files, "args": args,
                          "dashboard_env": os.environ.get("FRAY_RAY_COMPAT_REQUIRE_RAY_DASHBOARD")}}) + "\\n")
tests = []
for f in files:
    name = f.split("/", 1)[1]
    for test in re.findall(r"def (test_\\w+)", Path(f).read_text()):
        tests.append({{"nodeid": f"{{name}}::{{test}}", "area": name[5:-3], "name": test,
                      "outcome": "failed" if "FAILS" in test else "passed",
                      "duration": 0.5, "message": None, "known_difference": None}})
Path(report).write_text(json.dumps({{"report_version": 1, "backend": "ray", "backend_version": "2.60.0",
    "python": "3.11.9", "started": "2030-01-01T00:00:00+00:00", "duration_s": 1.0,
    "known_differences": {{}}, "collection_errors": [], "tests": tests}}))
sys.exit(1 if any(t["outcome"] == "failed" for t in tests) else 0)
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name, text in {**FILES, ".ci/run": CI_RUN}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _fake_python(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(FAKE_PYTHON.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _calls(tmp_path: Path) -> list[dict]:
    log = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _edit(root: Path, name: str, text: str = "\n# edited\n") -> None:
    with (root / name).open("a") as f:
        f.write(text)


def _result(digest, tests: list[dict]):
    return rv.ModuleResult(digest=digest.digest, shared_digest=digest.shared_digest, dashboard=digest.dashboard,
                           verified="2030-01-01T00:00:00+00:00", python="3.11.9", tests=tuple(tests),
                           collection_errors=())


def _test(module: str, name: str, outcome: str = "passed") -> dict:
    return {"nodeid": f"{module}::{name}", "area": module[5:-3], "name": name, "outcome": outcome,
            "duration": 1.0, "message": None, "known_difference": None}


def _record_now(root: Path) -> None:
    """Record every module as passing under its current digest."""
    digests = rv.current_digests(root)
    modules = {m: _result(d, [_test(m, "test_recorded")]) for m, d in digests.items()}
    rv.write_record(rv.record_path(root), rv.Record(ray_version="2.60.0", modules=modules))


def _plan(root: Path) -> dict[str, str]:
    return dict(rv.make_plan(rv.load_record(rv.record_path(root)), rv.current_digests(root)).modules)


# ---- digests --------------------------------------------------------------------------------


def test_digests_are_stable_and_cover_every_module(repo: Path) -> None:
    first = rv.current_digests(repo)
    assert sorted(first) == ["test_alpha.py", "test_beta.py", "test_state_api.py"]
    assert rv.current_digests(repo) == first
    assert [m for m, d in first.items() if d.dashboard] == ["test_state_api.py"]
    assert len({d.digest for d in first.values()}) == 3


def test_a_module_edit_changes_only_that_modules_digest(repo: Path) -> None:
    before = rv.current_digests(repo)
    _edit(repo, "compat_tests/test_beta.py")
    after = rv.current_digests(repo)
    assert {m for m in before if before[m] != after[m]} == {"test_beta.py"}


@pytest.mark.parametrize("shared", ["compat_tests/conftest.py", "compat_tests/_plugin.py", "compat_tests/helpers.py",
                                    "compat_tests/pytest.ini", "compat_tests/__init__.py"])
def test_a_shared_file_edit_changes_every_digest(repo: Path, shared: str) -> None:
    before = rv.current_digests(repo)
    _edit(repo, shared)
    after = rv.current_digests(repo)
    assert all(before[m].digest != after[m].digest for m in before)


def test_a_new_helper_module_is_shared(repo: Path) -> None:
    before = rv.current_digests(repo)
    (repo / "compat_tests" / "_more_helpers.py").write_text("X = 1\n")
    assert "_more_helpers.py" in rv.shared_files(repo)
    assert all(before[m].digest != d.digest for m, d in rv.current_digests(repo).items())


def test_the_ray_pin_is_part_of_every_digest_and_the_rest_of_ci_is_not(repo: Path) -> None:
    before = rv.current_digests(repo)
    _edit(repo, ".ci/run", "echo something else\n")
    assert rv.current_digests(repo) == before
    (repo / ".ci/run").write_text(CI_RUN.replace("2.60.0", "2.61.0"))
    assert all(before[m].digest != d.digest for m, d in rv.current_digests(repo).items())


def test_docs_the_record_and_caches_change_no_digest(repo: Path) -> None:
    before = rv.current_digests(repo)
    _edit(repo, "compat_tests/README.md")
    _edit(repo, "compat_tests/NOTES.md")
    _record_now(repo)
    (repo / "compat_tests" / "__pycache__").mkdir()
    (repo / "compat_tests" / "__pycache__" / "conftest.cpython-311.pyc").write_bytes(b"\0")
    assert rv.current_digests(repo) == before


def test_two_pins_that_disagree_are_refused(repo: Path) -> None:
    (repo / ".ci/run").write_text(CI_RUN.replace("ray[default]==2.60.0", "ray[default]==2.61.0"))
    with pytest.raises(rv.RecordError, match="exactly one Ray version"):
        rv.current_digests(repo)


# ---- plan -----------------------------------------------------------------------------------


def test_plan_without_a_record_runs_everything(repo: Path) -> None:
    assert set(_plan(repo)) == {"test_alpha.py", "test_beta.py", "test_state_api.py"}


def test_plan_lists_exactly_the_changed_modules(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record_now(repo)
    assert _plan(repo) == {}
    assert rv.main(["plan"], root=repo) == 0
    assert capsys.readouterr().out == "ray-verified: all 3 compat modules match the record; nothing to run on Ray\n"

    _edit(repo, "compat_tests/test_alpha.py")
    (repo / "compat_tests" / "test_gamma.py").write_text("def test_new():\n    pass\n")
    assert _plan(repo) == {"test_alpha.py": "module changed", "test_gamma.py": "not in the record"}
    assert rv.main(["plan"], root=repo) == 0
    out = capsys.readouterr().out
    assert "2 of 4 compat modules" in out and "test_alpha.py" in out and "test_beta.py" not in out

    _edit(repo, "compat_tests/helpers.py")
    assert set(_plan(repo)) == {"test_alpha.py", "test_beta.py", "test_state_api.py", "test_gamma.py"}
    assert _plan(repo)["test_beta.py"] == "shared files or the pinned Ray version changed"


def test_needs_dashboard_only_when_the_state_api_module_must_run(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record_now(repo)
    _edit(repo, "compat_tests/test_alpha.py")
    assert rv.main(["needs-dashboard"], root=repo) == 0
    assert capsys.readouterr().out == "no\n"
    _edit(repo, "compat_tests/test_state_api.py")
    assert rv.main(["needs-dashboard"], root=repo) == 0
    assert capsys.readouterr().out == "yes\n"


# ---- merged report --------------------------------------------------------------------------


def test_merged_report_is_the_record_for_unchanged_modules_and_fresh_results_for_the_rest(repo: Path) -> None:
    _record_now(repo)
    record = rv.load_record(rv.record_path(repo))
    _edit(repo, "compat_tests/test_alpha.py")
    digests = rv.current_digests(repo)
    fresh = {"test_alpha.py": _result(digests["test_alpha.py"], [_test("test_alpha.py", "test_fresh", "skipped")])}
    merged = rv.merged_report(record, fresh, digests, "2.60.0")
    by_module: dict[str, list[dict]] = {}
    for test in merged["tests"]:
        by_module.setdefault(test["nodeid"].split("::")[0], []).append(test)
    assert by_module["test_alpha.py"] == [_test("test_alpha.py", "test_fresh", "skipped")]
    for module in ("test_beta.py", "test_state_api.py"):
        assert by_module[module] == list(record.modules[module].tests)
    assert merged["rerun_modules"] == ["test_alpha.py"]


def test_a_record_entry_whose_digest_does_not_match_is_never_used(repo: Path) -> None:
    _record_now(repo)
    record = rv.load_record(rv.record_path(repo))
    _edit(repo, "compat_tests/test_beta.py")
    digests = rv.current_digests(repo)
    assert "test_beta.py" not in rv.usable(record, digests)
    with pytest.raises(rv.RecordError, match="test_beta.py: no Ray result for its current digest"):
        rv.merged_report(record, {}, digests, "2.60.0")
    stale_fresh = {"test_beta.py": record.modules["test_beta.py"]}  # results under the old digest
    with pytest.raises(rv.RecordError, match="test_beta.py"):
        rv.merged_report(record, stale_fresh, digests, "2.60.0")


def test_the_merged_report_makes_the_compatibility_table(repo: Path, tmp_path: Path) -> None:
    _record_now(repo)
    digests = rv.current_digests(repo)
    merged = tmp_path / "ray.json"
    merged.write_text(json.dumps(rv.merged_report(rv.load_record(rv.record_path(repo)), {}, digests, "2.60.0")))
    out = tmp_path / "table.md"
    assert table.main(["--ray", str(merged), "-o", str(out)]) == 0
    text = out.read_text()
    assert "| **total** | **3** | **3/3** | **not run** |" in text
    assert "recorded in `compat_tests/ray_verified.json` (run 2030-01-01T00:00:00+00:00; 0 modules re-run" in text


# ---- run and update -------------------------------------------------------------------------


def _run(repo: Path, tmp_path: Path, *extra: str) -> int:
    plain, dashboard = _fake_python(tmp_path, "ray-python"), _fake_python(tmp_path, "dashboard-python")
    return rv.main(["run", "--ray-python", str(plain), "--ray-dashboard-python", str(dashboard),
                    "--out", str(tmp_path / "out"), *extra], root=repo)


def test_run_then_update_then_run_again_runs_nothing(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(repo, tmp_path) == 0
    calls = _calls(tmp_path)
    assert [(Path(c["python"]).name, c["files"], c["dashboard_env"]) for c in calls] == [
        ("ray-python", ["compat_tests/test_alpha.py", "compat_tests/test_beta.py"], None),
        ("dashboard-python", ["compat_tests/test_state_api.py"], "1"),
    ]
    assert {"-n", "--dist", "loadfile", "--max-worker-restart=0", "--backend=ray"} <= set(calls[0]["args"])
    assert rv.main(["update", "--out", str(tmp_path / "out")], root=repo) == 0
    record = rv.load_record(rv.record_path(repo))
    assert sorted(record.modules) == ["test_alpha.py", "test_beta.py", "test_state_api.py"]
    assert [t["nodeid"] for t in record.modules["test_alpha.py"].tests] == ["test_alpha.py::test_one",
                                                                           "test_alpha.py::test_two"]
    capsys.readouterr()

    (tmp_path / "calls.jsonl").unlink()
    assert _run(repo, tmp_path) == 0
    assert _calls(tmp_path) == []
    assert capsys.readouterr().out == "ray-verified: all 3 compat modules match the record; nothing to run on Ray\n"
    merged = json.loads((tmp_path / "out" / "ray.json").read_text())
    assert len(merged["tests"]) == 4 and merged["rerun_modules"] == []


def test_run_reruns_only_the_changed_module(repo: Path, tmp_path: Path) -> None:
    _record_now(repo)
    _edit(repo, "compat_tests/test_beta.py", "\ndef test_four():\n    pass\n")
    assert _run(repo, tmp_path) == 0
    assert [c["files"] for c in _calls(tmp_path)] == [["compat_tests/test_beta.py"]]
    merged = json.loads((tmp_path / "out" / "ray.json").read_text())
    assert sorted(t["nodeid"] for t in merged["tests"]) == [
        "test_alpha.py::test_recorded", "test_beta.py::test_four", "test_beta.py::test_three",
        "test_state_api.py::test_recorded"]


def test_run_all_runs_every_module(repo: Path, tmp_path: Path) -> None:
    _record_now(repo)
    assert _run(repo, tmp_path, "--all") == 0
    assert sum(len(c["files"]) for c in _calls(tmp_path)) == 3


def test_a_failing_test_fails_the_run_and_only_its_module_goes_unrecorded(repo: Path, tmp_path: Path) -> None:
    _record_now(repo)
    old = rv.load_record(rv.record_path(repo))
    _edit(repo, "compat_tests/test_alpha.py", "\ndef test_FAILS():\n    pass\n")
    _edit(repo, "compat_tests/test_beta.py")
    assert _run(repo, tmp_path) == 1
    assert rv.main(["update", "--out", str(tmp_path / "out")], root=repo) == 1
    record = rv.load_record(rv.record_path(repo))
    assert record.modules["test_alpha.py"] == old.modules["test_alpha.py"]  # the stale entry, never used
    assert set(_plan(repo)) == {"test_alpha.py"}
    assert [t["nodeid"] for t in record.modules["test_beta.py"].tests] == ["test_beta.py::test_three"]


def test_update_refuses_results_of_a_module_edited_after_its_run(repo: Path, tmp_path: Path) -> None:
    _record_now(repo)
    _edit(repo, "compat_tests/test_alpha.py")
    assert _run(repo, tmp_path) == 0
    _edit(repo, "compat_tests/test_alpha.py", "\n# edited again\n")
    assert rv.main(["update", "--out", str(tmp_path / "out")], root=repo) == 1
    assert _plan(repo) == {"test_alpha.py": "module changed"}


def test_run_refuses_a_ray_other_than_the_pinned_one(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_RAY_VERSION", "2.59.0")
    assert _run(repo, tmp_path) == 2
    assert _calls(tmp_path) == []


def test_run_needs_the_dashboard_python_only_for_the_state_api_module(repo: Path, tmp_path: Path) -> None:
    _record_now(repo)
    _edit(repo, "compat_tests/test_alpha.py")
    plain = _fake_python(tmp_path, "ray-python")
    assert rv.main(["run", "--ray-python", str(plain), "--out", str(tmp_path / "out")], root=repo) == 0
    _edit(repo, "compat_tests/test_state_api.py")
    assert rv.main(["run", "--ray-python", str(plain), "--out", str(tmp_path / "out")], root=repo) == 2


def test_a_malformed_record_is_refused(repo: Path) -> None:
    _record_now(repo)
    data = json.loads(rv.record_path(repo).read_text())
    data["modules"]["test_alpha.py"]["tests"][0]["nodeid"] = "test_beta.py::test_recorded"
    rv.record_path(repo).write_text(json.dumps(data))
    with pytest.raises(rv.RecordError, match="not this module's"):
        rv.load_record(rv.record_path(repo))


# ---- the committed record -------------------------------------------------------------------


def test_the_committed_record_is_well_formed_and_covers_every_compat_module() -> None:
    record = rv.load_record(rv.record_path(ROOT))
    assert record is not None, "compat_tests/ray_verified.json is missing: run scripts/ray_verified.py run, then update"
    assert record.ray_version == rv.pinned_ray_version(ROOT)
    missing = sorted(set(rv.compat_modules(ROOT)) - set(record.modules))
    assert not missing, f"not verified on Ray (scripts/ray_verified.py run, then update): {missing}"
    assert sorted(record.modules) == sorted(rv.compat_modules(ROOT))
    for module, result in record.modules.items():
        assert result.failures() == [], module
        assert result.dashboard == (module in rv.DASHBOARD_MODULES), module
