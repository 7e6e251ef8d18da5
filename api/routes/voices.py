"""``/v1/voices``: which voices jobs may ask for."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import StateDep
from api.schemas import VoicePublic, VoicesPublic

router = APIRouter(prefix="/v1/voices", tags=["voices"])


@router.get("", response_model=VoicesPublic, summary="List voices")
def list_voices(state: StateDep) -> VoicesPublic:
    default = state.settings.default_voice
    return VoicesPublic(
        voices=[
            VoicePublic(
                id=info.id,
                language=info.config.language,
                sample_rate=info.config.sample_rate,
                quality=info.config.quality,
                num_speakers=info.config.num_speakers,
                speakers=info.speakers,
                default=info.id == default,
            )
            for info in state.catalog.all()
        ]
    )
