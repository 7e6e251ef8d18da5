"""The exchange of held models between workers (``workers.held_models``), against a real Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Final, cast

import pytest
import redis

from tests.conftest import database_url
from ttsq import broker_transport
from ttsq.constants import HELD_MODELS_KEY, model_queue
from ttsq.settings import Settings
from workers.held_models import STALE_S, HeldModels, others_models

DATABASE: Final = 13
"""A database of its own: the suite's workers write their entries to the shared one every few seconds."""


@pytest.fixture
def own_redis(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(database_url(settings.redis_url, DATABASE))
    client.delete(HELD_MODELS_KEY)
    yield client
    client.delete(HELD_MODELS_KEY)
    client.close()


def test_fresh_entries_of_others_count_and_stale_or_broken_ones_are_dropped() -> None:
    now = 1000.0
    entries = {
        "me:1": json.dumps({"at": now, "models": ["a"]}),
        "other:2": json.dumps({"at": now - 1, "models": ["b", "c"]}),
        "gone:3": json.dumps({"at": now - STALE_S - 1, "models": ["d"]}),
        "broken:4": "not json",
    }
    held, stale = others_models(entries, "me:1", now)
    assert held == {"b", "c"}
    assert sorted(stale) == ["broken:4", "gone:3"]


def test_each_worker_learns_what_only_the_others_hold(own_redis: redis.Redis) -> None:
    mine = ["a", "shared"]
    worker = HeldModels(own_redis, "tts", lambda: mine)
    own_redis.hset(HELD_MODELS_KEY, "other:9", json.dumps({"at": time.time(), "models": ["b", "shared"]}))
    own_redis.hset(HELD_MODELS_KEY, "dead:8", json.dumps({"at": time.time() - 2 * STALE_S, "models": ["c"]}))
    try:
        assert worker.exchange(time.time()) == {"b"}
        assert broker_transport._elsewhere == {model_queue("tts", "b"), model_queue("tts", "b", interactive=True)}
        raw = cast(dict[bytes, bytes], own_redis.hgetall(HELD_MODELS_KEY))
        entries = {k.decode(): json.loads(v) for k, v in raw.items()}
        assert set(entries) == {"other:9", worker._me}  # the dead worker's entry is gone
        assert entries[worker._me]["models"] == mine
        worker.stop()  # never started: removes its entry all the same
        assert worker._me.encode() not in own_redis.hkeys(HELD_MODELS_KEY)
    finally:
        broker_transport.held_elsewhere([])


@pytest.mark.parametrize("broken", ["{}", '{"at": "x", "models": []}'])
def test_an_entry_of_the_wrong_shape_is_dropped(broken: str) -> None:
    assert others_models({"w:1": broken}, "me", 0.0) == (set(), ["w:1"])
