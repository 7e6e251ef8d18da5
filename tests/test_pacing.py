"""Each tenant's share of submissions while others submit too (``ttsq.pacing``), against a real
Redis, and through the real API: alone a tenant is never paced; contended, its submissions are
spaced at its rate after a burst, each weighing its body, and one whose turn is too far away is
refused with no job made."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from api.main import create_app
from tests.conftest import serve
from ttsq.constants import SUBMITTERS_KEY, consumed_queues
from ttsq.errors import QuotaExceeded
from ttsq.pacing import BURST_S, CONTENDED_WINDOW_S, MAX_WAIT_S, SubmitPacer, submission_cost
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore


def _tenant() -> str:
    return f"pace-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pacer(redis_client: redis.Redis) -> Iterator[SubmitPacer]:
    redis_client.delete(SUBMITTERS_KEY)  # other tests' tenants would make every test contended
    yield SubmitPacer(redis_client)
    redis_client.delete(SUBMITTERS_KEY)


def test_a_tenant_alone_is_never_paced(pacer: SubmitPacer) -> None:
    alone = _tenant()
    assert [pacer.turn(alone, 1, 1.0) for _ in range(50)] == [0.0] * 50


def test_contended_a_tenant_is_spaced_after_its_burst_then_refused(pacer: SubmitPacer) -> None:
    pacer.turn(_tenant(), 1, 1.0)  # another tenant submits
    flooding = _tenant()
    waits, refused = _turns_until_refused(pacer, flooding)
    burst = int(BURST_S) + 1
    assert waits[:burst] == [0.0] * burst
    assert all(0 < wait <= MAX_WAIT_S for wait in waits[burst:]), waits
    assert waits[burst:] == sorted(waits[burst:])  # each later than the one before
    assert len(waits) <= burst + MAX_WAIT_S + 1
    assert refused.code == "submits_per_second_exceeded"
    assert refused.retry_after_s >= 1


def _turns_until_refused(pacer: SubmitPacer, tenant: str) -> tuple[list[float], QuotaExceeded]:
    waits: list[float] = []
    for _ in range(20):
        try:
            waits.append(pacer.turn(tenant, 1, 1.0))
        except QuotaExceeded as e:
            return waits, e
    raise AssertionError(f"20 turns at once, none refused: {waits}")


def test_a_long_body_weighs_as_many_submissions(pacer: SubmitPacer) -> None:
    pacer.turn(_tenant(), 1, 1.0)
    heavy = _tenant()
    cost = submission_cost(60_000)
    assert cost == 7
    assert pacer.turn(heavy, cost, 1.0) == 0.0
    assert pacer.turn(heavy, 1, 1.0) > cost - BURST_S - 0.5  # seven turns used by one
    with pytest.raises(QuotaExceeded):
        pacer.turn(heavy, 1, 1.0)


def test_another_tenant_counts_only_within_the_window(pacer: SubmitPacer, redis_client: redis.Redis) -> None:
    seconds, micros = redis_client.time()
    redis_client.zadd(SUBMITTERS_KEY, {_tenant(): seconds + micros / 1e6 - CONTENDED_WINDOW_S - 1})
    late = _tenant()
    assert [pacer.turn(late, 1, 1.0) for _ in range(20)] == [0.0] * 20


def test_no_limit_takes_no_turn(pacer: SubmitPacer, redis_client: redis.Redis) -> None:
    assert pacer.turn(_tenant(), 50, None) == 0.0
    assert not redis_client.exists(SUBMITTERS_KEY)


@pytest.fixture
def idle_api(settings: Settings, redis_client: redis.Redis) -> Iterator[str]:
    """An API requiring keys whose jobs go to a queue no worker reads, with the server's default
    limits of production (the suite's have none)."""
    queue = f"idle-{uuid.uuid4()}"
    redis_client.delete(SUBMITTERS_KEY)
    production = Settings(_env_file=None).default_limits
    changed = settings.model_copy(
        update={"auth_required": True, "queue": queue, "model_affinity": False, "default_limits": production}
    )
    with serve(create_app(changed)) as url:
        yield url
    redis_client.delete(*consumed_queues(queue), SUBMITTERS_KEY)


def _submits(url: str, key: str, count: int) -> list[httpx.Response]:
    """``count`` submissions at once, each on its own connection."""

    def submit(n: int) -> httpx.Response:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            return client.post("/v1/jobs", json={"text": f"Paced submission number {n}."})

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(submit, range(count)))


def test_the_api_paces_a_flood_only_while_another_tenant_submits(idle_api: str, redis_client: redis.Redis) -> None:
    tenants = TenantStore(redis_client)
    # Half a submission a second: a burst of three, then one every 2 s, so that 12 sent at once are
    # refused in part even if a loaded machine lets them reach the pacer over several seconds.
    rate = 0.5
    key_a, _ = tenants.create(_tenant(), Limits(submits_per_second=rate))
    key_b, _ = tenants.create(_tenant(), Limits())
    alone = _submits(idle_api, key_a, 12)
    assert [r.status_code for r in alone] == [202] * 12, [r.text for r in alone if r.status_code != 202]
    assert _submits(idle_api, key_b, 1)[0].status_code == 202
    contended = _submits(idle_api, key_a, 12)
    codes = Counter(r.status_code for r in contended)
    assert codes[202] >= int(BURST_S * rate) + 1, codes
    assert codes[429] >= 1, codes
    refusal = next(r for r in contended if r.status_code == 429)
    assert refusal.json()["error"]["code"] == "submits_per_second_exceeded"
    assert int(refusal.headers["Retry-After"]) >= 1
    with httpx.Client(base_url=idle_api, headers={"Authorization": f"Bearer {key_a}"}, timeout=30) as client:
        jobs = client.get("/v1/jobs", params={"limit": 100}).json()["jobs"]
    assert len(jobs) == 12 + codes[202]  # no job for a refused submission
