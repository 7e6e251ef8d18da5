"""Piper's decoder in two halves at once on a two-thread CPU session: the voice says what its whole
graph says, to the sample, batched or alone, short or long; a decoder whose output reaches further
than any margin tried is never split; other thread counts and graphs without a decoder run whole."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tts_core.base.config import SynthesisConfig
from tts_core.base.device import Device, Spinning
from tts_core.base.errors import SynthesisError
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.piper_engine import piper_source
from tts_core.voices.runtime import create_session
from tts_core.voices.split_decoder import (
    MARGINS,
    MIN_SPLIT_FRAMES,
    DecoderCut,
    decoder_cut,
    split_run,
)
from tts_core.voices.voice import Voice

DETERMINISTIC = SynthesisConfig(noise_scale=0.0, noise_w=0.0)
LONG = "Queues turn one GPU into speech for many people at once, and nobody waits for long."
SHORT = "OK."


@pytest.fixture(scope="module")
def voices() -> tuple[Voice, Voice]:
    """The bundled voice on two threads (split), and on three (whole: the graph as it is)."""
    files = piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID))
    split = Voice.load(files.model_path, files.config_path, Device.CPU, intra_op_threads=2)
    whole = Voice.load(files.model_path, files.config_path, Device.CPU, intra_op_threads=3)
    return split, whole


def test_the_bundled_voice_on_two_threads_splits_its_decoder_with_a_margin_found_at_load(
    voices: tuple[Voice, Voice],
) -> None:
    split, whole = voices
    assert split._split is not None
    assert whole._split is None
    assert split._split.margin in MARGINS
    assert split._split.samples_per_frame == 256


@pytest.mark.parametrize("texts", [[LONG], [LONG, SHORT], [SHORT], [LONG, "And then some more words."]])
def test_the_split_voice_says_what_the_whole_graph_says(voices: tuple[Voice, Voice], texts: list[str]) -> None:
    split, whole = voices
    ids = [u.phoneme_ids for text in texts for u in whole.utterances(text)]
    halves = split.synthesize_timed(ids, DETERMINISTIC)
    for a, b in zip(halves, whole.synthesize_timed(ids, DETERMINISTIC), strict=True):
        assert a.audio.size == b.audio.size
        np.testing.assert_array_equal(a.id_samples, b.id_samples)
        np.testing.assert_allclose(a.audio, b.audio, atol=1e-4)
    frames = max(len(a.audio) for a in halves) // 256
    assert (frames >= MIN_SPLIT_FRAMES) == (LONG in texts)  # the long ones are the halves' case


def test_a_stopped_call_raises_from_the_halves_too(voices: tuple[Voice, Voice]) -> None:
    split, _ = voices
    assert split._split is not None
    assert split._split.margin is not None
    ids = [u.phoneme_ids for u in split.utterances(LONG)]
    stopped = ort.RunOptions()
    stopped.terminate = True
    with pytest.raises(SynthesisError):
        split.synthesize_timed(ids, DETERMINISTIC, stopped)
    frames = np.zeros((1, 192, 2 * MIN_SPLIT_FRAMES), dtype=np.float32)
    with pytest.raises(Exception, match=r"[Tt]erminat"):
        split._split.halves(frames, split._split.margin, stopped)


@pytest.mark.parametrize("threads", [1, 3])
def test_other_thread_counts_run_the_graph_whole(threads: int) -> None:
    files = piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID))
    model = files.model_path.read_bytes()
    assert split_run(model, Device.CPU, threads, Spinning.OFF, lambda names: {}) is None


CHANNELS = 4


def cut_graph(decoder: list[onnx.NodeProto], weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """x [1, 4, T] → an encoder part (``/enc_p/`` nodes) → ``z`` → the given ``/dec/`` nodes → ``y``,
    and a second output read off the encoder part, as Piper's alignment is."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["z"], name="/enc_p/Mul"),
        helper.make_node("ReduceSum", ["z"], ["lengths"], name="/enc_p/ReduceSum", keepdims=0, axes=[1]),
        *decoder,
    ]
    initializers = {"two": np.array(2.0, dtype=np.float32), **weights}
    graph = helper.make_graph(
        nodes,
        "cut",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, "T"])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("lengths", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(value, name) for name, value in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def upsampling_decoder(extra: list[onnx.NodeProto]) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """Two convolutions (reach 3 frames), then 4 samples a frame; ``extra`` nodes read ``c`` and make ``y``."""
    rng = np.random.default_rng(3)
    weights = {
        "w1": rng.standard_normal((CHANNELS, CHANNELS, 5)).astype(np.float32),
        "w2": rng.standard_normal((4, CHANNELS, 3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["z", "w1"], ["a"], name="/dec/conv1", pads=[2, 2]),
        helper.make_node("Conv", ["a", "w2"], ["b"], name="/dec/conv2", pads=[1, 1]),
        helper.make_node("Transpose", ["b"], ["bt"], name="/dec/Transpose", perm=[0, 2, 1]),
        helper.make_node("Flatten", ["bt"], ["c"], name="/dec/Flatten", axis=1),
        *extra,
    ]
    return nodes, weights


def probe(_: set[str]) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(5).standard_normal((1, CHANNELS, 200)).astype(np.float32)}


def whole_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = create_session(model.SerializeToString(), Device.CPU, 2)
    return [np.asarray(out) for out in session.run(None, feeds)]


def test_a_local_decoder_is_cut_at_its_input_and_split_with_the_smallest_margin_that_holds() -> None:
    nodes, weights = upsampling_decoder([helper.make_node("Identity", ["c"], ["y"], name="/dec/Identity")])
    model = cut_graph(nodes, weights)
    cut = decoder_cut(model.SerializeToString())
    assert cut is not None
    assert cut.frames_input == "z"
    assert cut.outputs == ("y", "lengths")
    run = split_run(model.SerializeToString(), Device.CPU, 2, Spinning.OFF, probe)
    assert run is not None
    assert run.margin == MARGINS[0]
    assert run.samples_per_frame == 4
    feeds = {"x": np.random.default_rng(9).standard_normal((1, CHANNELS, 2 * MIN_SPLIT_FRAMES)).astype(np.float32)}
    for got, expected in zip(run.run(feeds, None), whole_outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_decoder_whose_every_sample_reads_every_frame_is_never_split() -> None:
    mean = [
        helper.make_node("ReduceMean", ["c"], ["m"], name="/dec/ReduceMean", axes=[1], keepdims=1),
        helper.make_node("Add", ["c", "m"], ["y"], name="/dec/Add"),
    ]
    nodes, weights = upsampling_decoder(mean)
    model = cut_graph(nodes, weights).SerializeToString()
    assert decoder_cut(model) is not None  # it cuts; the probe finds no margin that holds
    assert split_run(model, Device.CPU, 2, Spinning.OFF, probe) is None


def test_a_decoder_that_reads_two_tensors_of_the_rest_is_not_cut() -> None:
    nodes, weights = upsampling_decoder([helper.make_node("Add", ["c", "lengths"], ["y"], name="/dec/Add")])
    assert decoder_cut(cut_graph(nodes, weights).SerializeToString()) is None


def test_a_graph_without_decoder_nodes_is_not_cut() -> None:
    nodes, weights = upsampling_decoder([helper.make_node("Identity", ["c"], ["y"], name="/dec/Identity")])
    for node in nodes:
        node.name = node.name.replace("/dec/", "/other/")
    assert decoder_cut(cut_graph(nodes, weights).SerializeToString()) is None


def test_a_cut_is_the_graph_in_two_parts() -> None:
    nodes, weights = upsampling_decoder([helper.make_node("Identity", ["c"], ["y"], name="/dec/Identity")])
    cut = decoder_cut(cut_graph(nodes, weights).SerializeToString())
    assert isinstance(cut, DecoderCut)
    encoder, decoder = onnx.load_from_string(cut.encoder), onnx.load_from_string(cut.decoder)
    assert [o.name for o in encoder.graph.output] == ["lengths", "z"]
    assert [i.name for i in decoder.graph.input] == ["z"]
    assert [o.name for o in decoder.graph.output] == ["y"]
    assert all(n.name.startswith("/dec/") for n in decoder.graph.node)
    assert not any(n.name.startswith("/dec/") for n in encoder.graph.node)
