"""Attacks on a driver's session port from another process, without the session token.

Each attack must be refused (the connection closed, nothing dispatched, nothing unpickled), the
driver's memory must stay within `RSS_GROWTH_BOUND_MIB` of where it started, and tasks and
actor calls must keep working while the attack goes on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import fray_ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from security_helpers import RSS_GROWTH_BOUND_MIB, PeakRss, Target, canary_payload_works, session_gate_stats  # noqa: E402

FRAME_ATTACKS = {
    "no_token",
    "wrong_token",
    "pickled_token",
    "pickle_first",
    "pickle_after_wrong_token",
    "pickle_in_buffer",
    "huge_header",
    "huge_buffer",
    "oversized_hello",
}
FLOOD = 10_000


@fray_ray.remote
def square(x: int) -> int:
    return x * x


@fray_ray.remote(num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.count = 0

    def incr(self) -> int:
        self.count += 1
        return self.count


def test_the_canary_payload_creates_the_canary_when_unpickled(tmp_path: Path) -> None:
    assert canary_payload_works(tmp_path / "control")


def test_frames_without_the_token_are_refused_and_never_unpickled(driver: Target, attackers, canary: Path) -> None:
    counter = Counter.remote()
    assert fray_ray.get(counter.incr.remote()) == 1
    refused_before = session_gate_stats().refused
    with PeakRss() as rss:
        events = attackers("frames", driver.session_host, driver.session_port, canary).run_to_exit()
    outcomes = {event["attack"]: event for event in events}
    assert set(outcomes) == FRAME_ATTACKS
    for name, outcome in outcomes.items():
        assert outcome["closed"], f"{name}: the session kept the connection open: {outcome}"
    # A well-formed greeting with a bad token is told why; malformed frames are just closed.
    for name in ("no_token", "wrong_token", "pickled_token", "pickle_after_wrong_token"):
        assert outcomes[name]["error"] == "Unauthenticated", outcomes[name]
    for name in ("pickle_first", "pickle_in_buffer", "huge_header", "huge_buffer", "oversized_hello"):
        assert outcomes[name]["error"] is None, outcomes[name]
    assert session_gate_stats().refused - refused_before >= len(FRAME_ATTACKS)
    assert not canary.exists()
    assert rss.growth_mib < RSS_GROWTH_BOUND_MIB, f"driver RSS grew {rss.growth_mib:.0f} MiB"
    assert fray_ray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
    assert fray_ray.get(counter.incr.remote()) == 2


@pytest.mark.slow  # over 10 s on its own
def test_idle_flood_and_slowloris_do_not_stop_authenticated_work(driver: Target, attackers) -> None:
    counter = Counter.remote()
    assert fray_ray.get(counter.incr.remote()) == 1
    with PeakRss() as rss:
        flood = attackers("flood", driver.session_host, driver.session_port, FLOOD)
        slow = attackers("slowloris", driver.session_host, driver.session_port, "stream")
        # Tasks and actor calls while the strangers connect ...
        calls = 0
        opened = None
        while opened is None:
            assert fray_ray.get(square.remote(calls)) == calls * calls
            assert fray_ray.get(counter.incr.remote()) == calls + 2
            calls += 1
            event = flood.poll(0)
            if event is not None and event.get("event") == "opened":
                opened = event
        # ... and a new worker that must get in while the gate is full of them.
        newcomer = Counter.remote()
        assert fray_ray.get(newcomer.incr.remote()) == 1
        assert fray_ray.get([square.remote(i) for i in range(8)]) == [i * i for i in range(8)]
        # Every idle stranger is closed (evicted for newer ones, or timed out).
        done = flood.wait_for(lambda e: e.get("event") == "all_closed")
        slowloris = slow.wait_for(lambda e: e.get("attack") == "slowloris")
    assert calls >= 1
    assert opened["opened"] + opened["failed"] == FLOOD
    assert done["closed_by_server"] == opened["opened"]
    assert slowloris["closed"] and slowloris["bytes_sent"] < slowloris["total"], slowloris
    stats = session_gate_stats()
    assert stats.evicted + stats.timed_out >= opened["opened"]
    assert stats.pending == 0
    assert rss.growth_mib < RSS_GROWTH_BOUND_MIB, f"driver RSS grew {rss.growth_mib:.0f} MiB"
    assert fray_ray.get(counter.incr.remote()) == calls + 2
