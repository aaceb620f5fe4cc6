"""Fixtures of the console's browser tests: Debian's headless Chromium driven by selenium,
a console subprocess, and the screenshots each test writes as artifacts.

Screenshots go to tests/console/artifacts/ (ignored by git), or to the directory named by
ONCEFLOW_CONSOLE_ARTIFACTS. Missing Chromium or chromedriver fails the tests (`make test`
installs both): a browser test that silently skips would prove nothing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.console_process import ConsoleProcess
from tests.helpers.broker import BrokerProcess

CHROMIUM = os.environ.get("ONCEFLOW_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ONCEFLOW_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("ONCEFLOW_CONSOLE_ARTIFACTS", Path(__file__).parent / "artifacts"))
# No Selenium Manager downloads: the browser and its driver are Debian's.
os.environ.setdefault("SE_OFFLINE", "true")
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
]


def _require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            f"the console's browser tests need {' and '.join(missing)}: install Debian's "
            "'chromium' and 'chromium-driver' packages (`make test` does so as root; otherwise "
            "sudo apt-get install chromium chromium-driver), or set ONCEFLOW_CHROMIUM and "
            "ONCEFLOW_CHROMEDRIVER",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="onceflow-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Callable[[Any, str], Path]:
    """`screenshot(driver, name)` writes ARTIFACTS/<name>.png and returns its path."""

    def take(driver: Any, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"no screenshot for {request.node.name}"
        return path

    return take


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a module, with KIP-890 partition verification off so that a raw
    produce can leave a hanging transaction (transactional producers work as usual), and
    two-phase commit (KIP-939) allowed."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("console") / "data",
        {
            "transaction.partition.verification.enable": "false",
            "transaction.two.phase.commit.enable": "true",
        },
    )
    b.start()
    try:
        yield b
    finally:
        code = b.stop() if b.running else 0
        b.kill()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"
        errors = b.internal_errors(b.errors_ignored_before)
        assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])


def start_console(bootstrap: str, log_dir: Path) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(bootstrap, log_dir / "console.log").start()
    try:
        yield console
    finally:
        code = console.stop()
        log = console.log()
        assert code == 0, f"the console exited with {code}:\n{log}"
        assert "Traceback" not in log, f"the console logged a traceback:\n{log}"


@pytest.fixture(scope="module")
def console(
    txn_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    yield from start_console(txn_broker.bootstrap, tmp_path_factory.mktemp("console-log"))
