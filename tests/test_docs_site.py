"""The documentation site as a reader gets it: built with warnings as errors, served over HTTP,
and opened in a real browser (Debian's chromium, driven by Selenium through chromedriver).

`make install` installs chromium and chromium-driver with apt when root; without them the test
skips, naming them.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built from this checkout into a temporary folder, served on a free local port."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
                           cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert build.returncode == 0, build.stderr
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *args: None  # type: ignore[assignment,method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMEDRIVER is None or CHROMIUM is None:
        pytest.skip("needs Debian's chromium and chromium-driver (make install installs them when root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: object) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_front_page_and_a_task_page_open_with_their_navigation_and_no_console_error(site: str, browser: object) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"{site}/")  # type: ignore[attr-defined]
    assert driver.title.startswith("dslrun")  # type: ignore[attr-defined]
    navigation = driver.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").get_attribute("textContent")  # type: ignore[attr-defined]
    for entry in ("Getting started", "Tasks", "Object detection", "Distributed training", "Architecture", "Command line"):
        assert entry in navigation
    assert console_errors(driver) == []
    # Follow the front page's link to a task, as a reader does.
    driver.find_element(By.LINK_TEXT, "Object detection").click()  # type: ignore[attr-defined]
    assert driver.current_url.endswith("/tasks/detection/")  # type: ignore[attr-defined]
    assert driver.find_element(By.TAG_NAME, "h1").text == "Object detection"  # type: ignore[attr-defined]
    assert "dslrun data synthetic-detection" in driver.find_element(By.TAG_NAME, "article").text  # type: ignore[attr-defined]
    assert console_errors(driver) == []


@pytest.mark.slow
def test_the_search_finds_a_page_by_a_word_in_it(site: str, browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    driver.get(f"{site}/getting-started/")  # type: ignore[attr-defined]
    box = WebDriverWait(driver, 20).until(expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
    box.click()
    box.send_keys("horovodrun")
    results = WebDriverWait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item") or None)
    titles = " ".join(item.text for item in results)
    assert "Distributed training" in titles or "On N ranks" in titles, titles
    assert console_errors(driver) == []
