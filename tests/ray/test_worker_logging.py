"""Python `logging` in tasks and actors reaches the driver the way prints do, as in a Ray
worker: the root logger at WARNING with no handler of its own, so `logging.warning()` (which
calls `basicConfig`) prints `WARNING:root:...`, a named logger without handlers goes through
Python's last-resort handler, and what the user configures in the worker applies. Lines carry
the `(name pid=N)` prefix and go to the driver's stderr."""

from __future__ import annotations

import logging
import os
import time

import pytest

import fray_ray as ray

pytestmark = pytest.mark.usefixtures("cluster_session")


class Output:
    """The driver's stderr as captured so far (capfd hands out each piece once)."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self._capfd = capfd
        self.err = ""

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        """The first line holding `text`; AssertionError if none arrives in time."""
        deadline = time.monotonic() + timeout
        while True:
            self.err += self._capfd.readouterr().err
            found = [line for line in self.err.splitlines() if text in line]
            if found:
                return found[0]
            assert time.monotonic() < deadline, f"{text!r} never reached the driver; it printed:\n{self.err[-3000:]}"
            time.sleep(0.02)


@ray.remote
def logs_in_task(tag: str) -> int:
    logging.warning("root warning %s", tag)
    logging.info("root info %s", tag)  # below the worker's default level: dropped
    logging.getLogger("some.library").error("named error %s", tag)
    return os.getpid()


def test_root_and_named_logger_records_of_a_task_reach_the_driver(capfd: pytest.CaptureFixture[str]) -> None:
    output = Output(capfd)
    pid = ray.get(logs_in_task.remote("t1"))
    assert output.wait_for("root warning t1") == f"(logs_in_task pid={pid}) WARNING:root:root warning t1"
    assert output.wait_for("named error t1") == f"(logs_in_task pid={pid}) ERROR:some.library:named error t1"
    assert "root info t1" not in output.err


@ray.remote
class Quiet:
    """Logs before anything configured logging in its process."""

    def log(self, tag: str) -> int:
        logging.getLogger("quiet.component").warning("last resort %s", tag)
        logging.getLogger("quiet.component").info("not shown %s", tag)
        return os.getpid()


@ray.remote
class Configured:
    """Configures logging in its own process, as user code does."""

    def __init__(self) -> None:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s | %(message)s")

    def log(self, tag: str) -> int:
        logging.getLogger("actor.events").info("configured info %s", tag)
        logging.getLogger("actor.events").debug("below the configured level %s", tag)
        return os.getpid()


def test_actor_records_reach_the_driver_at_the_levels_configured_in_the_worker(
    capfd: pytest.CaptureFixture[str],
) -> None:
    output = Output(capfd)
    quiet, configured = Quiet.remote(), Configured.remote()
    quiet_pid = ray.get(quiet.log.remote("a1"))
    configured_pid = ray.get(configured.log.remote("a2"))
    # no handler anywhere: Python's last-resort handler writes the bare message to stderr
    assert output.wait_for("last resort a1") == f"(Quiet pid={quiet_pid}) last resort a1"
    assert output.wait_for("configured info a2") == f"(Configured pid={configured_pid}) INFO actor.events | configured info a2"
    assert "not shown a1" not in output.err and "below the configured level a2" not in output.err
