"""Fixtures of the web table's browser tests: the whole suite as real processes, and Chromium.

`local_suite` starts `python -m services.local` (every service and the gateway, each its own
process, on free ports, with a temporary var folder) once for the session, waits for its "every
service is listening" line, and stops it with SIGINT at the end. `browsers` opens headless
Chromium windows (Debian's `chromium` and `chromium-driver`) through Selenium and closes them
after the test; a failed test leaves each window's screenshot and console log in
var/screenshots/.

Without Chromium (or Selenium) the tests are skipped, except with CI=true, where they fail: CI
never skips them silently.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.services.harness import free_ports

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "screenshots"
CHROMIUM = Path(os.environ.get("BURACO_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("BURACO_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"))
IN_CI = os.environ.get("CI", "").lower() == "true"
READY_LINE = "every service is listening"
START_SECONDS = 120.0
STOP_SECONDS = 45.0

#: What the browser tests rely on (and say so rather than trust the defaults): the wallet's
#: starting grant and house cut (the settlement's arithmetic), fixed deals, quick bots and a
#: matching loop and outbox that do not keep the test waiting; and short-lived tokens, so that
#: the page refreshes its token (and tells its socket) several times during a match.
STARTING_GRANT_CHIPS = 1000
HOUSE_CUT_PERCENT = 20
TOKEN_SECONDS = 40
SUITE_ENV = {
    "BURACO_WALLET_STARTING_GRANT_CHIPS": str(STARTING_GRANT_CHIPS),
    "BURACO_WALLET_HOUSE_CUT_PERCENT": str(HOUSE_CUT_PERCENT),
    "BURACO_GAME_SESSION_DEAL_SEED": "web-table-tests",
    "BURACO_GAME_SESSION_BOT_DELAY_MS": "100",
    "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS": "0.1",
    "BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS": "0.5",
    "BURACO_MATCHMAKING_TICK_SECONDS": "0.1",
    "BURACO_MATCHMAKING_WATCH_POLL_SECONDS": "0.1",
    "BURACO_MATCHMAKING_RETRY_SECONDS": "0.05",
    "BURACO_GATEWAY_TOKEN_SECONDS": str(TOKEN_SECONDS),
}
#: Settings of the developer's shell that would point the suite elsewhere.
DROPPED_ENV = ("BURACO_DATABASE_URL", "BURACO_DATABASE_SCHEMA", "BURACO_ENV", "BURACO_DEV_KEYS_DIR")


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason}: CI=true, and the browser tests must run in CI (install chromium and chromium-driver)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium() -> None:
    """Selenium and Chromium are here (else skip; fail in CI)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        _missing("selenium is not installed")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            _missing(f"{path} is missing (apt-get install chromium chromium-driver)")


@dataclass
class LocalSuite:
    """`python -m services.local`, running."""

    url: str  # the web table, http://localhost:PORT
    var: Path
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def tail(self, count: int = 60) -> str:
        return "\n".join(self.lines[-count:])


@pytest.fixture(scope="session")
def local_suite(chromium: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    var = tmp_path_factory.mktemp("webvar")
    base = free_ports(12)  # 5 services, 6 metrics ports, the gateway
    grpc_base, metrics_base, gateway_port = base, base + 5, base + 11
    env = {key: value for key, value in os.environ.items() if key not in DROPPED_ENV}
    env.update(SUITE_ENV)
    process = subprocess.Popen(
        [sys.executable, "-m", "services.local", "--var", str(var), "--port-base", str(grpc_base),
         "--metrics-base", str(metrics_base), "--gateway-port", str(gateway_port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
    )
    running = LocalSuite(f"http://localhost:{gateway_port}", var, process)
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        with (var / "suite.log").open("w") as log:
            for line in process.stdout:
                running.lines.append(line.rstrip())
                log.write(line)
                log.flush()
                if READY_LINE in line:
                    ready.set()

    reader = threading.Thread(target=pump, name="services.local output", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_SECONDS
        while not ready.wait(0.2):
            if process.poll() is not None:
                pytest.fail(f"services.local exited with {process.returncode} before listening:\n{running.tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"services.local did not listen within {START_SECONDS:g} s:\n{running.tail()}")
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        reader.join(10)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report on the test item (the `browsers` fixture saves screenshots on failure)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def browsers(chromium: None, request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
    """A factory of headless Chromium windows, closed after the test."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    drivers: list[Any] = []

    def open_window() -> Any:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                         "--window-size=1400,1200", "--disable-extensions", "--no-first-run"):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
        driver.set_script_timeout(30)
        drivers.append(driver)
        return driver

    yield open_window

    report = getattr(request.node, "report_call", None)
    failed = report is not None and report.failed
    for number, driver in enumerate(drivers):
        try:
            if failed:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                stem = f"failed-{request.node.name}-{number}"
                driver.save_screenshot(str(SCREENSHOTS / f"{stem}.png"))
                console = "\n".join(str(entry) for entry in driver.get_log("browser"))
                (SCREENSHOTS / f"{stem}.console.txt").write_text(console)
        except Exception:  # a window that died: nothing to save
            pass
        finally:
            driver.quit()
