"""A loaded Piper voice: text in, 16-bit PCM out, with exact-length batched inference."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from google.protobuf.message import DecodeError

from tts_core.base.audio import PCM16, FloatAudio, speech_pcm, to_int16
from tts_core.base.config import DEFAULT_SEGMENT_IDS, HOP_LENGTH, SynthesisConfig, VoiceConfig
from tts_core.base.device import Device, Spinning
from tts_core.base.errors import SynthesisError, VoiceLoadError
from tts_core.base.timing import TimedAudio, WordIds
from tts_core.frontend.segments import PiperFrontEnd, Utterance, plan_utterances
from tts_core.voices.alignment import alignment_output_name, file_identity, with_output
from tts_core.voices.runtime import create_session
from tts_core.voices.split_decoder import SplitRun, piper_probe, split_run

Outputs = list[np.typing.NDArray[np.generic]]


@dataclass(frozen=True)
class AudioChunk:
    """The audio of one utterance."""

    utterance: Utterance
    pcm: PCM16
    sample_rate: int


class Voice:
    """A Piper VITS voice with its own inference session. Create one per process, after fork."""

    def __init__(
        self, config: VoiceConfig, session: ort.InferenceSession, alignment_output: str, split: SplitRun | None = None
    ) -> None:
        """``split``: the graph's calls with the decoder in halves (``split_decoder``), whose encoder
        part is then ``session``; None: ``session`` runs the whole graph."""
        self.config = config
        self._session = session
        self._alignment_output = alignment_output
        self._input_names = {i.name for i in session.get_inputs()}
        self._split = split

    @classmethod
    def load(
        cls,
        model_path: Path,
        config_path: Path | None = None,
        device: Device = Device.AUTO,
        intra_op_threads: int = 0,
        spinning: Spinning = Spinning.OFF,
    ) -> Voice:
        """Load ``NAME.onnx`` (and ``NAME.onnx.json`` beside it unless given) into a session."""
        config = VoiceConfig.from_file(config_path or model_path.with_name(model_path.name + ".json"))
        try:
            model, alignment_output = with_output(
                model_path.read_bytes(), alignment_output_name, file_identity(model_path)
            )
        except (OSError, DecodeError) as e:
            raise VoiceLoadError(f"cannot read voice model {model_path}: {e}") from e
        probe = piper_probe(_id_count(config), SynthesisConfig().scales(config))
        split = split_run(model, device, intra_op_threads, spinning, probe)
        if split is not None:
            return cls(config, split.session, alignment_output, split)
        return cls(config, create_session(model, device, intra_op_threads, spinning), alignment_output)

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def providers(self) -> list[str]:
        return list(self._session.get_providers())

    def utterances(self, text: str, max_ids: int = DEFAULT_SEGMENT_IDS) -> list[Utterance]:
        """Normalise, split and phonemise, no utterance over ``max_ids``; raises :class:`EmptyText`."""
        return plan_utterances(text, PiperFrontEnd(self.config), max_ids)

    def synthesize_ids(self, batch: Sequence[Sequence[int]], config: SynthesisConfig) -> list[FloatAudio]:
        """Run one padded ``session.run`` over several id sequences and trim each to its exact length."""
        return [timed.audio for timed in self.synthesize_timed(batch, config)]

    def synthesize_timed(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: ort.RunOptions | None = None
    ) -> list[TimedAudio]:
        """As :meth:`synthesize_ids`, with the samples each input id lasts (the graph's durations);
        ``run_options`` may stop the call from another thread (``terminate``)."""
        if not batch:
            return []
        lengths = np.array([len(ids) for ids in batch], dtype=np.int64)
        padded = np.zeros((len(batch), int(lengths.max())), dtype=np.int64)
        for row, ids in enumerate(batch):
            padded[row, : len(ids)] = ids
        feeds: dict[str, np.typing.NDArray[np.generic]] = {
            "input": padded,
            "input_lengths": lengths,
            "scales": np.array(config.scales(self.config), dtype=np.float32),
        }
        if "sid" in self._input_names:
            feeds["sid"] = np.full(len(batch), config.speaker_id or 0, dtype=np.int64)
        try:
            audio, frames = self._run(feeds, run_options)[:2]
        except Exception as e:  # ORT raises its own non-Exception-hierarchy-documented errors
            raise SynthesisError(f"inference failed: {e}") from e
        id_samples = frames.reshape(len(batch), -1).astype(np.int64) * HOP_LENGTH
        flat = audio.reshape(len(batch), -1)
        timed: list[TimedAudio] = []
        for row, length in enumerate(lengths):
            samples = id_samples[row, : int(length)]
            timed.append(TimedAudio(flat[row, : int(samples.sum())].astype(np.float32), samples))
        return timed

    def _run(self, feeds: dict[str, np.typing.NDArray[np.generic]], run_options: ort.RunOptions | None) -> Outputs:
        if self._split is not None:
            return self._split.run(feeds, run_options)
        outputs: Outputs = self._session.run(None, feeds, run_options)
        return outputs

    def synthesize_batch(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: ort.RunOptions | None = None
    ) -> list[TimedAudio]:
        """What the worker runs (``tts_core.voices.engines.SpeechModel``): the timed audio, for word marks."""
        return self.synthesize_timed(batch, config, run_options)

    @property
    def word_ids(self) -> WordIds:
        """Which of this voice's ids break words or make no sound of one (for word timings)."""
        return WordIds.of(self.config.phoneme_id_map)

    def synthesize(self, text: str, config: SynthesisConfig, max_batch: int = 1) -> Iterator[AudioChunk]:
        """Speak ``text`` utterance by utterance, ``max_batch`` utterances per inference call."""
        utterances = self.utterances(text)
        for start in range(0, len(utterances), max_batch):
            group = utterances[start : start + max_batch]
            outputs = self.synthesize_ids([u.phoneme_ids for u in group], config)
            for utterance, audio in zip(group, outputs, strict=True):
                yield AudioChunk(utterance, to_int16(audio), self.sample_rate)

    def speak_ids(self, utterances: Sequence[Sequence[int]], config: SynthesisConfig) -> PCM16:
        """Utterances' ids as one PCM array, one inference call each, joined by the sentence pause."""
        audio = [self.synthesize_ids([ids], config)[0] for ids in utterances]
        return speech_pcm(audio, config.sentence_pause_s, self.sample_rate)

    def speak(self, text: str, config: SynthesisConfig) -> PCM16:
        """The whole text as one PCM array, sentences separated by the configured pause."""
        return self.speak_ids([u.phoneme_ids for u in self.utterances(text)], config)


def _id_count(config: VoiceConfig) -> int:
    """One past the largest id the voice's phoneme map gives."""
    return 1 + max(i for ids in config.phoneme_id_map.values() for i in ids)
