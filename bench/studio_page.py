"""The studio's page weight and first render: cold loads in headless chromium (cache disabled),
medians of first contentful paint, DOMContentLoaded and load, and the bytes of each asset.

    .venv/bin/python -m bench.studio_page http://127.0.0.1:8000/ [--loads 7]

Run against ``make dev`` (keys not required, so the page renders its views at once). Figures go in
docs/STUDIO.md by hand: they depend on the machine, not on a reference to compare against.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any, Final

from tests.browser_support import start_chromium

MEASURE: Final = """
const nav = performance.getEntriesByType('navigation')[0];
const paint = Object.fromEntries(performance.getEntriesByType('paint').map(p => [p.name, p.startTime]));
const assets = performance.getEntriesByType('resource').filter(r => r.initiatorType !== 'fetch');
return {fcp: paint['first-contentful-paint'], dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
        page: nav.decodedBodySize, assets: assets.map(r => [r.name.split('/').pop(), r.decodedBodySize])};
"""


def cold_load(url: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as downloads:
        browser = start_chromium(Path(downloads))
        try:
            browser.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
            browser.get(url)
            browser.implicitly_wait(10)
            browser.find_element("css selector", "nav a[aria-current='page']")
            measured: dict[str, Any] = browser.execute_script(MEASURE)
            return measured
        finally:
            browser.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--loads", type=int, default=7)
    args = parser.parse_args()
    loads = [cold_load(args.url) for _ in range(args.loads)]
    last = loads[-1]
    for name, size in [("page", last["page"]), *last["assets"]]:
        print(f"{name:>16} {size:>7} bytes")
    total = last["page"] + sum(size for _, size in last["assets"])
    print(f"{'all':>16} {total:>7} bytes, {len(last['assets']) + 1} requests")
    for key, label in (("fcp", "first contentful paint"), ("dcl", "DOMContentLoaded"), ("load", "load")):
        values = [round(load[key]) for load in loads]
        print(f"{label}: median {statistics.median(values):.0f} ms {values}")


if __name__ == "__main__":
    main()
