"""A headless Chromium (Selenium) and a Flask app served on a free port, for the browser
tests of ``lr inspect`` (tests/inspect/test_inspect_browser.py, tests/apps/test_real_bundle.py)."""

from __future__ import annotations

import shutil
import threading
from typing import Any

import pytest
from node_support import free_port


def chromium() -> Any:
    """Headless Chromium through Debian's chromedriver; a failure (never a skip) when missing."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail("headless Chromium is missing: scripts/setup.sh installs Debian's chromium "
                    "and chromium-driver (apt-get install chromium chromium-driver)",
                    pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


class Server:
    """A Flask app on a free loopback port, in a thread (werkzeug's server)."""

    def __init__(self, app: Any) -> None:
        from werkzeug.serving import make_server

        self.port = free_port()
        self.server = make_server("127.0.0.1", self.port, app, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}/"

    def close(self) -> None:
        self.server.shutdown()


def list_ids(browser: Any, mode: str) -> list[str]:
    """The document ids of the page's list for ``mode`` (a leg, or ``hybrid``)."""
    from selenium.webdriver.common.by import By

    return [li.get_attribute("data-id")
            for li in browser.find_elements(By.CSS_SELECTOR, f"#list-{mode} li")]


def wait_rendered(browser: Any, count: int) -> None:
    """Wait until the page has rendered its ``count``-th answer."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(
        lambda d: d.find_element("tag name", "body").get_attribute("data-rendered") == str(count))
