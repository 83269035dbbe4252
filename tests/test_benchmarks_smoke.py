"""Smoke tests of the benchmark harness on fray_ray alone (tiny sizes, no Ray). Never asserts speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCH)

import stats  # noqa: E402
from shapes import Curves, EnvelopeSizes, Target, TargetKind, catalog  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_LOCAL_MODE", "FRAY_BENCH_QUICK")}


def _run(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=ENV, cwd=ROOT, check=False)


def _compare(tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out.json"
    proc = _run([os.path.join(BENCH, "compare.py"), "--ray-python", "", "--fray-mode", "default", "--quick",
                 "--round-s", "0.05", "--warmup-s", "0.02", "--idle-wait-s", "0", "--json", str(out), "--quiet", *extra])
    assert out.exists(), f"no JSON written; exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc, json.loads(out.read_text())


@pytest.mark.slow  # over 10 s on its own
def test_compare_reports_median_spread_targets_and_floor(tmp_path):
    proc, report = _compare(tmp_path, "--reps", "2", "--shapes", "floor,actor_calls_sync")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["reps"] == 2
    assert "load average" in report["header"][1] and "2 repetition(s)" in report["header"][1]
    metrics = report["metrics"]
    for name in ("floor_socket_rtt_us", "floor_socket_threaded_rtt_us", "floor_socket_spin_rtt_us",
                 "floor_socket_100mb_gbps", "floor_protocol_rtt_us",
                 "actor_calls_sync", "actor_call_sync_vs_floor"):
        row = metrics[name]
        assert row["fray_ray"]["n"] == 2, (name, row)
        assert row["fray_ray"]["median"] > 0 and row["fray_ray"]["spread"] is not None, (name, row)
        assert row["ray"] is None and row["ratio"] is None  # Ray skipped: no ratio invented
    assert metrics["actor_call_sync_vs_floor"]["target"] == "≤ 3× floor"
    assert metrics["actor_call_sync_vs_floor"]["met"] in ("met", "missed")
    assert metrics["actor_calls_sync"]["met"] == "n/a"  # a ratio target cannot be judged without Ray
    assert "**Floor**" in proc.stdout and "**Calls and objects**" in proc.stdout and "Ray skipped" in proc.stdout


@pytest.mark.slow  # over 10 s on its own
def test_the_cross_driver_shape_runs_on_fray_ray(tmp_path):
    proc, report = _compare(tmp_path, "--reps", "1", "--shapes", "cross_driver_calls")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = report["metrics"]["cross_driver_calls"]["fray_ray"]
    assert row["n"] == 1 and row["median"] > 0, (row, report.get("notes"))


@pytest.mark.slow  # over 10 s on its own
def test_the_several_node_shapes_run_on_fray_ray(tmp_path):
    proc, report = _compare(tmp_path, "--reps", "1", "--shapes", "multi_node,node_calls")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("node_to_node_100mb_gbps", "node_to_node_driver_cpu_s_per_gb", "actor_to_actor_100mb_gbps",
                 "actor_to_actor_driver_cpu_s_per_gb", "stream_to_node_100mb_gbps", "stream_to_node_driver_cpu_s_per_gb",
                 "parallel_puts_gbps", "wait_one_of_1k",
                 "node_task_to_actor_calls", "node_actor_to_actor_calls", "node_generator_items", "node_generator_driver_us",
                 "node_pass_on_steps", "node_pass_on_driver_us", "node_keep_steps", "node_keep_driver_us",
                 "node_relay_steps", "node_relay_driver_us", "node_pass_large_steps", "node_pass_large_driver_us",
                 "node_chain_steps", "node_chain_driver_us", "node_sample_steps", "node_sample_driver_us",
                 "node_nested_tasks", "node_nested_task_driver_us",
                 "node_nested_batch_tasks"):
        row = report["metrics"][name]["fray_ray"]
        assert row["n"] == 1 and row["median"] > 0, (name, row, report.get("notes"))
    assert "**Several nodes**" in proc.stdout


@pytest.mark.slow  # over 10 s on its own
def test_a_curve_point_that_runs_out_of_time_is_reported_not_dropped(tmp_path):
    # with every timeout shrunk to microseconds, submitting 500 tasks already takes too long
    proc, report = _compare(tmp_path, "--reps", "2", "--shapes", "queued_tasks", "--tasks-curve", "500,800",
                            "--timeout-scale", "0.000001")
    assert proc.returncode == 1
    runs = report["runs"]["fray_ray"]
    assert [r["status"] for r in runs["queued_tasks_500"]] == ["timeout"]  # not tried again in repetition 2
    assert [r["status"] for r in runs["queued_tasks_800"]] == ["skipped", "timeout"]  # after a smaller point stopped
    assert report["metrics"]["queued_tasks_500"]["met"] == "missed"
    assert "timeout (rep 1)" in proc.stdout
    assert any("queued_tasks_500 stopped (timeout) in repetition 1; not tried again" in n for n in report["notes"])


@pytest.mark.slow  # over 10 s on its own
def test_the_envelope_shapes_run_at_tiny_sizes(tmp_path):
    proc, report = _compare(tmp_path, "--reps", "1", "--shapes", "envelope",
                            "--envelope", "args=200,returns=50,get=200,queued=300,large_gib=0.02,list_ints=100")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["envelope"] == {"args": 200, "returns": 50, "get": 200, "queued": 300, "large_gib": 0.02, "list_ints": 100}
    metrics = report["metrics"]
    for name in ("envelope_args_s", "envelope_returns_s", "envelope_get_s", "envelope_queued_s",
                 "envelope_queued_driver_bytes_per_task", "envelope_large_gbps"):
        assert metrics[name]["fray_ray"]["n"] == 1 and metrics[name]["fray_ray"]["median"] >= 0, (name, metrics[name])
    assert metrics["envelope_queued_s"]["fray_ray"]["median"] > 0 and metrics["envelope_large_gbps"]["fray_ray"]["median"] > 0
    assert metrics["envelope_args_s"]["target"] == "≥ Ray's speed"
    assert "**Envelope**" in proc.stdout and "envelope: args=200," in proc.stdout


def test_envelope_sizes_parse_and_refuse_unknown_names():
    base = EnvelopeSizes()
    assert EnvelopeSizes.parse("queued=1000000,large_gib=0.5", base) == EnvelopeSizes(queued=1_000_000, large_gib=0.5)
    assert EnvelopeSizes.parse(base.text(), EnvelopeSizes.quick()) == base
    with pytest.raises(ValueError, match="unknown envelope size 'argz'"):
        EnvelopeSizes.parse("argz=1", base)
    with pytest.raises(ValueError, match="must be positive"):
        EnvelopeSizes.parse("args=0", base)


def test_run_one_local_mode(tmp_path):
    out = tmp_path / "out.json"
    proc = _run([os.path.join(BENCH, "run_one.py"), "--backend", "fray_ray", "--local-mode", "--quick",
                 "--only", "tasks_sync,put_get_small", "--round-s", "0.05", "--json", str(out)], timeout=120)
    report = json.loads(out.read_text())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["mode"] == "local_mode" and set(report["results"]) == {"tasks_sync", "put_get_small"}
    for name, res in report["results"].items():
        assert res["status"] == "ok", res
        assert res["metrics"][name] > 0


def test_summary_and_spread():
    s = stats.summary([10.0, 11.0, 12.0, 13.0, 100.0])
    assert s["median"] == 12.0 and s["q1"] == 11.0 and s["q3"] == 13.0
    assert s["spread"] == pytest.approx(2 / 12) and not s["flagged"]  # one outlier does not flag
    assert s["range_spread"] == pytest.approx(90 / 12)
    assert stats.summary([10.0, 10.0, 14.0, 14.0, 14.0])["flagged"]
    assert stats.summary([]) is None


def test_ratios_are_paired_by_repetition_and_oriented():
    fray, ray = {0: 200.0, 1: 100.0, 3: 50.0}, {0: 100.0, 1: 100.0, 2: 1.0}
    assert stats.paired_ratios(fray, ray, "higher") == {0: 2.0, 1: 1.0}
    assert stats.paired_ratios(fray, ray, "lower") == {0: 0.5, 1: 1.0}


def test_derived_metrics_and_verdicts():
    cat = catalog(Curves(tasks=(10, 100), actors=(2, 4)))
    values = {
        "floor_socket_rtt_us": {0: 20.0, 1: 25.0},
        "actor_calls_sync": {0: 10_000.0, 1: 2_000.0},
        "queued_tasks_10_us_per_task": {0: 100.0},
        "queued_tasks_100_us_per_task": {0: 150.0},
        "actors_2_ms_per_actor": {0: 100.0},
        "actors_4_ms_per_actor": {0: 90.0},
    }
    derived = stats.derive(cat, values)
    assert derived["actor_call_sync_vs_floor"] == {0: pytest.approx(5.0), 1: pytest.approx(20.0)}
    assert derived["queued_tasks_cost_growth"] == {0: pytest.approx(1.5)}
    assert derived["actors_time_cost_growth"] == {0: pytest.approx(0.9)}
    assert "actors_pss_cost_growth" not in derived
    at_most = Target(TargetKind.AT_MOST, 3.0, "≤ 3×")
    assert stats.verdict(at_most, stats.summary([2.0, 4.0, 2.5]), None, True) == "met"
    ratio = Target(TargetKind.RATIO, 5.0, "≥ 5×")
    assert stats.verdict(ratio, None, stats.summary([4.0, 6.0, 4.5]), True) == "missed"
    assert stats.verdict(ratio, None, None, True) == "n/a"
    completes = Target(TargetKind.COMPLETES, 0.0, "completes")
    assert stats.verdict(completes, None, None, False) == "missed"


def test_shape_selection_by_name_and_group():
    cat = catalog(Curves())
    assert cat.select(["actors"]) == ["actors_10", "actors_100", "actors_500"]
    assert cat.select(["queued_tasks_100k", "floor"]) == ["floor", "queued_tasks_100k"]
    assert cat.select(["envelope"]) == ["envelope_args", "envelope_returns", "envelope_get", "envelope_queued",
                                        "envelope_large"]
    assert cat.select(["broadcast"]) == ["broadcast_512mib_4", "broadcast_1gib_8"]
    assert not set(cat.select(["multi_node"])) & set(cat.groups["broadcast"])
    assert cat.targets["broadcast_1gib_8_origin_x"].value < 2.1
    with pytest.raises(ValueError, match="unknown shape"):
        cat.select(["actors_7"])
    assert cat.targets["actors_100"].value == 10.0 and cat.targets["actors_100_pss_total"].value == 4.0
