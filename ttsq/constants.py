"""Names and numbers that the API, the workers and operators must agree on."""

from __future__ import annotations

import re
from typing import Final

KEY_PREFIX: Final = "ttsq"
"""Prefix of every Redis key ttsq writes, so a shared Redis stays readable."""

SYNTHESIZE_TASK: Final = "ttsq.synthesize_job"
"""Entry task of a job: plans its segments, and finishes a one-segment job itself. Its only
argument is the job id; user text never travels in task messages."""

SEGMENT_TASK: Final = "ttsq.synthesize_segment"
"""Synthesises one segment of a multi-segment job; arguments: job id and segment index."""

ASSEMBLE_TASK: Final = "ttsq.assemble_job"
"""Joins a multi-segment job's parts into the final object; argument: the job id."""

DEFAULT_QUEUE: Final = "tts"
"""Celery queue of bulk jobs' entry and assembly tasks; their segments go to ``<queue>.segments``,
and every task of an interactive job to ``<queue>.interactive``. Workers take from the three in that
fixed order (see ``ttsq.broker``): interactive work first, then short jobs and assemblies, then the
segments of long jobs."""

SEGMENT_QUEUE_SUFFIX: Final = ".segments"
INTERACTIVE_QUEUE_SUFFIX: Final = ".interactive"
MODEL_QUEUE_INFIX: Final = ".model."
"""Work for one model's voices waits in ``<queue>.model.<model>`` (bulk) and
``<queue>.model.<model>.interactive`` (voice affinity): workers holding the model ask for them
first, any other worker when it has nothing of its own."""
MODEL_QUEUES_KEY: Final = f"{KEY_PREFIX}:model-queues"
"""Set of the model queues some synthesis worker reads (each adds its own at start): where the
sweeper looks for waiting work besides the fixed queues."""
HELD_MODELS_KEY: Final = f"{KEY_PREFIX}:held-models"
"""Hash: each live synthesis worker's id to ``{"at": unix seconds, "models": [model keys]}``, the
models it holds (``workers.held_models``)."""
HEARTBEAT_INTERVAL_S: Final = 1.0
"""How often a synthesis worker renews its heartbeat (``ttsq.liveness``), from a thread of its own so
that a long inference call never looks like death."""
HEARTBEAT_TTL_S: Final = 5.0
"""A heartbeat not renewed for this long is a worker that is gone, frozen or cut off: four missed
renewals, so a stall of a second or two (a slow Redis call, a GC pause) is no death."""
_QUEUE_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")

WORKER_CHECK_KEY_TEMPLATE: Final = "tmp/worker-checks/{worker}"
"""S3 key of the empty object a synthesis worker writes at each of its checks (``workers.fitness``):
keys that may read the bucket but not write to it fail it. Under ``tmp/``, so the cleanup deletes
the object of a worker gone longer than the part TTL."""

PART_KEY_TEMPLATE: Final = "tmp/{job_id}/{index:06d}.{attempt}.pcm"
"""S3 key of one segment's raw PCM, as one attempt at the segment made it, while its job is assembled
(part store ``s3``, and the parts past a job's Redis share)."""

JOB_OBJECTS_TEMPLATE: Final = "{tenant}/jobs/{job_id}/"
"""S3 prefix of everything a job stores (its audio), under its tenant's prefix."""

ATTEMPT_OBJECTS_TEMPLATE: Final = JOB_OBJECTS_TEMPLATE + "{attempt}/"
"""S3 prefix of what one attempt at a job's final step stores (its audio, marks and subtitles). Each
attempt writes under its own prefix and the job's success write names the winner's keys, so a late
duplicate of the step (a worker paused past its lease, then resumed) never overwrites or deletes
what the winner stored; a loser deletes only its own objects (``workers.steps``)."""

RESULT_KEY_TEMPLATE: Final = ATTEMPT_OBJECTS_TEMPLATE + "audio.{ext}"
"""S3 key of a job's audio, as one attempt stored it."""

MAX_WAIT_S: Final = 60.0
"""Longest long poll (``GET /v1/jobs/{id}?wait=``) the API accepts; clients wait longer in rounds."""

WYOMING_PORT: Final = 10200
"""Where the Wyoming server listens unless told otherwise: wyoming-piper's port, the one Home
Assistant's Wyoming integration is usually pointed at for speech."""

DEV_S3_ACCESS_KEY: Final = "ttsq-dev"
DEV_S3_SECRET_KEY: Final = "ttsq-dev-secret"
"""Credentials of the embedded SeaweedFS in development; refused in production (``ttsq.secrets_check``)."""


def job_key(job_id: str) -> str:
    return f"{KEY_PREFIX}:job:{job_id}"


def job_text_key(job_id: str) -> str:
    """The text lives apart from the record so status reads never carry it."""
    return f"{KEY_PREFIX}:job:{job_id}:text"


def result_key(tenant: str, job_id: str, attempt: str, extension: str) -> str:
    return RESULT_KEY_TEMPLATE.format(tenant=tenant, job_id=job_id, attempt=attempt, ext=extension)


def job_objects_prefix(tenant: str, job_id: str) -> str:
    return JOB_OBJECTS_TEMPLATE.format(tenant=tenant, job_id=job_id)


def job_object_key(tenant: str, job_id: str, attempt: str, name: str) -> str:
    """Another object of a job beside its audio (``marks.json``, ``subtitles.vtt``...)."""
    return ATTEMPT_OBJECTS_TEMPLATE.format(tenant=tenant, job_id=job_id, attempt=attempt) + name


def bulk_segments_queue(queue: str) -> str:
    """The fixed queue of bulk segment tasks (a job's own is ``ttsq.broker.segments_queue``)."""
    return f"{queue}{SEGMENT_QUEUE_SUFFIX}"


def interactive_queue(queue: str) -> str:
    return f"{queue}{INTERACTIVE_QUEUE_SUFFIX}"


def is_interactive_queue(name: str) -> bool:
    """Whether work in this queue is interactive (the fixed interactive queue or a model's)."""
    return name.endswith(INTERACTIVE_QUEUE_SUFFIX)


def model_queue(queue: str, model_key: str, interactive: bool = False) -> str:
    """The queue of one model's bulk work, or of its interactive work (a voice id or ``kokoro``:
    characters other than letters, digits, ``_-`` become ``_``, so the name has no dot of its own)."""
    name = f"{queue}{MODEL_QUEUE_INFIX}{_QUEUE_NAME_UNSAFE.sub('_', model_key)}"
    return f"{name}{INTERACTIVE_QUEUE_SUFFIX}" if interactive else name


def is_model_queue(name: str) -> bool:
    return MODEL_QUEUE_INFIX in name


def model_queue_home(name: str) -> str:
    """The fixed queue a model queue is read right after: ``<queue>.interactive`` for a model's
    interactive work, ``<queue>.segments`` for its bulk work."""
    queue = name.rsplit(MODEL_QUEUE_INFIX, 1)[0]
    return interactive_queue(queue) if name.endswith(INTERACTIVE_QUEUE_SUFFIX) else bulk_segments_queue(queue)


def alive_workers_key(queue: str) -> str:
    """Sorted set of the synthesis workers of ``queue`` by when their heartbeat expires
    (``ttsq.liveness``)."""
    return f"{KEY_PREFIX}:alive:{queue}"


def consumed_queues(queue: str) -> list[str]:
    """The queues a synthesis worker takes from, highest priority first."""
    return [interactive_queue(queue), queue, bulk_segments_queue(queue)]


def job_timings_key(job_id: str) -> str:
    """Per segment, where its utterances and words lie in its audio (jobs with marks)."""
    return f"{KEY_PREFIX}:job:{job_id}:timings"


def job_levels_key(job_id: str) -> str:
    """Per segment, its level summary (jobs with a loudness target)."""
    return f"{KEY_PREFIX}:job:{job_id}:levels"


def job_segments_key(job_id: str) -> str:
    """Phoneme ids of each segment, planned once by the entry task (derived from the text)."""
    return f"{KEY_PREFIX}:job:{job_id}:segments"


def job_plan_draft_key(job_id: str, token: str) -> str:
    """A plan being written, chunk by chunk, before it is renamed to :func:`job_segments_key`."""
    return f"{KEY_PREFIX}:job:{job_id}:segments:draft:{token}"


def job_done_key(job_id: str) -> str:
    """Hash of finished segments: index → the attempt whose part counts. The first attempt to finish
    a segment wins it, so a redelivered segment is never counted twice and a late duplicate's part is
    never read."""
    return f"{KEY_PREFIX}:job:{job_id}:done-parts"


def job_stats_key(job_id: str) -> str:
    """Running sums of the finished segments (synthesis and audio microseconds)."""
    return f"{KEY_PREFIX}:job:{job_id}:stats"


def job_part_key(job_id: str, index: int, attempt: str) -> str:
    """Raw PCM of one segment in Redis (part store ``redis``), as one attempt made it."""
    return f"{KEY_PREFIX}:job:{job_id}:part:{index}:{attempt}"


def job_part_bytes_key(job_id: str) -> str:
    """Bytes of a job's parts held in Redis (part store ``redis``), against its per-job share."""
    return f"{KEY_PREFIX}:job:{job_id}:part-bytes"


def job_spilled_key(job_id: str) -> str:
    """Set once a job's parts went past its Redis share and some went to S3."""
    return f"{KEY_PREFIX}:job:{job_id}:spilled"


def part_object_key(job_id: str, index: int, attempt: str) -> str:
    return PART_KEY_TEMPLATE.format(job_id=job_id, index=index, attempt=attempt)


def job_events_channel(job_id: str) -> str:
    """Redis pub/sub channel on which every change of a job is announced (see ``ttsq.events``)."""
    return f"{KEY_PREFIX}:events:job:{job_id}"


JOB_EVENTS_PATTERN: Final = f"{KEY_PREFIX}:events:job:*"
"""What an API process subscribes to once, to hear every job's changes."""


def job_streamed_key(job_id: str) -> str:
    """Set by the API once it has sent every part of a streamed job: whichever of it and the worker
    finishes last deletes the parts."""
    return f"{KEY_PREFIX}:job:{job_id}:streamed"


ENTRY_STEP: Final = "entry"
"""A job's first step: plan it; a job of one segment, or a short streamed one, is made whole here."""
ASSEMBLE_STEP: Final = "assemble"
"""A job's last step when its segments ran as tasks of their own: join their parts into its object."""
OBJECT_STEPS: Final = (ENTRY_STEP, ASSEMBLE_STEP)
"""The steps whose runs store a job's objects (audio, marks): either may be the one that commits them,
whichever stored them last (a sweeper may re-queue the assembly of a job whose entry died)."""


def segment_step(index: int) -> str:
    """The step of a job's segment ``index``."""
    return f"segment:{index}"


def job_claim_key(job_id: str, step: str) -> str:
    """Held while one task runs one step of a job (``entry``, ``segment:<n>``, ``assemble``)."""
    return f"{KEY_PREFIX}:job:{job_id}:claim:{step}"


def job_step_starts_key(job_id: str, step: str) -> str:
    """How many deliveries of one step of a job started and never finished (their worker died): past
    ``max_step_starts`` the job fails instead of handing the step to the next worker."""
    return f"{KEY_PREFIX}:job:{job_id}:starts:{step}"


def job_step_started_at_key(job_id: str, step: str) -> str:
    """When each unended delivery of one step of a job started (Unix time), until it ends or the next
    run reports it as died (``JobStore.take_died``): the span of a run whose worker died with it."""
    return f"{KEY_PREFIX}:job:{job_id}:started-at:{step}"


ACTIVE_JOBS_KEY: Final = f"{KEY_PREFIX}:jobs:active"
"""Sorted set of every queued or running job (score: creation time), for the sweeper."""

OBJECT_EXPIRY_KEY: Final = f"{KEY_PREFIX}:objects:expiry"
"""Sorted set of stored objects (score: when their job expires), for the cleanup task."""


SUBMITTERS_KEY: Final = f"{KEY_PREFIX}:submitters"
"""Sorted set: each tenant that submitted lately, scored by when (``ttsq.pacing``: two or more make
the service contended)."""


def pace_key(tenant: str) -> str:
    """A tenant's next turn to submit while the service is contended (``ttsq.pacing``)."""
    return f"{KEY_PREFIX}:tenant:{tenant}:pace"


def tenant_active_key(tenant: str) -> str:
    """A tenant's queued and running jobs (its active-jobs limit counts them)."""
    return f"{KEY_PREFIX}:tenant:{tenant}:active"


def tenant_jobs_key(tenant: str) -> str:
    """Every job of a tenant by creation time, for ``GET /v1/jobs``."""
    return f"{KEY_PREFIX}:tenant:{tenant}:jobs"


def usage_key(tenant: str, day: str) -> str:
    """A tenant's usage of one UTC day (``YYYY-MM-DD``): what its limits count, and its jobs and each
    voice's share (the fields: ``ttsq.quotas``)."""
    return f"{KEY_PREFIX}:usage:{tenant}:{day}"


def rate_key(tenant: str, second: int) -> str:
    return f"{KEY_PREFIX}:rate:{tenant}:{second}"


def lexicons_key(tenant: str) -> str:
    """Hash: a tenant's lexicons by name, each its current version's summary (JSON)."""
    return f"{KEY_PREFIX}:lexicons:{tenant}"


def lexicon_versions_key(tenant: str) -> str:
    """Hash: the last version number given to each lexicon name of a tenant (never reset, so a
    lexicon deleted and stored again never reuses a version a worker may have cached)."""
    return f"{KEY_PREFIX}:lexicons:{tenant}:versions"


def lexicon_version_key(tenant: str, name: str, version: int) -> str:
    """Hash: one version of a lexicon (the document as uploaded, its content type, its entries as
    JSON). The current version persists; a replaced or deleted one expires after the job TTL, so
    jobs submitted before the change still plan with what they were given."""
    return f"{lexicon_version_prefix(tenant, name)}{version}"


def lexicon_sizes_key(tenant: str) -> str:
    """Hash: the bytes each stored version of a tenant's lexicons holds (current and kept ones), by
    version key: what the tenant's ``lexicon_bytes_per_tenant`` counts."""
    return f"{KEY_PREFIX}:lexicons:{tenant}:sizes"


def lexicon_kept_key(tenant: str) -> str:
    """Sorted set: a tenant's replaced or deleted lexicon versions, still kept for the jobs that were
    submitted with them, by version key, scored by when they expire (oldest dropped first)."""
    return f"{KEY_PREFIX}:lexicons:{tenant}:kept"


def lexicon_version_prefix(tenant: str, name: str) -> str:
    """What the keys of a lexicon's versions start with (its store script adds the number)."""
    return f"{KEY_PREFIX}:lexicon:{tenant}:{name}:"


def voicevox_words_key(tenant: str) -> str:
    """Hash: a tenant's VOICEVOX user dictionary words by uuid (JSON, as VOICEVOX answers them); the
    tenant's ``userdict`` lexicon is rewritten from them after every change."""
    return f"{KEY_PREFIX}:voicevox:{tenant}:words"


def voicevox_words_lock_key(tenant: str) -> str:
    """Lock: held while a change to a tenant's VOICEVOX words and the lexicon made from them is written."""
    return f"{KEY_PREFIX}:voicevox:{tenant}:words:lock"


def idempotency_key(tenant: str, key_hash: str) -> str:
    return f"{KEY_PREFIX}:idempotency:{tenant}:{key_hash}"


SWEEP_TASK: Final = "ttsq.sweep"
"""What ``ttsq beat`` sent every minute before sweeps ran in the service workers' own loop
(``workers.sweeping``); still taken, and ignored, so that an older beat's message finds its task."""

CLEANUP_TASK: Final = "ttsq.cleanup"
"""Deletes expired jobs' objects and stale temporary parts; no arguments."""

MAINTENANCE_QUEUE: Final = "maintenance"
"""Queue of the periodic tasks ``ttsq beat`` sends and of batches' finishing tasks, consumed by the
service worker. Webhook deliveries take no Celery thread (``ttsq.webhook_dispatch``), so nothing
on this queue waits behind a receiver."""

WEBHOOK_TENANTS_KEY: Final = f"{KEY_PREFIX}:webhooks:tenants"
"""Sorted set of tenants with pending webhook events, scored by their earliest due event
(``ttsq.webhook_schedule``)."""


def webhook_receivers_key(tenant: str) -> str:
    """Sorted set of a tenant's receivers (``host:port``) with pending events, scored by their earliest."""
    return f"{KEY_PREFIX}:webhooks:tenant:{tenant}:receivers"


def webhook_lane_key(tenant: str, receiver: str) -> str:
    """Sorted set of a tenant's pending events for one receiver (``job:<id>``, ``batch:<id>``),
    scored by when each is due."""
    return f"{KEY_PREFIX}:webhooks:tenant:{tenant}:due:{receiver}"


FINISH_BATCH_TASK: Final = "ttsq.finish_batch"
"""Writes a batch's manifest once its last item finished (which schedules its webhook), then makes
the bundles it asked for; argument: the batch id. Run by the service worker (no model), idempotent
under the batch's ``finish`` claim."""

BATCH_MANIFEST_TEMPLATE: Final = "{tenant}/batches/{batch_id}/{attempt}/manifest.json"
"""S3 key of a finished batch's manifest (each item's ref, job id, status, object key and error), as
one attempt at finishing the batch wrote it; the batch record names the winner's."""

BATCH_BUNDLE_TEMPLATE: Final = "{tenant}/batches/{batch_id}/{attempt}/{name}"
"""S3 key of a batch's bundle (``book.zip``, ``book.m4b``) as one attempt made it, beside the
manifest under the batch's prefix; the batch record names the winner's (``ttsq.bundling``)."""


ACTIVE_BATCHES_KEY: Final = f"{KEY_PREFIX}:batches:active"
"""Sorted set of every batch without a manifest, or with a bundle still pending (score: creation
time), so the sweeper finds a batch whose finishing task was lost without scanning keys."""


def batch_key(batch_id: str) -> str:
    """A batch's record (JSON), with the job TTL."""
    return f"{KEY_PREFIX}:batch:{batch_id}"


def batch_counts_key(batch_id: str) -> str:
    """Hash of a batch's counters (``total``, ``finished``, one per terminal status, ``chars_done``,
    ``segments_done``), moved in the same transaction as each item's terminal status."""
    return f"{KEY_PREFIX}:batch:{batch_id}:counts"


def batch_items_key(batch_id: str) -> str:
    """List of a batch's item job ids, in item order."""
    return f"{KEY_PREFIX}:batch:{batch_id}:items"


def batch_claim_key(batch_id: str, step: str) -> str:
    """Held while one task runs one step of a batch (``finish``, ``webhook``)."""
    return f"{KEY_PREFIX}:batch:{batch_id}:claim:{step}"


def tenant_batches_key(tenant: str) -> str:
    """Every batch of a tenant by creation time, for ``GET /v1/batches``."""
    return f"{KEY_PREFIX}:tenant:{tenant}:batches"


def batch_manifest_key(tenant: str, batch_id: str, attempt: str) -> str:
    return BATCH_MANIFEST_TEMPLATE.format(tenant=tenant, batch_id=batch_id, attempt=attempt)


def batch_bundle_key(tenant: str, batch_id: str, attempt: str, name: str) -> str:
    return BATCH_BUNDLE_TEMPLATE.format(tenant=tenant, batch_id=batch_id, attempt=attempt, name=name)


SWEEP_SUSPECTS_KEY: Final = f"{KEY_PREFIX}:sweeper:suspects"
"""Jobs that no message named at the sweeper's last look, with when it first saw them so."""

BATCH_SUSPECTS_KEY: Final = f"{KEY_PREFIX}:sweeper:batch-suspects"
"""Finished batches whose finishing task no message named at the sweeper's last look."""

SWEEP_LEADER_KEY: Final = f"{KEY_PREFIX}:sweeper:leader"
"""The sweeping lease (``ttsq.leader``): the token of the service worker that sweeps, expiring
``sweep_lease_s`` after its last renewal."""

SWEEPS_KEY: Final = f"{KEY_PREFIX}:sweeper:sweeps"
"""How many sweeps ran (a counter): whoever watches the pool sees them go on, whoever leads them."""

SWEEP_CONFIRM_S: Final = 1.0
"""A job (or finished batch) that no message names is taken for lost only when it was so at two looks
at least this far apart: a message moves from a queue to a worker's held messages within
milliseconds (kombu's ``BRPOP`` then ``HSET``), and a step sends its follow-up before it is
acknowledged, so a second look a second later no longer misses a message in transit."""


def maintenance_lock_key(task: str) -> str:
    """Held while one service worker runs a periodic task (``cleanup``)."""
    return f"{KEY_PREFIX}:maintenance:{task}"


FINISHED_STATS_KEY: Final = f"{KEY_PREFIX}:stats:finished"
"""Finished jobs counted by status and error code, for the metrics (``ttsq.job_stats``)."""


def stats_histogram_key(name: str, label: str) -> str:
    """One label value's buckets, sum and count of a histogram kept in Redis (``ttsq.job_stats``)."""
    return f"{KEY_PREFIX}:stats:{name}:{label}"


TENANTS_KEY: Final = f"{KEY_PREFIX}:tenants"
"""Every tenant id (``ttsq keys list``)."""


def api_key_entry_key(key_hash: str) -> str:
    """An API key's SHA-256 → its tenant id (the key itself is never stored)."""
    return f"{KEY_PREFIX}:apikey:{key_hash}"


def tenant_key(tenant_id: str) -> str:
    """A tenant's record: name, limits, the key's first characters."""
    return f"{KEY_PREFIX}:tenant:{tenant_id}"


SERVICE_UNACKED_PREFIX: Final = f"{KEY_PREFIX}:service:unacked"
"""Where the service worker's held messages (maintenance, batches' finishing tasks) wait: its
held messages are renewed by its own lease keeper (``workers.service``), so its kombu keys are its own."""
