"""The try-it page in a real headless browser (Debian's chromium and chromium-driver, via selenium)
against the real stack: voices load, a job runs with live progress and plays, errors show."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import soundfile
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="the browser test needs Debian's chromium and chromium-driver: "
    "`apt-get install chromium chromium-driver` (.ci/run installs them)",
)

SENTENCE = "The browser asked for this sentence, and the queue spoke it."


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--autoplay-policy=no-user-gesture-required",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def open_page(browser: webdriver.Chrome, api_url: str) -> WebDriverWait[webdriver.Chrome]:
    browser.get(f"{api_url}/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda b: len(Select(b.find_element("id", "voice")).options) > 0)
    return wait


def test_a_job_runs_from_the_page_with_live_progress_and_plays(browser: webdriver.Chrome, api_url: str) -> None:
    wait = open_page(browser, api_url)
    voices = httpx.get(f"{api_url}/v1/voices").json()["voices"]
    default = next(v["id"] for v in voices if v["default"])
    assert Select(browser.find_element("id", "voice")).first_selected_option.get_attribute("value") == default
    # Record every status the page shows, as it shows it (a MutationObserver, not sampling).
    browser.execute_script(
        "const status = document.getElementById('status'); window.seen = [];"
        "new MutationObserver(() => window.seen.push(status.textContent))"
        ".observe(status, {childList: true, characterData: true, subtree: true});"
    )
    browser.find_element("id", "text").send_keys(SENTENCE)
    Select(browser.find_element("id", "format")).select_by_value("mp3")
    browser.find_element("id", "submit").click()
    wait.until(lambda b: b.find_element("id", "status").text in {"succeeded", "failed"})
    assert browser.find_element("id", "status").text == "succeeded", browser.find_element("id", "error").text
    seen = browser.execute_script("return window.seen")
    assert (seen[-1] == "succeeded" and "running" in seen) or "queued" in seen, seen
    job_id = browser.find_element("id", "job-id").text
    job = httpx.get(f"{api_url}/v1/jobs/{job_id}").json()
    assert job["format"] == "mp3"
    duration = wait.until(
        lambda b: b.execute_script(
            "const a = document.getElementById('player'); return a.readyState >= 1 ? a.duration : null"
        )
    )
    assert abs(duration - job["result"]["duration_s"]) < 0.15
    assert str(browser.find_element("id", "player").get_attribute("src")).endswith(f"/v1/jobs/{job_id}/audio")
    download = browser.find_element("id", "download").get_attribute("href")
    assert download is not None
    assert urlsplit(download).path == urlsplit(job["result"]["url"]).path
    audio, rate = soundfile.read(io.BytesIO(httpx.get(download).content))
    assert abs(len(audio) / rate - job["result"]["duration_s"]) < 0.15


@pytest.mark.parametrize(
    ("text", "voice_id", "code"),
    [("   ", None, "empty_text"), (SENTENCE, "en_US-nobody-medium", "voice_not_found")],
)
def test_a_refused_request_shows_its_code_and_message(
    browser: webdriver.Chrome, api_url: str, text: str, voice_id: str | None, code: str
) -> None:
    wait = open_page(browser, api_url)
    if voice_id is not None:  # a voice the server does not have, as a stale page would send
        browser.execute_script(
            f"document.getElementById('voice').add(new Option('{voice_id}', '{voice_id}', true, true))"
        )
    browser.execute_script("document.getElementById('text').removeAttribute('required')")
    browser.find_element("id", "text").send_keys(text)
    browser.find_element("id", "submit").click()
    wait.until(lambda b: b.find_element("id", "error").is_displayed())
    assert browser.find_element("id", "error").text.startswith(f"{code}: ")
    assert len(browser.find_element("id", "error").text) > len(code) + 10


def test_the_page_loads_nothing_from_elsewhere(browser: webdriver.Chrome, api_url: str) -> None:
    open_page(browser, api_url)
    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls, "the page loaded no resources at all"
    assert {urlsplit(u).netloc for u in urls} == {urlsplit(api_url).netloc}
