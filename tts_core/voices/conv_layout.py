"""A graph's one-dimensional convolutions as two-dimensional ones of height 1, for CPU sessions of
one or two threads.

ONNX Runtime's CPU provider runs a 1-D ``Conv`` through im2col and a matrix product, while a 2-D one
goes to MLAS's blocked (NCHWc) kernels. Piper's VITS decoder is mostly 1-D convolutions: on one
thread, with each such ``Conv`` wrapped as ``Unsqueeze`` → 2-D ``Conv`` (kernel ``1 x k``) →
``Squeeze``, a call takes 0.85 to 0.91x the time and two calls at once give 1.12x the audio per second
(docs/PERFORMANCE.md, "Convolutions in two dimensions"). On two threads the whole graph so
converted was 1.11 to 1.20x slower, but not every convolution lost: those of many output channels
gained there too, so which are converted is chosen by their output channels
(``tts_core.voices.runtime.cpu_graph``). The arithmetic is the same, summed in another order:
samples differ by a few millionths.
"""

from __future__ import annotations

from functools import partial
from typing import Final

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tts_core.voices.graph_edits import edited

AXES_NAME: Final = "ttsq_conv_height_axis"
"""The initializer holding ``[2]``, the axis of height 1 that wraps each converted convolution."""

UNSQUEEZE_AXES_AS_INPUT_OPSET: Final = 13
"""From this opset on, ``Unsqueeze`` and ``Squeeze`` take their axes as an input, not an attribute."""

STANDARD_DOMAINS: Final = ("", "ai.onnx")
"""The names of ONNX's own operator set (the empty one is the usual)."""

SPATIAL_LENGTHS: Final = {"kernel_shape": 1, "strides": 1, "dilations": 1, "pads": 2}
"""How many integers each spatial attribute of a 1-D ``Conv`` holds."""


def with_2d_convolutions(model: bytes, min_out_channels: int = 1) -> bytes:
    """``model`` with each ``Conv`` of a constant three-dimensional weight of at least
    ``min_out_channels`` output channels done in two dimensions; a model with none comes back
    unchanged (the same bytes)."""
    return edited(model, [partial(convert, min_out_channels=min_out_channels)])


def convert(model: onnx.ModelProto, min_out_channels: int = 1) -> int:
    """Convert ``model``'s 1-D convolutions of at least ``min_out_channels`` output channels in
    place; returns how many were converted. A ``Conv`` whose weight is computed in the graph (weight
    norm), has another rank, or is read by anything but convolutions is left as it is."""
    graph = model.graph
    weights = {
        name: tensor
        for name, tensor in _conv_only_weights(graph).items()
        if len(tensor.dims) == 3 and tensor.dims[0] >= min_out_channels
    }
    if not weights:
        return 0
    axes_as_input = _opset(model) >= UNSQUEEZE_AXES_AS_INPUT_OPSET
    nodes: list[onnx.NodeProto] = []
    converted = 0
    for node in graph.node:
        if _is_conv(node) and node.input[1] in weights:
            nodes.extend(_as_2d(node, axes_as_input))
            converted += 1
        else:
            nodes.append(node)
    for name, tensor in weights.items():
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor)[:, :, np.newaxis, :], name))
    if axes_as_input:
        graph.initializer.append(numpy_helper.from_array(np.array([2], dtype=np.int64), AXES_NAME))
    del graph.node[:]
    graph.node.extend(nodes)
    return converted


def _conv_only_weights(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The initializers read only as the weight of a ``Conv`` of this graph: reshaping one changes
    nothing else (not a graph input a caller may feed, not an output, not read in a subgraph)."""
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, position))
    elsewhere = {i.name for i in graph.input} | {o.name for o in graph.output} | names_read_in_subgraphs(graph)
    return {
        tensor.name: tensor
        for tensor in graph.initializer
        if tensor.name in readers
        and tensor.name not in elsewhere
        and all(_is_conv(node) and position == 1 for node, position in readers[tensor.name])
    }


def names_read_in_subgraphs(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of a subgraph (an ``If``'s branches, a ``Loop``'s body, at any depth) reads."""
    names: set[str] = set()
    pending = [g for node in graph.node for g in _subgraphs(node)]
    while pending:
        subgraph = pending.pop()
        for node in subgraph.node:
            names.update(node.input)
            pending.extend(_subgraphs(node))
    return names


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [a.g for a in node.attribute if a.HasField("g")] + [g for a in node.attribute for g in a.graphs]


def _is_conv(node: onnx.NodeProto) -> bool:
    """A standard ``Conv`` whose attributes describe one spatial dimension (anything else, even a
    malformed model that ONNX Runtime would refuse, is left for it to judge as it is)."""
    if node.op_type != "Conv" or node.domain not in STANDARD_DOMAINS:
        return False
    lengths = {a.name: len(a.ints) for a in node.attribute if a.name in SPATIAL_LENGTHS}
    return all(length == SPATIAL_LENGTHS[name] for name, length in lengths.items())


def _as_2d(conv: onnx.NodeProto, axes_as_input: bool) -> list[onnx.NodeProto]:
    """``Unsqueeze`` → the convolution in two dimensions → ``Squeeze``, under the node's own output
    name (a weight used by two convolutions is converted once, and both read it)."""
    wide_in, wide_out = f"{conv.output[0]}_2d_in", f"{conv.output[0]}_2d_out"
    attributes = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    wide = _node(
        "Conv", [wide_in, *conv.input[1:]], wide_out, _attributes_2d(attributes), f"{conv.name or conv.output[0]}_2d"
    )
    axes: dict[str, object] = {} if axes_as_input else {"axes": [2]}
    axis_input = [AXES_NAME] if axes_as_input else []
    return [
        _node("Unsqueeze", [conv.input[0], *axis_input], wide_in, axes),
        wide,
        _node("Squeeze", [wide_out, *axis_input], conv.output[0], axes),
    ]


def _node(
    op_type: str, inputs: list[str], output: str, attributes: dict[str, object], name: str = ""
) -> onnx.NodeProto:
    node = helper.make_node(op_type, inputs, [output], name=name or None)
    node.attribute.extend(helper.make_attribute(key, value) for key, value in attributes.items())
    return node


def _attributes_2d(attributes: dict[str, object]) -> dict[str, object]:
    """A 1-D ``Conv``'s attributes for its ``1 x k`` form: height 1, no padding, stride or dilation on it."""
    wide: dict[str, object] = {}
    for name, value in attributes.items():
        if name in ("kernel_shape", "strides", "dilations"):
            wide[name] = [1, *_ints(value)]
        elif name == "pads":
            begin, end = _ints(value)
            wide[name] = [0, begin, 0, end]
        else:
            wide[name] = value
    return wide


def _ints(value: object) -> list[int]:
    assert isinstance(value, list)
    return [int(v) for v in value]


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS), 1)
