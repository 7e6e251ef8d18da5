"""A tenant's usage over a window of UTC days, as ``GET /v1/usage`` answers it and ``ttsq usage``
prints it (one model for both, so the two never drift apart).

Every figure is read from the quotas' own day hashes (:mod:`ttsq.quotas`), moved at the moments the
limits count: admission, the worker's plan, the job's terminal status. So today's characters and
audio are exactly what the next admission checks. A job counts on the UTC day it was created, and:

- ``characters``: what jobs admitted that day were charged (the text they speak, lexicon
  pronunciations counted), whatever became of them;
- ``audio_seconds``: the audio the day's finished jobs delivered, plus what its unfinished jobs
  reserve (``reserved_audio_seconds``: the estimate at submit, then the worker's plan); a failed or
  canceled job delivered none;
- ``jobs``: jobs admitted that day, each batch item one, failed and canceled ones included (a job the
  queue refused right after admission is given back).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Final

from pydantic import BaseModel, Field

from ttsq.quotas import USAGE_HISTORY_DAYS, DayUsage, Quotas, Usage, usage_day
from ttsq.tenants import Limits, Tenant

DEFAULT_USAGE_DAYS: Final = 30
"""Days a report covers unless told (today and the 29 before)."""


class UsageFigures(BaseModel):
    """What was used: over the window, on one day or by one voice."""

    characters: int = Field(description="Characters charged (what the limits count), failed and canceled jobs too.")
    audio_seconds: float = Field(
        description="Audio delivered by finished jobs, plus what unfinished jobs reserve; none for failed or "
        "canceled jobs."
    )
    jobs: int = Field(description="Jobs admitted (each batch item is one), whatever became of them.")


class DayUsagePublic(UsageFigures):
    day: date = Field(description="The UTC day the jobs were created on.")


class VoiceUsagePublic(UsageFigures):
    voice: str = Field(description="Voice id, as in GET /v1/voices.")


class RemainingPublic(BaseModel):
    """What today's limits leave; null where there is no limit."""

    characters: int | None
    audio_seconds: float | None
    active_jobs: int | None


class TodayUsagePublic(DayUsagePublic):
    """Today so far, beside the limits that admission checks it against."""

    reserved_audio_seconds: float = Field(description="The part of `audio_seconds` reserved by unfinished jobs.")
    active_jobs: int = Field(description="Jobs queued or running now (what `max_active_jobs` counts).")
    limits: Limits = Field(description="The key's limits, the server's defaults filled in; null: no limit.")
    remaining: RemainingPublic


class UsagePublic(BaseModel):
    """A tenant's usage over its last ``days`` UTC days, today included."""

    tenant: str
    name: str
    days: int
    start: date = Field(description="First day of the window (UTC).")
    end: date = Field(description="Last day of the window: today (UTC).")
    total: UsageFigures
    by_day: list[DayUsagePublic] = Field(description="Every day of the window, oldest first, days without use too.")
    by_voice: list[VoiceUsagePublic] = Field(description="Each voice used in the window, most characters first.")
    today: TodayUsagePublic


def usage_report(quotas: Quotas, tenant: Tenant, days: int, now: datetime) -> UsagePublic:
    """``tenant``'s usage over the ``days`` UTC days up to ``now``'s; its limits must already be
    merged with the server's defaults (as the API's tenant and ``ttsq usage`` have them)."""
    if not 1 <= days <= USAGE_HISTORY_DAYS:
        raise ValueError(f"a usage report covers 1 to {USAGE_HISTORY_DAYS} days, not {days}")
    end = date.fromisoformat(usage_day(now))
    dates = [end - timedelta(days=back) for back in range(days - 1, -1, -1)]
    history, active = quotas.history(tenant.id, [d.isoformat() for d in dates])
    voices: dict[str, Usage] = {}
    for day in history:
        for voice, used in day.voices.items():
            voices[voice] = voices.get(voice, Usage()) + used
    by_voice = [VoiceUsagePublic(voice=voice, **_figures(used).model_dump()) for voice, used in voices.items()]
    by_voice.sort(key=lambda v: (-v.characters, v.voice))
    return UsagePublic(
        tenant=tenant.id,
        name=tenant.name,
        days=days,
        start=dates[0],
        end=end,
        total=_figures(sum((day.total for day in history), Usage())),
        by_day=[DayUsagePublic(day=d, **_figures(u.total).model_dump()) for d, u in zip(dates, history, strict=True)],
        by_voice=by_voice,
        today=_today(end, history[-1], active, tenant.limits),
    )


def _figures(used: Usage) -> UsageFigures:
    return UsageFigures(characters=used.characters, audio_seconds=used.audio_ms / 1000, jobs=used.jobs)


def _today(day: date, used: DayUsage, active: int, limits: Limits) -> TodayUsagePublic:
    figures = _figures(used.total)
    remaining = RemainingPublic(
        characters=None if limits.chars_per_day is None else max(0, limits.chars_per_day - figures.characters),
        audio_seconds=None
        if limits.audio_seconds_per_day is None
        else max(0.0, round(limits.audio_seconds_per_day - figures.audio_seconds, 3)),
        active_jobs=None if limits.max_active_jobs is None else max(0, limits.max_active_jobs - active),
    )
    return TodayUsagePublic(
        day=day,
        **figures.model_dump(),
        reserved_audio_seconds=used.reserved_ms / 1000,
        active_jobs=active,
        limits=limits,
        remaining=remaining,
    )
