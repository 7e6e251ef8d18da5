"""Encoders: every format, at every rate it offers, decodes back with the right rate and length."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from bench.audio_decoding import decode
from tts_core.base.audio import join_with_pauses, to_int16
from tts_core.base.errors import UnsupportedFormat
from tts_core.mastering.encoding import StreamEncoder, encode, encode_stream
from tts_core.mastering.formats import AudioFormat, AudioOutput, allowed_rates
from tts_core.mastering.resampling import OUTPUT_RATES

RATE = 22050
SNDFILE_FORMATS = [AudioFormat.WAV, AudioFormat.FLAC, AudioFormat.OGG, AudioFormat.MP3]
CODEC_FORMATS = [AudioFormat.OPUS, AudioFormat.AAC, AudioFormat.M4A]
G711 = {
    AudioFormat.MULAW: ("mulaw", "pcm_mulaw"),
    AudioFormat.ALAW: ("alaw", "pcm_alaw"),
    AudioFormat.WAV_MULAW: (None, "pcm_mulaw"),
    AudioFormat.WAV_ALAW: (None, "pcm_alaw"),
}
"""Each G.711 format: the FFmpeg demuxer a raw file needs (None: WAV says itself), and its codec."""
AAC_FRAME = 1024


def tone(seconds: float, rate: int = RATE, hz: float = 440) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return to_int16((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32))


def assert_same_audio(actual: np.ndarray, expected: np.ndarray) -> None:
    """As long, and the same to within rounding: a resampler fed in pieces rounds a little differently
    from one fed the whole (a last bit here and there), and a lossy codec carries that on."""
    assert actual.size == expected.size
    assert float(np.sqrt(np.mean((actual - expected) ** 2))) < 0.01 * float(np.sqrt(np.mean(expected**2)))  # -40 dB


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[int(np.argmax(spectrum))])


@pytest.mark.parametrize("audio_format", SNDFILE_FORMATS)
def test_each_libsndfile_format_decodes(audio_format: AudioFormat) -> None:
    pcm = tone(1.0)
    encoded = encode(pcm, RATE, AudioOutput(audio_format))
    decoded, rate = soundfile.read(io.BytesIO(encoded.data))
    assert rate == encoded.sample_rate == RATE
    assert encoded.duration_s == pytest.approx(1.0)
    # Lossy codecs pad by up to a frame or two; lengths must still agree within 50 ms.
    assert abs(len(decoded) - len(pcm)) < 0.05 * RATE
    assert np.sqrt(np.mean(decoded**2)) > 0.2


@pytest.mark.parametrize("rate", OUTPUT_RATES)
@pytest.mark.parametrize("audio_format", CODEC_FORMATS)
def test_opus_and_aac_decode_to_the_length_of_the_speech(audio_format: AudioFormat, rate: int) -> None:
    """Read back by FFmpeg's decoders: mono, at the file's rate, as long as the input. Ogg Opus and MP4
    carry the encoder's delay and the last frame's padding, which decoders drop; ADTS cannot, so its
    decoders play one priming frame of 1,024 samples and the last frame whole."""
    pcm = tone(1.37, rate)
    output = AudioOutput(audio_format)
    encoded = encode(pcm, rate, output)
    decoded = decode(encoded.data)
    assert decoded.channels == 1
    assert decoded.codec == ("opus" if audio_format is AudioFormat.OPUS else "aac")
    assert encoded.sample_rate == output.rate_for(rate)
    assert decoded.sample_rate == (48000 if audio_format is AudioFormat.OPUS else rate)  # Opus decodes at 48 kHz
    assert encoded.duration_s == pytest.approx(1.37, abs=1 / rate)
    if audio_format is AudioFormat.AAC:
        frames = -(-pcm.size // AAC_FRAME) + 1
        assert decoded.duration_s == pytest.approx(frames * AAC_FRAME / rate, abs=AAC_FRAME / rate)
    elif audio_format is AudioFormat.M4A:
        assert decoded.container_duration_s == pytest.approx(1.37, abs=0.002)
        assert decoded.duration_s == pytest.approx(1.37, abs=AAC_FRAME / rate)
    else:
        assert decoded.duration_s == pytest.approx(1.37, abs=0.002)
    assert np.sqrt(np.mean(decoded.samples[: int(decoded.sample_rate * 1.3)] ** 2)) > 0.2


def test_opus_is_encoded_at_a_rate_opus_has() -> None:
    opus = AudioOutput(AudioFormat.OPUS)
    assert [opus.rate_for(r) for r in OUTPUT_RATES] == [8000, 16000, 24000, 24000, 48000, 48000]
    assert AudioOutput(AudioFormat.AAC).rate_for(22050) == AudioOutput(AudioFormat.WAV).rate_for(22050) == 22050
    assert allowed_rates(AudioFormat.OPUS) == (8000, 16000, 24000, 48000)


@pytest.mark.parametrize(
    ("audio_format", "to_rate"),
    [(f, r) for f in (AudioFormat.WAV, AudioFormat.FLAC, AudioFormat.M4A, AudioFormat.OPUS) for r in allowed_rates(f)],
)
def test_a_file_at_another_rate_keeps_the_length_and_the_pitch(audio_format: AudioFormat, to_rate: int) -> None:
    """Resampled once (soxr), the file is at the rate asked for, as long as the speech, and a 440 Hz
    tone is still 440 Hz: nothing sped up, slowed down or folded back. (Rates a format lacks are
    refused: test_outputs_a_format_cannot_make_are_refused_by_name.)"""
    pcm = tone(1.0)
    encoded = encode(pcm, RATE, AudioOutput(audio_format, sample_rate=to_rate))
    decoded = decode(encoded.data)
    assert encoded.sample_rate == to_rate
    assert decoded.sample_rate == (48000 if audio_format is AudioFormat.OPUS else to_rate)
    assert encoded.duration_s == pytest.approx(1.0)
    assert decoded.duration_s == pytest.approx(1.0, abs=0.05)
    middle = decoded.samples[int(0.2 * decoded.sample_rate) : int(0.8 * decoded.sample_rate)]
    assert peak_hz(middle, decoded.sample_rate) == pytest.approx(440, abs=3)


@pytest.mark.parametrize("audio_format", list(G711))
def test_g711_is_8_khz_mu_law_or_a_law(audio_format: AudioFormat) -> None:
    """Raw (Asterisk's .ulaw/.alaw, Twilio's media streams) or in WAV, 8 kHz by default and only."""
    pcm = tone(1.0, hz=300)
    encoded = encode(pcm, RATE, AudioOutput(audio_format))
    demuxer, codec = G711[audio_format]
    assert encoded.sample_rate == 8000
    if demuxer is not None:  # raw: one byte a sample, nothing else
        assert len(encoded.data) == pytest.approx(8000, abs=2)
    decoded = decode(encoded.data, demuxer=demuxer, sample_rate=8000)
    assert (decoded.codec, decoded.sample_rate, decoded.channels) == (codec, 8000, 1)
    assert decoded.duration_s == pytest.approx(1.0, abs=0.002)
    assert peak_hz(decoded.samples[800:7200], 8000) == pytest.approx(300, abs=3)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (
            AudioOutput(AudioFormat.OPUS, sample_rate=22050),
            "sample_rate 22050 is not offered for opus; choose one of: 8000, 16000, 24000, 48000",
        ),
        (AudioOutput(AudioFormat.OPUS, sample_rate=44100), "not offered for opus"),
        (
            AudioOutput(AudioFormat.MULAW, sample_rate=16000),
            "sample_rate 16000 is not offered for mulaw; choose one of: 8000",
        ),
        (AudioOutput(AudioFormat.WAV, sample_rate=11025), "choose one of: 8000, 16000, 22050, 24000, 44100, 48000"),
        (AudioOutput(AudioFormat.OPUS, bitrate=512_000), "bitrate for opus is 6000 to 256000 bit/s, not 512000"),
        (AudioOutput(AudioFormat.M4A, bitrate=8000), "bitrate for m4a is 16000 to 320000 bit/s"),
        (AudioOutput(AudioFormat.FLAC, bitrate=64000), "bitrate applies to opus, aac, m4a, not flac"),
    ],
)
def test_outputs_a_format_cannot_make_are_refused_by_name(output: AudioOutput, message: str) -> None:
    with pytest.raises(UnsupportedFormat, match=message):
        output.check()


def test_every_offered_output_passes_its_check() -> None:
    for audio_format in AudioFormat:
        for rate in allowed_rates(audio_format):
            AudioOutput(audio_format, sample_rate=rate).check()


@pytest.mark.parametrize("audio_format", CODEC_FORMATS)
def test_bitrate_sets_the_size(audio_format: AudioFormat) -> None:
    noise = np.random.default_rng(7).normal(0, 4000, 2 * RATE).clip(-32768, 32767).astype(np.int16)
    sizes = {b: len(encode(noise, RATE, AudioOutput(audio_format, bitrate=b)).data) for b in (24_000, 128_000)}
    assert sizes[128_000] > 3 * sizes[24_000]
    assert sizes[128_000] * 8 / 2.0 == pytest.approx(128_000, rel=0.25)


def test_content_types_and_extensions() -> None:
    assert {f.value: (f.content_type, f.extension) for f in AudioFormat} == {
        "wav": ("audio/wav", "wav"),
        "flac": ("audio/flac", "flac"),
        "ogg": ("audio/ogg", "ogg"),
        "mp3": ("audio/mpeg", "mp3"),
        "opus": ("audio/ogg", "opus"),
        "aac": ("audio/aac", "aac"),
        "m4a": ("audio/mp4", "m4a"),
        "mulaw": ("audio/basic", "ulaw"),
        "alaw": ("audio/x-alaw-basic", "alaw"),
        "wav_mulaw": ("audio/wav", "wav"),
        "wav_alaw": ("audio/wav", "wav"),
    }


def test_unknown_format_names_the_valid_ones() -> None:
    with pytest.raises(UnsupportedFormat, match="choose one of: wav, flac, ogg, mp3, opus, aac, m4a, mulaw, alaw"):
        AudioFormat.parse("aiff")


@pytest.mark.parametrize("audio_format", [AudioFormat.OPUS, AudioFormat.AAC])
def test_streamed_audio_holds_the_stored_files_samples(audio_format: AudioFormat) -> None:
    """Sent piece by piece as the speech endpoint does, nothing is held back for a close that a stream
    never sees (the last Ogg page, the last AAC frames): the same samples as the stored file."""
    parts = [tone(0.5), tone(0.2), tone(0.7)]
    encoder = StreamEncoder(AudioOutput(audio_format), RATE)
    streamed = b"".join(encoder.write(part) for part in parts) + encoder.close()
    stored = encode(np.concatenate(parts), RATE, AudioOutput(audio_format)).data
    # An Ogg stream's serial number is random: compare what decoders play.
    assert_same_audio(decode(streamed).samples, decode(stored).samples)


def test_streamed_pcm_at_another_rate_equals_the_whole_resampled() -> None:
    parts = [tone(0.5), tone(0.2), tone(0.7)]
    encoder = StreamEncoder(None, RATE, pcm_rate=16000)
    streamed = np.frombuffer(b"".join(encoder.write(part) for part in parts) + encoder.close(), dtype="<i2")
    whole = encode(np.concatenate(parts), RATE, AudioOutput(AudioFormat.WAV, sample_rate=16000)).data
    stored, rate = soundfile.read(io.BytesIO(whole), dtype="int16")
    assert rate == 16000
    # One resampler over the parts: no seam between them, only rounding.
    assert_same_audio(streamed.astype(np.float64), stored.astype(np.float64))
    assert int(np.max(np.abs(streamed.astype(np.int32) - stored))) <= 2


def test_m4a_is_not_streamed() -> None:
    assert not AudioOutput(AudioFormat.M4A).streams
    with pytest.raises(UnsupportedFormat, match="m4a cannot be streamed"):
        StreamEncoder(AudioOutput(AudioFormat.M4A), RATE)


@pytest.mark.parametrize("audio_format", [*CODEC_FORMATS, AudioFormat.MULAW])
def test_assembly_writes_a_part_at_a_time(audio_format: AudioFormat) -> None:
    parts = [tone(0.5), tone(0.2), tone(0.7)]
    sink = io.BytesIO()
    output = AudioOutput(audio_format)
    samples = encode_stream(iter(parts), 0.25, RATE, output, sink)
    assert samples == join_with_pauses(parts, 0.25, RATE).size
    whole = encode(join_with_pauses(parts, 0.25, RATE), RATE, output).data
    demuxer = G711.get(audio_format, (None, ""))[0]
    assert_same_audio(
        decode(sink.getvalue(), demuxer=demuxer, sample_rate=8000).samples,
        decode(whole, demuxer=demuxer, sample_rate=8000).samples,
    )


def test_int16_conversion_clips() -> None:
    assert to_int16(np.array([2.0, -2.0, 0.5], dtype=np.float32)).tolist() == [32767, -32768, 16383]


def test_join_with_pauses_inserts_silence_between_parts_only() -> None:
    a, b = np.ones(10, dtype=np.int16), np.full(5, 2, dtype=np.int16)
    joined = join_with_pauses([a, b], 0.001, 1000)
    assert joined.tolist() == [1] * 10 + [0] + [2] * 5


@pytest.mark.parametrize("audio_format", [AudioFormat.WAV, AudioFormat.FLAC])
def test_streamed_parts_equal_the_joined_whole(audio_format: AudioFormat) -> None:
    parts = [tone(0.5), tone(0.2), tone(0.7)]
    sink = io.BytesIO()
    samples = encode_stream(iter(parts), 0.25, RATE, AudioOutput(audio_format), sink)
    whole = join_with_pauses(parts, 0.25, RATE)
    assert samples == whole.size
    decoded, rate = soundfile.read(io.BytesIO(sink.getvalue()), dtype="int16")
    assert rate == RATE
    np.testing.assert_array_equal(decoded, whole)  # lossless: identical samples, pauses included
