"""``/v1/usage``: what the caller's key used, by day and by voice, and what today's limits leave."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import StateDep, TenantDep
from api.schemas import UsagePublic, error_responses
from ttsq.quotas import USAGE_HISTORY_DAYS
from ttsq.usage import DEFAULT_USAGE_DAYS, usage_report

router = APIRouter(prefix="/v1/usage", tags=["usage"])

UsageDays = Annotated[
    int,
    Query(
        ge=1,
        le=USAGE_HISTORY_DAYS,
        description=f"UTC days to cover, today included (at most {USAGE_HISTORY_DAYS}, the history kept).",
    ),
]


@router.get(
    "",
    response_model=UsagePublic,
    responses=error_responses(401, 422, 429, 503),
    summary="Your usage by day and by voice, and today's limits",
)
def get_usage(state: StateDep, tenant: TenantDep, days: UsageDays = DEFAULT_USAGE_DAYS) -> UsagePublic:
    """Characters, audio seconds and jobs over the last ``days`` UTC days, counted by the same moves
    as the quotas: today's figures are what the next submission is checked against."""
    return usage_report(state.stores.quotas, tenant, days, datetime.now(UTC))
