"""Option bounds, voice config parsing, the voice catalog and the settings validator (secrets included)."""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from tests.test_japanese import JAPANESE_VOICE_IDS
from tts_core.base.config import SynthesisConfig, VoiceConfig
from tts_core.base.device import Device, Spinning
from tts_core.base.errors import InvalidOption, VoiceLoadError, VoiceNotFound
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog, bundled_voices
from ttsq.constants import DEV_S3_ACCESS_KEY, DEV_S3_SECRET_KEY
from ttsq.secrets_check import normalise, weakness
from ttsq.settings import S3Settings, SentinelSettings, Settings, WorkerSettings, settings_env
from ttsq.tenants import Limits


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


REAL_SECRET = "kQ7v2Lx9TfR4wNz8HcBm3Yp6"
"""Looks generated: long, many distinct characters, no placeholder word."""
REAL_REDIS_URL = "redis://:9d4e1f7a2b8c6e0d3a5f@redis.internal:6379/0"
REAL_WEBHOOK_SECRET = "whsec_" + base64.b64encode(bytes(range(7, 39))).decode()


def production(**values: Any) -> Settings:
    """Production settings with real-looking secrets, ``values`` replacing some."""
    s3 = {"access_key_id": "AKIAIOSFODNN7TTSQ001", "secret_access_key": REAL_SECRET}
    chosen: dict[str, Any] = {
        "redis_url": REAL_REDIS_URL,
        "s3": S3Settings(**s3),
        "webhook_secret": REAL_WEBHOOK_SECRET,
    } | values
    return Settings(_env_file=None, environment="production", **chosen)


def whsec(key: str) -> str:
    return "whsec_" + base64.b64encode(key.encode()).decode()


@pytest.mark.parametrize(
    "value",
    [
        "",
        "CHANGEME",
        "change-me",
        " Change_Me ",
        "changethis",
        "password",
        "Password1234",
        "secret",
        "admin",
        "minioadmin",
        "minioadmin  ",
        DEV_S3_SECRET_KEY,
        "TTSQ-DEV-SECRET",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # AWS's documented example
        "short1",
        "aaaaaaaaaaaaaaaa",
        "abcabcabcabcabc",
        "${S3_SECRET_ACCESS_KEY}",
        "$(S3_SECRET)",
    ],
)
def test_placeholders_are_no_secrets(value: str) -> None:
    assert weakness(value) is not None


@pytest.mark.parametrize(
    "value", [REAL_SECRET, "9d4e1f7a2b8c6e0d3a5f", "Xo2k+9fQe/Lm7Rt1Vb3Nc5Wz8Ya0Hd4Gj6Ks2Tu", f"  {REAL_SECRET}  "]
)
def test_generated_values_are_secrets(value: str) -> None:
    assert weakness(value) is None


def test_normalise_folds_case_whitespace_and_separators() -> None:
    assert normalise(" Change_Me ") == normalise("CHANGE-ME") == normalise("change.me") == "changeme"
    assert normalise("TTSQ-Dev-Secret\n") == "ttsqdevsecret"


def test_production_accepts_real_secrets() -> None:
    assert production().s3.secret_access_key == SecretStr(REAL_SECRET)
    assert production(s3=S3Settings()).s3.access_key_id is None  # boto3 finds credentials itself
    assert production(webhook_secret=None).webhook_secret is None  # webhook_url is refused instead
    assert production(redis_url="unix:///run/redis/redis.sock?db=0").redis_url.startswith("unix:")
    assert production(redis_url="rediss://ttsq:9d4e1f7a2b8c6e0d3a5f@redis.internal:6380/1").redis_url.startswith(
        "rediss:"
    )


@pytest.mark.parametrize("value", ["CHANGEME", "password", "minioadmin", "changeme  ", DEV_S3_SECRET_KEY, ""])
def test_production_refuses_placeholder_secret(value: str) -> None:
    s3 = S3Settings(access_key_id="AKIAIOSFODNN7TTSQ001", secret_access_key=value)
    with pytest.raises(ValidationError, match="TTSQ_S3__SECRET_ACCESS_KEY is a placeholder") as error:
        production(s3=s3)
    if value.strip():
        assert value.strip() not in str(error.value), "the error echoes the secret"
    assert Settings(_env_file=None, environment="development", s3=s3).s3.secret_access_key is not None


@pytest.mark.parametrize(
    ("s3", "message"),
    [
        ({"access_key_id": "AKIAIOSFODNN7TTSQ001"}, "TTSQ_S3__ACCESS_KEY_ID is set without TTSQ_S3__SECRET_ACCESS_KEY"),
        ({"secret_access_key": REAL_SECRET}, "TTSQ_S3__SECRET_ACCESS_KEY is set without TTSQ_S3__ACCESS_KEY_ID"),
    ],
)
def test_production_refuses_half_s3_credentials(s3: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        production(s3=S3Settings(**s3))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://redis:6379/0", "TTSQ_REDIS_URL has no password"),
        ("redis://ttsq@redis:6379/0", "TTSQ_REDIS_URL has no password"),
        ("redis://:@redis:6379/0", "TTSQ_REDIS_URL has no password"),
        ("redis://:password@redis:6379/0", "the password in TTSQ_REDIS_URL is a placeholder"),
        ("redis://:CHANGEME@redis:6379/0", "the password in TTSQ_REDIS_URL is a placeholder"),
        ("redis://default:change%2Dme%20@redis:6379/0", "the password in TTSQ_REDIS_URL is a placeholder"),
        ("redis://:$(REDIS_PASSWORD)@redis:6379/0", "the password in TTSQ_REDIS_URL is a placeholder"),
    ],
)
def test_production_refuses_redis_without_a_real_password(url: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)) as error:
        production(redis_url=url)
    assert "@redis" not in str(error.value), "the error echoes the URL"


@pytest.mark.parametrize(
    "key", ["changeme-changeme-changeme", "ttsq-dev-webhook-key-not-a-secret-00", "xxxxxxxxxxxxxxxxxxxxxxxx"]
)
def test_production_refuses_placeholder_webhook_secret(key: str) -> None:
    with pytest.raises(ValidationError, match="TTSQ_WEBHOOK_SECRET #2 is a placeholder"):
        production(webhook_secret=f"{REAL_WEBHOOK_SECRET} {whsec(key)}")
    assert Settings(_env_file=None, webhook_secret=whsec(key)).webhook_secret is not None  # development


def test_production_names_every_problem_at_once() -> None:
    with pytest.raises(ValidationError) as error:
        production(redis_url="redis://redis:6379/0", s3=S3Settings(access_key_id="minioadmin"))
    assert "TTSQ_REDIS_URL" in str(error.value)
    assert "TTSQ_S3__SECRET_ACCESS_KEY" in str(error.value)


def test_development_defaults_pass() -> None:
    """What ``ttsq dev`` runs with: the embedded store's credentials, a Redis without a password."""
    s3 = S3Settings(access_key_id=DEV_S3_ACCESS_KEY, secret_access_key=DEV_S3_SECRET_KEY)
    assert Settings(_env_file=None, s3=s3).redis_url == "redis://127.0.0.1:6379/0"


def test_visibility_timeout_must_cover_the_step_lease() -> None:
    """A retry's wait may be longer than the visibility timeout: the lease keeper renews scheduled
    messages too."""
    with pytest.raises(ValidationError, match="visibility_timeout_s must be at least step_lease_s"):
        Settings(_env_file=None, step_lease_s=600, visibility_timeout_s=300)
    assert Settings(_env_file=None, task_retry_backoff_max_s=200, visibility_timeout_s=10).visibility_timeout_s == 10


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
        secret_access_key=REAL_SECRET,
        addressing_style="virtual",
        presign_ttl_s=600,
        create_bucket=True,
    )
    worker = WorkerSettings(
        device=Device.CPU,
        intra_op_threads=3,
        spinning=Spinning.ALWAYS,
        concurrency=5,
        max_batch=4,
        max_wait_ms=2.5,
        parallel_calls=3,
        preload_voices=["a", "b"],
        metrics_port=9301,
        metrics_host="10.0.0.7",
        max_loaded_models=3,
        interactive_slot=False,
        preempt_bulk=False,
        check_interval_s=7.5,
    )
    chosen = Settings(
        _env_file=None,
        environment="production",
        log_format="json",
        redis_url="redis://:9d4e1f7a2b8c6e0d3a5f@redis.internal:6380/2",
        redis_sentinel=SentinelSettings(
            hosts=["sentinel-0:26379", "sentinel-1:26380"],
            master="ttsq",
            password=SecretStr("4f8a1c6e9b2d7f3a5c0e"),
            sentinel_password=SecretStr("b7e2a9c4f1d8e3b6a0c5"),
            db=3,
        ),
        s3=s3,
        worker=worker,
        voices_dir=Path("/srv/voices"),
        default_voice="en_US-other-medium",
        queue="narration",
        model_affinity=False,
        max_text_chars=5000,
        job_ttl_s=3600,
        sentence_pause_s=0.4,
        paragraph_pause_s=0.9,
        segment_max_ids=256,
        max_job_segments=500,
        part_store="s3",
        part_ttl_s=7200,
        task_time_limit_s=900,
        visibility_timeout_s=1800,
        ready_timeout_s=3.5,
        task_max_retries=2,
        task_retry_backoff_max_s=30,
        api_url="http://api.internal:8000",
        heavy_request_chars=5000,
        heavy_request_processes=3,
        heavy_processes_at_start=False,
        heavy_requests_per_tenant=4,
        interactive_max_chars=200,
        openai_voices={"nova": "en_US-other-medium"},
        lexicons_per_tenant=7,
        lexicon_max_entries=500,
        lexicon_max_bytes=65536,
        book_max_bytes=2 << 20,
        lexicon_versions_kept=2,
        lexicon_bytes_per_tenant=1 << 20,
        voice_lexicons={"en_US-joe-medium": [Path("/etc/ttsq/names.pls")]},
        webhook_secret=SecretStr("whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3"),
        webhook_allow_private=True,
        webhook_connect_timeout_s=2.5,
        webhook_timeout_s=9.0,
        webhook_retry_schedule_s=[1.0, 2.0],
        webhook_concurrency=3,
        webhook_concurrency_per_tenant=2,
        webhook_concurrency_per_receiver=1,
        max_request_bytes=1 << 20,
        step_lease_s=30,
        sweep_interval_s=15.0,
        sweep_lease_s=4.0,
        sweep_grace_s=45.0,
        max_requeues=5,
        max_step_starts=4,
        silence_allowance_s=90.0,
        silence_ratio=0.5,
        cleanup_interval_s=120.0,
        auth_required=True,
        default_limits=Limits(max_active_jobs=7, chars_per_day=9000, audio_seconds_per_day=600, requests_per_second=3),
        admission_max_age_interactive_s=20.0,
        admission_max_age_bulk_s=900.0,
        idempotency_ttl_s=7200,
        part_redis_max_bytes_per_job=1 << 24,
        api_key=SecretStr("ttsq_" + "k" * 43),
        wyoming_api_key=SecretStr("ttsq_" + "w" * 43),
        wyoming_max_connections=7,
        voicevox_api_key=SecretStr("ttsq_" + "v" * 43),
        max_batch_items=500,
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


def test_the_body_cap_follows_the_text_limit_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, the cap holds ``max_text_chars`` characters at 12 bytes each plus 64 KiB; a child
    process gets it unset too, so it derives the same cap from the same text limit."""
    for name in [n for n in os.environ if n.startswith("TTSQ_")]:
        monkeypatch.delenv(name)
    default = Settings(_env_file=None)
    assert default.max_text_chars == 1_000_000
    assert default.request_bytes_limit == 12 * 1_000_000 + 64 * 1024
    assert Settings(_env_file=None, max_text_chars=5000).request_bytes_limit == 12 * 5000 + 64 * 1024
    assert Settings(_env_file=None, max_text_chars=5000, max_request_bytes=4096).request_bytes_limit == 4096
    monkeypatch.setenv("TTSQ_MAX_TEXT_CHARS", "2000")
    for name, value in settings_env(Settings(_env_file=None)).items():
        monkeypatch.setenv(name, value)
    assert Settings(_env_file=None).request_bytes_limit == 12 * 2000 + 64 * 1024
