"""Option bounds, voice config parsing, the voice catalog and the settings validator."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from tests.test_japanese import JAPANESE_VOICE_IDS
from tts_core.catalog import DEFAULT_VOICE_ID, VoiceCatalog, bundled_voices
from tts_core.config import SynthesisConfig, VoiceConfig
from tts_core.device import Device
from tts_core.errors import InvalidOption, VoiceLoadError, VoiceNotFound
from ttsq.constants import DEV_S3_SECRET_KEY
from ttsq.settings import S3Settings, Settings, WorkerSettings, settings_env


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
    assert catalog.ids() == ["en_US-copy-medium", DEFAULT_VOICE_ID, *JAPANESE_VOICE_IDS]
    assert catalog.get("en_US-copy-medium").sample_rate == 22050


def test_catalog_names_valid_voices_for_an_unknown_id() -> None:
    with pytest.raises(VoiceNotFound, match=f"unknown voice 'nope'; available voices: {DEFAULT_VOICE_ID}"):
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


def leaves(model: BaseModel, prefix: str = "") -> dict[str, object]:
    """Every setting by dotted name."""
    found: dict[str, object] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found.update(leaves(value, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = value.get_secret_value() if isinstance(value, SecretStr) else value
    return found


def test_children_get_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """settings_env carries each setting, whatever its type, to a child that reads the environment."""
    s3 = S3Settings(
        endpoint_url="http://s3.internal:9000",
        public_endpoint_url="https://audio.example.com",
        bucket="books",
        region="eu-west-1",
        access_key_id="AKIA",
        secret_access_key="s3cr3t",
        addressing_style="virtual",
        presign_ttl_s=600,
        create_bucket=True,
    )
    worker = WorkerSettings(
        device=Device.CPU,
        intra_op_threads=3,
        spin_wait=True,
        concurrency=5,
        max_batch=4,
        max_wait_ms=2.5,
        preload_voices=["a", "b"],
        metrics_port=9301,
    )
    chosen = Settings(
        _env_file=None,
        environment="production",
        log_format="json",
        redis_url="redis://redis.internal:6380/2",
        s3=s3,
        worker=worker,
        voices_dir=Path("/srv/voices"),
        default_voice="en_US-other-medium",
        queue="narration",
        max_text_chars=5000,
        job_ttl_s=3600,
        sentence_pause_s=0.4,
        paragraph_pause_s=0.9,
        segment_max_ids=256,
        part_store="s3",
        part_ttl_s=7200,
        task_time_limit_s=900,
        visibility_timeout_s=1800,
        ready_timeout_s=3.5,
        task_max_retries=2,
        task_retry_backoff_max_s=30,
        api_url="http://api.internal:8000",
        interactive_max_chars=200,
        openai_voices={"nova": "en_US-other-medium"},
        webhook_secret=SecretStr("whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3"),
        webhook_allow_private=True,
        webhook_connect_timeout_s=2.5,
        webhook_timeout_s=9.0,
        webhook_retry_schedule_s=[1.0, 2.0],
        webhook_concurrency=3,
    )
    defaults = leaves(Settings(_env_file=None))
    unchanged = [name for name, value in leaves(chosen).items() if value == defaults[name]]
    assert unchanged == [], "choose a non-default value for every setting, so each one is checked"
    for name in [n for n in os.environ if n.startswith("TTSQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TTSQ_WORKER__MAX_BATCH", "99")  # a stale parent value is overridden
    for name, value in settings_env(chosen).items():
        monkeypatch.setenv(name, value)
    assert leaves(Settings(_env_file=None)) == leaves(chosen)


def test_a_none_setting_reaches_children_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    env = settings_env(Settings(_env_file=None))
    monkeypatch.setenv("TTSQ_S3__ACCESS_KEY_ID", "stale")  # what the parent had: the child must not see it
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings(_env_file=None).s3.access_key_id is None
    assert Settings(_env_file=None).worker.max_batch is None
