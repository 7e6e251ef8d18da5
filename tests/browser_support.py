"""A headless Debian chromium driven by selenium, for the studio's browser tests: downloads land in
a folder of the test's, the browser's console and network logs can be read, and axe-core (from
npm, ``make test`` installs it) checks a view's accessibility."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM: Final = Path("/usr/bin/chromium")
CHROMEDRIVER: Final = Path("/usr/bin/chromedriver")
AXE: Final = Path(__file__).resolve().parent.parent / "node_modules" / "axe-core" / "axe.min.js"
SERIOUS: Final = frozenset({"serious", "critical"})


def start_chromium(downloads: Path, language: str = "en-US") -> webdriver.Chrome:
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=1280,1000",
        f"--lang={language}",
    ):
        options.add_argument(argument)
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(downloads),
            "download.prompt_for_download": False,
            # A file the page fetches with the key is saved after the fetch, which may outlast the
            # click's user activation: chromium then asks once before a second such download (a
            # person answers "Allow"; a test cannot), so the test's profile allows them.
            "profile.default_content_setting_values.automatic_downloads": 1,
            "intl.accept_languages": language,
        },
    )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def request_urls(browser: webdriver.Chrome) -> list[str]:
    """Every URL the page requested since the last call (the DevTools network log)."""
    urls = []
    for entry in browser.get_log("performance"):  # type: ignore[no-untyped-call]
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_errors(browser: webdriver.Chrome, allowed: Callable[[str], bool] = lambda _: False) -> list[str]:
    """The console's errors since the last call: script errors and console.error, and failed loads
    except those ``allowed`` names (a 401 the test asked for)."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")  # type: ignore[no-untyped-call]
        if entry["level"] == "SEVERE" and not (entry.get("source") == "network" and allowed(entry["message"]))
    ]


def axe_violations(browser: webdriver.Chrome) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it is shown now."""
    browser.execute_script(AXE.read_text())
    result = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done(String(e)));"
    )
    assert isinstance(result, list), result
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["html"][:120] for n in v["nodes"][:3]]}
        for v in result
        if v["impact"] in SERIOUS
    ]


def downloaded(folder: Path, name: str, timeout_s: float = 30) -> Path:
    """The file the browser saved under ``name``, once it is whole."""
    path = folder / name
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and not (folder / f"{name}.crdownload").exists() and path.stat().st_size > 0:
            return path
        time.sleep(0.1)
    raise AssertionError(f"{name} was not downloaded; the folder holds {sorted(p.name for p in folder.iterdir())}")
