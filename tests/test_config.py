"""Option bounds, voice config parsing, the voice catalog and the settings validator."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from tts_core import DEFAULT_VOICE_ID, InvalidOption, SynthesisConfig, VoiceCatalog, VoiceConfig, VoiceLoadError
from tts_core.catalog import bundled_voices
from ttsq.constants import DEV_S3_SECRET_KEY
from ttsq.settings import S3Settings, Settings


@pytest.mark.parametrize(
    ("field", "value"),
    [("speed", 0.0), ("speed", 5.0), ("speed", math.nan), ("noise_scale", -0.1), ("noise_w", 2.5)],
)
def test_synthesis_options_are_bounded(field: str, value: float) -> None:
    with pytest.raises(InvalidOption, match=field):
        SynthesisConfig(**{field: value})  # type: ignore[arg-type]


def test_speed_maps_to_length_scale() -> None:
    voice = VoiceConfig.from_file(bundled_voices()[DEFAULT_VOICE_ID][1])
    assert SynthesisConfig(speed=2.0).scales(voice) == (0.667, 0.5, 0.8)
    assert SynthesisConfig(noise_scale=0.0, noise_w=0.1).scales(voice) == (0.0, 1.0, 0.1)


def test_voice_config_with_missing_field_is_refused() -> None:
    with pytest.raises(VoiceLoadError, match="audio"):
        VoiceConfig.from_dict({"espeak": {"voice": "en-us"}, "phoneme_id_map": {}})


def test_catalog_serves_voices_from_a_folder(tmp_path: Path) -> None:
    model, config = bundled_voices()[DEFAULT_VOICE_ID]
    (tmp_path / "en_US-copy-medium.onnx").symlink_to(model)
    shutil.copy(config, tmp_path / "en_US-copy-medium.onnx.json")
    (tmp_path / "orphan.onnx").touch()  # no JSON beside it: not a voice
    catalog = VoiceCatalog.discover(tmp_path)
    assert catalog.ids() == ["en_US-copy-medium", DEFAULT_VOICE_ID]
    assert catalog.get("en_US-copy-medium").config.sample_rate == 22050


def test_catalog_names_valid_voices_for_an_unknown_id() -> None:
    with pytest.raises(Exception, match=f"unknown voice 'nope'; available voices: {DEFAULT_VOICE_ID}"):
        VoiceCatalog.discover().get("nope")


def test_missing_voices_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(VoiceLoadError, match="does not exist"):
        VoiceCatalog.discover(tmp_path / "missing")


def test_production_refuses_placeholder_secret() -> None:
    s3 = S3Settings(secret_access_key=DEV_S3_SECRET_KEY)
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(_env_file=None, environment="production", s3=s3)
    assert Settings(_env_file=None, environment="development", s3=s3).s3.secret_access_key is not None


def test_visibility_timeout_must_exceed_task_limit() -> None:
    with pytest.raises(ValidationError, match="visibility_timeout_s"):
        Settings(_env_file=None, task_time_limit_s=600, visibility_timeout_s=600)


def test_settings_read_nested_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTSQ_S3__BUCKET", "from-env")
    monkeypatch.setenv("TTSQ_WORKER__INTRA_OP_THREADS", "3")
    settings = Settings(_env_file=None)
    assert settings.s3.bucket == "from-env"
    assert settings.worker.intra_op_threads == 3
