"""What VOICEVOX clients ask an engine about itself: its version, its cores, its manifest (which
features its controls may use) and its devices.

The manifest's ``supported_features`` is how an engine tells editors which controls to hide: ttsq sets
pitch, intonation, mora pitch and phoneme length to false, since its models do not take them
(docs/VOICEVOX.md), so an engine-aware client never offers what would not be applied.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, Final

from fastapi import APIRouter

from api.deps import StateDep
from tts_core.base.device import Device

ENGINE_VERSION: Final = version("ttsq")
"""ttsq's own version: what ``/version`` and ``/core_versions`` answer."""

ENGINE_UUID: Final = "8d2ad4b5-1f0a-5c8e-9a8b-7474737176ff"
"""The engine's id in the manifest (editors key their per-engine settings on it): fixed forever."""

DEFAULT_SAMPLING_RATE: Final = 24000
"""VOICEVOX's own default rate, and the Japanese (Kokoro) voices' rate."""

SUPPORTED_FEATURES: Final = {
    "adjust_mora_pitch": False,
    "adjust_phoneme_length": False,
    "adjust_speed_scale": True,
    "adjust_pitch_scale": False,
    "adjust_intonation_scale": False,
    "adjust_volume_scale": True,
    "adjust_pause_length": False,
    "interrogative_upspeak": False,
    "synthesis_morphing": False,
    "sing": False,
    "manage_library": False,
    "return_resource_url": False,
    "apply_katakana_english": False,
}
"""What ``/synthesis`` honours, by VOICEVOX's feature names (docs/VOICEVOX.md has the details)."""

router = APIRouter(tags=["voicevox"])


@router.get("/version", summary="The engine's version (ttsq's)")
async def engine_version() -> str:
    return ENGINE_VERSION


@router.get("/core_versions", summary="The cores' versions (one: ttsq's)")
async def core_versions() -> list[str]:
    return [ENGINE_VERSION]


@router.get("/supported_devices", summary="Devices the workers may use, from the shared settings")
async def supported_devices(state: StateDep) -> dict[str, bool]:
    """From ``TTSQ_WORKER__DEVICE`` as the API reads it: the workers run elsewhere, so this is what
    they are configured for, not what each one found (``auto`` may mean CUDA: reported as possible)."""
    device = state.settings.worker.device
    return {"cpu": device is not Device.CUDA, "cuda": device is not Device.CPU, "dml": False}


@router.get("/engine_manifest", summary="The engine's manifest: name, rates, supported features")
async def engine_manifest() -> dict[str, Any]:
    return {
        "manifest_version": "0.13.1",
        "name": "ttsq",
        "brand_name": "ttsq",
        "uuid": ENGINE_UUID,
        "url": "",
        "icon": "",
        "default_sampling_rate": DEFAULT_SAMPLING_RATE,
        "frame_rate": 93.75,
        "terms_of_service": "Each voice's own licence applies (GET /v1/voices).",
        "update_infos": [],
        "dependency_licenses": [],
        "supported_vvlib_manifest_version": None,
        "supported_features": SUPPORTED_FEATURES,
    }
