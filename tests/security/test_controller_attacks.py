"""Attacks on a driver's embedded controller (Connect over HTTP) from another process.

Requests without the controller's bearer token are refused before their body is read and lose
their connection; idle and slow connections are shed by the connection limits; authenticated
RPCs, tasks and actors keep working throughout, and the driver's memory stays bounded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import fray_ray
from fray_ray.iris.controller_client import ControllerClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from security_helpers import RSS_GROWTH_BOUND_MIB, PeakRss, Target  # noqa: E402

SERVICE = "/iris.cluster.ControllerService"
FLOOD = 10_000


@fray_ray.remote(num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.count = 0

    def incr(self) -> int:
        self.count += 1
        return self.count


def _host(target: Target) -> str:
    return urlsplit(target.controller_url).hostname or "127.0.0.1"


def test_requests_without_the_token_are_refused_and_never_run(driver: Target, attackers, canary: Path) -> None:
    with PeakRss() as rss:
        events = attackers(
            "http", _host(driver), driver.controller_port, canary, f"{SERVICE}/ListJobs", f"{SERVICE}/LaunchJob"
        ).run_to_exit()
    outcomes = {event["attack"]: event for event in events}
    assert set(outcomes) == {"no_token", "wrong_token", "empty_bearer", "huge_length", "canary_launch_job"}
    for name, outcome in outcomes.items():
        assert outcome["status"] == 401, f"{name}: {outcome}"
        assert "unauthenticated" in outcome["body"], f"{name}: {outcome}"
        assert outcome["closed"], f"{name}: the controller kept the connection open: {outcome}"
    with ControllerClient(driver.controller_url, token=driver.controller_token) as client:
        assert not [job for job in client.list_jobs() if "attacker" in job.job_id]
    assert not canary.exists()
    assert rss.growth_mib < RSS_GROWTH_BOUND_MIB, f"driver RSS grew {rss.growth_mib:.0f} MiB"


@pytest.mark.slow  # over 10 s on its own
def test_idle_flood_and_slowloris_leave_the_controller_serving(driver: Target, attackers) -> None:
    with ControllerClient(driver.controller_url, token=driver.controller_token) as client, PeakRss() as rss:
        flood = attackers("flood", _host(driver), driver.controller_port, FLOOD)
        slow = attackers("slowloris", _host(driver), driver.controller_port, "http")
        calls = 0
        opened = None
        while opened is None:  # authenticated RPCs on a kept-alive connection while they connect ...
            client.list_jobs()
            calls += 1
            event = flood.poll(0)
            if event is not None and event.get("event") == "opened":
                opened = event
        for _ in range(3):  # ... on new connections while the server is full of strangers ...
            with ControllerClient(driver.controller_url, token=driver.controller_token) as fresh:
                fresh.list_jobs()
        newcomer = Counter.remote()  # ... and a new actor: LaunchJob, then its endpoint registers
        assert fray_ray.get(newcomer.incr.remote()) == 1
        done = flood.wait_for(lambda e: e.get("event") == "all_closed")
        slowloris = slow.wait_for(lambda e: e.get("attack") == "slowloris")
        client.list_jobs()
    assert calls >= 1
    assert opened["opened"] + opened["failed"] == FLOOD
    assert done["closed_by_server"] == opened["opened"]
    assert slowloris["closed"] and slowloris["bytes_sent"] < slowloris["total"], slowloris
    assert rss.growth_mib < RSS_GROWTH_BOUND_MIB, f"driver RSS grew {rss.growth_mib:.0f} MiB"
