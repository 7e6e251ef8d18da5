"""Schemathesis against the live API (real Redis and S3, a queue no worker reads, so jobs are
accepted and stay queued): requests made from /openapi.json, valid and invalid, to every operation.
No answer may be a server error, every answer must be one the document describes (status, content
type, headers, body), and a request the document calls invalid must be refused."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import redis

from api import part_reader
from api.main import create_app
from tests.conftest import serve
from ttsq.constants import consumed_queues
from ttsq.settings import Settings

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
RUN_LIMIT_S = 240
"""A run took about 25 s on two cores with the first routes, and 75 s in the suite's CI run of 29 Nov
(more routes, each 200 cases); this is only a deadline for a run that hangs, kept well above that."""

CONFIG: Final = """
# A fixed seed: the same cases on every run, so that a failure in CI is one a developer can replay.
seed = 20261123
# An event stream of a job that stays queued never ends: read its first event only.
max-stream-events = 1

# 200 cases an operation: with five server errors planted for the measure (on a field's value, on a
# pair of fields, on three rare values of a query parameter, on a speed above 3, and the duplicate
# mark kinds of a batch's defaults that schemathesis found in 8ffef62), 200 found 19 of the 20 over
# seeds 1, 2, 3 and this one, as many as 400 (which missed the batch bug with this seed) in half the
# time; 100 missed the rare values.
[generation]
max-examples = 200
database = "none"

# The document has no links between operations: nothing for the stateful phase.
[phases.stateful]
enabled = false

# Every check that applies to an API without links: not positive_data_acceptance, since a request
# the document allows may still be refused for what only the server knows (an unknown voice, text
# that no voice reads); not the stateful ones (use_after_free, ensure_resource_availability); not
# the auth ones, keys being optional outside production.
[checks]
positive_data_acceptance.enabled = false
use_after_free.enabled = false
ensure_resource_availability.enabled = false
ignored_auth.enabled = false
object_level_authorization.enabled = false
# Refusals: schemathesis's list, plus 413 (a text over the limit, a body over the cap).
negative_data_rejection.expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]

# 5xx answers that this setup causes by design: no worker answers readiness's ping, and none takes
# a speech job or a lexicon preview's (the test cuts its wait short, to a 504).
# Only ids never seen: with the id of a job (which stays queued), ?wait=60 would hold a case for a
# minute. A job as it is read is checked on the other operations that answer with one.
[[operations]]
include-path = "/v1/jobs/{job_id}"
include-method = "GET"
phases.coverage.extra-data-sources.responses = false
phases.fuzzing.extra-data-sources.responses = false

[[operations]]
include-path = "/readyz"
checks.not_a_server_error.expected-statuses = ["2XX", "3XX", "4XX", 503]

[[operations]]
include-path = "/v1/audio/speech"
checks.not_a_server_error.expected-statuses = ["2XX", "3XX", "4XX", 504]

[[operations]]
include-path = "/v1/lexicon-preview"
checks.not_a_server_error.expected-statuses = ["2XX", "3XX", "4XX", 504]
"""


@pytest.fixture(scope="module")
def idle_api(settings: Settings) -> Iterator[str]:
    """An API on a queue of its own that no worker reads; admission never finds it behind."""
    fuzzed = settings.model_copy(
        update={
            "queue": f"fuzz-{uuid.uuid4().hex[:8]}",
            "model_affinity": False,
            "ready_timeout_s": 0.2,
            "admission_max_age_interactive_s": 1e9,
            "admission_max_age_bulk_s": 1e9,
        }
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(part_reader, "PART_TIMEOUT_S", 0.02)  # no audio ever comes: the 504 at once
        with serve(create_app(fuzzed)) as url:
            yield url
    client = redis.Redis.from_url(fuzzed.redis_url)
    client.delete(*consumed_queues(fuzzed.queue))
    client.close()


@pytest.mark.timeout(RUN_LIMIT_S + 30)
def test_the_api_keeps_to_its_openapi_document(idle_api: str, tmp_path: Path) -> None:
    """Run as its users run it, the ``schemathesis`` command, which reports each finding with a
    ``curl`` line that reproduces it."""
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    argv = [str(SCHEMATHESIS), "--no-color", "--config-file", str(config), "run", f"{idle_api}/openapi.json"]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_LIMIT_S, cwd=tmp_path, check=False)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"no verdict after {RUN_LIMIT_S} s:\n{report(e.stdout)}") from None
    assert run.returncode == 0, report(run.stdout) + report(run.stderr)


def report(output: bytes | str | None) -> str:
    """The run's report with its lines cut short: a curl line may carry a megabyte of generated text."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output or ""
    return "\n".join(line if len(line) <= 1000 else f"{line[:1000]}…" for line in text.splitlines())
