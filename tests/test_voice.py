"""tts_core with the real joe voice: phoneme ids, exact-length batching, speed and pauses."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import piper_phonemize
import pytest

from tts_core.base.audio import join_with_pauses, rms_dbfs
from tts_core.base.config import SynthesisConfig
from tts_core.base.errors import EmptyText, VoiceLoadError
from tts_core.frontend.phonemes import phoneme_ids, phonemize
from tts_core.voices.alignment import alignment_output_name, file_identity, with_output
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.piper_engine import piper_source
from tts_core.voices.voice import Voice

DETERMINISTIC = SynthesisConfig(noise_scale=0.0, noise_w=0.0)
SENTENCES = [
    "Hi.",
    "The quick brown fox jumps over the lazy dog.",
    "Queues turn one GPU into speech for many people at once, without falling over.",
]


@pytest.fixture(scope="module")
def voice() -> Voice:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    return Voice.load(piper_source(info).model_path, piper_source(info).config_path, intra_op_threads=2)


def test_phoneme_ids_match_piper(voice: Voice) -> None:
    for sentence in SENTENCES:
        for phonemes in phonemize(sentence, voice.config.espeak_voice):
            assert phoneme_ids(phonemes, voice.config.phoneme_id_map) == piper_phonemize.phoneme_ids_espeak(phonemes)


def test_batched_items_match_single_synthesis(voice: Voice) -> None:
    ids = [u.phoneme_ids for s in SENTENCES for u in voice.utterances(s)]
    singles = [voice.synthesize_ids([one], DETERMINISTIC)[0] for one in ids]
    batched = voice.synthesize_ids(ids, DETERMINISTIC)
    assert [len(b) for b in batched] == [len(s) for s in singles]
    for single, item in zip(singles, batched, strict=True):
        assert np.max(np.abs(single - item)) < 2e-4


def test_speak_joins_sentences_with_the_configured_pause(voice: Voice) -> None:
    text = " ".join(SENTENCES)
    parts = [voice.speak(s, DETERMINISTIC) for s in SENTENCES]
    for pause_s in (0.0, 0.5):
        config = SynthesisConfig(noise_scale=0.0, noise_w=0.0, sentence_pause_s=pause_s)
        joined = voice.speak(text, config)
        expected = sum(len(p) for p in parts) + 2 * round(pause_s * voice.sample_rate)
        assert len(joined) == expected


def test_speed_changes_duration(voice: Voice) -> None:
    normal = voice.speak(SENTENCES[1], DETERMINISTIC)
    fast = voice.speak(SENTENCES[1], SynthesisConfig(speed=2.0, noise_scale=0.0, noise_w=0.0))
    # Frame counts are ceiled per phoneme, so twice the speed is a little over half the length.
    assert 0.45 < len(fast) / len(normal) < 0.7


def test_speech_is_audible(voice: Voice) -> None:
    pcm = voice.speak(SENTENCES[2], SynthesisConfig())
    assert rms_dbfs(pcm) > -35
    assert 2.0 < len(pcm) / voice.sample_rate < 12.0


def test_text_without_speech_is_rejected(voice: Voice) -> None:
    with pytest.raises(EmptyText):
        voice.utterances(" ... ")


def test_alignment_patch_requires_one_ceil_node() -> None:
    graph = onnx.helper.make_graph([], "empty", [], [])
    with pytest.raises(VoiceLoadError, match="exactly one Ceil node"):
        alignment_output_name(onnx.helper.make_model(graph))


def test_the_output_appended_to_the_bytes_is_the_output_added_to_the_parsed_graph() -> None:
    """Bytes appended (protobuf merges the second graph into the first) parse to the model that
    adding the output in place and serialising would give; a model that has it is left alone."""
    path = piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID)).model_path
    raw = path.read_bytes()
    patched, name = with_output(raw, alignment_output_name, file_identity(path))
    expected = onnx.load_from_string(raw)
    expected.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    assert onnx.load_from_string(patched) == expected
    assert with_output(expected.SerializeToString(), alignment_output_name, "already has it") == (
        expected.SerializeToString(),
        name,
    )


def test_unreadable_model_is_a_voice_load_error(tmp_path: Path) -> None:
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"not a protobuf at all \xff\xfe")
    shutil.copy(piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID)).config_path, tmp_path / "broken.onnx.json")
    with pytest.raises(VoiceLoadError, match="cannot read voice model"):
        Voice.load(model)


def test_streamed_chunks_are_the_utterances_of_speak(voice: Voice) -> None:
    """``synthesize`` yields one chunk per utterance, in order; joined with pauses they are ``speak``."""
    text = " ".join(SENTENCES)
    chunks = list(voice.synthesize(text, DETERMINISTIC, max_batch=2))
    assert [c.utterance.text for c in chunks] == SENTENCES
    assert all(c.sample_rate == voice.sample_rate for c in chunks)
    joined = join_with_pauses([c.pcm for c in chunks], DETERMINISTIC.sentence_pause_s, voice.sample_rate)
    assert np.max(np.abs(joined.astype(np.int32) - voice.speak(text, DETERMINISTIC))) <= 8
