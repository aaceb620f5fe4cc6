"""Waiting for what a console page shows, with the page's text in the failure message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")
WAIT_S = 30.0


def page_text(driver: Any) -> str:
    try:
        return str(driver.find_element(By.TAG_NAME, "body").text)
    except Exception as exc:
        return f"(no page text: {exc})"


def wait_until(driver: Any, condition: Callable[[Any], T], what: str, timeout: float = WAIT_S) -> T:
    """The first truthy value of condition(driver); a page re-rendered meanwhile retries."""
    try:
        return WebDriverWait(
            driver, timeout, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
        ).until(condition)
    except TimeoutException:
        raise AssertionError(
            f"the page never showed {what}; it shows:\n{page_text(driver)}"
        ) from None


def texts(driver: Any, css: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def text_is(css: str, expected: str) -> Callable[[Any], bool]:
    """The (first) element at `css` shows exactly `expected`."""

    def check(driver: Any) -> bool:
        found = texts(driver, css)
        return bool(found) and found[0] == expected

    return check


def status(driver: Any) -> str:
    return str(driver.find_element(By.ID, "status").get_attribute("class"))
