"""Presigned URLs: one is reused for a moment (the long poll's answer and ``/audio``'s redirect of
the same job), never past a small share of its lifetime, and it reads the object."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import httpx

from ttsq.settings import Settings
from ttsq.storage import ObjectStore, RecentUrls


def test_a_url_is_reused_while_young_and_made_again_after() -> None:
    urls = RecentUrls(reuse_s=2.0)
    urls.put("a", "url-a", now=100.0)
    assert urls.get("a", now=101.9) == "url-a"
    assert urls.get("a", now=102.0) is None
    assert urls.get("b", now=100.0) is None


def test_the_least_recently_made_urls_are_forgotten_first() -> None:
    urls = RecentUrls(reuse_s=60.0, kept=2)
    for n, key in enumerate(("a", "b", "a", "c")):
        urls.put(key, f"url-{key}", now=float(n))
    assert urls.get("a", now=4.0) == "url-a"
    assert urls.get("b", now=4.0) is None
    assert urls.get("c", now=4.0) == "url-c"


def _signed_at(url: str) -> str:
    return parse_qs(urlsplit(url).query)["X-Amz-Date"][0]


def test_a_url_is_handed_out_again_only_within_a_hundredth_of_its_lifetime(settings: Settings) -> None:
    key = "tests/presigned/reused.wav"
    hour = ObjectStore(settings.s3.model_copy(update={"presign_ttl_s": 3600}))  # reused for 36 s
    hour.put(key, b"RIFF-and-so-on", "audio/wav")
    first = hour.presigned_get_url(key)
    time.sleep(1.1)  # a URL signed now would carry another second
    assert hour.presigned_get_url(key) == first
    assert hour.presigned_get_url("tests/presigned/other.wav") != first
    assert httpx.get(first).raise_for_status().content == b"RIFF-and-so-on"
    assert int(parse_qs(urlsplit(first).query)["X-Amz-Expires"][0]) == 3600

    minute = ObjectStore(settings.s3.model_copy(update={"presign_ttl_s": 60}))  # reused for 0.6 s
    signed = minute.presigned_get_url(key)
    time.sleep(1.1)
    again = minute.presigned_get_url(key)
    assert _signed_at(again) > _signed_at(signed)
    assert httpx.get(again).raise_for_status().content == b"RIFF-and-so-on"
