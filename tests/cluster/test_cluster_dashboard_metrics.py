"""The controller's /metrics: sessions' Prometheus texts merged into one, labelled by session."""

from __future__ import annotations

from fray_ray.cluster._dashboard_metrics import merge_exposition, session_metrics

SESSION_A = """# HELP ray_rows rows loaded
# TYPE ray_rows counter
ray_rows{stage="load"} 3.0
# HELP ray_latency latency
# TYPE ray_latency histogram
ray_latency_bucket{le="1.0"} 1
ray_latency_bucket{le="+Inf"} 2
ray_latency_sum 4.5
ray_latency_count 2
"""
SESSION_B = """# HELP ray_rows rows loaded
# TYPE ray_rows counter
ray_rows{stage="load"} 7.0
"""


def test_each_family_is_described_once_with_every_sessions_samples() -> None:
    merged = merge_exposition([("job-a", SESSION_A), ("job-b", SESSION_B)])
    assert merged == "\n".join([
        "# HELP ray_rows rows loaded",
        "# TYPE ray_rows counter",
        'ray_rows{session="job-a",stage="load"} 3.0',
        'ray_rows{session="job-b",stage="load"} 7.0',
        "# HELP ray_latency latency",
        "# TYPE ray_latency histogram",
        'ray_latency_bucket{session="job-a",le="1.0"} 1',
        'ray_latency_bucket{session="job-a",le="+Inf"} 2',
        'ray_latency_sum{session="job-a"} 4.5',
        'ray_latency_count{session="job-a"} 2',
    ]) + "\n"


def test_session_labels_are_escaped_and_empty_label_sets_kept_valid() -> None:
    merged = merge_exposition([('odd"job\\', "plain 1\nempty{} 2\n")])
    assert 'plain{session="odd\\"job\\\\"} 1' in merged
    assert 'empty{session="odd\\"job\\\\"} 2' in merged
    assert merge_exposition([]) == ""


def test_unreachable_sessions_are_left_out_and_counted() -> None:
    text = session_metrics([{"job": "gone", "address": "127.0.0.1:1"}], token="t")
    assert "session=" not in text
    assert text.endswith("fray_ray_dashboard_unreachable_sessions 1\n")
