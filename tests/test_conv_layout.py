"""One-dimensional convolutions done in two dimensions on sessions of one or two threads: the same
sound, and every shape of ``Conv`` the graphs have (padding, stride, dilation, groups, a shared
weight), while a weight that anything else reads is left alone, and so is a convolution of fewer
output channels than the session's threads gain from."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tts_core.base.config import SynthesisConfig
from tts_core.base.device import Device
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.conv_layout import AXES_NAME, convert, with_2d_convolutions
from tts_core.voices.piper_engine import piper_source
from tts_core.voices.runtime import MIN_2D_CHANNELS_BY_THREADS, cpu_graph, session_options
from tts_core.voices.voice import Voice

DETERMINISTIC = SynthesisConfig(noise_scale=0.0, noise_w=0.0)


def conv_graph(opset: int) -> onnx.ModelProto:
    """x [1, 4, T] through three convolutions: padded and dilated; strided with groups; and one
    sharing the first one's weight. A fourth weight is also added to the output, so it must stay 3-D."""
    rng = np.random.default_rng(7)
    weights = {
        "w_shared": rng.standard_normal((4, 4, 3)).astype(np.float32),
        "w_grouped": rng.standard_normal((4, 2, 5)).astype(np.float32),
        "w_read_elsewhere": rng.standard_normal((4, 4, 1)).astype(np.float32),
        "bias": rng.standard_normal(4).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w_shared", "bias"], ["a"], pads=[2, 2], dilations=[2]),
        helper.make_node("Conv", ["a", "w_grouped"], ["b"], pads=[1, 3], strides=[2], group=2, kernel_shape=[5]),
        helper.make_node("Conv", ["b", "w_shared"], ["c"], pads=[1, 1]),
        helper.make_node("Conv", ["c", "w_read_elsewhere"], ["d"]),
        helper.make_node("ReduceSum", ["w_read_elsewhere"], ["w_sum"], keepdims=0),
        helper.make_node("Add", ["d", "w_sum"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "U"])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def run(model: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, session_options(1), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize("opset", [11, 15])  # Unsqueeze's axes: an attribute, then an input
def test_every_shape_of_convolution_gives_the_same_result_in_two_dimensions(opset: int) -> None:
    model = conv_graph(opset)
    original = model.SerializeToString()
    converted = onnx.load_from_string(original)
    assert convert(converted) == 3
    onnx.checker.check_model(converted, full_check=True)
    weights = {t.name: list(t.dims) for t in converted.graph.initializer}
    assert weights["w_shared"] == [4, 4, 1, 3]
    assert weights["w_grouped"] == [4, 2, 1, 5]
    assert weights["w_read_elsewhere"] == [4, 4, 1], "a weight read by another node changed shape"
    x = np.random.default_rng(1).standard_normal((1, 4, 37)).astype(np.float32)
    expected = run(original, x)
    got = run(converted.SerializeToString(), x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_convolution_whose_attributes_are_not_one_dimensional_is_left_alone() -> None:
    model = conv_graph(15)
    odd = next(node for node in model.graph.node if node.input[1] == "w_grouped")
    next(a for a in odd.attribute if a.name == "pads").ints[:] = [1, 3, 0, 0]
    assert convert(model) == 2  # the other two; the weight the odd one reads keeps its shape
    assert {t.name: len(t.dims) for t in model.graph.initializer}["w_grouped"] == 3


def test_a_weight_a_caller_may_feed_or_a_subgraph_reads_keeps_its_shape() -> None:
    fed, in_branch = conv_graph(15), conv_graph(15)
    fed.graph.input.append(helper.make_tensor_value_info("w_grouped", TensorProto.FLOAT, [4, 2, 5]))
    branch = helper.make_graph(
        [helper.make_node("Identity", ["w_grouped"], ["seen"])],
        "branch",
        [],
        [helper.make_tensor_value_info("seen", TensorProto.FLOAT, [4, 2, 5])],
    )
    in_branch.graph.initializer.append(numpy_helper.from_array(np.array(True), "always"))
    in_branch.graph.node.append(helper.make_node("If", ["always"], ["chosen"], then_branch=branch, else_branch=branch))
    for model in (fed, in_branch):
        assert convert(model) == 2
        assert {t.name: len(t.dims) for t in model.graph.initializer}["w_grouped"] == 3


def test_a_graph_without_one_dimensional_convolutions_comes_back_as_it_was() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString()
    assert with_2d_convolutions(model) is model


def narrowing_graph() -> onnx.ModelProto:
    """x [1, 8, T] through a convolution to 16 channels, then one to 2."""
    rng = np.random.default_rng(3)
    weights = {"wide": rng.standard_normal((16, 8, 3)), "narrow": rng.standard_normal((2, 16, 5))}
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "wide"], ["h"], pads=[1, 1]),
            helper.make_node("Conv", ["h", "narrow"], ["y"], pads=[2, 2]),
        ],
        "narrowing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, "T"])],
        [numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=7)


def test_only_convolutions_of_enough_output_channels_are_converted() -> None:
    model = narrowing_graph()
    original = model.SerializeToString()
    assert convert(onnx.load_from_string(original), 17) == 0
    converted = onnx.load_from_string(original)
    assert convert(converted, 16) == 1
    assert {t.name: len(t.dims) for t in converted.graph.initializer} == {"wide": 4, "narrow": 3, AXES_NAME: 1}
    x = np.random.default_rng(2).standard_normal((1, 8, 29)).astype(np.float32)
    np.testing.assert_allclose(run(converted.SerializeToString(), x), run(original, x), rtol=1e-5, atol=1e-5)


def conv_channels(model: bytes) -> tuple[list[int], list[int]]:
    """Output channels of the model's convolutions done in two dimensions, and of those left in one."""
    parsed = onnx.load_from_string(model)
    dims = {t.name: list(t.dims) for t in parsed.graph.initializer}
    convs = [dims[node.input[1]] for node in parsed.graph.node if node.op_type == "Conv" and node.input[1] in dims]
    return [d[0] for d in convs if len(d) == 4], [d[0] for d in convs if len(d) == 3]


def test_a_cpu_session_converts_the_convolutions_its_thread_count_gains_from() -> None:
    model = piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID)).model_path.read_bytes()
    for threads in (3, 4, 8):
        assert cpu_graph(model, threads) is model  # not measured: as it is
    for threads, min_channels in MIN_2D_CHANNELS_BY_THREADS.items():
        wide, kept = conv_channels(cpu_graph(model, threads))
        assert len(wide) > 100  # the voice's convolutions, most of them
        assert min(wide) >= min_channels > max(kept)
    default = len(os.sched_getaffinity(0))  # 0 threads: ONNX Runtime's choice, one per core
    assert cpu_graph(model, 0) == cpu_graph(model, default)


@pytest.mark.parametrize("threads", sorted(MIN_2D_CHANNELS_BY_THREADS))
def test_the_voice_converted_for_its_threads_says_what_it_says_unconverted(threads: int) -> None:
    files = piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID))
    converted = Voice.load(files.model_path, files.config_path, Device.CPU, intra_op_threads=threads)
    as_is = Voice.load(files.model_path, files.config_path, Device.CPU, intra_op_threads=3)  # not converted
    ids = [u.phoneme_ids for u in as_is.utterances("Queues turn one GPU into speech for many people at once.")]
    pairs = zip(converted.synthesize_timed(ids, DETERMINISTIC), as_is.synthesize_timed(ids, DETERMINISTIC), strict=True)
    for a, b in pairs:
        assert a.audio.size == b.audio.size > as_is.sample_rate  # over a second of speech, to the sample
        np.testing.assert_array_equal(a.id_samples, b.id_samples)
        np.testing.assert_allclose(a.audio, b.audio, atol=1e-4)
