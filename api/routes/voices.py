"""``/v1/voices``: which voices jobs may ask for."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from api.deps import StateDep, current_tenant
from api.schemas import VoicePublic, VoicesPublic

router = APIRouter(prefix="/v1/voices", tags=["voices"], dependencies=[Depends(current_tenant)])


@router.get("", response_model=VoicesPublic, summary="List voices")
def list_voices(state: StateDep) -> VoicesPublic:
    default = state.settings.default_voice
    return VoicesPublic(
        voices=[
            VoicePublic(
                id=info.id,
                engine=info.engine.value,
                language=info.language,
                sample_rate=info.sample_rate,
                quality=info.quality,
                num_speakers=info.num_speakers,
                speakers=list(info.speakers),
                default=info.id == default,
            )
            for info in state.catalog.all()
        ]
    )
