"""The studio's modules and style as a browser gets them from the real API: gzipped where it takes
gzip, as they are where it does not, and the same bytes either way."""

from __future__ import annotations

import gzip

import httpx
import pytest

from api.routes.web import STATIC_DIR, STATIC_GZIP_MIN_BYTES

PATHS = ["js/app.js", "js/speak.js", "style.css"]


@pytest.mark.parametrize("path", PATHS)
def test_a_file_is_sent_gzipped_to_a_browser_that_takes_it(api_url: str, path: str) -> None:
    on_disk = (STATIC_DIR / path).read_bytes()
    assert len(on_disk) >= STATIC_GZIP_MIN_BYTES
    with httpx.Client(base_url=api_url, timeout=10) as http:
        with http.stream("GET", f"/static/{path}", headers={"Accept-Encoding": "gzip"}) as zipped:
            sent = b"".join(zipped.iter_raw())
        assert zipped.status_code == 200
        assert zipped.headers["content-encoding"] == "gzip"
        assert "accept-encoding" in zipped.headers["vary"].lower()
        assert len(sent) < len(on_disk) / 2
        assert gzip.decompress(sent) == on_disk
        plain = http.get(f"/static/{path}", headers={"Accept-Encoding": "identity"})
        assert plain.status_code == 200
        assert "content-encoding" not in plain.headers
        assert plain.content == on_disk
