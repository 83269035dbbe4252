"""The dashboard in a real headless browser (Debian's Chromium, driven by Playwright).

A standalone cluster (`python -m fray_ray.cluster`) runs a Ray driver (a running actor and a
task that failed), a plain Iris job that failed, and a job that prints one line, then another
once the page has loaded. The browser logs in with the token link and must see all of it,
including the second line arriving in the live log without a reload. Screenshots go to
$FRAY_RAY_ARTIFACTS (default `.ci/artifacts/`); with FRAY_RAY_UPDATE_SCREENSHOT=1 the dashboard page's
`docs/dashboard.png` is rewritten too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec, ResourceSpec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-breakpad", "--disable-crash-reporter",
]
WAIT_MS = 90_000  # generous: a loaded 2-core machine


def _chromium() -> str:
    for candidate in ("chromium", "chromium-browser"):
        found = shutil.which(candidate)
        if found:
            return found
    pytest.skip("Chromium is not installed (Debian: `apt-get install -y chromium`; .ci/run installs it)")


def _artifacts() -> Path:
    directory = Path(os.environ.get("FRAY_RAY_ARTIFACTS") or ROOT / ".ci" / "artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "fray_ray.cluster", "--json", "--cpu", "2", "--memory", "4g",
         "--work-dir", str(tmp_path / "cluster")],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        yield info
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


DRIVER = textwrap.dedent(
    """
    import os, sys
    import fray_ray as ray

    ray.init(address=os.environ["CLUSTER_ADDRESS"], token=os.environ["CLUSTER_TOKEN"])

    @ray.remote
    class Counter:
        def __init__(self):
            self.count = 0

        def add(self):
            self.count += 1
            return self.count

    @ray.remote(max_retries=0)
    def explode():
        raise ValueError("boom from a task")

    counter = Counter.remote()
    assert ray.get(counter.add.remote()) == 1
    failed = explode.remote()
    try:
        ray.get(failed)
    except ValueError:
        pass
    print("READY", flush=True)
    sys.stdin.read()  # hold the session until the test is done
    ray.shutdown()
    """
)


def _sh(name: str, script: str) -> JobSpec:
    return JobSpec(
        name=JobName.root("tester", name),
        entrypoint=command_entrypoint(["sh", "-c", script]),
        resources=ResourceSpec(cpu_millicores=100),
    )


#: What does not fit: the page scrolling sideways, a panel beyond the viewport's right edge, or
#: a table wider than its panel (cut off there, behind a scroll bar).
OVERFLOW_SCRIPT = """() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  if (document.documentElement.scrollWidth > width) out.push(`page ${document.documentElement.scrollWidth} > ${width}`);
  for (const table of document.querySelectorAll("table")) {
    const panel = table.closest(".panel");
    const panelRight = panel.getBoundingClientRect().right;
    const name = panel.id + " " + (table.querySelector("th") || {}).textContent;
    if (panelRight > width + 0.5) out.push(`${name}: panel ends at ${Math.round(panelRight)} > ${width}`);
    if (table.getBoundingClientRect().right > panelRight + 0.5 || panel.scrollWidth > panel.clientWidth + 0.5)
      out.push(`${name}: table ${Math.round(table.getBoundingClientRect().width)} px wide, cut off in its panel`);
  }
  return out;
}"""


def _assert_fits(page: Any, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 1000})
    assert page.evaluate(OVERFLOW_SCRIPT) == [], f"at {width} px"


def test_dashboard_in_a_browser(standalone_cluster: dict[str, Any], tmp_path: Path) -> None:
    chromium = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    address, token, link = standalone_cluster["address"], standalone_cluster["token"], standalone_cluster["dashboard"]
    assert link == f"{address}/?token={token}"
    signal_file = tmp_path / "print-the-second-line"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "CLUSTER_ADDRESS": address, "CLUSTER_TOKEN": token}, cwd=tmp_path,
    )
    controller = ControllerClient(address, token=token)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "READY"
        failing = controller.launch_job(_sh("will-fail", "echo about to fail; exit 3"))
        printer = controller.launch_job(_sh(
            "printer", f"echo first line; while [ ! -f {signal_file} ]; do sleep 0.1; done; "
                       "echo second line, printed after the page loaded; exec sleep 300"))
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                # No session: the login form, and the form logs in.
                anonymous = browser.new_context().new_page()
                anonymous.goto(address + "/")
                assert anonymous.locator("input[name=token]").count() == 1
                assert "will-fail" not in anonymous.content()
                anonymous.fill("input[name=token]", "not-the-token")
                anonymous.click("button[type=submit]")
                sync_api.expect(anonymous.locator("text=Wrong token")).to_be_visible(timeout=WAIT_MS)
                anonymous.fill("input[name=token]", token)
                anonymous.click("button[type=submit]")
                sync_api.expect(anonymous.locator("#cluster")).to_contain_text("cpu-0", timeout=WAIT_MS)

                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                page.goto(link)  # the token link: a session cookie, then the page without the token
                assert token not in page.url
                sessions = page.locator("#sessions")
                sync_api.expect(sessions).to_contain_text("Counter", timeout=WAIT_MS)
                sync_api.expect(sessions).to_contain_text("ALIVE", timeout=WAIT_MS)
                sync_api.expect(sessions).to_contain_text("ValueError: boom from a task", timeout=WAIT_MS)
                jobs = page.locator("#jobs")
                sync_api.expect(jobs).to_contain_text("will-fail", timeout=WAIT_MS)
                failed_row = jobs.locator("tr", has_text="will-fail")
                sync_api.expect(failed_row).to_contain_text("failed", timeout=WAIT_MS)
                sync_api.expect(failed_row).to_contain_text("exit code 3", timeout=WAIT_MS)
                for width in (1920, 1280, 1400):  # the screenshot below is at 1400
                    _assert_fits(page, width)

                page.goto(address + "/?job=" + urllib.parse.quote(printer, safe=""))
                log = page.locator("#log")
                sync_api.expect(log).to_contain_text("first line", timeout=WAIT_MS)
                loaded_at = page.evaluate("performance.timeOrigin")
                signal_file.write_text("go\n")
                sync_api.expect(log).to_contain_text("second line, printed after the page loaded", timeout=WAIT_MS)
                assert page.evaluate("performance.timeOrigin") == loaded_at  # the same page: no reload
                sync_api.expect(page.locator("#job")).to_contain_text("running", timeout=WAIT_MS)
                sync_api.expect(sessions).to_contain_text("Counter", timeout=WAIT_MS)
                shot = page.screenshot(full_page=True)
                (_artifacts() / "dashboard.png").write_bytes(shot)
                if os.environ.get("FRAY_RAY_UPDATE_SCREENSHOT") == "1":
                    (ROOT / "docs" / "dashboard.png").write_bytes(shot)
                assert failing  # shown above
            finally:
                browser.close()
    finally:
        if driver.stdin is not None:
            driver.stdin.close()
        try:
            driver.wait(60)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
        controller.close()
