"""ttsq's synthesis library: voices, text front end, ONNX inference and audio encoding.

A pure library: it imports no Celery, FastAPI or boto3, so the worker and the API stay thin shells.
"""

from tts_core.catalog import DEFAULT_VOICE_ID, VoiceCatalog, VoiceInfo
from tts_core.config import SynthesisConfig, VoiceConfig
from tts_core.errors import (
    DeviceUnavailable,
    EmptyText,
    InvalidInput,
    InvalidOption,
    SynthesisError,
    TextTooLong,
    TTSError,
    UnsupportedFormat,
    VoiceLoadError,
    VoiceNotFound,
)
from tts_core.formats import AudioFormat, EncodedAudio, encode
from tts_core.runtime import Device
from tts_core.segments import DEFAULT_SEGMENT_IDS, Utterance, group_segments, plan_utterances
from tts_core.voice import AudioChunk, Voice

__all__ = [
    "DEFAULT_SEGMENT_IDS",
    "DEFAULT_VOICE_ID",
    "AudioChunk",
    "AudioFormat",
    "Device",
    "DeviceUnavailable",
    "EmptyText",
    "EncodedAudio",
    "InvalidInput",
    "InvalidOption",
    "SynthesisConfig",
    "SynthesisError",
    "TTSError",
    "TextTooLong",
    "UnsupportedFormat",
    "Utterance",
    "Voice",
    "VoiceCatalog",
    "VoiceConfig",
    "VoiceInfo",
    "VoiceLoadError",
    "VoiceNotFound",
    "encode",
    "group_segments",
    "plan_utterances",
]
