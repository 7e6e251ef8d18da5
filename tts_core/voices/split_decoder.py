"""Piper's decoder run in two halves at once, for a lone call on a two-thread CPU session.

A Piper VITS graph is a text encoder, duration predictor and flow, whose output (a frame sequence)
feeds a HiFi-GAN decoder (``/dec/…`` nodes) that makes the samples, 256 a frame. The decoder is most
of a call's time, and its later, narrow convolutions over long sequences split badly between two
threads. But it is a stack of convolutions, so each sample depends only on frames within a fixed
reach (12 frames for the bundled voice): its output over the first half of the frames, given those
frames and a margin of the second half, is the same as over the whole, and likewise for the second
half. So a call on two threads runs the encoder part on both threads, then the decoder's two halves
at once, each on a one-thread session (which also runs every convolution in two dimensions,
``conv_layout``). In-process, a short message's decoder took 0.77 to 0.91x the time for 110 to 450
frames (about the same at 90 to 100, slower below; docs/PERFORMANCE.md, "The decoder in halves").

The graph is cut where the decoder's nodes read what the rest made. A graph that cannot be so cut, or
whose halves do not give the whole's samples for a probe at load (:meth:`SplitRun.find_margin`), runs
whole, as before. The randomness (noise) is all in the encoder part, drawn once per call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import onnx
import onnxruntime as ort
from onnx.utils import Extractor

from tts_core.base.device import CPU_PROVIDER, Device, Spinning
from tts_core.voices.runtime import cpu_graph, cpu_threads, resolve_device, session_options

log = logging.getLogger(__name__)

DECODER_PREFIX: Final = "/dec/"
"""How PyTorch's exporter names the nodes of a Piper VITS model's decoder (its ``dec`` module)."""

SPLIT_THREADS: Final = 2
"""The one thread count whose sessions are split: two halves at once on two cores, as measured.
Other counts were not measured, so their sessions run whole."""

MIN_SPLIT_FRAMES: Final = 112
"""Fewest frames (about 1.3 s of audio) whose decoder is run in halves: in-process, 0.87 to 0.91x
the time at 110 to 130 frames, 0.96 to 1.02x at 90, slower below (each half also decodes its
margin)."""

MARGINS: Final = (8, 12, 16, 24, 32, 48)
"""Margins (frames past the cut each half decodes) tried at load, smallest first; the first whose
halves give the whole's samples is kept."""

MARGIN_TOLERANCE: Final = 1e-5
"""Largest difference, over the peak sample, between the halves' samples and the whole's that
still counts as the same (the two sessions sum convolutions in other orders: about 1e-7)."""

PROBE_IDS: Final = 100
"""Input ids of the probe at load: about 250 frames, over twice the largest margin."""

PROBE_SEED: Final = 20261130
"""Seed of the probe's ids: every load of a voice probes it alike."""


Array = np.typing.NDArray[Any]
"""A tensor fed to or read from a session (ids, scales, frames, samples)."""
Feeds = Mapping[str, Array]
"""A call's inputs by name."""
ProbeFeeds = Callable[[set[str]], Feeds]
"""Inputs of one call of a graph whose input names are given: the probe at load."""


def split_run(
    model: bytes, device: Device, intra_op_threads: int, spinning: Spinning, probe: ProbeFeeds
) -> SplitRun | None:
    """``model``'s calls with the decoder in halves, where its session would run on the CPU on
    :data:`SPLIT_THREADS` threads, the graph cuts before its decoder and the halves give the whole's
    samples at the probe; None (a whole session) anywhere else."""
    if resolve_device(device) is not Device.CPU or cpu_threads(intra_op_threads) != SPLIT_THREADS:
        return None
    cut = decoder_cut(model)
    if cut is None:
        return None
    try:
        run = SplitRun(cut, spinning)
        margin = run.find_margin(probe({i.name for i in run.session.get_inputs()}))
    except Exception as e:  # ORT's own error types: a part it cannot load or run
        log.warning("the decoder's halves could not be made (%s); the graph runs whole", e)
        return None
    if margin is None:
        log.info("no margin made the decoder's halves give its whole samples; the graph runs whole")
        return None
    log.info("the decoder runs in halves from %d frames, each with %d of the other's", MIN_SPLIT_FRAMES, margin)
    return run


@dataclass(frozen=True)
class DecoderCut:
    """A graph cut before its decoder: the part that makes the decoder's input, and the decoder."""

    outputs: tuple[str, ...]
    """The whole graph's outputs, in order; the first is the audio."""
    encoder: bytes
    """The graph's inputs to its other outputs, then the decoder's input (the last output)."""
    decoder: bytes
    """The decoder's input to the graph's audio."""
    frames_input: str
    """The decoder's input: frames on its last axis."""


def decoder_cut(model: bytes) -> DecoderCut | None:
    """The graph cut before its ``/dec/`` nodes, which make its first output (the audio); None where
    it has none or they read more than one tensor made outside them (a speaker's embedding, say: not
    measured, so not cut)."""
    parsed = onnx.load_from_string(model)
    graph = parsed.graph
    outputs = tuple(output.name for output in graph.output)
    audio_output = outputs[0]
    decoder_nodes = [node for node in graph.node if node.name.startswith(DECODER_PREFIX)]
    if not decoder_nodes:
        return None
    made_inside = {name for node in decoder_nodes for name in node.output}
    constants = {init.name for init in graph.initializer}
    read_from_outside = {
        name
        for node in decoder_nodes
        for name in node.input
        if name and name not in made_inside and name not in constants
    }
    if len(read_from_outside) != 1:
        return None
    (frames_input,) = read_from_outside
    if frames_input not in {info.name for info in graph.value_info}:  # the exporter did not say its type
        graph.value_info.append(onnx.helper.make_tensor_value_info(frames_input, onnx.TensorProto.FLOAT, None))
    other_outputs = list(outputs[1:])
    extractor = Extractor(parsed)
    try:
        encoder = extractor.extract_model([i.name for i in graph.input], [*other_outputs, frames_input])
        decoder = extractor.extract_model([frames_input], [audio_output])
    except Exception:  # onnx raises plain errors for a graph it cannot cut there
        return None
    return DecoderCut(outputs, encoder.SerializeToString(), decoder.SerializeToString(), frames_input)


class SplitRun:
    """A two-thread CPU session's calls: the encoder part on two threads, then the decoder whole on
    two threads (a short call) or in halves at once on one thread each; returns what the whole
    graph's session returns, in its output order."""

    def __init__(self, cut: DecoderCut, spinning: Spinning) -> None:
        self._encoder = _session(cut.encoder, SPLIT_THREADS, spinning)
        self._decoder = _session(cut.decoder, SPLIT_THREADS, spinning)
        self._half = _session(cut.decoder, 1, Spinning.OFF)
        self._frames_input = cut.frames_input
        self._output_names = cut.outputs
        self._audio_output = cut.outputs[0]
        self._encoder_outputs = [o.name for o in self._encoder.get_outputs()]
        self.margin: int | None = None
        self.samples_per_frame = 0

    @property
    def session(self) -> ort.InferenceSession:
        """The session whose inputs and providers are the call's."""
        return self._encoder

    def run(self, feeds: Feeds, run_options: ort.RunOptions | None) -> list[Array]:
        made = dict(zip(self._encoder_outputs, self._encoder.run(None, feeds, run_options), strict=True))
        frames = made.pop(self._frames_input)
        made[self._audio_output] = self.decode(frames, run_options)
        return [made[name] for name in self._output_names]

    def decode(self, frames: Array, run_options: ort.RunOptions | None) -> Array:
        """The decoder's samples of ``frames``: in halves where long enough and a margin is known."""
        if self.margin is None or frames.shape[-1] < MIN_SPLIT_FRAMES:
            return self._whole(frames, run_options)
        return self.halves(frames, self.margin, run_options)

    def halves(self, frames: Array, margin: int, run_options: ort.RunOptions | None) -> Array:
        """The two halves at once (the second on a thread of its own), each with ``margin`` frames
        of the other, trimmed and joined."""
        total = frames.shape[-1]
        cut = total // 2
        first_end, second_start = min(total, cut + margin), max(0, cut - margin)
        second = _in_thread(
            lambda: self._half.run(None, {self._frames_input: frames[..., second_start:]}, run_options)[0]
        )
        try:
            head = self._half.run(None, {self._frames_input: frames[..., :first_end]}, run_options)[0]
        finally:
            tail = second.result()
        step = self.samples_per_frame
        return np.concatenate([head[..., : cut * step], tail[..., (cut - second_start) * step :]], axis=-1)

    def _whole(self, frames: Array, run_options: ort.RunOptions | None) -> Array:
        out: Array = self._decoder.run(None, {self._frames_input: frames}, run_options)[0]
        return out

    def find_margin(self, probe_feeds: Feeds) -> int | None:
        """The smallest of :data:`MARGINS` whose halves give the whole decoder's samples for the
        probe's frames, kept as this run's margin; None (every call whole) where none does."""
        made = dict(zip(self._encoder_outputs, self._encoder.run(None, probe_feeds), strict=True))
        frames = made[self._frames_input]
        whole = self._whole(frames, None)
        total = frames.shape[-1]
        if total < 2 * max(MARGINS) or whole.shape[-1] % total:
            return None
        self.samples_per_frame = whole.shape[-1] // total
        peak = float(np.abs(whole).max()) or 1.0
        for margin in MARGINS:
            joined = self.halves(frames, margin, None)
            if joined.shape == whole.shape and float(np.abs(joined - whole).max()) <= MARGIN_TOLERANCE * peak:
                self.margin = margin
                return margin
        return None


def piper_probe(id_count: int, scales: Sequence[float]) -> ProbeFeeds:
    """A Piper probe call's inputs: :data:`PROBE_IDS` ids below ``id_count``, one utterance, speaker 0."""
    return lambda input_names: _piper_feeds(input_names, id_count, scales)


def _piper_feeds(input_names: set[str], id_count: int, scales: Sequence[float]) -> Feeds:
    ids = np.random.default_rng(PROBE_SEED).integers(1, id_count, size=(1, PROBE_IDS)).astype(np.int64)
    feeds: dict[str, Array] = {
        "input": ids,
        "input_lengths": np.array([PROBE_IDS], dtype=np.int64),
        "scales": np.array(scales, dtype=np.float32),
    }
    if "sid" in input_names:
        feeds["sid"] = np.zeros(1, dtype=np.int64)
    return feeds


def _session(model: bytes, threads: int, spinning: Spinning) -> ort.InferenceSession:
    return ort.InferenceSession(cpu_graph(model, threads), session_options(threads, spinning), providers=[CPU_PROVIDER])


def _in_thread(call: Callable[[], Array]) -> Future[Array]:
    """``call`` on a new thread; its result or error in the future. (A thread a call: about 0.1 ms,
    against the tens of milliseconds a half takes, and nothing to keep or stop.)"""
    future: Future[Array] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as e:  # handed to the caller, who raises it
            future.set_exception(e)

    threading.Thread(target=run, name="ttsq-decoder-half", daemon=True).start()
    return future
