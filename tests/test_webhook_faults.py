"""One tenant's silent receiver at the scale the probe used (issue 19, finding 9): 200 jobs whose
receiver accepts and never answers, delivered with the production deadline (15 s), beside another
tenant's job and the sweeper, on the whole stack of real processes (``tests/faults_support.py``).

Behind the ``faults`` marker (``make faults``); its figures go to ``bench/results/faults-latest.json``
and docs/RELIABILITY.md. ``tests/test_webhook_fairness.py`` checks the same in ``make test`` with a
2 s deadline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

import httpx
import pytest
from pydantic import SecretStr

from cli.processes import wait_until
from tests.conftest import TEST_WEBHOOK_SECRET
from tests.faults_support import fault_stack, record_figures, short_texts, wait_terminal
from tests.receiver import RawReceiver, Receiver, never_answers
from tests.test_webhook_fairness import finished_at, first_arrival
from ttsq.constants import SWEEPS_KEY
from ttsq.tenants import Limits, TenantStore

pytestmark = pytest.mark.faults

SILENT_JOBS: Final = 200
SWEEP_S: Final = 5.0


@pytest.mark.timeout(1200)
def test_200_jobs_to_a_silent_receiver_delay_no_other_tenant_and_no_sweep(tmp_path: Path) -> None:
    settings = {
        "webhook_secret": SecretStr(TEST_WEBHOOK_SECRET),
        "webhook_allow_private": True,
        "sweep_interval_s": SWEEP_S,
    }
    silent = RawReceiver(never_answers)
    good = Receiver()
    with fault_stack(tmp_path, **settings) as stack:
        tenants = TenantStore(stack.redis_client)
        key_a, _ = tenants.create("silent-receiver", Limits())
        key_b, _ = tenants.create("other-tenant", Limits())
        a = httpx.Client(base_url=stack.api_url, headers={"authorization": f"Bearer {key_a}"}, timeout=30)
        b = httpx.Client(base_url=stack.api_url, headers={"authorization": f"Bearer {key_b}"}, timeout=30)
        timeout_s = stack.settings.webhook_timeout_s
        ids = []
        for text in short_texts(SILENT_JOBS):
            answer = a.post("/v1/jobs", json={"text": text, "webhook_url": silent.url})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        wait_until(lambda: silent.accepted >= stack.settings.webhook_concurrency_per_receiver, 300, "silent attempts")
        window_start = time.time()
        sweeps_before = int(stack.redis_client.get(SWEEPS_KEY) or 0)
        url = good.path(204)
        other = b.post("/v1/jobs", json={"text": "Tell the other tenant.", "webhook_url": url}).json()
        done = wait_terminal(stack.jobs, [other["id"], *ids], 600)
        job = b.get(f"/v1/jobs/{other['id']}").json()
        arrived = first_arrival(good, url, 60)
        time.sleep(4 * SWEEP_S)  # the silent receiver still holds attempts: sweeps must go on
        window_s = time.time() - window_start
        sweeps = int(stack.redis_client.get(SWEEPS_KEY) or 0) - sweeps_before
        held = silent.accepted
        alive = stack.alive()
        pending = sum(1 for job_id in ids if a.get(f"/v1/jobs/{job_id}").json()["webhook"]["state"] == "pending")
        late = None if arrived is None else round(arrived - finished_at(job), 2)
        record_figures(
            "webhooks_200_jobs_to_a_silent_receiver",
            {
                "silent_jobs": SILENT_JOBS,
                "webhook_timeout_s": timeout_s,
                "per_receiver": stack.settings.webhook_concurrency_per_receiver,
                "per_tenant": stack.settings.webhook_concurrency_per_tenant,
                "silent_connections_accepted": held,
                "silent_events_still_pending": pending,
                "other_tenant_event_after_its_job_s": late,
                "sweep_interval_s": SWEEP_S,
                "sweeps_in_window": sweeps,
                "window_s": round(window_s, 1),
                "statuses": sorted({r.status.value for r in done.values() if r is not None}),
                "processes_alive": alive,
            },
        )
        a.close()
        b.close()
    silent.close()
    good.close()
    assert late is not None, "the other tenant's event never arrived"
    assert late < 10, f"the other tenant's event arrived {late} s after its job finished"
    assert sweeps >= int(window_s / SWEEP_S) - 2, f"{sweeps} sweeps in {window_s:.0f} s: some were missed"
    assert pending > 0, "the silent receiver's events were all over: the test did not hold them"
    assert all(alive.values()), alive
